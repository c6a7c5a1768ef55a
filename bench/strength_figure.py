"""The picture of `vkgraph denoise --strength` in README.md: one held-out photograph made into a
phone-like JPEG (noise on the mosaic, demosaic, JPEG: vkgraph/apps/camera.py) and denoised with the
shipped JPEG weights at the estimated noise level times 0.5, 1, 2 and 4, beside the noisy JPEG and
the clean photo; crops magnified 2x, sRGB, each labelled with its strength and PSNR.

    python bench/strength_figure.py [--out graphs/images/results/denoise-strength.png]
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vkgraph.apps import camera, heldout  # noqa: E402
from vkgraph.pipeline.formats import atomic_write, to_srgb8  # noqa: E402

STRENGTHS = (0.5, 1.0, 2.0, 4.0)
NOISE = heldout.LEVELS[2]  # "high": (name, a, b)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path,
                    default=ROOT / "graphs" / "images" / "results" / "denoise-strength.png")
    ap.add_argument("--device", help="Vulkan device (substring of its name)")
    args = ap.parse_args(argv)
    from PIL import Image, ImageDraw

    from vkgraph.apps.denoise import Denoiser
    from vkgraph.apps.noise import estimate_noise
    from vkgraph.cli.denoise import WEIGHTS_JPEG
    from vkgraph.pipeline.vk import Device

    photo = next(p for p in heldout.photos() if p.stem == "chelsea")
    clean = heldout.load_clean(photo)[60:252, 150:342]  # the cat's eye and fur, 192x192
    _, a, b = NOISE
    noisy = camera.camera_jpeg(clean, a, b, seed=1, quality=85)
    est = estimate_noise(noisy, jpeg=True)
    dev = Device.open(args.device)
    try:
        den = Denoiser(dev, WEIGHTS_JPEG)  # the JPEG default on a CPU
        panels = [("noisy JPEG", noisy)]
        panels += [(f"strength {s:g}", den(noisy, s * est[0], s * est[1])) for s in STRENGTHS]
        panels.append(("clean", clean))
    finally:
        dev.close()
    tiles = []
    for label, img in panels:
        psnr = "" if label == "clean" else f"  {heldout.psnr(np.clip(img, 0, 1), clean):.1f} dB"
        tile = Image.fromarray(to_srgb8(img[..., :3])).resize((384, 384), Image.NEAREST)
        ImageDraw.Draw(tile).rectangle((0, 0, 383, 17), fill=(0, 0, 0))
        ImageDraw.Draw(tile).text((4, 3), label + psnr, fill=(255, 255, 255))
        tiles.append(tile)
    strip = Image.new("RGB", (384 * len(tiles) + 4 * (len(tiles) - 1), 384), (255, 255, 255))
    for i, tile in enumerate(tiles):
        strip.paste(tile, (i * 388, 0))
    buf = io.BytesIO()
    strip.save(buf, format="PNG", optimize=True)
    atomic_write(args.out, buf.getvalue())
    print(f"{args.out}: noise a {est[0]:.4g} b {est[1]:.4g} estimated (true {a:g} {b:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
