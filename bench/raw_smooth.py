"""The raw denoisers on smooth synthetic pictures, where the mosaic networks are weakest; one
table.

raw_quality.py scores held-out photographs, whose detail the learned demosaicing of the
mosaic U-Nets wins on by several dB. This bench asks the opposite: a picture of smooth colour
gradients and one vertical edge (skies, walls, out-of-focus backgrounds), bare or with a fine
texture of std 0.005, written as a Bayer (RGGB) and an X-Trans DNG with noise (a, b) =
(1000, 10) in cnngenin's units (about ISO 3200 on a full-frame sensor), each denoised by
`vkgraph denoise`'s chain (rawdenoise.denoise_raw, the true profile) with the shipped weights
of its pattern and with demosaic + kpn-photo-ctx.lut. PSNR in dB (linear Rec.709) against the
clean picture, 12 pixels from the borders left out.

    python bench/raw_smooth.py [--size 204x180] [--device NAME] [--ensemble N]

--ensemble N adds a column per pattern: its GPU default's mean over N flips and rotations
(`vkgraph denoise --ensemble N`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/raw_quality.py

from raw_quality import PATTERNS, develop, write_raw  # noqa: E402

from vkgraph.apps import dng  # noqa: E402

NOISE = (1000.0, 10.0)
WEIGHTS = {"RGGB": ("unet-raw.lut", "unet-raw-w24.lut", "kpn-photo-ctx.lut"),
           "X-Trans": ("unet-xtrans.lut", "unet-xtrans-w24.lut", "kpn-photo-ctx.lut")}


def gradients(wd: int, ht: int, texture: bool) -> np.ndarray:
    """(ht, wd, 3): smooth colour gradients in 0.1..0.6 with a vertical edge at the middle,
    plus (texture) a fixed fine texture of std 0.005."""
    yy, xx = np.mgrid[0:ht, 0:wd] / max(wd, ht)
    rgb = np.stack([0.3 + 0.25 * np.sin(6 * xx + 1) * np.cos(4 * yy),
                    0.35 + 0.2 * np.cos(5 * yy + 2 * xx),
                    0.25 + 0.2 * np.sin(7 * yy + 0.5)], -1)
    rgb[:, wd // 2:] *= 1.4
    if texture:
        rgb += 0.01 * np.random.default_rng(4).standard_normal(rgb.shape)
    return 0.5 * np.clip(rgb, 0.02, 0.95) + 0.1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="204x180", help="WxH of the pictures")
    p.add_argument("--device", help="Vulkan device (substring of its name)")
    p.add_argument("--ensemble", type=int, choices=(2, 4, 8), default=None, metavar="N")
    args = p.parse_args(argv)
    wd, ht = (int(v) for v in args.size.split("x"))

    from vkgraph.apps.denoise import Denoiser
    from vkgraph.apps.heldout import add_noise, psnr
    from vkgraph.apps.rawdenoise import Demosaicer, denoise_raw
    from vkgraph.pipeline.raw import read_raw
    from vkgraph.pipeline.testing import session_device
    from vkgraph.pipeline.vk import Device

    device = Device.open(args.device) if args.device else session_device()
    dem = Demosaicer(device)
    inner = np.s_[12:-12, 12:-12]
    print(f"smooth gradients, {wd}x{ht}, noise a {NOISE[0]:g} b {NOISE[1]:g}; PSNR in dB; "
          f"device {device.info.name}")
    ens = f" | the GPU default, ensemble {args.ensemble}" if args.ensemble else ""
    print("| picture | pattern | demosaic, noisy | mosaic U-Net, GPU default (unet-raw / "
          f"unet-xtrans) | mosaic U-Net, CPU default (-w24) | demosaic + kpn-photo-ctx{ens} |")
    print("|---" * (7 if args.ensemble else 6) + "|")
    with tempfile.TemporaryDirectory() as tmp:
        for texture in (False, True):
            clean = gradients(wd, ht, texture)
            for name, cfa in PATTERNS.items():
                mosaic = add_noise(dng.camera_mosaic(clean, cfa), *NOISE, seed=3)
                raw = read_raw(write_raw(Path(tmp), name, mosaic, cfa))
                row = [psnr(develop(raw.mosaic, raw)[inner], clean[inner])]
                runs = [(w, 1) for w in WEIGHTS[name]]
                if args.ensemble:
                    runs.append((WEIGHTS[name][0], args.ensemble))
                for w, n in runs:
                    den = Denoiser(device, ROOT / "graphs" / "weights" / w, ensemble=n)
                    out, _, _ = denoise_raw(den, dem, raw, NOISE)
                    row.append(psnr(out[inner], clean[inner]))
                    den.close()
                print(f"| {'textured' if texture else 'bare'} | {name} | "
                      + " | ".join(f"{v:.2f}" for v in row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
