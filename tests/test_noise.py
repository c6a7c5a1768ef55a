"""vkgraph/apps/noise.py: the noise profile estimated from an image against the known (a, b) of
cnngenin's model at bench/quality.py's three levels, on the rendered scenes and the held-out
photographs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import load_script

from vkgraph.apps.noise import estimate_noise
from vkgraph.pipeline.datasets import image_set
from vkgraph.pipeline.formats import read_image, read_pfm

ROOT = Path(__file__).resolve().parent.parent
LEVELS = [("low", 2e5, 20.0), ("mid", 1e6, 100.0), ("high", 5e6, 400.0)]  # bench/quality.py
TOLERANCE = 0.2  # relative error of the std at x = 0.1 and x = 0.5


def add_noise(img, a, b, seed):
    return load_script("graphs/images/make_scene.py", "make_scene").add_noise(img, a, b, seed)


def std(a: float, b: float, x: float) -> float:
    return float(np.sqrt(a + 65535.0 * x * b) / 65535.0)


def check(clean: np.ndarray, what: str) -> None:
    for i, (level, a, b) in enumerate(LEVELS):
        ea, eb = estimate_noise(add_noise(clean, a, b, 10 + i))
        assert ea >= 0 and eb >= 0
        for x in (0.1, 0.5):
            err = std(ea, eb, x) / std(a, b, x) - 1
            assert abs(err) <= TOLERANCE, f"{what} {level}: std at {x} off by {err:+.1%}"


@pytest.mark.parametrize("name", ["scene.pfm", "scene-b.pfm", "scene-c.pfm"])
def test_scenes(name):
    check(read_pfm(ROOT / "graphs" / "images" / name), name)


def test_held_out_photos():
    pytest.importorskip("skimage")
    held_out = ROOT / "graphs" / "photos" / "held-out.txt"
    for path in image_set(str(held_out), lambda n: held_out.parent / n):
        check(read_image(path)[..., :3], path.stem)


def test_grey_small_and_clean_images():
    rng = np.random.default_rng(3)
    flat = np.full((64, 64), 0.3, np.float32)
    a, b = estimate_noise(flat + 0.02 * rng.standard_normal(flat.shape).astype(np.float32))
    assert abs(std(a, b, 0.3) / 0.02 - 1) < 0.1  # a grey (h, w) image of one intensity
    assert estimate_noise(np.zeros((5, 5, 3))) == (0.0, 0.0)  # too small to hold blocks
    a, b = estimate_noise(np.full((64, 64, 4), 0.5))  # no noise at all
    assert std(a, b, 0.5) < 1e-6


def test_clipped_blocks_are_left_out():
    """An 8-bit file clips noise at 0: the black half must not pull the estimate down."""
    rng = np.random.default_rng(4)
    img = np.zeros((128, 128, 3))
    img[:, 64:] = 0.4
    noisy = img + 0.03 * rng.standard_normal(img.shape)
    noisy[:, :64] = np.maximum(noisy[:, :64], 0.0)
    a, b = estimate_noise(noisy)
    assert abs(std(a, b, 0.4) / 0.03 - 1) < 0.15


def smooth_photo(n: int = 96) -> np.ndarray:
    """A small colour picture with smooth shading and one edge, linear rgb."""
    yy, xx = np.mgrid[0:n, 0:n] / n
    img = np.stack([0.05 + 0.6 * xx * (0.5 + 0.5 * np.sin(3 * yy + c)) for c in range(3)], -1)
    img[n // 3:2 * n // 3, n // 4:3 * n // 4] += 0.2
    return img


JPEG_RANGE = (1 / 3, 1.5)  # the estimated std over the true one, on JPEGs of smooth_photo


@pytest.mark.parametrize("kind", ["camera", "white"])
def test_jpeg_estimate_within_a_factor(kind):
    """Noise on the mosaic (camera) or per pixel (white), then sRGB and JPEG at quality 75
    and 95: the estimate for JPEG files is within JPEG_RANGE of the true std at x = 0.1 and
    0.5 (measured: 0.39-0.98; low where JPEG erased faint noise from the flat areas), where
    the pixel-scale estimate is below 0.6 of it on camera JPEGs."""
    from vkgraph.apps import camera

    make = camera.camera_jpeg if kind == "camera" else camera.white_jpeg
    for i, (level, a, b) in enumerate(LEVELS):
        for q in (75, 95):
            noisy = make(smooth_photo(), a, b, i, q)
            ea, eb = estimate_noise(noisy, jpeg=True)
            for x in (0.1, 0.5):
                r = std(ea, eb, x) / std(a, b, x)
                assert JPEG_RANGE[0] <= r <= JPEG_RANGE[1], f"{level} q {q}: std at {x} x{r:.2f}"
            if kind == "camera":
                pa, pb = estimate_noise(noisy)
                assert std(pa, pb, 0.5) < 0.6 * std(a, b, 0.5)  # what the JPEG scale is for


def test_jpeg_estimate_of_a_tiny_image_falls_back():
    rng = np.random.default_rng(5)
    img = 0.3 + 0.02 * rng.standard_normal((40, 40, 3))  # too small for half resolution
    a, b = estimate_noise(img, jpeg=True)
    assert (a, b) == estimate_noise(img)
    assert abs(std(a, b, 0.3) / 0.02 - 1) < 0.2


def test_noise_profile_given_estimated_and_strength():
    from vkgraph.apps.noise import noise_profile

    img = smooth_photo(64) + 0.02 * np.random.default_rng(6).standard_normal((64, 64, 3))
    assert noise_profile(img, (1e6, 100), 1.0) == ((1e6, 100.0), "given")
    assert noise_profile(img, (1e6, 100), 2.0) == ((2e6, 200.0), "given, strength 2")
    est, how = noise_profile(img, None)
    assert how == "estimated" and est == estimate_noise(img)
    (a, b), how = noise_profile(img, None, 0.5, jpeg=True)
    ea, eb = estimate_noise(img, jpeg=True)
    assert how == "estimated, strength 0.5" and (a, b) == (0.5 * ea, 0.5 * eb) and ea + eb > 0


def test_stored_white_quantile_is_the_measured_one():
    from vkgraph.apps import noise

    assert noise._measure_white_quantile(noise.QUANTILE) == pytest.approx(
        noise._WHITE[(noise.BLOCK, noise.QUANTILE)], rel=1e-6)


def test_fast_block_means_match_the_plain_ones():
    """_half and _blocks add in their own order (fast on 12 MP): the same numbers as numpy's
    means over the axes of the block views, within float32 rounding, on odd sizes and rgba."""
    from vkgraph.apps import noise

    rng = np.random.default_rng(7)
    img = rng.random((203, 157, 4)).astype(np.float32)
    img[:20, :30] = 0.0  # clipped blocks
    h, w = 202, 156
    plain = img[:h, :w, :3].reshape(h // 2, 2, w // 2, 2, 3).mean(axis=(1, 3), dtype=np.float32)
    half = noise._half(img)
    assert half.shape == plain.shape and np.allclose(half, plain, rtol=0, atol=1e-6)
    z = np.ascontiguousarray(half[:, :, 1])
    mean, var = noise._blocks(z)
    r = noise._residual(z)
    mid = z[1:-1, 1:-1]
    bh, bw = r.shape[0] // 8 * 8, r.shape[1] // 8 * 8
    shape = (bh // 8, 8, bw // 8, 8)
    pm = mid[:bh, :bw].reshape(shape).mean(axis=(1, 3))
    pv = np.square(r[:bh, :bw]).reshape(shape).mean(axis=(1, 3))
    clipped = ((mid[:bh, :bw] == 0) | (mid[:bh, :bw] == 1)).reshape(shape).any(axis=(1, 3))
    pm[clipped] = np.nan
    assert clipped.any() and np.array_equal(np.isnan(mean), clipped.ravel())
    assert np.allclose(mean, pm.ravel(), rtol=1e-6, atol=0, equal_nan=True)
    assert np.allclose(var, pv.ravel(), rtol=1e-5, atol=0)


def test_median_and_quantile_are_numpys():
    """The bins' median and quantile (np.partition, no numpy.ma import) give numpy's numbers."""
    from vkgraph.apps.noise import _median, _quantile

    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 4, 7, 10, 101, 1000, 4097):
        for _ in range(20):
            x = rng.standard_normal(n) * rng.uniform(0, 10) ** 3
            x = np.round(x, 1) if rng.uniform() < 0.3 else x  # ties
            assert _median(x) == float(np.median(x))
            for q in (0.0, 0.1, 0.5, 0.9, 1.0, rng.uniform()):
                assert _quantile(x, q) == float(np.quantile(x, q))


@pytest.mark.parametrize("jpeg", [False, True])
def test_8bit_samples_give_the_linear_images_estimate(jpeg):
    """estimate_noise of 8-bit sRGB rgbx samples (`vkgraph denoise` leaves an 8-bit photo
    undecoded) is the estimate of the linear image the file readers make of them, exactly."""
    from vkgraph.pipeline.formats import linear_rgba

    rng = np.random.default_rng(4)
    yy, xx = np.mgrid[0:230, 0:310]
    clean = np.stack([120 + 80 * np.sin(xx / 9.0 + c) * np.cos(yy / 13.0) for c in range(3)], -1)
    px = np.full((230, 310, 4), 255, np.uint8)
    px[..., :3] = np.clip(clean + 9 * rng.standard_normal(clean.shape), 0, 255)
    want = estimate_noise(linear_rgba(px), jpeg=jpeg)
    assert estimate_noise(px, jpeg=jpeg) == want and want[1] > 0
