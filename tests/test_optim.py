"""The trainers' optimiser step (shaders/include/optim.glsl, run by kpn-t's adam kernel)
against its float64 reference (pipeline/optim.py): Adam, SGD and AdamW, with and without
gradient clipping, at a step past the first (bias correction)."""

from __future__ import annotations

import numpy as np
import pytest

from vkgraph.modules.kpn_t import forward as kpn_t
from vkgraph.pipeline import optim
from vkgraph.pipeline.testing import dispatch

N = kpn_t.NW
# the weights kpn-t uses: all but the last matrix's rows past OUT_ROWS (those stay 0)
USED = (kpn_t.MATRICES - 1) * kpn_t.WIDTH ** 2 + kpn_t.OUT_ROWS * kpn_t.WIDTH


def kpn_adam(w, m, v, dw, norm, frame, **params):
    """kpn-t's adam kernel, one step at `frame`; (w, m, v) after it."""
    out = dispatch("kpn-t", "adam", inputs={
        "dw": dw, "gn": np.array([norm, 1, 0, 0], np.float32),
        "wcp": np.zeros(N, np.float16), "w": w, "m": m, "v": v,
        "stats": np.zeros(4, np.float32)},
        outputs={"w": (N,), "m": (N,), "v": (N,), "stats": (4,), "wout": ((N,), np.float16)},
        bindings=["dw", "gn", "wcp", "w", "m", "v", "stats", "wout"], size=(N, 1),
        local=(256, 1, 1), push=[0], frame=frame, frames=100,
        params={"L2": 0.0, "schedule": 0, **params})
    return out["w"], out["m"], out["v"]


@pytest.mark.parametrize("opt", [0, 1, 2])
@pytest.mark.parametrize("clip", [1e9, 0.5])
def test_optimizer_step_matches_the_float64_reference(device, opt, clip):
    rng = np.random.default_rng(opt * 10 + int(clip < 1))
    w = rng.uniform(-1, 1, N).astype(np.float32)
    m = (0.01 * rng.standard_normal(N)).astype(np.float32)
    v = (1e-4 * rng.uniform(0, 1, N)).astype(np.float32)
    dw = (0.01 * rng.standard_normal(N)).astype(np.float32)
    norm = float(np.linalg.norm(dw.astype(np.float64)))
    hyper = {"alpha": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "gradclip": clip,
             "opt": opt, "wdecay": 0.05}
    frame = 7
    got = kpn_adam(w, m, v, dw, norm, frame, **hyper)
    g = optim.clipped(dw.astype(np.float64), norm, clip)
    f32 = {k: float(np.float32(x)) for k, x in hyper.items()}  # the values the kernel gets
    want = optim.step(w, m, v, g, f32["alpha"], frame, opt, f32["beta1"], f32["beta2"],
                      f32["eps"], f32["wdecay"])
    # the step, against the reference's: fp32 arithmetic, and the device's pow() in the bias
    # correction 1 - beta^t (lavapipe's is good to ~1e-7 relative, which 1 - 0.999^7 = 0.007
    # magnifies to ~1e-5)
    for name, a, b, old in zip("wmv", got, want, (w, m, v), strict=True):
        np.testing.assert_allclose(a[:USED] - old[:USED], b[:USED] - old[:USED], rtol=1e-4,
                                   atol=1e-7 * np.abs(old[:USED]).max(), err_msg=name)
        assert np.array_equal(a[USED:], old[USED:]), f"{name}: unused weights changed"
    moved = got[0][:USED] - w[:USED]
    assert np.abs(moved).max() > 1e-5  # a real step was taken (SGD: lr |g| ~ 1e-4)
    if opt == 1:
        assert np.array_equal(got[1], m) and np.array_equal(got[2], v)  # SGD keeps moments


def test_adamw_decays_the_weights_apart_from_the_moments(device):
    """With a zero gradient Adam's step is zero; AdamW's still shrinks w by lr wd w."""
    rng = np.random.default_rng(3)
    w = rng.uniform(-1, 1, N).astype(np.float32)
    zero = np.zeros(N, np.float32)
    for opt, factor in ((0, 1.0), (2, 1 - 0.01 * 0.5)):
        got, _, _ = kpn_adam(w, zero, zero, zero, 0.0, 3, alpha=0.01, opt=opt, wdecay=0.5)
        np.testing.assert_allclose(got[:USED], factor * w[:USED].astype(np.float64),
                                   rtol=1e-6)


def test_reference_skips_non_finite_steps():
    w, m, v = np.ones(3), np.zeros(3), np.zeros(3)
    g = np.array([1.0, np.nan, np.inf])
    for opt in (0, 1, 2):
        wn, mn, vn = optim.step(w, m, v, g, 0.1, 1, opt)
        assert wn[0] != 1.0 and np.array_equal(wn[1:], w[1:])
        assert np.array_equal(mn[1:], m[1:]) and np.array_equal(vn[1:], v[1:])


def test_mlp_t_adamw_step_matches_the_reference(device, tmp_path):
    """mlp-t's adam kernel (the same optim.glsl) with opt adamw, frame 1 from zero moments."""
    from test_mlp_gpu import first_step

    m, w0, g0, w1 = first_step(device, tmp_path, opt="adamw", alpha=0.01, wdecay=0.5)
    hyper = [float(np.float32(m.param(k))) for k in ("beta1", "beta2", "eps")]
    used = m.trainable.used
    want, _, _ = optim.step(w0, 0 * w0, 0 * w0, g0, float(np.float32(0.01)), 1, 2, *hyper,
                            wd=0.5)
    adam, _, _ = optim.step(w0, 0 * w0, 0 * w0, g0, float(np.float32(0.01)), 1, 0, *hyper)
    assert np.abs(w1[used] - want[used]).max() <= 1e-6
    assert np.abs(want[used] - adam[used]).max() > 1e-4  # the decay is there
    assert np.all(w1[~used] == 0)
