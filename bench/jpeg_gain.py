"""The JPEG gain of the noise estimate (vkgraph/apps/noise.py: JPEG_GAIN), chosen for given weights
on training photographs, never on the held-out ones.

For a JPEG, `vkgraph denoise` measures the noise at half resolution and multiplies the
variance by a gain (JPEG removes most of the finest-scale noise, so the pixel-scale estimate is
low). The gain that serves a user best depends on what the weights learned to expect. This
script scores candidate gains the way bench/photo_jpeg.py scores `vkgraph denoise`: training
photographs (graphs/photos/train.txt: the photographs, not the text or cell images; centred
crops), made into JPEGs as a camera makes them (vkgraph/apps/camera.py, camera and white noise, the
three levels of vkgraph/apps/heldout.py with its seeds, qualities 75/85/95 cycled; photo_jpeg.py
draws its noise with other seeds), denoised with the estimated
profile scaled by gain / JPEG_GAIN, mean sRGB PSNR against the clean crop. One table: a row per
gain, a column per noise kind and level, and the mean.

    python bench/jpeg_gain.py --weights graphs/weights/kpn-jpeg-ctx.lut [--gains 2,3,4]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from photo_jpeg import KINDS, QUALITIES, srgb_psnr  # noqa: E402

from vkgraph.apps import heldout, noise  # noqa: E402
from vkgraph.apps.denoise import Denoiser  # noqa: E402
from vkgraph.pipeline.datasets import image_set  # noqa: E402
from vkgraph.pipeline.formats import read_image  # noqa: E402
from vkgraph.pipeline.vk import Device  # noqa: E402

# the training list's photographs of natural scenes and objects (the list also holds text,
# cells, a clock and rendered scenes, which are not what users photograph)
PHOTOS = ("rocket.jpg", "motorcycle_left.png", "retina.jpg", "coins.png", "brick.png",
          "grass.png")


def crops(size: int) -> list[tuple[str, np.ndarray]]:
    """Centred size x size crops of PHOTOS, linear rgb float64."""
    listing = ROOT / "graphs" / "photos" / "train.txt"
    out = []
    for path in image_set(str(listing), lambda n: listing.parent / n):
        if path.name not in PHOTOS:
            continue
        img = np.asarray(read_image(path), np.float64)[..., :3]
        if img.shape[2] == 1:
            img = np.repeat(img, 3, 2)
        h, w = img.shape[:2]
        s = min(size, h, w)
        y, x = (h - s) // 2, (w - s) // 2
        out.append((path.stem, img[y:y + s, x:x + s]))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", type=Path, required=True)
    ap.add_argument("--gains", default="1.5,2,3,4")
    ap.add_argument("--crop", type=int, default=256)
    ap.add_argument("--device", help="Vulkan device (substring of its name)")
    args = ap.parse_args(argv)
    gains = [float(g) for g in args.gains.split(",")]
    cases = []
    for index, (name, clean) in enumerate(crops(args.crop)):
        for li, (level, a, b) in enumerate(heldout.LEVELS):
            q = QUALITIES[(index + li) % len(QUALITIES)]
            for kind, make in KINDS.items():
                noisy = make(clean, a, b, heldout.seed_of(li), q)
                cases.append((name, kind, level, clean, noisy,
                              noise.estimate_noise(noisy, jpeg=True)))
    scores: dict[float, dict[tuple[str, str], list[float]]] = {}
    with Device.open(args.device) as dev:
        den = Denoiser(dev, args.weights)
        for g in gains:
            f = g / noise.JPEG_GAIN
            per = scores.setdefault(g, {})
            for _, kind, level, clean, noisy, (ea, eb) in cases:
                out = den(noisy, f * ea, f * eb)
                per.setdefault((kind, level), []).append(srgb_psnr(out, clean))
            print(f"gain {g:g}: done", file=sys.stderr, flush=True)
    cols = [(k, lv) for k in KINDS for lv, _, _ in heldout.LEVELS]
    print(f"\n{args.weights.name}, {len(cases) // len(cols)} training crops of "
          f"{args.crop} px: mean sRGB PSNR (dB)\n")
    print("| gain | " + " | ".join(f"{k} {lv}" for k, lv in cols) + " | mean |")
    print("|---" * (len(cols) + 2) + "|")
    for g, per in scores.items():
        means = [float(np.mean(per[c])) for c in cols]
        print(f"| {g:g} | " + " | ".join(f"{m:.2f}" for m in means)
              + f" | {np.mean(means):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
