"""The trainers' optimiser step (shaders/include/optim.glsl, run by kpn-t's adam kernel)
against its float64 reference (pipeline/optim.py): Adam, SGD, AdamW and SGD with momentum,
with and without gradient clipping, at a step past the first (bias correction); Muon's
Newton-Schulz kernel (shaders/trainer/muon.comp) and its step; short runs of the shipped
graphs with the new optimisers."""

from __future__ import annotations

import numpy as np
import pytest

import vkgraph
from vkgraph.modules.kpn_t import forward as kpn_t
from vkgraph.pipeline import optim
from vkgraph.pipeline.optim import Matrix
from vkgraph.pipeline.testing import dispatch
from vkgraph.pipeline.trainer import Weights, muon_defines

ROOT = __import__("pathlib").Path(vkgraph.__file__).resolve().parent.parent

N = kpn_t.NW
# the weights kpn-t uses: all but the last matrix's rows past OUT_ROWS (those stay 0)
USED = (kpn_t.MATRICES - 1) * kpn_t.WIDTH ** 2 + kpn_t.OUT_ROWS * kpn_t.WIDTH


def kpn_adam(w, m, v, dw, norm, frame, o=None, **params):
    """kpn-t's adam kernel, one step at `frame`; (w, m, v) after it. With `o` (Muon's update
    of kpn-t's matrices) it is built as the scaffold builds it for opt 4."""
    bindings = ["dw", "gn", "wcp", "w", "m", "v", "stats", "wout"]
    inputs, defines = {}, {}
    if o is not None:
        defines = {**muon_defines(KPN_MUON), "ADAM_MUON": 1, "MUON_B": len(bindings)}
        inputs, bindings = {"o": o}, [*bindings, "o"]
    out = dispatch("kpn-t", "adam", inputs={
        "dw": dw, "gn": np.array([norm, 1, 0, 0], np.float32),
        "wcp": np.zeros(N, np.float16), "w": w, "m": m, "v": v,
        "stats": np.zeros(4, np.float32), **inputs},
        outputs={"w": (N,), "m": (N,), "v": (N,), "stats": (4,), "wout": ((N,), np.float16)},
        bindings=bindings, size=(N, 1), defines=defines,
        local=(256, 1, 1), push=[0], frame=frame, frames=100,
        params={"L2": 0.0, "schedule": 0, **params})
    return out["w"], out["m"], out["v"]


def kpn_weights():
    """kpn-t's optimiser declaration (arch 0) with Muon selected."""
    from vkgraph.modules.kpn_t import module as kpn_module

    return Weights(N, "w16", best=("f16", None), matrices=kpn_module.matrices(0), muon=True,
                   coupled="2.0 * params.L2")


KPN_MUON = kpn_weights()


def muon_kernel(spec, dw, gn, w, m, frame, **params):
    """shaders/trainer/muon.comp (with kpn-t's params block) over spec.matrices: Muon's
    update o of each matrix, one step at `frame`."""
    defines = {**muon_defines(spec), "MUON_CLIP": "params.gradclip",
               "MUON_MU": "params.momentum"}
    if spec.coupled:
        defines["MUON_L2"] = f"({spec.coupled})"
    out = dispatch("kpn-t", "muon", shader="trainer", inputs={
        "dw": dw, "gn": gn, "w": w, "m": m}, outputs={"o": (len(w),)},
        bindings=["dw", "gn", "w", "m", "o"], size=(256 * len(spec.matrices), 1),
        local=(256, 1, 1), defines=defines, frame=frame, frames=100, params=params)
    return out["o"]


def moments(rng, n):
    """Weights, moments and a gradient of n params, as a trainer holds them mid-run."""
    return (rng.uniform(-1, 1, n).astype(np.float32),
            (0.01 * rng.standard_normal(n)).astype(np.float32),
            (1e-4 * rng.uniform(0, 1, n)).astype(np.float32),
            (0.01 * rng.standard_normal(n)).astype(np.float32))


