"""kpn-t on the device against the float64 reference (modules/kpn-t/reference.py):
loss, output and every weight gradient at once, on odd and even sizes, plus Adam and
training. Weights are set directly in adam's buffer with alpha = 0 (adam then leaves them
unchanged), so frame 1 computes E and dE/dW for exactly those weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import graph_from_lines, noisy_training_graph

from vkgraph.modules.kpn_t import forward as kpn_t_forward
from vkgraph.modules.kpn_t import reference as kpn_t_reference
from vkgraph.pipeline.formats import write_pfm
from vkgraph.pipeline.runner import Build

ROOT = Path(__file__).resolve().parent.parent


ref = kpn_t_reference
APPLY = {"plain": 0, "softmax": 1, "blend": 2}


def pair(w, h, seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    clean = np.stack([0.5 + 0.4 * np.sin(xx / 3.0 + c) * np.cos(yy / 5.0) for c in range(3)], -1)
    noisy = clean + 0.08 * rng.standard_normal(clean.shape)
    return noisy.astype(np.float32), clean.astype(np.float32)


def kpn_graph(tmp_path, X, R, levels, extra=""):
    write_pfm(tmp_path / "x.pfm", X)
    write_pfm(tmp_path / "r.pfm", R)
    return graph_from_lines(f"""
        module:i-pfm:main
        module:i-pfm:ref
        module:kpn-t:01
        module:o-lut:w
        param:i-pfm:main:filename:{tmp_path / 'x.pfm'}
        param:i-pfm:ref:filename:{tmp_path / 'r.pfm'}
        param:kpn-t:01:levels:{levels}
        param:kpn-t:01:init:1
        connect:i-pfm:main:output:kpn-t:01:input
        connect:i-pfm:ref:output:kpn-t:01:ref
        connect:kpn-t:01:w:o-lut:w:input
        param:o-lut:w:filename:{tmp_path / 'mlp-w'}
        {extra}""")


def conditioned_weights(seed=3):
    """Xavier weights with a positive last layer, so the plain filter's sum S stays well
    above its 0.001 floor (there the normalisation amplifies fp32 rounding)."""
    W = ref.xavier_init()
    rng = np.random.default_rng(seed)
    W[6, :15] = np.abs(W[6, :15]) + 0.02 * rng.random((15, 64))
    return W


def align_kinks(build, module, cache):
    """Put the reference on the same side of every leaky-ReLU kink as the device: where a
    pre-activation z is so close to 0 that fp32 and float64 disagree on its sign, the
    derivative differs by a factor 1000 and no tolerance could cover it. Returns the largest
    |z| (relative to its layer's largest) whose sign was aligned: fp32 rounding explains
    only tiny ones."""
    fwd = [n for n in module.nodes if n.kernel == "fwd"]
    worst = 0.0
    for node, acts in zip(fwd, cache.acts, strict=True):
        n = acts.h[0].shape[0]
        A = build.read(node, "A")[: 7 * n * 64].reshape(7, n, 64)
        for layer in range(1, 7):
            z = acts.z[layer]
            flip = (A[layer] > 0) != (z > 0)
            if flip.any():
                worst = max(worst, float(np.abs(z[flip]).max() / np.abs(z).max()))
            z[flip] = np.where(A[layer][flip] > 0, 1e-30, -1e-30)
            acts.h[layer][flip] = ref.leaky(z[flip])
    return worst


def run_with_weights(device, graph, W):
    b = Build(graph, device)
    b.run_frame(0, download=False)
    m = graph.modules[("kpn-t", "01")]
    adam = m.trainable.adam
    b.buffer(adam, "w").upload(W.astype(np.float32).ravel())
    b.run_frame(1, download=False)
    E = m.cls.hook("current_loss")(b, m)
    dW = b.read(m.trainable.dw, "dw").reshape(7, 64, 64).astype(np.float64)
    O = b.read(m.backing["output"][0], "output")[..., :3]
    return b, E, dW, O


@pytest.mark.parametrize("w,h,levels,loss,apply", [
    (37, 23, 3, "smape", "plain"),
    (64, 64, 4, "smape", "plain"),
    (29, 31, 4, "l2", "softmax"),
    (16, 9, 2, "l1", "plain"),
    (33, 17, 3, "l2", "blend"),
])
def test_forward_backward_match_reference(device, tmp_path, w, h, levels, loss, apply):
    X, R = pair(w, h)
    kinds = {"smape": 0, "l2": 1, "l1": 2}
    extra = (f"param:kpn-t:01:alpha:0\nparam:kpn-t:01:loss:{kinds[loss]}\n"
             f"param:kpn-t:01:apply:{APPLY[apply]}")
    g = kpn_graph(tmp_path, X, R, levels, extra)
    g.frames = 2
    W = conditioned_weights()
    b, E, dW, O = run_with_weights(device, g, W)
    Wf = W.astype(np.float32).astype(np.float64)
    Eref, Oref, cache = ref.forward(X.astype(np.float64), R.astype(np.float64), Wf,
                                    levels=levels, apply_mode=apply, loss=loss)
    assert align_kinks(b, g.modules[("kpn-t", "01")], cache) <= 1e-5  # rounding-sized only
    dWref = ref.backward(cache)
    assert abs(E - Eref) <= 1e-5 * abs(Eref)
    assert np.abs(O - Oref).max() <= 1e-4
    scale = np.abs(dWref).max()
    assert scale > 0
    # fp32 sums over thousands of pixels against float64: 1e-4 of the largest entry
    assert np.abs(dW - dWref).max() <= 1e-4 * scale
    assert np.all(dW[6, 16:] == 0)


def test_init_is_vkdt_xavier(device, tmp_path):
    X, R = pair(24, 24)
    g = kpn_graph(tmp_path, X, R, 2)
    b = Build(g, device)
    b.run_frame(0, download=False)
    m = g.modules[("kpn-t", "01")]
    w = b.read(m.trainable.adam, "w").reshape(7, 64, 64)
    assert np.abs(w - ref.xavier_init()).max() <= 1e-6
    assert np.all(w[6, 16:] == 0)


def test_adam_step_matches_reference(device, tmp_path):
    X, R = pair(32, 20)
    extra = "param:kpn-t:01:gradclip:0.05\nparam:kpn-t:01:alpha:0.01\nparam:kpn-t:01:L2:0.001"
    g = kpn_graph(tmp_path, X, R, 3, extra)
    b = Build(g, device)
    m = g.modules[("kpn-t", "01")]
    b.run_frame(0, download=False)
    w0 = b.read(m.trainable.adam, "w").reshape(7, 64, 64).astype(np.float64)
    g0 = b.read(m.trainable.dw, "dw").reshape(7, 64, 64).astype(np.float64)
    b.run_frame(1, download=False)
    w1 = b.read(m.trainable.adam, "w").reshape(7, 64, 64)
    wr, _, _, skipped = ref.adam_step(w0, np.zeros_like(w0), np.zeros_like(w0), g0, 1,
                                      alpha=0.01, gradclip=0.05, L2=0.001)
    assert not skipped
    assert np.abs(w1 - wr).max() <= 1e-6
    assert np.abs(w1 - w0).max() > 1e-3  # it moved


def train(device, tmp_path, w, h, frames=40):
    """`frames` frames of kpn-t (3 levels, alpha 0.003, no L2) on a seeded w x h pair:
    (build, graph, module, loss history)."""
    from vkgraph.api import run_graph

    X, R = pair(w, h, seed=5)
    g = kpn_graph(tmp_path, X, R, 3, "param:kpn-t:01:alpha:0.003\nparam:kpn-t:01:L2:0")
    g.frames = frames
    b = run_graph(g, device, last_frame_only=True)
    m = g.modules[("kpn-t", "01")]
    return b, g, m, m.cls.hook("losses")(b, m)


def test_training_lowers_loss_and_writes_lut(device, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    b, _, m, hist = train(device, tmp_path, 32, 32)
    assert len(hist) == 40 and np.all(np.isfinite(hist))
    assert hist[-1] < 0.7 * hist[0]
    lut = tmp_path / "mlp-w.lut"
    assert lut.stat().st_size == 16 + 64 * 448 * 2 + len(m.connector("w").meta["text"]) + 1
    summary = m.cls.hook("summary")(b, m)
    assert summary.startswith("kpn-t:01: 40 frames, first loss ")


def kpn_kernels():
    """kpn-t's forward code (forward.py: the pyramid's band noise)."""
    return kpn_t_forward


def test_band_noise_matches_monte_carlo():
    """The exact per-level noise std of the detail bands (forward.py, from the 1-D pyramid
    maps) agrees with a Monte-Carlo estimate on 1024^2 white noise (the reference's) to the
    estimate's own error: the bands are spatially correlated, so level i's middle holds about
    (256 / 2^i)^2 independent samples (2% std error at level 2, 4% at level 3)."""
    exact = kpn_kernels().band_noise(4)
    mc = ref.band_noise_mc(4)
    assert exact[0] > exact[1] > exact[2] > exact[3] > 0
    for e, m, tol in zip(exact, mc, (0.005, 0.01, 0.04, 0.08), strict=True):
        assert abs(e - m) <= tol * e, (exact, mc)


def noise_feature_graph(tmp_path, R, extra=""):
    """cnngenin (synthetic noise on R, the whole image) -> kpn-t with feat 1 (the noise
    profile from noiseab); `extra`: more cfg lines."""
    return noisy_training_graph(tmp_path, R, "kpn-t", "mlp-w", f"""param:cnngenin:01:tiles:0
        param:kpn-t:01:alpha:0
        param:kpn-t:01:feat:1
        {extra}""")


def generated(b, g):
    """cnngenin's noisy input and reference (float64 rgb) and its noise records."""
    gen = g.modules[("cnngenin", "01")].nodes[0]
    return (b.read(gen, "imgo")[..., :3].astype(np.float64),
            b.read(gen, "refo")[..., :3].astype(np.float64), b.read(gen, "noiseab").ravel())


@pytest.mark.parametrize("w,h,levels,apply", [(37, 23, 3, "blend"), (64, 48, 4, "plain")])
def test_noise_features_match_reference(device, tmp_path, w, h, levels, apply):
    """feat 1: the noise map from cnngenin's noiseab, the pyramid of the variance and the
    signal-to-noise features give the reference's E, output and dE/dW (same tolerances as
    vkdt's features)."""
    X, R = pair(w, h)
    g = noise_feature_graph(tmp_path, R, f"param:kpn-t:01:levels:{levels}\n"
                            f"param:kpn-t:01:apply:{APPLY[apply]}")
    g.frames = 2
    W = conditioned_weights()
    b, E, dW, O = run_with_weights(device, g, W)
    Xd, Rd, nab = generated(b, g)
    assert nab[0] > 0 and nab[1] > 0 and nab[2] == 0 and nab[3] == 1
    Wf = W.astype(np.float32).astype(np.float64)
    Eref, Oref, cache = ref.forward(Xd, Rd, Wf, levels=levels, apply_mode=apply,
                                    noise=(float(nab[0]), float(nab[1])),
                                    bands=kpn_kernels().band_noise(levels))
    assert align_kinks(b, g.modules[("kpn-t", "01")], cache) <= 1e-5
    dWref = ref.backward(cache)
    assert abs(E - Eref) <= 1e-5 * abs(Eref)
    assert np.abs(O - Oref).max() <= 1e-4
    assert np.abs(dW - dWref).max() <= 1e-4 * np.abs(dWref).max()
    # the features really are signal-to-noise ratios: O(1) for noise, not vkdt's |D|
    f0 = ref.features(cache.D[0], None)
    assert np.median(cache.acts[0].h[0]) > 10 * np.median(f0)


def test_noise_features_need_noiseab(device, tmp_path):
    X, R = pair(16, 16)
    g = kpn_graph(tmp_path, X, R, 2, "param:kpn-t:01:feat:1")
    from vkgraph.pipeline.errors import GraphError
    with pytest.raises(GraphError, match="noiseab"):
        Build(g, device)


def ctx_weights(seed=3):
    """conditioned_weights with W_6's rows 16..31 (arch 1's chroma kernel and gain) drawn
    like the rest of the matrix."""
    W = conditioned_weights(seed)
    rng = np.random.default_rng(seed + 1)
    W[6, 16:32] = rng.uniform(-1, 1, (16, 64)) * np.sqrt(6.0 / 128.0)
    return W


def nl_weights(seed=3):
    """ctx_weights with W_6's rows 32..55 (arch 2's chroma kernel and gain, past arch 1's
    rows) drawn like the rest."""
    W = ctx_weights(seed)
    W[6, 32:56] = np.random.default_rng(seed + 2).uniform(-1, 1, (24, 64)) * np.sqrt(6.0 / 128.0)
    return W


@pytest.mark.parametrize("arch", [1, 2])
@pytest.mark.parametrize("w,h,levels", [(37, 23, 3), (29, 31, 2)])
def test_ctx_archs_match_reference(device, tmp_path, w, h, levels, arch):
    """arch 1 (context planes one level deeper, 64 features with reach, 32 outputs, luma and
    chroma filtered apart) and arch 2 (and the 12 block-matched taps per level with their
    distances as features, 56 outputs): the device's E, output and dE/dW are the reference's
    (the tolerances of vkdt's features), arch 2's with the device's matches, which are the
    reference's but for float32 ties; the last matrix's chroma rows get a gradient, the
    unused ones none."""
    X, R = pair(w, h)
    g = noise_feature_graph(tmp_path, R, f"param:kpn-t:01:levels:{levels}\n"
                            f"param:kpn-t:01:apply:2\nparam:kpn-t:01:arch:{arch}")
    g.frames = 2
    W = nl_weights() if arch == 2 else ctx_weights()
    b, E, dW, O = run_with_weights(device, g, W)
    Xd, Rd, nab = generated(b, g)
    m = g.modules[("kpn-t", "01")]
    Wf = W.astype(np.float32).astype(np.float64)
    kw = dict(levels=levels, apply_mode="blend", noise=(float(nab[0]), float(nab[1])),
              bands=kpn_kernels().band_noise(levels + 1), arch=arch)
    idx = None
    if arch == 2:
        fw = m.data["forward"]
        idx = [b.read(node, "nltap").view(np.uint8).reshape(hh, ww, 12).astype(np.int64)
               for node, (ww, hh) in zip(fw["match"], fw["sizes"][:levels], strict=True)]
        _, _, own = ref.forward(Xd, Rd, Wf, **kw)
        same = sum(int((i == c[0]).sum()) for i, c in zip(idx, own.matches, strict=True))
        assert same >= 0.99 * sum(i.size for i in idx)
    Eref, Oref, cache = ref.forward(Xd, Rd, Wf, **kw, match_idx=idx)
    assert align_kinks(b, m, cache) <= 1e-5
    dWref = ref.backward(cache)
    assert abs(E - Eref) <= 1e-5 * abs(Eref)
    assert np.abs(O - Oref).max() <= 1e-4
    assert np.abs(dW - dWref).max() <= 1e-4 * np.abs(dWref).max()
    rows = 32 if arch == 1 else 56
    assert np.abs(dW[6, rows // 2:rows]).max() > 0 and np.all(dW[6, rows:] == 0)


@pytest.mark.parametrize("extra,match", [
    ("param:kpn-t:01:arch:1\nparam:kpn-t:01:apply:1", "arch 1 needs feat 1 and apply 2"),
    ("param:kpn-t:01:arch:2\nparam:kpn-t:01:apply:0", "arch 2 needs feat 1 and apply 2"),
])
def test_arch1_needs_its_filter(device, tmp_path, extra, match):
    from vkgraph.pipeline.errors import GraphError
    X, R = pair(16, 16)
    g = noise_feature_graph(tmp_path, R, extra)
    with pytest.raises(GraphError, match=match):
        Build(g, device)
