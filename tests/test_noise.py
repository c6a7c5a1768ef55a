"""pipeline/noise.py: the noise profile estimated from an image against the known (a, b) of
cnngenin's model at bench/quality.py's three levels, on the rendered scenes and the held-out
photographs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import load_script

from vkgraph.pipeline.datasets import image_set
from vkgraph.pipeline.formats import read_image, read_pfm
from vkgraph.pipeline.noise import estimate_noise

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
