"""Where `vkgraph denoise`'s noise estimate costs quality on phone-like JPEGs: the estimate's
size or its shape.

For each held-out photograph (a centre crop) and level of bench/photo_jpeg.py, one table row:
the estimated std over the true one at x = 0.02, 0.1 and 0.5 (the shape), then the sRGB PSNR
of the weights given the true (a, b), the estimate times each of --scales (its size moved,
as `--strength` does), the true level times 0.5 and 0.7, and the estimate scaled to the true
std at x = 0.18 (the right size at mid grey, the estimate's shape); the means per level last.

    python bench/estimate_shape.py [--crop 256] [--kind white] [--weights W.lut]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from photo_jpeg import case, srgb_psnr  # noqa: E402

from vkgraph.apps import camera, heldout  # noqa: E402
from vkgraph.apps.noise import noise_profile  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--crop", type=int, default=256)
    ap.add_argument("--kind", default="white", choices=["camera", "white"])
    ap.add_argument("--weights", type=Path, default=ROOT / "graphs" / "weights" / "unet-jpeg.lut")
    ap.add_argument("--scales", default="0.35,0.5,0.7,1,1.4")
    args = ap.parse_args(argv)
    from vkgraph.apps.denoise import Denoiser
    from vkgraph.pipeline.vk import Device

    scales = [float(v) for v in args.scales.split(",")]
    dev = Device.open()
    try:
        den = Denoiser(dev, args.weights)
        means: dict[str, list[dict]] = {}
        for li, (level, _, _) in enumerate(heldout.LEVELS):
            for i, photo in enumerate(heldout.photos()):
                c = case(photo, i, args.kind, li, args.crop)
                (ea, eb), _ = noise_profile(c["noisy"], None, 1.0, jpeg=True)
                a, b = c["a"], c["b"]

                def score(pa, pb, c=c):
                    return srgb_psnr(den(c["noisy"], pa, pb), c["clean"])

                r = {"noisy": srgb_psnr(c["noisy"], c["clean"]), "true": score(a, b)}
                r.update({f"est*{s:g}": score(s * ea, s * eb) for s in scales})
                r.update({f"true*{s:g}": score(s * a, s * b) for s in (0.5, 0.7)})
                k = (camera.noise_std(0.18, a, b) / camera.noise_std(0.18, ea, eb)) ** 2
                r["est@true(0.18)"] = score(k * ea, k * eb)
                shape = [camera.noise_std(x, ea, eb) / camera.noise_std(x, a, b)
                         for x in (0.02, 0.1, 0.5)]
                print(f"{level} {photo.stem}: true a {a:.0f} b {b:.1f}, est a {ea:.0f} "
                      f"b {eb:.1f}; est/true std at 0.02/0.1/0.5 "
                      + " / ".join(f"{v:.2f}" for v in shape) + "; "
                      + " ".join(f"{n} {v:.2f}" for n, v in r.items()), flush=True)
                means.setdefault(level, []).append(r)
        for level, rows in means.items():
            print(f"{level} mean: " + " ".join(
                f"{n} {np.mean([r[n] for r in rows]):.2f}" for n in rows[0]))
    finally:
        dev.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
