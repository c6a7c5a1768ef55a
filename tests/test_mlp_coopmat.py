"""mlp-t's cooperative-matrix training kernel (shaders/mlp-t/train_cm.comp) against the
portable fp32 kernels: the same weights and samples give the same loss and gradient (within
f16 rounding: operands and activations are f16, sums f32), training reaches a similar loss,
and the dynamic loss scale skips an overflowing step, halves and grows.

On the GPU machine (VK_KHR_cooperative_matrix, marker `coopmat`) the real kernel runs; on any
other device (the CPU driver) the same source runs through the plain-GLSL emulation
(CM_EMULATE in shaders/include/mlp_coopmat.glsl), so the tests check its indexing, padding,
sampling and the loss-scale logic everywhere."""

from __future__ import annotations

import numpy as np
import pytest
from test_kpn_coopmat import has_coopmat
from test_mlp_gpu import mlp_graph, split, target_image

from vkgraph.modules.mlp_t import module as mlp_t_module
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.formats import write_pfm
from vkgraph.pipeline.runner import Build

MLP = ("mlp-t", "01")
# Measured through the emulation: relative error of the whole gradient 5.5e-3 (freq-64, leaky:
# pre-activations near 0 whose sign f16 rounding flips change leaky' by 100x; 1.9e-4 with tanh
# in the same net), 5.9e-4 (tri-32), 4.6e-5 (none-16).
CASES = {
    "freq-64-leaky-l2": dict(enc="frequency", octaves=3, width=64, depth=2, act="leaky",
                             outact="sigmoid", loss="l2", batch=256, lscale=64),
    "tri-32-relu-l1-bias": dict(enc="triangle", octaves=2, shift=0.3, width=30, depth=2,
                                bias=1, act="relu", outact="none", loss="l1", batch=200),
    # 24 inputs into 4 neurons: 28 padding columns over two column tiles in train_cm's
    # padding pass (the other cases pad inside the last tile only)
    "freq-24in-4-leaky-l2-bias": dict(enc="frequency", octaves=6, width=4, depth=2, bias=1,
                                      act="leaky", outact="sigmoid", loss="l2", batch=96),
    "none-16-tanh-smape-array": dict(enc="none", width=8, depth=1, nout=4, act="tanh",
                                     outact="exp", loss="smape", tiles="2:1", batch=100,
                                     xform="flip", filter="bilinear"),
    # table encodings: the backward goes on through layer 0 and scatters into the table
    "hash-16-leaky-l2": dict(enc="hashgrid", levels=3, features=2, log2size=6, baseres=3,
                             width=16, depth=2, act="leaky", outact="sigmoid", loss="l2",
                             batch=160),
    "permuto-3d-32-relu-l1-bias": dict(enc="permuto", dims=3, slices=2, levels=2, features=4,
                                       log2size=7, baseres=4, width=32, depth=1, bias=1,
                                       act="relu", outact="none", loss="l1", batch=128),
}


def use(monkeypatch, variant: str, emulate: bool) -> None:
    monkeypatch.delenv("VKGRAPH_PORTABLE", raising=False)
    monkeypatch.setenv("VKGRAPH_MLP", variant)
    if emulate:
        monkeypatch.setenv("VKGRAPH_COOPMAT_EMULATE", "1")
    else:
        monkeypatch.delenv("VKGRAPH_COOPMAT_EMULATE", raising=False)


@pytest.fixture(params=["emulated", pytest.param("gpu", marks=pytest.mark.coopmat)])
def mode(request, device, monkeypatch):
    monkeypatch.delenv("VKGRAPH_MLP_TUNE", raising=False)
    if request.param == "gpu" and not has_coopmat(device):
        pytest.skip(f"{device.info.name} has no cooperative matrices")
    return request.param


