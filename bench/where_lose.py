"""Where the shipped denoiser loses to VST-BM3D on the held-out photographs: each pixel's
squared error (summed over r, g, b) of both, grouped by the clean photograph's local luma
gradient (the magnitude's 5x5 mean, split at its own 50/80/95% quantiles: flat, gentle,
texture, edges) and by its luma (dark quarter, middle half, bright quarter). One row per
photograph and level; a cell is the denoiser's error minus VST-BM3D's in that class, as a
share of the denoiser's whole error (+: VST-BM3D better there). The noise, photographs and
VST-BM3D are bench/quality.py's; the denoiser runs as `vkgraph denoise` does (the true
profile), on whatever device there is (the CPU driver works: about 25 s a photograph and
level on 2 cores, and as long again for BM3D).

    python3 bench/where_lose.py [--weights W.lut] [--photos coffee,astronaut] [--levels mid,high]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/quality.py, bench/vst.py

from quality import bm3d_vst  # noqa: E402

from vkgraph.apps import heldout  # noqa: E402

LUMA = np.array([0.2627, 0.6780, 0.0593])
GRADIENT = ["flat", "gentle", "texture", "edges"]  # below 50%, 50-80, 80-95, top 5%
BRIGHTNESS = ["dark", "middle", "bright"]  # quarter, half, quarter


def classes(clean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(gradient class 0..3, brightness class 0..2) of each pixel of a clean rgb photo."""
    from scipy.ndimage import uniform_filter

    y = clean @ LUMA
    gy, gx = np.gradient(y)
    g = uniform_filter(np.hypot(gx, gy), 5)
    return (np.digitize(g, np.quantile(g, [0.5, 0.8, 0.95])),
            np.digitize(y, np.quantile(y, [0.25, 0.75])))


def shares(err: np.ndarray, ref: np.ndarray, cls: np.ndarray, n: int) -> list[float]:
    """(err - ref) summed over each class 0..n-1, over err's whole sum."""
    return [float((err[cls == k] - ref[cls == k]).sum() / err.sum()) for k in range(n)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", type=Path, default=ROOT / "graphs" / "weights" /
                    "unet-photo.lut")
    ap.add_argument("--photos", help="comma-separated names (default: all held out)")
    ap.add_argument("--levels", default="mid,high", help="of low, mid, high (default mid,high)")
    args = ap.parse_args(argv)
    from vkgraph.apps.denoise import Denoiser
    from vkgraph.pipeline.vk import Device

    dev = Device.open(None, None)
    try:
        table(Denoiser(dev, args.weights), args)
    finally:
        dev.close()
    return 0


def table(den, args) -> None:
    """The table's rows, as each photograph and level is done."""
    photos = heldout.photos()
    if args.photos:
        photos = [p for p in photos if p.stem in args.photos.split(",")]
    levels = [(i, lv) for i, lv in enumerate(heldout.LEVELS) if lv[0] in args.levels.split(",")]
    print(f"| photograph, level ({args.weights.name} / VST-BM3D dB) | "
          + " | ".join(GRADIENT + BRIGHTNESS) + " |")
    print("|---|" + "---|" * (len(GRADIENT) + len(BRIGHTNESS)))
    for path in photos:
        rgba = heldout.load_clean(path)
        clean = rgba[..., :3].astype(np.float64)
        grad, bright = classes(clean)
        for li, (level, a, b) in levels:
            noisy = heldout.add_noise(rgba, a, b, heldout.seed_of(li))
            ours = np.asarray(den(noisy, a, b), np.float64)[..., :3]
            bm3d = np.asarray(bm3d_vst(noisy[..., :3].astype(np.float64), a, b), np.float64)
            err, ref = ((ours - clean) ** 2).sum(-1), ((bm3d[..., :3] - clean) ** 2).sum(-1)
            db = [heldout.psnr(x, clean) for x in (ours, bm3d)]
            cells = shares(err, ref, grad, 4) + shares(err, ref, bright, 3)
            print(f"| {path.stem}, {level} ({db[0]:.2f} / {db[1]:.2f}) | "
                  + " | ".join(f"{c:+.3f}" for c in cells) + " |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
