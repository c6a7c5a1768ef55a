"""What a camera does to noise, simulated: the phone-like JPEGs that `vkgraph denoise` meets.

A camera adds its noise on the sensor's colour mosaic, one colour per photosite, then
demosaics (each missing colour interpolated from its neighbours: the noise becomes correlated
across pixels and channels), encodes to sRGB and compresses to JPEG (which removes most of the
finest-scale noise, and subsamples colour). `camera_jpeg` does that to a clean linear
photograph:

1. the RGGB mosaic of the clean linear rgb (red at even rows and columns, blue at odd ones,
   green elsewhere) gets cnngenin's noise, std(x) = sqrt(a + 65535 x b) / 65535, Gaussian,
   from a seeded generator;
2. bilinear demosaic (`demosaic`): each channel's samples, zero elsewhere, convolved with the
   tent kernel of its sampling grid, mirrored borders;
3. sRGB encode, 8 bits, JPEG of the given quality (Pillow, its default 4:2:0 chroma
   subsampling), decoded back to linear float as `read_image` decodes a JPEG.

`white_jpeg` is the same with the noise drawn per pixel and channel (i.i.d.) instead of on the
mosaic. The true level of both is the (a, b) given.
"""

from __future__ import annotations

import io

import numpy as np

from ..pipeline.formats import srgb_to_linear, to_srgb8

# which channel each photosite of a 2x2 RGGB cell records: (row parity, column parity) -> c
RGGB = {(0, 0): 0, (0, 1): 1, (1, 0): 1, (1, 1): 2}


def noise_std(x: np.ndarray, a: float, b: float) -> np.ndarray:
    """cnngenin's noise std at linear intensity x (negative x counts as 0)."""
    return np.sqrt(a + 65535.0 * np.maximum(x, 0.0) * b) / 65535.0


def mosaic(rgb: np.ndarray) -> np.ndarray:
    """(h, w) RGGB mosaic of a linear rgb image: each photosite keeps its channel."""
    out = np.empty(rgb.shape[:2], np.float64)
    for (py, px), c in RGGB.items():
        out[py::2, px::2] = rgb[py::2, px::2, c]
    return out


def _convolve3(z: np.ndarray, k: np.ndarray) -> np.ndarray:
    """3x3 convolution, mirrored borders (index -1 -> 1)."""
    p = np.pad(z, 1, mode="reflect")
    h, w = z.shape
    return sum(k[i, j] * p[i:i + h, j:j + w] for i in range(3) for j in range(3))


def demosaic(raw: np.ndarray) -> np.ndarray:
    """Bilinear demosaic of an RGGB mosaic (h, w) -> (h, w, 3): a channel's recorded values
    stay, the missing ones are the mean of the nearest recorded neighbours."""
    green = np.array([[0, 1, 0], [1, 4, 1], [0, 1, 0]]) / 4.0
    red_blue = np.array([[1, 2, 1], [2, 4, 2], [1, 2, 1]]) / 4.0
    out = np.empty(raw.shape + (3,), np.float64)
    for c, k in ((0, red_blue), (1, green), (2, red_blue)):
        sparse = np.zeros_like(raw)
        for (py, px), cc in RGGB.items():
            if cc == c:
                sparse[py::2, px::2] = raw[py::2, px::2]
        out[:, :, c] = _convolve3(sparse, k)
    return out


def jpeg(rgb: np.ndarray, quality: int) -> np.ndarray:
    """Linear rgb -> sRGB 8-bit JPEG of `quality` -> decoded linear float32 rgb."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(to_srgb8(rgb)).save(buf, format="JPEG", quality=int(quality))
    buf.seek(0)
    pixels = np.asarray(Image.open(buf).convert("RGB"))
    return srgb_to_linear(pixels / 255.0).astype(np.float32)


def camera_jpeg(clean: np.ndarray, a: float, b: float, seed: int, quality: int) -> np.ndarray:
    """A phone-like JPEG of a clean linear rgb photo (h, w, 3): noise on the RGGB mosaic,
    bilinear demosaic, sRGB, JPEG; linear float32 (h, w, 3)."""
    raw = mosaic(np.asarray(clean, np.float64)[..., :3])
    rng = np.random.default_rng(seed)
    raw = raw + noise_std(raw, a, b) * rng.standard_normal(raw.shape)
    return jpeg(demosaic(raw), quality)


def white_jpeg(clean: np.ndarray, a: float, b: float, seed: int, quality: int) -> np.ndarray:
    """The same photo with i.i.d. noise per pixel and channel instead, then sRGB and JPEG."""
    x = np.asarray(clean, np.float64)[..., :3]
    rng = np.random.default_rng(seed)
    return jpeg(x + noise_std(x, a, b) * rng.standard_normal(x.shape), quality)
