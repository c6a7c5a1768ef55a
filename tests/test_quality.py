"""bench/quality.py on a tiny stand-in for the held-out photographs: the noise sigma given to
the classical methods, the baseline cache (filled, reused, recomputed when the pixels change)
and one whole run with kpn weights down to the table and the JSON."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from vkgraph.pipeline.formats import write_lut, write_png

ROOT = Path(__file__).resolve().parent.parent


def load_quality():
    spec = importlib.util.spec_from_file_location("bench_quality", ROOT / "bench" / "quality.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def quality(tmp_path, monkeypatch):
    pytest.importorskip("skimage")
    pytest.importorskip("bm3d")
    q = load_quality()
    rng = np.random.default_rng(2)
    yy, xx = np.mgrid[0:32, 0:40]
    img = np.stack([0.5 + 0.3 * np.sin(xx / 3.0 + c) * np.cos(yy / 4.0) for c in range(3)], -1)
    write_png(tmp_path / "tiny.png", np.clip(img + 0.01 * rng.standard_normal(img.shape), 0, 1))
    (tmp_path / "held-out.txt").write_text("# stand-in\ntiny.png\n")
    monkeypatch.setattr(q, "HELD_OUT", tmp_path / "held-out.txt")
    return q


def test_true_sigma_is_the_rms_of_the_per_pixel_std(quality):
    clean = np.random.default_rng(0).random((16, 16, 3))
    a, b = 1e6, 100.0
    per_pixel = np.sqrt(a + 65535 * clean * b) / 65535
    assert quality.true_sigma(clean, a, b) == pytest.approx(np.sqrt(np.mean(per_pixel ** 2)))


def test_cache_filled_reused_and_checked(quality, tmp_path, monkeypatch):
    monkeypatch.setattr(quality, "LEVELS", quality.LEVELS[1:2])  # bm3d takes 4 s even here
    cache_path = tmp_path / "cache.json"
    cache = quality.fill_baselines(cache_path, jobs=1)
    assert len(cache) == len(quality.METHODS)
    assert json.loads(cache_path.read_text()) == cache
    rows = quality.collect(cache)
    for cells in rows.values():
        # every method beats the noisy input on this smooth picture
        assert all(cells[m]["psnr"] > cells["noisy"]["psnr"] for m in quality.METHODS)

    def fail(task):
        raise AssertionError(f"recomputed {task}")

    monkeypatch.setattr(quality, "baseline", fail)
    assert quality.fill_baselines(cache_path, jobs=1) == cache  # all from the cache
    key = next(iter(cache))
    cache[key]["input"] = "stale"
    quality.save_cache(cache_path, cache)
    with pytest.raises(AssertionError, match="recomputed"):
        quality.fill_baselines(cache_path, jobs=1)


def test_vst_stabilises_the_noise_and_inverts_without_bias():
    """bench/vst.py: unit noise after the transform at every level of the benchmark, and the
    exact unbiased inverse maps E[f(z) | y] back to y (where the plain algebraic inverse of f
    is biased, most in the dark)."""
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    import vst

    rng = np.random.default_rng(4)
    for a, b in ((2e5, 20.0), (1e6, 100.0), (5e6, 400.0)):
        for y0 in (0.001, 0.05, 0.6):
            y = np.full(100000, y0)
            z = y + np.sqrt((a + 65535 * b * y) / 65535**2) * rng.standard_normal(y.shape)
            f = vst.forward(z, a, b)
            assert f.std() == pytest.approx(1.0, abs=0.03)
            assert vst.inverse(np.array([f.mean()]), a, b)[0] == pytest.approx(
                y0, abs=0.01 * np.sqrt(a + 65535 * b * y0) / 65535)
        y = np.linspace(0.0, 1.0, 11)
        assert np.allclose(vst.inverse(vst.expected_forward(y, a, b), a, b), y, atol=1e-6)


def test_whole_run_with_weights(quality, tmp_path, capsys, monkeypatch):
    from test_kpn_infer import ref

    # the real BM3D ran above; a stand-in here keeps the test quick
    monkeypatch.setattr(quality, "bm3d_rgb", lambda noisy, sigma: quality.gaussian_blur(noisy, 1))
    lut = tmp_path / "w.lut"
    write_lut(lut, ref.xavier_init().astype(np.float16).ravel(), 1, "f16", 64, 448, ssbo=True)
    out = tmp_path / "q.json"
    assert quality.main(["--weights", str(lut), "--baselines", str(tmp_path / "c.json"),
                         "--jobs", "1", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert ("| image | noise | noisy | blur (oracle) | NL-means | BM3D | VST-BM3D | vkgraph |"
            in text)
    assert text.count("| tiny |") == 3 and text.count("| **mean** |") == 3
    assert "smallest margin of vkgraph over the noisy input" in text
    data = json.loads(out.read_text())
    assert len(data["results"]) == 3 and data["noise_given"] == "true"
    assert all({"psnr", "ssim"} <= set(r["vkgraph"]) for r in data["results"])
    assert data["ensemble"] == 1  # kpn weights: `vkgraph denoise` runs them once


def test_default_is_what_vkgraph_denoise_runs_on_an_exr(quality, tmp_path, capsys,
                                                        monkeypatch, device):
    """Without --weights and --ensemble: `vkgraph denoise`'s weights for an EXR on the
    device and their ensemble (on a GPU the photo U-Net, image and mirror averaged)."""
    from vkgraph.cli.denoise import GPU_WEIGHTS, default_weights, on_gpu

    monkeypatch.setattr(quality, "bm3d_rgb", lambda noisy, sigma: noisy)
    out = tmp_path / "q.json"
    assert quality.main(["--baselines", str(tmp_path / "c.json"), "--jobs", "1",
                         "--json", str(out)]) == 0
    want = default_weights(Path("x.exr"), on_gpu(device))
    n = 2 if want == GPU_WEIGHTS["linear"] else 1
    assert f"vkgraph: {want.name}, ensemble {n}, on " in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["weights"] == str(want) and data["ensemble"] == n


def test_train_first(quality, tmp_path, capsys, monkeypatch):
    """--train CFG: the cfg's o-lut gives the weights, kpn runs with the cfg's levels."""
    from conftest import TINY_KPN_LINES

    from vkgraph.pipeline.formats import write_pfm

    monkeypatch.setattr(quality, "bm3d_rgb", lambda noisy, sigma: noisy)
    rng = np.random.default_rng(9)
    write_pfm(tmp_path / "x.pfm", rng.random((32, 32, 3)).astype(np.float32))
    (tmp_path / "t.cfg").write_text("frames:2\n" + TINY_KPN_LINES + "\n")
    out = tmp_path / "q.json"
    assert quality.main(["--train", str(tmp_path / "t.cfg"), "--baselines",
                         str(tmp_path / "c.json"), "--jobs", "1", "--json", str(out)]) == 0
    assert "training: kpn-t:01: 2 frames" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["train_seconds"] > 0 and data["train_cfg"].endswith("t.cfg")
    assert data["kpn_levels"] == 2  # the cfg's kpn-t levels (the .lut says), not 4


def test_the_shipped_split_is_disjoint():
    pytest.importorskip("skimage")
    from vkgraph.pipeline.datasets import image_set

    train = ROOT / "graphs" / "photos" / "train.txt"
    load_quality().check_held_out(image_set(str(train), lambda n: train.parent / n))


def test_a_cfg_reading_a_held_out_photo_is_refused(quality, tmp_path):
    from conftest import TINY_KPN_LINES

    from vkgraph.pipeline.cfg import read_cfg

    (tmp_path / "copy.png").write_bytes((tmp_path / "tiny.png").read_bytes())  # another name
    lines = TINY_KPN_LINES.replace("i-pfm:main", "i-img:main").replace("x.pfm", "copy.png")
    (tmp_path / "t.cfg").write_text(lines + "\n")
    files = quality.training_files(read_cfg(tmp_path / "t.cfg"), tmp_path / "t.cfg")
    assert files == [tmp_path / "copy.png"]
    with pytest.raises(SystemExit, match="held-out photograph tiny.png"):
        quality.check_held_out(files)
