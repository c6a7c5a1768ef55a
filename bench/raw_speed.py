"""Wall time of `vkgraph denoise photo.dng -o out.exr` on a full-size raw file, decode included.

A synthetic 24-megapixel RGGB DNG (6000 x 4000, 14-bit; a smooth picture with noise a 800,
b 15 through vkgraph/apps/dng.py's camera) is written once, then denoised by the command's own
function in this process (the device opened and the shaders compiled by a first run, which
is not counted), --repeat times; each row is one run: read (LibRaw), noise profile, demosaic,
kpn, camera matrix, EXR write. A last row times the same stages one by one.

    python bench/raw_speed.py [--size 6000x4000] [--repeat 3] [--noise] [--stages-only]
                              [--weights W.lut]

--weights: the denoiser's weights (default: what `vkgraph denoise` uses for raw files on this
device); with weights of RGGB mosaics (unet-t `cfa 1`) the "kpn" stage is the network on the
white-balanced mosaic, which demosaics as it denoises, and there is no demosaic stage.
--noise gives the true profile (skips the estimate from the mosaic); --stages-only times the
stages without kpn and without the whole runs (what the CPU driver can do in minutes).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vkgraph.apps import dng  # noqa: E402


def picture(wd: int, ht: int) -> np.ndarray:
    y, x = np.mgrid[0:ht, 0:wd].astype(np.float32)
    return np.stack([0.3 + 0.2 * np.sin(x / 97 + c) * np.cos(y / 61) for c in range(3)], -1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="6000x4000")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--noise", action="store_true")
    p.add_argument("--stages-only", action="store_true")
    p.add_argument("--weights", type=Path, default=None)
    args = p.parse_args(argv)
    wd, ht = (int(v) for v in args.size.split("x"))

    from vkgraph.apps.denoise import Denoiser
    from vkgraph.apps.heldout import add_noise
    from vkgraph.cli.denoise import default_weights, denoise_raw_file, on_gpu
    from vkgraph.pipeline import raw as rawmod
    from vkgraph.pipeline.testing import session_device

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "photo.dng", Path(tmp) / "out.exr"
        mosaic = add_noise(dng.camera_mosaic(picture(wd, ht), dng.BAYER["RGGB"]), 800, 15, 1)
        dng.write_dng(src, dng.mosaic_counts(mosaic, 512, 16383), dng.BAYER["RGGB"], 512,
                      16383, dng.CAMERA_MATRIX, dng.CAMERA_NEUTRAL, iso=6400)
        device = session_device()
        print(f"{wd}x{ht} RGGB DNG ({src.stat().st_size / 1e6:.0f} MB) on {device.info.name}")
        noise = (800.0, 15.0) if args.noise else None
        # what the command uses for raw files on this device
        den = Denoiser(device, args.weights or default_weights(src, on_gpu(device)))
        print(f"weights {den.weights}")
        if not args.stages_only:
            denoise_raw_file(den, src, dst, noise)  # builds and compiles: not counted
            for i in range(args.repeat):
                rawmod._LAST.clear()  # decode every time
                t0 = time.perf_counter()
                line = denoise_raw_file(den, src, dst, noise)
                print(f"run {i}: {time.perf_counter() - t0:.3f} s wall "
                      f"({line.split(': ', 1)[1]})")
        print("stages: " + ", ".join(f"{k} {v:.2f} s" for k, v in stages(
            den, src, dst, noise, not args.stages_only).items()))
    return 0


def stages(den, src: Path, dst: Path, noise, kpn: bool) -> dict[str, float]:
    """The chain of denoise_raw_file one stage at a time (the demosaic build made first)."""
    from vkgraph.apps.camnoise import profile_for
    from vkgraph.apps.rawdenoise import demosaicer_of, rggb_mosaic, to_rec709
    from vkgraph.pipeline import raw as rawmod
    from vkgraph.pipeline.formats import ImageMeta, write_like

    out: dict[str, float] = {}
    rawmod._LAST.clear()
    t = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        out[name] = now - t
        t = now

    raw = rawmod.read_raw(src)
    lap("read")
    a, b = profile_for(raw, noise).balanced(raw.meta.wb).scalar()
    lap("profile")
    if den.cfa:  # the network demosaics: the white-balanced mosaic in RGGB phase
        mosaic, (top, left) = rggb_mosaic(raw)
        lap("mosaic")
        if not kpn:
            return out
        ht, wd = raw.shape
        den(mosaic, a, b)  # the first call at this size builds: not counted
        t = time.perf_counter()
        rgb = den(mosaic, a, b)[top:top + ht, left:left + wd]
        lap("unet")
    else:
        dem = demosaicer_of(den)
        dem(raw)
        t = time.perf_counter()
        rgb = dem(raw)
        lap("demosaic")
        if kpn:
            rgb = den(rgb, a, b)
            lap("kpn")
    rgb = to_rec709(rgb, raw)
    lap("matrix")
    write_like(dst, rgb, ImageMeta("raw", "u16"))
    lap(f"write {dst.suffix}")
    return out


if __name__ == "__main__":
    sys.exit(main())
