"""The network's level search (vkgraph/apps/levelsearch.py): the hinge's knee, the multiplier
it gives for a denoiser whose residual levels off at the true level, and `vkgraph denoise
--estimate`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vkgraph.apps import levelsearch as L
from vkgraph.cli.main import main
from vkgraph.pipeline.formats import write_jpg

WEIGHTS = Path(__file__).resolve().parent.parent / "graphs" / "weights"


@pytest.mark.parametrize("at", [-1.0, -0.375, 0.0, 0.625, 1.25])
def test_knee_of_a_hinge(at):
    x = np.log2(np.array(L.GRID))
    y = 3.0 + 1.0 * np.minimum(x, at) + 0.1 * np.maximum(x - at, 0)
    assert L.knee(x, y) == pytest.approx(at)


class Leveller:
    """A stand-in denoiser: told variance multiplier s of the true level it takes out
    min(s, 1) of the noise's variance, so its residual levels off at the true level."""

    def __init__(self, clean, noise, a, b):
        self.clean, self.noise, self.level = clean, noise, (a, b)
        self.calls = []

    def __call__(self, image, a, b):
        self.calls.append(image.shape)
        s = min(a / self.level[0], 1.0)
        ht, wd = image.shape[:2]
        # the crop's own part of the noise (crops are views: find where it starts)
        y, x = np.argwhere(np.all(self.full == image[:1, :1, :3], axis=2))[0]
        n = self.noise[y:y + ht, x:x + wd]
        return image[..., :3] - np.sqrt(s) * n


@pytest.mark.parametrize("off", [0.5, 1.0, 2.0])
def test_search_finds_the_level_where_the_residual_levels_off(off):
    rng = np.random.default_rng(0)
    ht, wd = 1200, 1300  # more than 4 crops' pixels: the search looks at 4 crops
    clean = np.full((ht, wd, 3), 0.4) + 0.02 * rng.random((ht, wd, 3))
    noise = 0.03 * rng.standard_normal((ht, wd, 3))
    noisy = (clean + noise).astype(np.float32)
    den = Leveller(clean, noise, 1e6, 10.0)
    den.full = noisy
    m = L.search(den, noisy, 1e6 / off, 10.0 / off)  # the estimate off by `off`
    # the knee is at the true level: log2(off) octaves above the estimate
    assert m == pytest.approx(2 ** (L.ALPHA * np.log2(off) + L.OFFSET), rel=0.1)
    assert len(den.calls) == len(L.GRID) * L.CROPS
    assert all(s == (L.CROP, L.CROP, 3) for s in den.calls)
    assert L.search(den, noisy, 0.0, 0.0) == 1.0  # no noise estimated: nothing to search


def test_crops_of_a_small_photo_are_the_photo():
    img = np.zeros((600, 700, 4), np.float32)
    assert len(L.crops(img)) == 1 and L.crops(img)[0] is img


def photo_jpeg(path: Path) -> None:
    rng = np.random.default_rng(2)
    yy, xx = np.mgrid[0:64, 0:64]
    clean = np.stack([0.3 + 0.2 * np.sin(xx / 5.0 + c) * np.cos(yy / 7.0) for c in range(3)], -1)
    write_jpg(path, np.clip(clean + 0.03 * rng.standard_normal(clean.shape), 0, 1), 90)


def test_denoise_estimate_modes(tmp_path, capsys):
    """--estimate network refines the level and says so; image and auto on the CPU driver do
    not (auto searches for JPEGs with U-Net weights on a GPU only)."""
    photo_jpeg(tmp_path / "p.jpg")
    unet = str(WEIGHTS / "unet-jpeg.lut")
    lines = {}
    for mode in ("network", "image", "auto"):
        code = main(["denoise", str(tmp_path / "p.jpg"), "-o", str(tmp_path / f"{mode}.png"),
                     "--weights", unet, "--estimate", mode])
        out, err = capsys.readouterr()
        assert code == 0, err
        lines[mode] = out
    assert "by the network's search" in lines["network"]
    assert "by the network's search" not in lines["image"]
    assert "by the network's search" not in lines["auto"]  # the CPU driver
    code = main(["denoise", str(tmp_path / "p.jpg"), "--estimate", "nope"])
    assert code == 2 and "invalid choice" in capsys.readouterr().err
