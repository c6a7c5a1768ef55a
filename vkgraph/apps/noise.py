"""Noise profile of an image: (a, b) of cnngenin's model, estimated from the image alone.

The model (cnngenin's and vkdt's units): Gaussian noise per channel with
std(x) = sqrt(a + 65535 x b) / 65535 for linear signal x, i.e. a variance linear in x,
var(x) = alpha + beta x with alpha = a / 65535^2 and beta = b / 65535.

The estimate:

1. residual: each channel filtered with the separable kernel [1 -2 1]^T [1 -2 1] / 6. It
   cancels constant and linear signal (most of a photograph's smooth areas), and its
   weights' squares sum to 1, so on noise of variance s^2 its output has variance s^2;
2. blocks of 8x8 pixels per channel: the block's mean intensity and the mean squared residual
   in it (a variance estimate, inflated where the block has texture or edges);
3. blocks binned by intensity (BINS bins of equal counts); per bin, a low quantile of the
   block variances, divided by the same quantile measured on pure white noise (so a
   textureless bin gives an unbiased variance, and texture mostly lands above the quantile);
   blocks that touch exact 0 or 1 (an 8-bit file's clipping) are left out;
4. the line var = alpha + beta x (alpha, beta >= 0) as the lower envelope of the bins: the
   highest line that no bin lies below. Texture only ever adds variance, so in photographs
   whose bright areas are all textured a least-squares line overestimates the slope (by up
   to 25% in std at x = 0.5, measured); the envelope does not. a = 65535^2 alpha,
   b = 65535 beta.

Measured (tests/test_noise.py; cnngenin's noise at bench/quality.py's three levels and
seeds): the estimated std at x = 0.1 and x = 0.5 is within 17% of the truth on the held-out
photographs (astronaut, camera, chelsea, coffee; the largest errors, at the lowest level, are
+8% at x = 0.1 and +17% at x = 0.5 on astronaut, +10% at x = 0.5 on coffee, where the
photographs' fine texture and own noise add to the estimate; at mid and high levels all within
6%) and within 7% on the rendered scenes. A 12-megapixel photograph takes about 0.2 s on one
core: at most MAX_PIXELS per channel are looked at, in bands of rows spread over the image,
and the channels (and bands) are measured on the host's threads at once.

JPEG files (estimate_noise(jpeg=True); `vkgraph denoise` uses it for every JPEG). A camera adds
its noise on the colour mosaic and demosaics (the noise is spread over neighbouring pixels and
channels), and JPEG removes most of what is left at the finest scale: on phone-like JPEGs
(vkgraph/apps/camera.py: noise on the RGGB mosaic, bilinear demosaic, sRGB, JPEG 75-95) the pixel-
scale estimate above comes out 20-70x low in variance (the median over the training and held-
out photographs, 256x256 crops: 0.015 of the true variance at x = 0.1 at quality 75, 0.045 at
95). For a JPEG the same steps run on the means of 2x2 pixels (where white noise has a quarter
of its pixels' variance, so the fit is multiplied by 4) and the result by JPEG_GAIN. The gain
was chosen by what the shipped weights do with it, on training photographs (rocket,
motorcycle_left, retina: 160x160 crops, camera and white noise at the three levels, JPEG
75/85/95; sRGB PSNR of the result): gain 3 against 1.5 gained 1.2 dB summed over rocket's six
cases and 9.2 dB over retina's (dark and smooth, where the half-resolution estimate is low),
and lost 5.9 dB over motorcycle_left's (fine texture everywhere, where it is high; at gain 3
the result fell below its input). 2 was the compromise for kpn-photo.lut. The JPEG default
weights are now kpn-jpeg-ctx.lut, trained on JPEG-compressed camera noise, and for them
bench/jpeg_gain.py (six training photographs, 256x256 crops, camera and white noise at the
three levels, JPEG 75/85/95; mean sRGB PSNR) measured 32.12 dB at gain 2, 32.21 at 3 and
32.10 at 4, and for the same recipe trained again (the kpn-jpeg-ctx.lut shipped until it was
trained with misreported levels, cnngenin nerr) 32.33, 32.42 and 32.32: 3 was kept. The
JPEG defaults are now the U-Nets trained with misreported levels (unet-jpeg-cells.lut on a
CPU, unet-jpeg.lut on a GPU), which check the level against the image; for them the same
bench measured 31.78 / 31.73 / 31.65 dB at gains 1.5 / 2 / 3 (cells) and 34.03 / 34.02 /
33.95 (unet-jpeg): lower gains help at low noise and on white noise, higher ones at camera
high. 2 takes most of the gain for both without going far below the variance the estimate
sees. `vkgraph denoise --strength` moves it per photo.
"""

