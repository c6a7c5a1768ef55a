"""Raw denoising quality: the held-out photographs as camera raw files (DNG), through vkgraph's
raw chain and a classical one, at three realistic noise levels.

Each held-out photograph (graphs/photos/held-out.txt; linear rgb, vkgraph/apps/heldout.py) is seen
through the made-up camera of vkgraph/apps/dng.py (its colour matrix and white balance), sampled
on an RGGB mosaic (or, with --pattern X-Trans, Fujifilm's 6 x 6 one), given cnngenin's noise
model on the mosaic normalised to [0, 1], std(x) = sqrt(a + 65535 x b) / 65535 (seeded, per
level), and written as a 14-bit DNG (black 512); every method reads the DNG back through
LibRaw (pipeline/raw.py). Levels, from darktable's camera profiles (b ~ 0.3 at ISO 100 to
~120 for a small sensor at high ISO, a <= 1e4):

* ISO 1600 (full frame): a 50, b 2;
* ISO 12800 (full frame): a 800, b 15;
* phone, high ISO: a 10000, b 100.

Rows (PSNR in dB, peak 1, linear Rec.709 against the clean photograph, unclipped, mean over the
photographs):

* demosaic, noise-free: the noise-free mosaic's DNG demosaiced (Malvar-He-Cutler, the
  `demosaic` module's reference; for X-Trans its green-then-colour-differences filter) and
  colour-converted: the demosaicer's own quality;
* demosaic, noisy: the noisy DNG the same way, no denoising;
* one row per weights (--weights, any number of them; default: what `vkgraph denoise` uses
  for raw files on this device): `vkgraph denoise`'s chain (vkgraph/apps/rawdenoise.py:
  demosaic on the device, the denoiser with the weights and the balanced true profile, the
  camera matrix); with weights of RGGB mosaics (unet-t `cfa 1`, graphs/train-raw.cfg) the row
  is unet on the white-balanced mosaic, which demosaics as it denoises, then the camera
  matrix;
* VST-BM3D (CFA) + demosaic: the generalized Anscombe transform of the true (a, b)
  (bench/vst.py) on the mosaic, BM3D (PyPI `bm3d`, sigma 1) on each of the four CFA planes
  (X-Trans: the 36 planes of its period, each 1/36 of the photosites), the exact unbiased
  inverse, then the same demosaicer and matrix.

    python bench/raw_quality.py [--weights W.lut [W2.lut ...]] [--ensemble N] [--crop N]
                                [--jobs J] [--pattern RGGB|X-Trans]

--ensemble N adds a row per weights: the mean over N flips and rotations (`vkgraph denoise
--ensemble N`).

A second table gives each photograph's PSNR per row and level (`camera` is a grey photograph:
its mosaic holds every colour at every photosite, which a demosaicer that learned so can use).

--crop N takes a centred N x N crop of each photograph (quick runs; not comparable with
full-size figures). BM3D runs on --jobs processes (default: the CPU count); --no-bm3d leaves
its row out (quick runs).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/vst.py

from vkgraph.apps import dng, heldout  # noqa: E402

LEVELS = [("ISO 1600", 50.0, 2.0), ("ISO 12800", 800.0, 15.0), ("phone", 1.0e4, 100.0)]
PATTERNS = {"RGGB": dng.BAYER["RGGB"], "X-Trans": dng.XTRANS}
CFA = PATTERNS["RGGB"]  # --pattern's
BLACK, WHITE = 512, 16383
TITLES = {"clean": "demosaic, noise-free", "noisy": "demosaic, noisy",
          "bm3d": "VST-BM3D (CFA planes) + demosaic"}  # and a row per weights, named by them


def write_raw(folder: Path, name: str, mosaic: np.ndarray, cfa=CFA) -> Path:
    path = folder / f"{name}.dng"
    dng.write_dng(path, dng.mosaic_counts(mosaic, BLACK, WHITE), cfa, BLACK, WHITE,
                  dng.CAMERA_MATRIX, dng.CAMERA_NEUTRAL, iso=100)
    return path


def develop(mosaic: np.ndarray, raw) -> np.ndarray:
    """The reference demosaicer and the camera matrix: linear Rec.709."""
    from vkgraph.modules.demosaic import reference as ref

    return ref.colour(ref.demosaic(mosaic, raw.meta.cfa, raw.meta.wb), raw.meta.rgb_cam)


def bm3d_cfa(path: str, a: float, b: float) -> np.ndarray:
    """VST-BM3D on the CFA planes of a DNG's mosaic (the photosites of each position in the
    pattern's period), then the demosaicer."""
    import bm3d
    import vst

    from vkgraph.pipeline.raw import read_raw

    raw = read_raw(path)
    z = raw.mosaic.astype(np.float64)
    out = np.empty_like(z)
    P = raw.meta.period
    for y in range(P):
        for x in range(P):
            plane = vst.forward(z[y::P, x::P], a, b)
            out[y::P, x::P] = vst.inverse(bm3d.bm3d(plane, 1.0), a, b)
    return develop(out, raw)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--weights", type=Path, nargs="+", default=None, metavar="W.lut")
    p.add_argument("--ensemble", type=int, choices=(2, 4, 8), default=None, metavar="N")
    p.add_argument("--crop", type=int, default=None, metavar="N")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--pattern", choices=tuple(PATTERNS), default="RGGB")
    p.add_argument("--no-bm3d", action="store_true", help="leave VST-BM3D's row out")
    args = p.parse_args(argv)
    cfa = PATTERNS[args.pattern]

    from vkgraph.apps.denoise import Denoiser
    from vkgraph.apps.rawdenoise import Demosaicer, denoise_raw
    from vkgraph.cli.denoise import default_weights, on_gpu
    from vkgraph.pipeline.raw import read_raw
    from vkgraph.pipeline.testing import session_device

    device = session_device()
    weights = args.weights or [default_weights(Path("x.dng"), on_gpu(device), cfa)]
    dens = {}
    for w in weights:
        for n in (1, args.ensemble) if args.ensemble else (1,):
            den = Denoiser(device, w, ensemble=n)
            # weights of mosaics (unet-t cfa 1 and 2) denoise and demosaic at once: no
            # demosaic first
            title = (f"{den.module} on the mosaic ({w.name}"
                     if den.cfa or den.any_pattern
                     else f"demosaic + {den.module} ({w.name}")
            dens[title + (f", ensemble {n})" if n > 1 else ")")] = den
    rows = ["clean", "noisy", *dens] + ([] if args.no_bm3d else ["bm3d"])
    dem = Demosaicer(device)
    scores: dict[tuple[str, int], list[float]] = {}
    seconds = dict.fromkeys(dens, 0.0)
    # spawned workers: rawpy's LibRaw (OpenMP) can deadlock in a forked process
    with tempfile.TemporaryDirectory() as tmp, ProcessPoolExecutor(
            args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        folder = Path(tmp)
        jobs = []
        for path in heldout.photos():
            clean = heldout.centre_crop(heldout.load_clean(path), args.crop)
            mosaic = dng.camera_mosaic(clean, cfa)
            raw = read_raw(write_raw(folder, f"{path.stem}-clean", mosaic, cfa))
            noise_free = heldout.psnr(develop(raw.mosaic, raw), clean)
            for li, (_, a, b) in enumerate(LEVELS):
                scores.setdefault(("clean", li), []).append(noise_free)
                noisy_dng = write_raw(folder, f"{path.stem}-{li}",
                                      heldout.add_noise(mosaic, a, b, heldout.seed_of(li)), cfa)
                if not args.no_bm3d:
                    jobs.append((li, clean, pool.submit(bm3d_cfa, str(noisy_dng), a, b)))
                noisy = read_raw(noisy_dng)
                scores.setdefault(("noisy", li), []).append(
                    heldout.psnr(develop(noisy.mosaic, noisy), clean))
                for title, den in dens.items():
                    t0 = time.perf_counter()
                    out, _, _ = denoise_raw(den, dem, noisy, (a, b))
                    seconds[title] += time.perf_counter() - t0
                    scores.setdefault((title, li), []).append(heldout.psnr(out, clean))
        for li, clean, job in jobs:
            scores.setdefault(("bm3d", li), []).append(heldout.psnr(job.result(), clean))
    size = f"{args.crop}x{args.crop} centre crops" if args.crop else "full size"
    print(f"held-out photographs ({len(heldout.photos())}, {size}) as {args.pattern} DNGs; "
          f"mean PSNR in dB, linear Rec.709; device {device.info.name}")
    levels = " | ".join(f"{n} (a {a:g}, b {b:g})" for n, a, b in LEVELS)
    print(f"| | {levels} | mean |")
    print("|---" * (len(LEVELS) + 2) + "|")
    for row in rows:
        per = [float(np.mean(scores[(row, li)])) for li in range(len(LEVELS))]
        print(f"| {TITLES.get(row, row)} | " + " | ".join(f"{v:.2f}" for v in per)
              + f" | {np.mean(per):.2f} |")
    files = len(heldout.photos()) * len(LEVELS)
    for title, s in seconds.items():
        print(f"{title}: {s:.1f} s for all {files} files (vkgraph denoise's chain: the "
              f"denoiser, any demosaic, the matrix; BM3D ran beside it on {args.jobs} "
              "processes)")
    print(f"\nper photograph: | photograph | row | {levels} |")
    for pi, path in enumerate(heldout.photos()):
        for row in rows:
            per = [scores[(row, li)][pi] for li in range(len(LEVELS))]
            print(f"| {path.stem} | {TITLES.get(row, row)} | "
                  + " | ".join(f"{v:.2f}" for v in per) + " |")
    return 0 if all(math.isfinite(v) for vs in scores.values() for v in vs) else 1


if __name__ == "__main__":
    sys.exit(main())