@pytest.mark.parametrize("opt", [0, 1, 2, 3])
@pytest.mark.parametrize("clip", [1e9, 0.5])
def test_optimizer_step_matches_the_float64_reference(device, opt, clip):
    rng = np.random.default_rng(opt * 10 + int(clip < 1))
    w = rng.uniform(-1, 1, N).astype(np.float32)
    m = (0.01 * rng.standard_normal(N)).astype(np.float32)
    v = (1e-4 * rng.uniform(0, 1, N)).astype(np.float32)
    dw = (0.01 * rng.standard_normal(N)).astype(np.float32)
    norm = float(np.linalg.norm(dw.astype(np.float64)))
    hyper = {"alpha": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "gradclip": clip,
             "opt": opt, "wdecay": 0.05, "momentum": 0.8}
    frame = 7
    got = kpn_adam(w, m, v, dw, norm, frame, **hyper)
    g = optim.clipped(dw.astype(np.float64), norm, clip)
    f32 = {k: float(np.float32(x)) for k, x in hyper.items()}  # the values the kernel gets
    want = optim.step(w, m, v, g, f32["alpha"], frame, opt, f32["beta1"], f32["beta2"],
                      f32["eps"], f32["wdecay"], mu=f32["momentum"])
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
    if opt == 3:
        assert np.array_equal(got[2], v)  # momentum keeps v


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
    for opt in (0, 1, 2, 3):
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


def test_momentum_zero_is_plain_sgd():
    """opt momentum with mu 0 takes SGD's step (m then holds the gradient)."""
    rng = np.random.default_rng(5)
    w, m, v, g = moments(rng, 50)
    sgd = optim.step(w, m, v, g, 0.1, 3, optim.OPTIMIZERS["sgd"])
    mom = optim.step(w, m, v, g, 0.1, 3, optim.OPTIMIZERS["momentum"], mu=0.0)
    assert np.array_equal(sgd[0], mom[0]) and np.array_equal(mom[1], g.astype(np.float64))


def test_newton_schulz_reference_orthogonalises():
    """NS5 maps a matrix near the polar factor: singular values in about [0.68, 1.2] (the
    quintic's band, not in order), the same singular vectors; a tall matrix as its
    transpose."""
    u = np.random.default_rng(1).standard_normal((16, 64))
    x = optim.newton_schulz(u)
    s = np.linalg.svd(x, compute_uv=False)
    assert 0.6 < s.min() and s.max() < 1.25
    uu, _, vt = np.linalg.svd(u, full_matrices=False)
    d = uu.T @ x @ vt.T  # diagonal: the polynomial acts on u's singular values alone
    np.testing.assert_allclose(np.sort(np.abs(np.diag(d))), np.sort(s), rtol=1e-9)
    assert np.abs(d - np.diag(np.diag(d))).max() < 1e-9
    np.testing.assert_allclose(optim.newton_schulz(u.T), x.T, rtol=1e-12)
    np.testing.assert_allclose(optim.muon_update(u.T), x.T * 2.0, rtol=1e-12)  # sqrt(64/16)


# square, wide (kpn-t's last matrix), tall (mlp-t's first layer) and small blocks, one stride
SHAPES = Weights(64 * 64 + 16 * 64 + 16 * 64 + 4 * 64 + 3 * 64, "w", best=("f32", None),
                 muon=True, matrices=(Matrix(0, 64, 64, 64), Matrix(4096, 16, 64, 64),
                                      Matrix(5120, 16, 2, 64, net=1),
                                      Matrix(6144, 4, 16, 64, net=1),
                                      Matrix(6400, 3, 3, 64)))


@pytest.mark.parametrize("clip", [1e9, 0.05])
def test_newton_schulz_kernel_matches_the_reference(device, clip):
    """muon.comp's o on each block: clipped gradient, momentum, Nesterov direction, NS5 and
    the scale, against the float64 reference; params outside the blocks are not written."""
    rng = np.random.default_rng(11)
    n = SHAPES.n
    w, m, _, dw = moments(rng, n)
    gn = np.array([0.3, 1, 0.02, 1], np.float32)  # two nets' (norm, finite) pairs
    got = muon_kernel(SHAPES, dw, gn, w, m, 4, gradclip=clip, momentum=0.9)
    mu = float(np.float32(0.9))
    touched = np.zeros(n, bool)
    for mat in SHAPES.matrices:
        k = mat.index()
        g = optim.clipped(dw[k].astype(np.float64), float(gn[2 * mat.net]), clip)
        want = optim.muon_update(g + mu * (mu * m[k] + g))
        np.testing.assert_allclose(got[k], want, rtol=0, atol=2e-5 * np.abs(want).max(),
                                   err_msg=str(mat))
        touched[k] = True
    assert np.all(got[~touched] == 0)
    assert np.all(muon_kernel(SHAPES, dw, gn, w, m, 0) == 0)  # frame 0: the optimiser's init


