"""kpn inference time on a large photo: the shipped weights (or --weights) on a W x H image
(default 4000 x 3000, 12 megapixels), whole on the device; one table.

The image is a held-out photograph tiled to the size, with cnngenin's noise at the "mid"
level. After one warm-up call, --runs calls of the Denoiser (upload, one frame, download) are
timed on the wall clock, and the GPU time of the frame is the sum of its nodes' timestamps.
With --ensemble N the Denoiser runs N frames a call (the flips and rotations of the image),
whose GPU times add up.

    python bench/kpn_infer.py [--size 4000x3000] [--runs 5] [--weights W.lut] [--ensemble N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import quality  # noqa: E402  (bench/quality.py: the held-out photos, the noise model)

from vkgraph.apps.denoise import Denoiser  # noqa: E402
from vkgraph.pipeline.vk import Device  # noqa: E402

_, A, B = quality.LEVELS[1]  # the "mid" level


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="4000x3000")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--weights", type=Path, default=ROOT / "graphs/weights/kpn-photo.lut")
    ap.add_argument("--ensemble", type=int, choices=(1, 2, 4, 8), default=1,
                    help="flips and rotations averaged (the Denoiser's ensemble)")
    ap.add_argument("--device", help="Vulkan device (substring of its name)")
    args = ap.parse_args()
    wd, ht = (int(v) for v in args.size.split("x"))
    photo = quality.load_clean(quality.photos()[0])
    reps = (-(-ht // photo.shape[0]), -(-wd // photo.shape[1]), 1)
    clean = np.tile(photo, reps)[:ht, :wd]
    noisy = quality.add_noise(clean, A, B, seed=0)
    dev = Device.open(args.device)
    try:
        den = Denoiser(dev, args.weights, max_pixels=wd * ht, profile=True,
                       ensemble=args.ensemble)
        den(noisy, A, B)  # warm-up: build, pipelines
        walls, gpus = [], []
        for _ in range(args.runs):
            den.gpu_ms.clear()
            t0 = time.perf_counter()
            out = den(noisy, A, B)
            walls.append(time.perf_counter() - t0)
            gpus.append(sum(den.gpu_ms))  # the ensemble's frames' node times
        psnr = quality.psnr(out, clean)
        name = dev.info.name
    finally:
        dev.close()
    print(f"kpn inference, {wd}x{ht} ({wd * ht / 1e6:.1f} MP), {args.weights.name}, ensemble "
          f"{args.ensemble}, on {name}")
    print("| runs | GPU ms (median) | wall ms (median, with upload/download) | PSNR dB |")
    print("|---|---|---|---|")
    print(f"| {args.runs} | {np.median(gpus):.2f} | {1e3 * np.median(walls):.1f} | "
          f"{psnr:.2f} |")


if __name__ == "__main__":
    main()
