"""The noise level of a JPEG found with the denoiser itself, from the image's own estimate.

A JPEG's noise has been shaped by demosaicing and compression, so the estimate from the image
alone (vkgraph/apps/noise.py) is off by up to about 2x in variance either way, and the JPEG U-Net
(unet-jpeg.lut) is sharp about its level: told half or twice the true variance it loses 0.5-2 dB
at the mid and high levels of bench/photo_jpeg.py. `search` asks the network instead:

1. crops of the photo (the whole photo up to 4 x CROP^2 pixels, else CROPS crops of CROP x CROP
   at the centres of its quarters) are denoised at the estimate (a, b) times each multiplier
   of GRID, 1/4 to 4 in steps of sqrt(2);
2. per multiplier s, v(s): the QUANTILE-quantile of the variances of the 8x8 blocks (per
   channel) of the residual, the sRGB-encoded input minus the sRGB-encoded result;
3. below the true level the network takes out about what it is told, so v grows with s;
   above it there is little noise left to take, and v grows slower (what it takes then is
   the picture). log2 v against log2 s is fitted by a hinge (two lines meeting at a knee,
   least squares, the knee on a grid of 1/8 octave inside the multipliers'), and the level
   is the estimate times 2^(ALPHA knee + OFFSET).

ALPHA and OFFSET were chosen on the training photographs only (ten of graphs/photos/train.txt,
512 x 512 crops, camera and white noise at bench/photo_jpeg.py's three levels, the JPEG
qualities it cycles): the mean sRGB PSNR lost against the true level, over those 60 cases,
was 0.16 dB with (0.8, 0.125), against 0.61 dB with the estimate alone. Measured on the
held-out photographs: bench/README.md, photo_jpeg.py.

It costs len(GRID) runs of the network on at most 1 MP: `vkgraph denoise` does it on a GPU
(for a 12 MP photo, tens of milliseconds of GPU time), not on a CPU device.
"""

from __future__ import annotations

import numpy as np

GRID = tuple(2.0 ** (k / 2) for k in range(-4, 5))  # variance multipliers of the estimate
CROP, CROPS = 512, 4
QUANTILE = 0.75
ALPHA, OFFSET = 0.8, 0.125


def crops(image: np.ndarray) -> list[np.ndarray]:
    """The parts of the photo the search looks at (module docstring, step 1)."""
    ht, wd = image.shape[:2]
    if ht * wd <= CROPS * CROP * CROP:
        return [image]
    ch, cw = min(CROP, ht), min(CROP, wd)
    out = []
    for fy in (0.25, 0.75):
        for fx in (0.25, 0.75):
            y = min(max(int(fy * ht) - ch // 2, 0), ht - ch)
            x = min(max(int(fx * wd) - cw // 2, 0), wd - cw)
            out.append(image[y:y + ch, x:x + cw])
    return out


def residual_level(noisy: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The variances of the 8x8 blocks of each channel of sRGB(noisy) - sRGB(out)."""
    from ..pipeline.formats import to_srgb8

    r = (to_srgb8(noisy[..., :3]).astype(np.float32)
         - to_srgb8(out[..., :3]).astype(np.float32)) / 255.0
    h, w = r.shape[0] // 8 * 8, r.shape[1] // 8 * 8
    blocks = r[:h, :w].reshape(h // 8, 8, w // 8, 8, 3).transpose(0, 2, 4, 1, 3)
    return blocks.reshape(-1, 64).var(axis=1)


def knee(log_s: np.ndarray, log_v: np.ndarray) -> float:
    """The knee of the hinge y = c0 + c1 min(x, k) + c2 max(x - k, 0) that fits (log_s, log_v)
    best (least squares), k on a grid of 1/8 of log_s's step inside its second and
    second-to-last points."""
    best, at = np.inf, 0.0
    for k in np.arange(log_s[1], log_s[-2] + 1e-9, (log_s[1] - log_s[0]) / 4):
        x = np.stack([np.ones_like(log_s), np.minimum(log_s, k), np.maximum(log_s - k, 0)], 1)
        c, *_ = np.linalg.lstsq(x, log_v, rcond=None)
        err = float(np.sum((x @ c - log_v) ** 2))
        if err < best:
            best, at = err, float(k)
    return at


def search(den, image: np.ndarray, a: float, b: float) -> float:
    """The multiplier of (a, b) (an estimate of the image's noise profile) that the denoiser
    `den` (den(image, a, b) -> rgb) finds for the image; 1 where the estimate is no noise."""
    if a <= 0 and b <= 0:
        return 1.0
    parts = crops(np.asarray(image))
    v = []
    for s in GRID:
        blocks = np.concatenate([residual_level(p, den(p, s * a, s * b)) for p in parts])
        v.append(float(np.quantile(blocks, QUANTILE)))
    log_v = np.log2(np.maximum(np.array(v), 1e-12))
    k = knee(np.log2(np.array(GRID)), log_v)
    return float(2.0 ** (ALPHA * k + OFFSET))