def step_at(device, tmp_path, monkeypatch, variant, emulate, params, W=None):
    """Frame 1 at weights W (alpha 0 keeps them; None: frame 0's): (E, dw, w, kernels)."""
    use(monkeypatch, variant, emulate)
    (tmp_path / variant).mkdir(exist_ok=True)
    g = mlp_graph(tmp_path / variant, target_image(20, 24), {"alpha": 0, **params})
    b = Build(g, device)
    m = g.modules[MLP]
    b.run_frame(0, download=False)
    if W is not None:
        b.buffer(m.trainable.adam, "w").upload(W)
    b.run_frame(1, download=False)
    E = float(b.read(m.trainable.lsum, "cur").astype(np.float64)[:2].sum())
    dw = b.read(m.trainable.dw, "dw").astype(np.float64)
    w = b.read(m.trainable.adam, "w")
    kernels = {n.kernel for n in m.nodes}
    assert m.data["variant"] == variant
    return E, dw, w, kernels, m


@pytest.mark.parametrize("case", list(CASES))
def test_gradient_matches_portable(device, tmp_path, monkeypatch, mode, case):
    params = CASES[case]
    emulate = mode == "emulated"
    E0, dw0, w0, k0, m0 = step_at(device, tmp_path, monkeypatch, "portable", False, params)
    rng = np.random.default_rng(3)
    used = m0.trainable.used
    W = (w0 + 0.1 * rng.standard_normal(w0.shape) * used).astype(np.float32)
    W16 = W.astype(np.float16).astype(np.float32)  # the coopmat kernel's operands
    E0, dw0, _, _, _ = step_at(device, tmp_path, monkeypatch, "portable", False, params, W16)
    E1, dw1, w1, k1, m1 = step_at(device, tmp_path, monkeypatch, "coopmat", emulate, params,
                                  W16)
    assert "train_cm" in k1 and "wgrad" not in k1 and "train" in k0
    assert np.array_equal(w1, W16)
    assert np.all(dw1[~used] == 0)
    assert np.isfinite(dw1).all() and np.abs(dw0).max() > 0
    rel = np.linalg.norm(dw1 - dw0) / np.linalg.norm(dw0)
    print(f"{case}: relative gradient error {rel:.2e}, E {E0:.6g} vs {E1:.6g}")
    assert rel < 1e-2, rel
    assert abs(E1 - E0) <= 2e-3 * abs(E0), (E0, E1)
    # per matrix too: no layer's gradient hides under another's
    a = m0.data["arch"]
    W0, T0 = split(a, dw0)
    W1, T1 = split(a, dw1)
    if a.table is not None:  # the table's gradient, scattered through layer 0's data gradient
        assert np.abs(T0).max() > 0
        assert np.linalg.norm(T1 - T0) <= 2e-2 * np.linalg.norm(T0)
    for net in range(a.nets):
        for layer in range(a.layers):
            ref = np.linalg.norm(W0[net, layer])
            assert np.linalg.norm(W1[net, layer] - W0[net, layer]) <= 2e-2 * ref, (net, layer)


def train_losses(device, tmp_path, monkeypatch, variant, emulate, params, frames):
    use(monkeypatch, variant, emulate)
    (tmp_path / variant).mkdir(parents=True, exist_ok=True)
    g = mlp_graph(tmp_path / variant, target_image(20, 24), params, frames=frames)
    b = Build(g, device)
    m = g.modules[MLP]
    for f in range(frames):
        b.run_frame(f, download=False)
    hist = b.read(m.trainable.lsum, "hist")[:frames].astype(np.float64)
    st = b.read(m.trainable.adam, "stats")
    return hist, st


def test_training_follows_portable(device, tmp_path, monkeypatch, mode):
    params = {**CASES["freq-64-leaky-l2"], "batch": 512, "alpha": 0.01, "lscale": 256}
    h0, _ = train_losses(device, tmp_path, monkeypatch, "portable", False, params, 35)
    h1, st = train_losses(device, tmp_path, monkeypatch, "coopmat", mode == "emulated",
                          params, 35)
    assert h0[-1] < 0.5 * h0[0]  # it trains at all
    assert st[0] == 0 and st[2] == 256  # no skipped step, the scale unchanged (lsgrow 2000)
    assert abs(h1[-1] - h0[-1]) <= 0.1 * h0[-1], (h0[-1], h1[-1])
    assert np.abs(h1[:5] - h0[:5]).max() <= 0.01 * h0[0]