from __future__ import annotations

import numpy as np

SCALE = 65535.0
BLOCK = 8
BINS = 32
QUANTILE = 0.1
MAX_PIXELS = 4_000_000  # per channel; larger images are sampled in bands of rows
JPEG_GAIN = 2.0  # of the variance measured at half resolution in a JPEG (measured, see above)
# _white_quantile's (BLOCK, q) -> quantile; (8, 0.1): _measure_white_quantile(0.1), kept equal
# by tests/test_noise.py
_WHITE: dict[tuple, float] = {(8, 0.1): 0.6313079595565796}


def _residual(z: np.ndarray) -> np.ndarray:
    """[1 -2 1] along x then y, / 6: (h - 2, w - 2), unit gain on white noise."""
    dx = z[:, :-2] - 2.0 * z[:, 1:-1] + z[:, 2:]
    return (dx[:-2] - 2.0 * dx[1:-1] + dx[2:]) / 6.0


def _block_sums(x: np.ndarray) -> np.ndarray:
    """Sums of the BLOCK x BLOCK blocks of x (h, w multiples of BLOCK): the rows of each
    block added first (a reduction over whole rows), then each block's BLOCK columns (a
    matrix product). numpy's mean over axes (1, 3) of the 4-d block view is 2-20x slower (a
    strided reduction per block; the most of the estimate's time on a 12 MP photograph)."""
    a, b = x.shape[0] // BLOCK, x.shape[1] // BLOCK
    rows = x.reshape(a, BLOCK, x.shape[1]).sum(axis=1)
    return rows.reshape(a, b, BLOCK) @ np.ones(BLOCK, rows.dtype)


def _blocks(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean intensity, mean squared residual) of each BLOCK x BLOCK block of residual
    pixels; z: (h, w) one channel. Blocks holding a value of exactly 0 or 1 (clipped by an
    8-bit file: its noise is cut off there) get NaN."""
    r = _residual(z)
    mid = z[1:-1, 1:-1]  # the pixels the residual is centred on
    h, w = (r.shape[0] // BLOCK) * BLOCK, (r.shape[1] // BLOCK) * BLOCK
    n = BLOCK * BLOCK
    mean = _block_sums(mid[:h, :w]) / n
    var = _block_sums(np.square(r[:h, :w])) / n
    clip = (mid[:h, :w] == 0) | (mid[:h, :w] == 1)
    clipped = clip.reshape(h // BLOCK, BLOCK, w).any(axis=1).reshape(
        h // BLOCK, w // BLOCK, BLOCK).any(axis=2)
    mean[clipped] = np.nan
    return mean.ravel(), var.ravel()


def _white_quantile(q: float) -> float:
    """The q-quantile of block variances of unit white noise (the residual is correlated
    across neighbouring pixels, so this is measured rather than taken from a chi-square);
    the estimate's own (BLOCK, QUANTILE) is stored in _WHITE (measured: a fresh process
    spent 40 ms of a 12 MP estimate measuring it), others measured once a process."""
    key = (BLOCK, q)
    if key not in _WHITE:
        _WHITE[key] = _measure_white_quantile(q)
    return _WHITE[key]


def _measure_white_quantile(q: float) -> float:
    noise = np.random.default_rng(0).standard_normal((1026, 1026)).astype(np.float32)
    return float(np.quantile(_blocks(noise)[1], q))


def _median(x: np.ndarray) -> float:
    """np.median of a 1-d float64 array without NaN: the same number (the middle value, or
    the mean of the two middle ones). np.median and np.quantile import numpy.ma for their
    NaN checks: 25 ms of a fresh `vkgraph denoise` process."""
    n = x.size
    part = np.partition(x, [(n - 1) // 2, n // 2])
    return float((part[(n - 1) // 2] + part[n // 2]) / 2.0)


def _quantile(x: np.ndarray, q: float) -> float:
    """np.quantile(x, q) of a 1-d float64 array without NaN (its default, linear method):
    the same number, numpy's interpolation between the two values around q (n - 1)."""
    pos = q * (x.size - 1)
    lo = int(np.floor(pos))
    hi = min(lo + 1, x.size - 1)
    part = np.partition(x, [lo, hi])
    a, b, t = part[lo], part[hi], pos - lo
    return float(b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t)


