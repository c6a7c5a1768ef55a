"""Every graph in graphs/ and vkdt's own training cfg, run end to end by `vkgraph cli` in a
scratch working directory for a few frames: exit status 0 and the files each one writes.

The kpn graphs run in order: train-kpn writes mlp-w.lut, which continue-kpn and denoise read
(passed by absolute path, so a mlp-w.lut lying next to the cfgs cannot stand in for it).
denoise runs on a crop of its 256x256 input here (inference on lavapipe takes seconds per
256x256 frame); the other graphs in graphs/ (mlp-t's) are slow on lavapipe and run only with
VKGRAPH_SLOW=1 or `-m slow`.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import VKGRAPH, vkgraph_env

from vkgraph.pipeline.cfg import read_cfg
from vkgraph.pipeline.formats import read_lut, read_pfm, write_pfm

ROOT = Path(__file__).resolve().parent.parent
GRAPHS = ROOT / "graphs"
KPN_GRAPHS = ("train-kpn.cfg", "continue-kpn.cfg", "denoise.cfg", "gradcheck-kpn.cfg")
CURVE = (1.0, 0.55, 0.1)
SMOOTH = (0.35, 0.75, 1.0)


def vkgraph(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    res = subprocess.run([*VKGRAPH, "cli", *args], cwd=cwd, capture_output=True, text=True,
                         timeout=600, env=vkgraph_env())
    assert res.returncode == 0, f"vkgraph cli {' '.join(args)}: exit {res.returncode}\n" \
                                f"{res.stdout}\n{res.stderr}"
    return res


def image(path: Path, wd: int, ht: int) -> np.ndarray:
    assert path.exists(), f"{path.name} was not written"
    img = read_pfm(path)
    assert img.shape[:2] == (ht, wd), f"{path.name}: {img.shape}"
    assert np.all(np.isfinite(img))
    return img


def weights(path: Path) -> np.ndarray:
    data, info, text = read_lut(path)
    assert (info.wd, info.ht, info.format, info.ssbo) == (64, 448, "f16", True)
    assert text.startswith("lut contains weights for")
    assert np.all(np.isfinite(data)) and np.any(data != 0)
    return data


def first_loss(stdout: str) -> float:
    found = re.search(r"kpn-t:01: (\d+) frames, first loss ([0-9.]+)", stdout)
    assert found, stdout
    return float(found.group(2))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """train-kpn.cfg for 2 frames with all three displays written as PFM files."""
    d = tmp_path_factory.mktemp("train-kpn")
    res = vkgraph(d, "-g", str(GRAPHS / "train-kpn.cfg"), "--last-frame-only",
                  "--format", "o-pfm", "--filename", "out", "--output", "main",
                  "--format", "o-pfm", "--output", "hist", "--format", "o-pfm", "--output", "view0",
                  "--config", "frames:2")
    return d, res


def test_train_kpn(trained):
    d, res = trained
    assert "kpn-t:01: 2 frames" in res.stdout
    image(d / "out.pfm", 64, 64)
    hist = image(d / "hist.pfm", 500, 200)
    curve = np.all(np.abs(hist - CURVE) < 1e-3, axis=-1)
    curve |= np.all(np.abs(hist - SMOOTH) < 1e-3, axis=-1)  # the moving average over it
    assert curve[:, 60].any() and curve[:, 491].any()  # frames 0 and 1 at the axis ends
    image(d / "view0.pfm", 512, 256)
    weights(d / "mlp-w.lut")
    assert sorted(p.name for p in d.iterdir()) == ["hist.pfm", "mlp-w.lut", "out.pfm",
                                                   "view0.pfm"]


def test_continue_kpn(trained, tmp_path):
    lut = tmp_path / "mlp-w.lut"
    lut.write_bytes((trained[0] / "mlp-w.lut").read_bytes())
    before = weights(lut)
    res = vkgraph(tmp_path, "-g", str(GRAPHS / "continue-kpn.cfg"), "--last-frame-only",
                  "--format", "o-pfm", "--config", "frames:2", f"param:i-lut:w:filename:{lut}")
    image(tmp_path / "main.pfm", 64, 64)
    after = weights(lut)  # o-lut rewrote it: two more Adam steps
    assert not np.array_equal(before, after)
    # started from the trained weights, not from a random init (same first tile)
    assert first_loss(res.stdout) < first_loss(trained[1].stdout)


def test_denoise(trained, tmp_path, request):
    lut = trained[0] / "mlp-w.lut"
    args = ["-g", str(GRAPHS / "denoise.cfg"), "--format", "o-pfm", "--filename", "denoised",
            "--config", f"param:i-lut:w:filename:{lut}"]
    wd, ht = 451, 300
    if not slow_enabled(request):  # a crop of the noisy photograph and of its reference
        from vkgraph.pipeline.datasets import package_file
        from vkgraph.pipeline.formats import read_image
        noisy = read_image(GRAPHS / "images" / "chelsea-noisy.exr")[100:132, 60:100, :3]
        clean = read_image(package_file("pkg:skimage/data/chelsea.png"))[100:132, 60:100, :3]
        write_pfm(tmp_path / "crop.pfm", noisy)
        write_pfm(tmp_path / "ref.pfm", clean)
        args += [f"param:i-img:main:filename:{tmp_path / 'crop.pfm'}",
                 f"param:i-img:ref:filename:{tmp_path / 'ref.pfm'}"]
        wd, ht = 40, 32
    res = vkgraph(tmp_path, *args)
    image(tmp_path / "denoised.pfm", wd, ht)
    psnr = re.search(r"input ([0-9.]+) dB, output ([0-9.]+) dB", res.stdout)
    assert psnr, res.stdout


def test_gradcheck_kpn_shows_analytic_gradient(tmp_path):
    vkgraph(tmp_path, "-g", str(GRAPHS / "gradcheck-kpn.cfg"), "--format", "o-pfm",
            "--filename", "deriv", "--output", "view0")
    vis = image(tmp_path / "deriv.pfm", 512, 256)
    band = vis[64:128, :448]
    cyan = np.all(band == (0, 1, 1), axis=-1)
    assert cyan[16:, 384:].all() and not cyan[:, :384].all()  # the gradient of frame 0
    assert not (tmp_path / "mlp-w.lut").exists()  # a check leaves trained weights alone
    g = read_cfg(GRAPHS / "gradcheck-kpn.cfg")
    gen, kpn = g.modules[("cnngenin", "01")], g.modules[("kpn-t", "01")]
    assert (gen.param("generate"), gen.param("tiles")) == (0, 1)
    assert (kpn.param("init"), kpn.param("gradclip"), g.frames) == (1, 1e9, 1)


def test_vkdt_training_cfg_runs_unchanged(tmp_path):
    """vkdt's readme training cfg (its lines verbatim, image paths pointing at our scenes)."""
    cfg = Path(__file__).parent / "fixtures" / "vkdt-train.cfg"
    res = vkgraph(tmp_path, "-g", str(cfg), "--last-frame-only", "--config", "frames:3")
    assert "kpn-t:01: 3 frames" in res.stdout
    assert (tmp_path / "main.jpg").stat().st_size > 0
    weights(tmp_path / "mlp-w.lut")


def slow_enabled(request) -> bool:
    expr = request.config.option.markexpr or ""
    return os.environ.get("VKGRAPH_SLOW", "") not in ("", "0") or \
        ("slow" in expr and "not slow" not in expr)


OTHER = sorted(p.name for p in GRAPHS.glob("*.cfg") if p.name not in KPN_GRAPHS)


def test_kpn_graphs_exist():
    for name in KPN_GRAPHS:
        assert (GRAPHS / name).exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", OTHER)
def test_other_graph_runs(name, tmp_path, request):
    if not slow_enabled(request):
        pytest.skip("slow on lavapipe: VKGRAPH_SLOW=1 or -m slow runs it")
    g = read_cfg(GRAPHS / name)
    args = ["-g", str(GRAPHS / name), "--last-frame-only", "--config", "frames:2"]
    vkgraph(tmp_path, *args)
    if ("display", "main") in g.modules:
        assert (tmp_path / "main.jpg").stat().st_size > 0