def test_loss_scale_backs_off_and_grows(device, tmp_path, monkeypatch, mode):
    """lscale 2^30 overflows f16 (g = s dl/dy): the first steps are skipped and the scale
    halves until the gradients fit; then it doubles after every `lsgrow` clean steps (up to
    2^15, or lscale when that is larger)."""
    params = {**CASES["freq-64-leaky-l2"], "batch": 128, "alpha": 0.01, "lscale": 2.0 ** 30,
              "lsgrow": 3}
    hist, st = train_losses(device, tmp_path, monkeypatch, "coopmat", mode == "emulated",
                            params, 40)
    skipped = int(st[0])
    assert skipped >= 10  # 2^30 -> about 2^15 at |g| of order 1
    assert np.isfinite(hist).all()
    assert hist[-1] < hist[skipped + 1]  # training went on after the back-off
    # after the last skip the scale only grew: it is a power of two below 2^30
    scale = float(st[2])
    assert scale < 2.0 ** 30 and np.log2(scale) == int(np.log2(scale))
    assert 0 <= st[3] < 3


def test_table_training(device, tmp_path, monkeypatch, mode):
    """A hash grid trained on train_cm: the loss follows portable's, a second run repeats the
    first bit for bit (the table's sums are integer atomics, the weights' a fixed order), and
    from a loss scale that overflows f16 it backs off (skipping those steps) and trains on."""
    emulate = mode == "emulated"
    params = {**CASES["hash-16-leaky-l2"], "batch": 128, "alpha": 0.01, "talpha": 0.05}
    h0, _ = train_losses(device, tmp_path / "p", monkeypatch, "portable", False, params, 20)
    h1, st1 = train_losses(device, tmp_path / "a", monkeypatch, "coopmat", emulate, params, 20)
    h2, st2 = train_losses(device, tmp_path / "b", monkeypatch, "coopmat", emulate, params, 20)
    assert h0[-1] < 0.7 * h0[0]  # it trains at all
    assert st1[0] == 0  # no skipped step
    assert abs(h1[-1] - h0[-1]) <= 0.1 * h0[-1], (h0[-1], h1[-1])
    assert np.array_equal(h1, h2) and np.array_equal(st1, st2)
    over = {**params, "lscale": 2.0 ** 30, "lsgrow": 3}
    hist, st = train_losses(device, tmp_path / "o", monkeypatch, "coopmat", emulate, over, 20)
    assert st[0] >= 5 and np.isfinite(hist).all()
    assert hist[-1] < hist[int(st[0]) + 1]


def test_loss_scale_grows_to_the_cap(device, tmp_path, monkeypatch):
    params = {**CASES["freq-64-leaky-l2"], "batch": 64, "alpha": 0.01, "lscale": 4096,
              "lsgrow": 2}
    _, st = train_losses(device, tmp_path, monkeypatch, "coopmat", True, params, 12)
    # frames 1..11 are clean steps: doubled after each 2, capped at 2^15
    assert st[0] == 0 and st[2] == 32768.0


def test_several_chunks_per_workgroup(device, tmp_path, monkeypatch, mode):
    """Workgroups that train several chunks each (strided), the last chunk partly padding:
    emulated 4 warps (the tiles dealt 4 ways; 64-sample chunks) x 3 workgroups on 5 chunks
    (2, 2, 1); on the GPU the shipped 8 warps x 2 workgroups on 8 chunks of 128 (4 each):
    the same gradient as portable."""
    emulate = mode == "emulated"
    warps, groups, batch = (4, 3, 300) if emulate else (8, 2, 1000)
    params = dict(CASES["freq-64-leaky-l2"], batch=batch)
    _, _, w0, _, _ = step_at(device, tmp_path, monkeypatch, "portable", False, params)
    W16 = w0.astype(np.float16).astype(np.float32)
    E0, dw0, _, _, _ = step_at(device, tmp_path, monkeypatch, "portable", False, params, W16)
    monkeypatch.setenv("VKGRAPH_MLP_TUNE", f"warps={warps},groups={groups}")
    E1, dw1, _, _, m1 = step_at(device, tmp_path, monkeypatch, "coopmat", emulate, params, W16)
    node = m1.data["train"]
    assert node.local[0] == 32 * warps and node.dispatch[0] == groups * 32 * warps
    rel = np.linalg.norm(dw1 - dw0) / np.linalg.norm(dw0)
    assert rel < 1e-2, rel
    assert abs(E1 - E0) <= 2e-3 * abs(E0)