def test_kpn_muon_step_matches_the_reference(device):
    """kpn-t's Muon step (muon.comp, then adam with ADAM_MUON): its seven matrices (the last
    one's used rows) by Muon with the coupled L2 term and the decoupled decay, against
    optim.step's opt muon; the unused rows stay as they were."""
    rng = np.random.default_rng(7)
    w, m, v, dw = moments(rng, N)
    norm = float(np.linalg.norm(dw.astype(np.float64)))
    hyper = {"alpha": 0.02, "gradclip": 0.5, "L2": 0.001, "momentum": 0.9, "wdecay": 0.05}
    gn = np.array([norm, 1, 0, 0], np.float32)
    o = muon_kernel(KPN_MUON, dw, gn, w, m, 5, **hyper)
    got = kpn_adam(w, m, v, dw, norm, 5, o=o, opt=4, **hyper)
    f32 = {k: float(np.float32(x)) for k, x in hyper.items()}
    g = optim.clipped(dw.astype(np.float64), norm, 0.5) + 2 * f32["L2"] * w
    want = optim.step(w, m, v, g, f32["alpha"], 5, 4, wd=f32["wdecay"], mu=f32["momentum"],
                      matrices=KPN_MUON.matrices)
    for name, a, b, old in zip("wmv", got, want, (w, m, v), strict=True):
        np.testing.assert_allclose(a[:USED] - old[:USED], b[:USED] - old[:USED], rtol=0,
                                   atol=1e-3 * np.abs(b[:USED] - old[:USED]).max() + 1e-9,
                                   err_msg=name)
        assert np.array_equal(a[USED:], old[USED:]), f"{name}: unused weights changed"
    assert np.abs(got[0][:USED] - w[:USED]).max() > 1e-4


def test_reference_muon_steps_adamw_outside_the_matrices():
    """Params outside every block (biases, tables) take AdamW's step under opt muon."""
    rng = np.random.default_rng(2)
    w, m, v, g = moments(rng, 80)
    mats = (Matrix(0, 4, 6, 8),)
    muon = optim.step(w, m, v, g, 0.01, 3, 4, wd=0.1, matrices=mats)
    adamw = optim.step(w, m, v, g, 0.01, 3, 2, wd=0.1)
    inside = np.zeros(80, bool)
    inside[mats[0].index()] = True
    for a, b in zip(muon, adamw, strict=True):
        assert np.array_equal(a[~inside], b[~inside])
    assert not np.allclose(muon[0][inside], adamw[0][inside])


def run_losses(device, graph, frames, params, others=()):
    """The per-frame losses of `frames` frames of shipped graph `graph` with the trainer's
    params set, and `others`: (module, name, value) of other modules."""
    module = "kpn-t:01" if "kpn" in graph else "mlp-t:01"
    s = vkgraph.Session.load(ROOT / "graphs" / graph, device=device)
    for name, value in params.items():
        s.set(module, name, value)
    for other, name, value in others:
        s.set(other, name, value)
    s.run(frames)
    return s.losses()[module]




@pytest.mark.parametrize("graph,frames,params,others", [
    # kpn-t's losses are of new tiles each frame (0.1-1.0 apart): the run takes 15 frames, at
    # ~1 s a frame on the CPU, so only Muon (its own matrix kernel) runs here; SGD-momentum
    # is the element step that fit-poly runs below and test_optimizer_step_* checks
    ("train-kpn.cfg", 15, {"opt": 4, "alpha": 0.002}, ()),
    ("fit-poly.cfg", 150, {"opt": "momentum", "alpha": 0.01}, ()),
    ("fit-poly.cfg", 150, {"opt": "muon", "alpha": 0.01}, ()),
])
def test_short_runs_with_the_new_optimisers_train(device, tmp_path, monkeypatch, graph,
                                                  frames, params, others):
    """A short run of a shipped trainer graph with SGD-momentum or Muon ends finite and with a
    lower loss (means of the first and last tenth, at least 3 frames)."""
    monkeypatch.chdir(tmp_path)  # the graphs' o-lut writes here
    losses = run_losses(device, graph, frames, params, others)
    assert len(losses) == frames and np.all(np.isfinite(losses))
    k = max(3, frames // 10)
    assert losses[-k:].mean() < 0.9 * losses[:k].mean()
