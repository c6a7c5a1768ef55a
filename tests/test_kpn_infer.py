"""kpn (inference) with weights that kpn-t trained and o-lut wrote: the .lut layout, kpn's
output against kpn-t's own output for the same weights (same kernels: exactly equal), and
against the float64 reference forward pass (modules/kpn-t/reference.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vkgraph.api import run_graph
from vkgraph.modules.kpn_t import reference as kpn_t_reference
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.formats import read_lut, write_lut, write_pfm
from vkgraph.pipeline.graph import Graph
from vkgraph.pipeline.registry import Registry
from vkgraph.pipeline.testing import CAPTURE

ROOT = Path(__file__).resolve().parent.parent
SINKS = CAPTURE  # the `capture` sink
LEVELS = 2
W, H = 29, 22


ref = kpn_t_reference


def registry() -> Registry:
    return Registry([ROOT / "modules", SINKS])


def images(d: Path) -> tuple[np.ndarray, Path]:
    rng = np.random.default_rng(21)
    yy, xx = np.mgrid[0:H, 0:W]
    clean = np.stack([0.45 + 0.35 * np.sin(xx / 3.0 + c) * np.cos(yy / 4.0) for c in range(3)],
                     -1)
    noisy = (clean + 0.06 * rng.standard_normal(clean.shape)).astype(np.float32)
    write_pfm(d / "x.pfm", noisy)
    write_pfm(d / "r.pfm", clean.astype(np.float32))
    return noisy, d / "x.pfm"


@pytest.fixture(scope="module")
def trained(device, tmp_path_factory):
    """kpn-t trained for a few frames; o-lut wrote its weights. (dir, noisy input, lut path,
    kpn-t's fp32 weights after the last frame)."""
    d = tmp_path_factory.mktemp("kpn")
    noisy, _ = images(d)
    g = Graph(registry())
    g.add_module("i-pfm", "main").set_param("filename", str(d / "x.pfm"))
    g.add_module("i-pfm", "ref").set_param("filename", str(d / "r.pfm"))
    k = g.add_module("kpn-t", "01")
    for name, value in (("levels", LEVELS), ("init", 1), ("alpha", 0.003), ("L2", 0)):
        k.set_param(name, value)
    g.add_module("o-lut", "w").set_param("filename", str(d / "mlp-w"))
    g.connect("i-pfm", "main", "output", "kpn-t", "01", "input")
    g.connect("i-pfm", "ref", "output", "kpn-t", "01", "ref")
    g.connect("kpn-t", "01", "w", "o-lut", "w", "input")
    b = run_graph(g, device, frames=3, last_frame_only=True)
    m = g.modules[("kpn-t", "01")]
    w32 = b.read(m.trainable.adam, "w")
    return d, noisy, d / "mlp-w.lut", w32, m.connector("w").meta["text"]


def run_output(device, module: str, lut: Path, x: Path, apply: int = 0, extra=None):
    """One frame of kpn-t (weights from the lut through wcp, init 0) or kpn (weights from the
    lut through w) on input x; the output image and the build."""
    reg = registry()
    g = Graph(reg)
    g.add_module("i-pfm", "main").set_param("filename", str(x))
    g.add_module("i-lut", "w").set_param("filename", str(lut))
    m = g.add_module(module, "01")
    m.set_param("levels", LEVELS)
    m.set_param("apply", apply)
    for name, value in (extra or {}).items():
        m.set_param(name, value)
    g.connect("i-pfm", "main", "output", module, "01", "input")
    if module == "kpn-t":
        m.set_param("init", 0)
        g.connect("i-pfm", "main", "output", module, "01", "ref")
        g.connect("i-lut", "w", "output", module, "01", "wcp")
    else:
        g.connect("i-lut", "w", "output", module, "01", "w")
    g.add_module("capture", "out")
    g.connect(module, "01", "output", "capture", "out", "input")
    captured = reg.get("capture").hooks.CAPTURED
    captured.clear()
    b = run_graph(g, device, frames=1)
    return captured[("out", 0)], b, m


def test_lut_layout_and_weights(trained):
    _, _, lut, w32, text = trained
    data, info, got_text = read_lut(lut)
    assert (info.wd, info.ht, info.channels, info.format, info.ssbo) == (64, 448, 1, "f16", True)
    assert got_text == text and got_text.startswith("lut contains weights for\n")
    assert lut.stat().st_size == 16 + 64 * 448 * 2 + len(text) + 1
    assert data.dtype == np.float16 and data.shape == (448, 64, 1)
    w16 = data.reshape(7, 64, 64)
    np.testing.assert_array_equal(w16, w32.reshape(7, 64, 64).astype(np.float16))
    assert np.all(w16[6, 16:] == 0)
    # trained: not the initial weights any more
    assert np.abs(w16.astype(np.float64) - ref.xavier_init()).max() > 1e-3


def relabel(lut: Path, out: Path, old: str, new: str) -> Path:
    """A copy of the lut whose trailing text says `new` where it said `old`."""
    data, info, text = read_lut(lut)
    assert old in text
    write_lut(out, data.reshape(-1), info.channels, info.format, info.wd, info.ht,
              ssbo=info.ssbo, text=text.replace(old, new))
    return out


@pytest.mark.parametrize("apply", [0, 1])
def test_kpn_equals_kpn_t_output(device, trained, apply, tmp_path):
    d, _, lut, _, _ = trained
    if apply:  # the same weights, labelled as softmax-trained
        lut = relabel(lut, tmp_path / "soft.lut", "plain kernel", "softmax kernel")
    out_t, b, m = run_output(device, "kpn-t", lut, d / "x.pfm", apply)
    # kpn-t started from the lut's f16 values (init 0: the checkpoint)
    w0 = b.read(m.trainable.adam, "w")
    np.testing.assert_array_equal(w0, read_lut(lut)[0].astype(np.float32).ravel())
    out_k, b, m = run_output(device, "kpn", lut, d / "x.pfm", apply)
    fwd = [n for n in m.nodes if n.kernel == "fwd"]
    assert len(fwd) == LEVELS and all(n.defines.get("W16") for n in fwd)
    assert not any(n.kernel in ("loss", "adam", "bck", "mulw") for n in m.nodes)
    assert out_k.shape == (H, W, 4)
    np.testing.assert_array_equal(out_k, out_t)


def test_kpn_matches_reference(device, trained):
    d, noisy, lut, _, _ = trained
    out, _, _ = run_output(device, "kpn", lut, d / "x.pfm")
    Wl = read_lut(lut)[0].astype(np.float64).reshape(7, 64, 64)
    _, O, _ = ref.forward(noisy.astype(np.float64), noisy.astype(np.float64), Wl, levels=LEVELS)
    assert np.abs(out[..., :3] - O).max() <= 1e-4
    assert np.abs(O - noisy).max() > 1e-2  # the filters did something


def test_kpn_rejects_other_weights(device, trained, tmp_path):
    d = trained[0]
    bad = tmp_path / "small.lut"
    write_lut(bad, np.zeros(64 * 64, np.float16), 1, "f16", 64, 64, ssbo=True)
    with pytest.raises(GraphError, match="64x448"):
        run_output(device, "kpn", bad, d / "x.pfm")


def test_kpn_refuses_a_mismatch_with_the_weights(device, trained, tmp_path):
    """The .lut's text says how the weights were trained; kpn set otherwise is an error."""
    d, _, lut, _, _ = trained
    with pytest.raises(GraphError, match="apply 0 .plain taps.*set param:kpn:01:apply:0"):
        run_output(device, "kpn", lut, d / "x.pfm", apply=1)
    other = relabel(lut, tmp_path / "l3.lut", f"{LEVELS} pyramid levels", "3 pyramid levels")
    with pytest.raises(GraphError, match="3 pyramid levels.*levels:3"):
        run_output(device, "kpn", other, d / "x.pfm")
    # left at their defaults (apply 0, levels 4), apply and levels follow the text
    soft = relabel(lut, tmp_path / "soft.lut", "plain kernel", "softmax kernel")
    reg = registry()
    g = Graph(reg)
    g.add_module("i-pfm", "main").set_param("filename", str(d / "x.pfm"))
    g.add_module("i-lut", "w").set_param("filename", str(soft))
    m = g.add_module("kpn", "01")
    g.connect("i-pfm", "main", "output", "kpn", "01", "input")
    g.connect("i-lut", "w", "output", "kpn", "01", "w")
    g.add_module("capture", "out")
    g.connect("kpn", "01", "output", "capture", "out", "input")
    run_graph(g, device, frames=1)
    assert m.param("apply") == 1 and m.param("levels") == LEVELS


@pytest.mark.parametrize("arch", [0, 1, 2])
def test_kpn_noise_features_equal_kpn_t(device, trained, tmp_path, arch):
    """feat 1: kpn with the noise profile in its params gives exactly what kpn-t shows for
    the same (f16) weights and input, whose profile comes from cnngenin's noiseab; arch 1
    (the .lut's text says so; kpn takes it from there) and arch 2 likewise."""
    d, _, lut, _, _ = trained
    lut = relabel(lut, tmp_path / "feat.lut", "pyramid levels",
                  "pyramid levels\nnoise-normalised features"
                  + ("\nchroma and context features" if arch else "")
                  + ("\nnonlocal taps" if arch == 2 else ""))
    if arch:  # arch 1 filters with softmax taps and a band gain (apply 2)
        lut = relabel(lut, tmp_path / "feat2.lut", "plain kernel weight", "softmax kernel weight")
        lut = relabel(lut, tmp_path / "feat3.lut", "const alpha", "sigmoid alpha")
    reg = registry()
    g = Graph(reg)
    g.add_module("i-pfm", "ref").set_param("filename", str(d / "r.pfm"))
    g.add_module("i-lut", "w").set_param("filename", str(lut))
    gen = g.add_module("cnngenin", "01")
    for name, value in (("generate", 2), ("tiles", 0), ("noise", 0.05)):
        gen.set_param(name, value)
    k = g.add_module("kpn-t", "01")
    for name, value in (("levels", LEVELS), ("init", 0), ("feat", 1), ("arch", arch),
                        ("apply", 2 if arch else 0)):
        k.set_param(name, value)
    g.connect("i-pfm", "ref", "output", "cnngenin", "01", "imgi")
    g.connect("i-pfm", "ref", "output", "cnngenin", "01", "refi")
    g.connect("i-lut", "w", "output", "kpn-t", "01", "wcp")
    for c, to in (("imgo", "input"), ("refo", "ref"), ("noiseab", "noiseab")):
        g.connect("cnngenin", "01", c, "kpn-t", "01", to)
    for c in ("imgo", "noiseab"):
        g.add_module("capture", c)
        g.connect("cnngenin", "01", c, "capture", c, "input")
    g.add_module("capture", "out")
    g.connect("kpn-t", "01", "output", "capture", "out", "input")
    captured = reg.get("capture").hooks.CAPTURED
    captured.clear()
    run_graph(g, device, frames=1)
    out_t, x, nab = captured[("out", 0)], captured[("imgo", 0)], captured[("noiseab", 0)]
    assert nab[0] > 0 and nab[1] > 0
    write_pfm(tmp_path / "x1.pfm", x[..., :3])
    out_k, _, m = run_output(device, "kpn", lut, tmp_path / "x1.pfm", apply=2 if arch else 0,
                             extra={"noise a": float(nab[0]), "noise b": float(nab[1])})
    assert any(n.kernel == "nmap" for n in m.nodes)
    assert any(n.kernel == "diff" and "KPN_CTX" in n.defines for n in m.nodes) == bool(arch)
    np.testing.assert_array_equal(out_k, out_t)
    # and the profile matters: another one gives another image
    other, _, _ = run_output(device, "kpn", lut, tmp_path / "x1.pfm", apply=2 if arch else 0,
                             extra={"noise a": 4 * float(nab[0]), "noise b": float(nab[1])})
    assert np.abs(other - out_k).max() > 1e-4