def test_variant_selection(device, tmp_path, monkeypatch):
    params = dict(enc="hashgrid", levels=2, features=2, log2size=6, baseres=3, width=16,
                  depth=1, batch=64)
    use(monkeypatch, "coopmat", True)
    g = mlp_graph(tmp_path, target_image(20, 24), params)
    Build(g, device)
    m = g.modules[MLP]
    assert m.data["variant"] == "coopmat"  # table encodings too
    monkeypatch.setenv("VKGRAPH_MLP", "fast")
    g = mlp_graph(tmp_path, target_image(20, 24), {"batch": 64})
    with pytest.raises(GraphError, match="VKGRAPH_MLP"):
        Build(g, device)
    monkeypatch.setenv("VKGRAPH_MLP", "coopmat")
    g = mlp_graph(tmp_path, target_image(20, 24), {"batch": 64, "precise": 1})
    Build(g, device)
    assert g.modules[MLP].data["variant"] == "portable"
    # the launch shape fits 48 KiB (the H100's Vulkan limit) at width 64 and 8 warps
    monkeypatch.delenv("VKGRAPH_COOPMAT_EMULATE")
    assert mlp_t_module.cm_shared_bytes(64, 8) == 47104


@pytest.mark.parametrize("graph", ["fit-image", "fit-image-hash"])
def test_resume_is_bit_exact_with_the_loss_scale(tmp_path, monkeypatch, graph):
    """fit-image.cfg (and with a hash grid, whose table trains too) on the coopmat kernel
    (emulated), with a scale that overflows at first and grows every 2 clean steps, so the
    scale and its count change during the run: 8 frames in one run equal 4 + resume to 8
    (stats, holding the scale, is in the checkpoint)."""
    from conftest import vkgraph
    from test_reliability import ROOT, arrays, assert_same_state, ok

    use(monkeypatch, "coopmat", True)
    write_pfm(tmp_path / "t.pfm", np.random.default_rng(3).random((16, 16, 3), np.float32))
    cfg = str(ROOT / "graphs" / f"{graph}.cfg")
    small = (["param:mlp-t:01:levels:3", "param:mlp-t:01:log2size:8"]
             if graph == "fit-image-hash" else [])
    args = ("--last-frame-only", "--format", "o-pfm", "--config", "param:mlp-t:01:batch:64",
            f"param:i-img:main:filename:{tmp_path / 't.pfm'}", "param:mlp-t:01:width:16",
            "param:mlp-t:01:depth:1", "param:mlp-t:01:lscale:1e6", "param:mlp-t:01:lsgrow:2",
            *small)
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    out, _ = ok(vkgraph(one, "-g", cfg, "--frames", "8", "--checkpoint", "end.npz", *args))
    assert "coopmat kernel" in out and "updates skipped" in out
    ok(vkgraph(two, "-g", cfg, "--frames", "4", "--checkpoint", "half.npz", *args))
    ok(vkgraph(two, "-g", cfg, "--frames", "8", "--resume", "half.npz", "--checkpoint",
               "end.npz", *args))
    assert_same_state(arrays(one / "end.npz"), arrays(two / "end.npz"))
    assert (one / f"{graph}-w.lut").read_bytes() == (two / f"{graph}-w.lut").read_bytes()