def _bands(h: int, max_rows: int) -> list[slice]:
    """Row bands (BLOCK * 8 rows each, whole blocks) spread evenly over h rows, together at
    most about max_rows; one slice of everything when h fits."""
    if h <= max_rows:
        return [slice(0, h)]
    band = BLOCK * 8 + 2
    n = max(1, max_rows // band)
    starts = np.linspace(0, h - band, n).astype(int)
    return [slice(s, s + band) for s in starts]


def _lower_line(x: np.ndarray, v: np.ndarray) -> tuple[float, float]:
    """The non-negative line alpha + beta x that lies on or below every (x, v) and is as
    high as possible (largest sum of (alpha + beta x) / v): texture only adds variance to a
    bin, so the noise is the lower envelope of the bins. The optimum of this linear program
    is a vertex: a line through two bins, or one through a bin with alpha or beta zero."""
    i, j = np.triu_indices(len(x), 1)
    dx = x[i] - x[j]
    ok = np.abs(dx) > 1e-12
    beta = (v[i][ok] - v[j][ok]) / dx[ok]
    alpha = v[i][ok] - beta * x[i][ok]
    alpha = np.concatenate([alpha, [float(v.min()), 0.0]])
    beta = np.concatenate([beta, [0.0, float(np.min(v / np.maximum(x, 1e-12)))]])
    line = alpha[:, None] + beta[:, None] * x[None, :]
    feasible = (alpha >= 0) & (beta >= 0) & np.all(line <= v * (1 + 1e-9) + 1e-30, axis=1)
    score = np.where(feasible, np.sum(line / v, axis=1), -np.inf)
    k = int(np.argmax(score))
    return float(alpha[k]), float(beta[k])


def _fit(img: np.ndarray) -> tuple[float, float]:
    """(a, b) of white noise at the image's own pixel scale (steps 1-4 of the module
    docstring); (0, 0) when it holds fewer than 16 blocks over its channels. img: (h, w, c),
    c <= 3 (estimate_noise's channels)."""
    from ..pipeline.formats import in_parts

    chans = np.asarray(img)
    h, w = chans.shape[:2]
    rows = max(BLOCK * 8 + 2, MAX_PIXELS // max(w, 1))
    tasks = [(band, c) for band in _bands(h, rows) for c in range(chans.shape[2])]
    blocks: list = [None] * len(tasks)

    def run(i: int, j: int) -> None:  # each (band, channel) on the host's threads
        for k in range(i, j):
            band, c = tasks[k]
            blocks[k] = _blocks(_linear(chans[band][:, :, c]))

    in_parts(run, len(tasks), 1)
    mean = np.concatenate([m for m, _ in blocks]) if blocks else np.zeros(0)
    var = np.concatenate([v for _, v in blocks]) if blocks else np.zeros(0)
    ok = np.isfinite(mean) & np.isfinite(var)
    mean, var = mean[ok].astype(np.float64), var[ok].astype(np.float64)
    bins = min(BINS, mean.size // 16)  # a quantile needs some blocks per bin
    if bins < 1:
        return 0.0, 0.0
    order = np.argsort(mean, kind="stable")
    white = _white_quantile(QUANTILE)
    xs, vs = [], []
    for idx in np.array_split(order, bins):
        xs.append(_median(mean[idx]))
        vs.append(_quantile(var[idx], QUANTILE) / white)
    x, v = np.maximum(np.array(xs), 0.0), np.array(vs)
    if not np.any(v > 0):
        return 0.0, 0.0
    alpha, beta = _lower_line(x, np.maximum(v, 1e-6 * v.max()))
    return alpha * SCALE * SCALE, beta * SCALE


def _linear(x: np.ndarray) -> np.ndarray:
    """float32 linear values of samples: floats as they are, 8-bit sRGB codes (an 8-bit
    photo's samples, which `vkgraph denoise` leaves undecoded where it denoises them in 8
    bits) through the file readers' own table (formats.decode_unorm's numbers)."""
    if x.dtype == np.uint8:
        from ..pipeline.formats import srgb8_linear

        return srgb8_linear()[x]
    return np.asarray(x, np.float32)


def _half(img: np.ndarray) -> np.ndarray:
    """Means of 2x2 pixels of each channel (h // 2, w // 2, c); an odd last row or column is
    dropped. float32, each channel contiguous (a (c, h, w) array seen as (h, w, c)): _fit
    reads it channel by channel. Rows are added first over all channels of img (which may
    hold more than c: rgba), then column pairs per channel; a mean over the axes of a 5-d
    view took 0.7 s on a 12 MP photograph, this 40 ms on one core; bands of rows go to the
    host's threads (formats.in_parts). 8-bit sRGB samples are made linear a band at a time
    (_linear): the same numbers as from the linear image, which is then never made whole."""
    from ..pipeline.formats import PART, in_parts

    h, w, c = img.shape[0] // 2 * 2, img.shape[1] // 2 * 2, min(img.shape[2], 3)
    out = np.empty((c, h // 2, w // 2), np.float32)

    def band(r0: int, r1: int) -> None:
        even, odd = img[2 * r0:2 * r1:2, :w], img[2 * r0 + 1:2 * r1:2, :w]
        if img.dtype == np.uint8:
            even, odd = _linear(even), _linear(odd)
        rows = np.add(even, odd, dtype=np.float32)
        for k in range(c):
            o = out[k, r0:r1]
            np.add(rows[:, 0::2, k], rows[:, 1::2, k], out=o)
            o *= 0.25

    in_parts(band, h // 2, max(1, PART // max(1, w * img.shape[2])))
    return np.moveaxis(out, 0, 2)


def _blocks_in(h: int, w: int, channels: int) -> int:
    return ((h - 2) // BLOCK) * ((w - 2) // BLOCK) * channels


def estimate_noise(img: np.ndarray, jpeg: bool = False) -> tuple[float, float]:
    """(a, b) of cnngenin's noise model for a linear float image (h, w, >= 3; only rgb is
    looked at; grey (h, w) or (h, w, 1) works too), or for 8-bit sRGB samples (uint8: made
    linear as the file readers do, band by band; the same estimate). Both are >= 0; an image
    with fewer than 16 blocks of 8x8 over its channels (rgb below about 26x26) gives (0, 0).

    jpeg=True for an image decoded from a JPEG file: the noise is measured at half the
    resolution (means of 2x2 pixels, whose white-noise variance is a quarter of the pixels')
    and scaled by JPEG_GAIN; below 2 x 26 pixels it falls back to the pixel scale. See the
    module docstring for the method and its measured accuracy."""
    # huge values (a float file's 1e38) overflow in the residual: those blocks are not
    # finite and left out, so numpy's warnings about them are noise
    with np.errstate(over="ignore", invalid="ignore"):
        return _estimate(np.asarray(img), jpeg)


def _estimate(img: np.ndarray, jpeg: bool) -> tuple[float, float]:
    if img.ndim == 2:
        img = img[:, :, None]
    chans = img[:, :, :3]
    h, w, c = chans.shape
    if not jpeg or _blocks_in(h // 2, w // 2, c) < 16:
        return _fit(chans)
    a, b = _fit(_half(img))
    return 4.0 * JPEG_GAIN * a, 4.0 * JPEG_GAIN * b


def noise_profile(image: np.ndarray, given: tuple[float, float] | None, strength: float = 1.0,
                  jpeg: bool = False) -> tuple[tuple[float, float], str]:
    """((a, b), how) of the profile `vkgraph denoise` hands to kpn: the given one, else the
    estimate (jpeg: see estimate_noise), times `strength` (a and b both: the noise variance
    times strength); how says "given" or "estimated", and the strength when it is not 1."""
    if given is not None:
        a, b, how = float(given[0]), float(given[1]), "given"
    else:
        (a, b), how = estimate_noise(image, jpeg=jpeg), "estimated"
    if strength != 1.0:
        how += f", strength {strength:g}"
    return (strength * a, strength * b), how
