"""Tests of the float64 numpy reference of unet-t (modules/unet-t/reference.py).

The layout is checked against counts written from the README's formulas, every layer kind
against scalar loops of the README's sums, the whole forward against a network assembled from
those loops (with the weights read from the flat array by index arithmetic), and backward
against central finite differences of forward's E. Within one piece of the piecewise-linear
maths (fixed ReLU pattern, fixed signs of O - R), E is affine in any single weight, so a central
difference is exact up to rounding; each difference asserts that its two evaluations stayed in
the piece of the base point (``_regime``), so a kink can fail the test but never pass it
silently. The seeds below were chosen so that none does (of seeds 0..7, only seed 1 of the
width 3, scales 3 case crosses one).
"""

import numpy as np
import pytest

from vkgraph.modules.unet_t import reference as ref

# ------------------------------------------------------------------------- hand layouts


def _n_conv3(cin, cout):  # README: W[co][ci][ky][kx], ky, kx in 0..2, then b[co]
    return 9 * cin * cout + cout


def _n_2x2(cin, cout):  # down and up: ky, kx in 0..1
    return 4 * cin * cout + cout


def _n_conv1(cin, cout):
    return cin * cout + cout


def _readme_layers(width, scales):
    """[(name, kind, cin, cout)] written out from the README's network loops."""
    w = [width * 2**k for k in range(scales)]
    out = []
    for k in range(scales):
        out.append((f"enc{k}a", "conv3", 4 if k == 0 else w[k - 1], w[k]))
        out.append((f"enc{k}", "conv3", w[k], w[k]))
        if k < scales - 1:
            out.append((f"down{k}", "down", w[k], w[k]))
    for k in reversed(range(scales - 1)):
        out += [(f"up{k}", "up", w[k + 1], w[k]), (f"dec{k}a", "conv3", 2 * w[k], w[k]),
                (f"dec{k}", "conv3", w[k], w[k])]
    return out + [("out", "conv1", w[0], 3)]


def _readme_size(kind, cin, cout):
    return {"conv3": _n_conv3, "down": _n_2x2, "up": _n_2x2, "conv1": _n_conv1}[kind](cin, cout)


def test_layout_width4_scales3_by_hand():
    # width 4, scales 3: w_0, w_1, w_2 = 4, 8, 16
    hand = [
        ("enc0a", "conv3", 4, 4, _n_conv3(4, 4)),
        ("enc0", "conv3", 4, 4, _n_conv3(4, 4)),
        ("down0", "down", 4, 4, _n_2x2(4, 4)),
        ("enc1a", "conv3", 4, 8, _n_conv3(4, 8)),
        ("enc1", "conv3", 8, 8, _n_conv3(8, 8)),
        ("down1", "down", 8, 8, _n_2x2(8, 8)),
        ("enc2a", "conv3", 8, 16, _n_conv3(8, 16)),
        ("enc2", "conv3", 16, 16, _n_conv3(16, 16)),
        ("up1", "up", 16, 8, _n_2x2(16, 8)),
        ("dec1a", "conv3", 16, 8, _n_conv3(16, 8)),
        ("dec1", "conv3", 8, 8, _n_conv3(8, 8)),
        ("up0", "up", 8, 4, _n_2x2(8, 4)),
        ("dec0a", "conv3", 8, 4, _n_conv3(8, 4)),
        ("dec0", "conv3", 4, 4, _n_conv3(4, 4)),
        ("out", "conv1", 4, 3, _n_conv1(4, 3)),
    ]
    got = ref.layers(4, 3)
    assert [(x.name, x.kind, x.cin, x.cout) for x in got] == [h[:4] for h in hand]
    assert [x.k for x in got] == [{"conv3": 3, "down": 2, "up": 2, "conv1": 1}[h[1]]
                                  for h in hand]  # fmt: skip
    assert [x.offset for x in got] == list(np.cumsum([0] + [h[4] for h in hand[:-1]]))
    assert sum(h[4] for h in hand) == 7847
    assert ref.n_params(4, 3) == 7847


@pytest.mark.parametrize("width,scales", [(1, 2), (2, 2), (3, 3), (8, 4), (16, 5)])
def test_offsets_contiguous(width, scales):
    got = ref.layers(width, scales)
    hand = _readme_layers(width, scales)
    assert [(x.name, x.kind, x.cin, x.cout) for x in got] == hand
    offset = 0
    for layer, (_, kind, cin, cout) in zip(got, hand, strict=True):
        assert isinstance(layer, ref.Layer) and layer.offset == offset
        assert layer.cout * layer.cin * layer.k**2 + layer.cout == _readme_size(kind, cin, cout)
        offset += _readme_size(kind, cin, cout)
    assert ref.n_params(width, scales) == offset


# ----------------------------------------------------------------- layers by scalar loops


def _naive_layer(kind, W, b, I, th):
    """The README's sums, one output value at a time; tile t holds rows t th .. (t+1) th - 1."""
    cout, cin, k, _ = W.shape
    _, H, Wd = I.shape
    if kind == "up":
        O = np.zeros((cout, 2 * H, 2 * Wd))
        for co in range(cout):
            for y in range(H):
                for x in range(Wd):
                    for ky in range(2):
                        for kx in range(2):
                            O[co, 2 * y + ky, 2 * x + kx] = b[co] + sum(
                                W[co, ci, ky, kx] * I[ci, y, x] for ci in range(cin))
        return O
    Ho, Wo = (H // 2, Wd // 2) if kind == "down" else (H, Wd)
    O = np.zeros((cout, Ho, Wo))
    for co in range(cout):
        for y in range(Ho):
            for x in range(Wo):
                acc = b[co]
                for ci in range(cin):
                    for ky in range(k):
                        for kx in range(k):
                            if kind == "conv3":
                                yy, xx = y + ky - 1, x + kx - 1
                                tile = y // th
                                if not (tile * th <= yy < (tile + 1) * th and 0 <= xx < Wd):
                                    continue  # zero outside the tile
                            elif kind == "down":
                                yy, xx = 2 * y + ky, 2 * x + kx
                            else:
                                yy, xx = y, x
                            acc += W[co, ci, ky, kx] * I[ci, yy, xx]
                O[co, y, x] = acc
    return O


def layer_case(k, seed, n, cin=3, cout=2, th=4, Wd=6):
    """(rng, W, b, I, th): a random layer of taps k x k and an input of n tiles of th rows."""
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(cout, cin, k, k))
    b = rng.normal(size=cout)
    return rng, W, b, rng.normal(size=(cin, n * th, Wd)), th


@pytest.mark.parametrize("kind,k", [("conv3", 3), ("down", 2), ("up", 2), ("conv1", 1)])
def test_layer_against_loops(kind, k):
    """conv on 3 tiles of 4 rows, 6 columns (conv3's taps straddle both tile borders)."""
    _, W, b, I, th = layer_case(k, 1, 3)
    n = 3
    got = ref.conv(kind, W, b, I, th)
    np.testing.assert_allclose(got, _naive_layer(kind, W, b, I, th), rtol=1e-13, atol=1e-13)
    if kind == "conv3":  # the tiles really are cut: one image of 12 rows differs
        assert not np.allclose(got, ref.conv(kind, W, b, I, n * th))


@pytest.mark.parametrize("kind,k", [("conv3", 3), ("down", 2), ("up", 2), ("conv1", 1)])
def test_layer_backward_is_the_adjoint(kind, k):
    """<conv(I) - b, G> = <I, dI> and dE/dW, dE/db of E = <conv(I), G>, as sums of the loops."""
    rng, W, b, I, th = layer_case(k, 2, 2)
    O = _naive_layer(kind, W, b, I, th)
    G = rng.normal(size=O.shape)
    dI, dW, db = ref.conv_backward(kind, W, I, G, th)
    assert dI.shape == I.shape and dW.shape == W.shape and db.shape == b.shape
    np.testing.assert_allclose(np.sum((O - b[:, None, None]) * G), np.sum(I * dI), rtol=1e-12)
    # O is linear in W: dE/dW[j] = <conv with W = e_j, b = 0, G>
    for j in range(W.size):
        e = np.zeros(W.size)
        e[j] = 1.0
        Oj = _naive_layer(kind, e.reshape(W.shape), np.zeros(W.shape[0]), I, th)
        assert np.isclose(np.sum(Oj * G), dW.flat[j], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(db, G.sum(axis=(1, 2)), rtol=1e-13)


# ------------------------------------------------------------------ the network by hand

NOISE_A = np.array([2.0e6, 5.0e5])  # noise std ~0.03 .. 0.05 at mid grey
NOISE_B = np.array([100.0, 300.0])


def _weights(rng, width, scales):
    """He-scaled random weights and small positive biases (few dead ReLUs)."""
    w = np.zeros(ref.n_params(width, scales))
    off = 0
    for _, kind, cin, cout in _readme_layers(width, scales):
        k = {"conv3": 3, "down": 2, "up": 2, "conv1": 1}[kind]
        nw = cout * cin * k * k
        w[off: off + nw] = rng.normal(size=nw) * np.sqrt(2.0 / (cin * k * k))
        w[off + nw: off + nw + cout] = rng.uniform(0.05, 0.3, cout)
        off += nw + cout
    return w


def _pair(rng, n, th, Wd):
    R = rng.uniform(0.05, 0.95, (n * th, Wd, 3))
    return R + 0.04 * rng.standard_normal(R.shape), R


def _features_by_hand(X, a, b, th):
    """F (4, H, W), s (n,): the README's formulas, pixel by pixel."""
    H, Wd, _ = X.shape
    F = np.zeros((4, H, Wd))
    s = np.array([max(np.sqrt(max(at + 65535 * 0.18 * bt, 0.0)) / 65535, 1e-5)
                  for at, bt in zip(a, b, strict=True)])  # fmt: skip
    for y in range(H):
        t = y // th
        for x in range(Wd):
            r, g, bl = X[y, x]
            lum = 0.2627 * r + 0.6780 * g + 0.0593 * bl
            sigma = np.sqrt(max(a[t] + 65535 * b[t] * max(lum, 0.0), 0.0)) / 65535
            F[:, y, x] = np.array([r, g, bl, sigma]) / s[t]
    return F, s


def _forward_by_hand(w, X, a, b, th, width, scales):
    """O (H, W, 3) of the README's network from the loop layers; each layer's W and b read as
    w[off + ((co cin + ci) k + ky) k + kx] and w[off + cout cin k k + co]."""
    params, off = {}, 0
    for name, kind, cin, cout in _readme_layers(width, scales):
        k = {"conv3": 3, "down": 2, "up": 2, "conv1": 1}[kind]
        Wl = np.zeros((cout, cin, k, k))
        for co in range(cout):
            for ci in range(cin):
                for ky in range(k):
                    for kx in range(k):
                        Wl[co, ci, ky, kx] = w[off + ((co * cin + ci) * k + ky) * k + kx]
        bl = np.array([w[off + cout * cin * k * k + co] for co in range(cout)])
        params[name] = (kind, Wl, bl)
        off += cout * cin * k * k + cout

    def L(name, I, th_k):
        kind, Wl, bl = params[name]
        return _naive_layer(kind, Wl, bl, I, th_k)

    def relu(v):
        return np.maximum(v, 0.0)

    F, s = _features_by_hand(X, a, b, th)
    h, E = F, {}
    for k in range(scales):
        th_k = th // 2**k
        E[k] = relu(L(f"enc{k}", relu(L(f"enc{k}a", h, th_k)), th_k))
        if k < scales - 1:
            h = L(f"down{k}", E[k], th_k)
    G = E[scales - 1]
    for k in reversed(range(scales - 1)):
        U = L(f"up{k}", G, th // 2 ** (k + 1))
        G = relu(L(f"dec{k}", relu(L(f"dec{k}a", np.concatenate([U, E[k]]), th // 2**k)),
                   th // 2**k))  # fmt: skip
    N = L("out", G, th)
    O = np.zeros_like(X)
    for y in range(X.shape[0]):
        O[y] = X[y] - s[y // th] * N[:, y, :].T
    return O


@pytest.mark.parametrize("width,scales,n,th,Wd", [(2, 2, 2, 4, 6), (2, 3, 2, 4, 8)])
def test_forward_against_the_network_by_hand(width, scales, n, th, Wd):
    rng = np.random.default_rng(3)
    X, _ = _pair(rng, n, th, Wd)
    X[0, 0] = [-0.2, -0.1, -0.3]  # negative luminance: sigma from a alone
    a, b = NOISE_A[:n], NOISE_B[:n]
    w = _weights(rng, width, scales)
    O, cache = ref.forward(w, X, a, b, th, width, scales)
    assert O.shape == X.shape and cache.N.shape == (3, n * th, Wd)
    F, s = _features_by_hand(X, a, b, th)
    np.testing.assert_allclose(cache.F, F, rtol=1e-14)
    np.testing.assert_allclose(cache.s, s, rtol=1e-15)
    np.testing.assert_allclose(O, _forward_by_hand(w, X, a, b, th, width, scales),
                               rtol=1e-12, atol=1e-12)  # fmt: skip
    assert np.abs(O - X).max() > 1e-3  # the network did something


def test_features_floors():
    """s_t's floor 1e-5 (a = b = 0, and a negative a + 65535 0.18 b), sigma's max(., 0)."""
    X = np.full((4, 2, 3), 0.5)
    F, s = ref.features(X, np.array([0.0, -1e4]), np.array([0.0, 0.01]), 2)
    assert s.tolist() == [1e-5, 1e-5]
    np.testing.assert_array_equal(F[:3], np.full((3, 4, 2), 0.5 / 1e-5))
    np.testing.assert_array_equal(F[3, :2], 0.0)  # a = b = 0
    np.testing.assert_array_equal(F[3, 2:], 0.0)  # a + 65535 b Y < 0 clamps to 0
    F, s = ref.features(X[:2], np.array([100.0]), np.array([0.5]), 2)
    assert s[0] == pytest.approx(np.sqrt(100 + 65535 * 0.18 * 0.5) / 65535, rel=1e-15)
    np.testing.assert_allclose(F[3], np.sqrt(100 + 65535 * 0.5 * 0.5) / 65535 / s[0], rtol=1e-15)


# --------------------------------------------------------------------------------- loss


def test_loss_by_hand():
    O = np.zeros((1, 2, 3))
    R = np.zeros((1, 2, 3))
    O[0, 0] = [1.0, -2.0, 0.5]
    R[0, 1] = [0.25, 0.0, 0.0]  # o - r = -0.25, 0, 0: sign(0) = 0
    E, dO = ref.loss(O, R)
    assert E == pytest.approx((1 + 2 + 0.5 + 0.25) / 2, rel=1e-15)
    np.testing.assert_array_equal(dO, np.array([[[0.5, -0.5, 0.5], [-0.5, 0.0, 0.0]]]))
    E, dO = ref.loss(O, R, l2=True)  # the squared error: 2 (o - r) / P
    assert E == pytest.approx((1 + 4 + 0.25 + 0.0625) / 2, rel=1e-15)
    np.testing.assert_array_equal(dO, np.array([[[1.0, -2.0, 0.5], [-0.25, 0.0, 0.0]]]))


# ----------------------------------------------------------------- finite differences


def _regime(w, X, R, a, b, th, width, scales, cfa=False):
    """The piece of the maths w lies in: every conv3's ReLU pattern and the signs of O - R."""
    O, cache = ref.forward(w, X, a, b, th, width, scales, cfa=cfa)
    conv3 = [x.name for x in ref.layers(width, scales, cfa) if x.kind == "conv3"]
    return [cache.z[name] > 0 for name in conv3] + [np.sign(O - R)]


def _check_backward(rng, w, X, R, a, b, th, width, scales, cfa=False, l2=False):
    """dE/dw of the reference (cfa: of the mosaic network) against central differences of
    step 1e-6 at every bias and 200 random weights (and the largest |dw|), each step inside
    the piece of the maths w lies in: max |fd - dw| <= 1e-6 max |dw| + 1e-9; no layer's
    gradient is zero (the check reaches every one)."""
    E, dw = ref.backward(w, X, R, a, b, th, width, scales, cfa=cfa, l2=l2)
    O, _ = ref.forward(w, X, a, b, th, width, scales, cfa=cfa)
    assert dw.shape == w.shape and E == ref.loss(O, R, l2)[0]
    table = ref.layers(width, scales, cfa)
    for layer in table:
        W, bias = ref.unpack(dw, layer)
        assert np.abs(W).max() > 1e-6 and np.abs(bias).max() > 1e-6, layer.name
    is_bias = np.zeros(w.size, dtype=bool)
    for layer in table:
        is_bias[layer.offset + layer.weights: layer.end] = True
    picks = np.concatenate([np.flatnonzero(is_bias),
                            rng.choice(np.flatnonzero(~is_bias), 200, replace=False),
                            [np.argmax(np.abs(dw))]])
    base = _regime(w, X, R, a, b, th, width, scales, cfa)
    eps = 1e-6
    fd = np.zeros(picks.size)
    for i, j in enumerate(picks):
        e = []
        for step in (eps, -eps):
            wp = w.copy()
            wp[j] += step
            Op, _ = ref.forward(wp, X, a, b, th, width, scales, cfa=cfa)
            e.append(ref.loss(Op, R, l2)[0])
            same = _regime(wp, X, R, a, b, th, width, scales, cfa)
            assert all(np.array_equal(p, q) for p, q in zip(same, base, strict=True)), (
                f"parameter {j}: the step crossed a kink, pick another seed")
        fd[i] = (e[0] - e[1]) / (2 * eps)
    err = np.abs(fd - dw[picks])
    worst = int(np.argmax(err))
    assert err.max() <= 1e-6 * np.abs(dw).max() + 1e-9, (
        f"parameter {picks[worst]}: dw {dw[picks[worst]]:.10e}, fd {fd[worst]:.10e}")


@pytest.mark.parametrize("width,scales,n,th,Wd,seed,l2", [
    (2, 2, 2, 8, 8, 4, False), (3, 3, 1, 8, 16, 5, False), (2, 2, 2, 8, 8, 4, True)])
def test_backward_against_finite_differences(width, scales, n, th, Wd, seed, l2):
    """Every bias and 200 random weights (and the largest |dw|) of dE/dw against central
    differences with step 1e-6: max |fd - dw| <= 1e-6 max |dw| + 1e-9 (l2: of the squared
    error)."""
    rng = np.random.default_rng(seed)
    X, R = _pair(rng, n, th, Wd)
    a, b = NOISE_A[:n], NOISE_B[:n]
    _check_backward(rng, _weights(rng, width, scales), X, R, a, b, th, width, scales, l2=l2)


def test_relu_grad_at_zero():
    """All weights 0 but the output layer's W: every pre-activation is 0 and relu'(0) = 0, so
    only the output bias gets a gradient (dec0 would with relu'(0) = 1, the output's W
    passing a nonzero dG_0): dE/db_out[c] = -sum_p s_t sign(O - R)[p, c] / P."""
    rng = np.random.default_rng(6)
    n, th, Wd = 2, 4, 4
    X, R = _pair(rng, n, th, Wd)
    a, b = NOISE_A, NOISE_B
    w = np.zeros(ref.n_params(2, 2))
    out = ref.layers(2, 2)[-1]
    first = out.offset + out.cout * out.cin
    w[out.offset: first] = rng.normal(size=first - out.offset)
    E, dw = ref.backward(w, X, R, a, b, th, 2, 2)
    assert np.all(dw[:first] == 0.0)
    _, s = ref.features(X, a, b, th)
    expect = -(np.repeat(s, th)[:, None, None] * np.sign(X - R)).sum(axis=(0, 1)) / (n * th * Wd)
    np.testing.assert_allclose(dw[first:], expect, rtol=1e-14)
    assert E == pytest.approx(np.abs(X - R).sum() / (n * th * Wd), rel=1e-15)


# ------------------------------------------------------------------ tiles, output, errors


def test_tiles_are_independent():
    rng = np.random.default_rng(7)
    n, th, Wd = 2, 8, 8
    X, _ = _pair(rng, n, th, Wd)
    a, b = NOISE_A.copy(), NOISE_B.copy()
    w = _weights(rng, 2, 3)
    O, _ = ref.forward(w, X, a, b, th, 2, 3)
    for t in range(n):
        X2, a2, b2 = X.copy(), a.copy(), b.copy()
        X2[t * th: (t + 1) * th] = rng.uniform(0, 1, (th, Wd, 3))
        a2[t], b2[t] = 3e6, 50.0
        O2, _ = ref.forward(w, X2, a2, b2, th, 2, 3)
        other = slice((1 - t) * th, (2 - t) * th)
        np.testing.assert_array_equal(O2[other], O[other])
        assert not np.allclose(O2[t * th: (t + 1) * th], O[t * th: (t + 1) * th])
    # the same image as one tile of 16 rows differs: the cut is real
    O1, _ = ref.forward(w, X, a[:1], b[:1], 2 * th, 2, 3)
    assert not np.allclose(O1[:th], O[:th])


def test_zero_weights_return_the_input():
    rng = np.random.default_rng(8)
    X, _ = _pair(rng, 2, 4, 8)
    O, cache = ref.forward(np.zeros(ref.n_params(3, 3)), X, NOISE_A, NOISE_B, 4, 3, 3)
    assert np.all(cache.N == 0.0)
    np.testing.assert_array_equal(O, X)


def test_bad_shapes():
    rng = np.random.default_rng(9)
    X, R = _pair(rng, 2, 8, 8)
    a, b = NOISE_A, NOISE_B
    w = np.zeros(ref.n_params(2, 3))
    ref.forward(w, X, a, b, 8, 2, 3)  # the good call
    with pytest.raises(ValueError, match="multiples of 2"):
        ref.forward(np.zeros(ref.n_params(2, 5)), X, a, b, 8, 2, 5)  # th 8, W 8 vs 2^4
    with pytest.raises(ValueError, match="multiples of 2"):
        ref.forward(w, X[:, :6], a, b, 8, 2, 3)  # W = 6
    with pytest.raises(ValueError, match="multiples of 2"):
        ref.backward(w, X[:12], R[:12], a, b, 6, 2, 3)  # th = 6
    with pytest.raises(ValueError, match="scales"):
        ref.forward(np.zeros(100), X, a, b, 8, 2, 1)
    with pytest.raises(ValueError, match="scales"):
        ref.layers(2, 1)
    with pytest.raises(ValueError, match="scales"):
        ref.n_params(2, 0)
    with pytest.raises(ValueError, match="width"):
        ref.layers(0, 2)
    with pytest.raises(ValueError, match="tiles"):
        ref.forward(w, X, a[:1], b[:1], 8, 2, 3)  # 16 rows, 1 tile of 8
    with pytest.raises(ValueError, match="tiles"):
        ref.features(X, a, b, 4)
    with pytest.raises(ValueError, match="a and b"):
        ref.forward(w, X, a, b[:1], 8, 2, 3)
    with pytest.raises(ValueError, match="a and b"):
        ref.features(X, a[:, None], b[:, None], 8)
    with pytest.raises(ValueError, match=r"\(H, W, 3\)"):
        ref.forward(w, X[..., :2], a, b, 8, 2, 3)
    with pytest.raises(ValueError, match="w must be"):
        ref.forward(w[:-1], X, a, b, 8, 2, 3)
    with pytest.raises(ValueError, match="w must be"):
        ref.backward(np.zeros(ref.n_params(3, 3)), X, R, a, b, 8, 2, 3)
    with pytest.raises(ValueError, match="R"):
        ref.backward(w, X, R[:, :4], a, b, 8, 2, 3)
    with pytest.raises(ValueError, match="must both be"):
        ref.loss(X, R[:8])
    with pytest.raises(ValueError, match="cannot read"):
        ref.conv("conv3", np.zeros((2, 3, 2, 2)), np.zeros(2), np.zeros((3, 4, 4)), 4)
    with pytest.raises(ValueError, match="cannot read"):
        ref.conv("conv5", np.zeros((2, 3, 3, 3)), np.zeros(2), np.zeros((3, 4, 4)), 4)


# ----------------------------------------------------------------- RGGB mosaics (cfa)


def _cfa_weights(rng, width, scales, cfa=ref.RGGB):
    """_weights' scaling for a network on cells (net.py's layers with cfa)."""
    w = np.zeros(ref.n_params(width, scales, cfa))
    for layer in ref.layers(width, scales, cfa):
        fan = layer.cin * layer.k * layer.k
        w[layer.offset: layer.offset + layer.weights] = (
            rng.normal(size=layer.weights) * np.sqrt(2.0 / fan))
        w[layer.offset + layer.weights: layer.end] = rng.uniform(0.05, 0.3, layer.cout)
    return w


def _cfa_pair(rng, n, th, Wd):
    """(the noisy mosaic, the clean RGB): tiles of th rows."""
    R = rng.uniform(0.05, 0.95, (n * th, Wd, 3))
    return ref.mosaic(R + 0.04 * rng.standard_normal(R.shape)), R


@pytest.mark.parametrize("width,scales", [(2, 2), (3, 3)])
def test_cfa_layers_differ_only_in_first_and_last(width, scales):
    rgb, cfa = ref.layers(width, scales), ref.layers(width, scales, True)
    assert [x.name for x in rgb] == [x.name for x in cfa]
    assert (cfa[0].cin, cfa[-1].cout) == (5, 12) and (rgb[0].cin, rgb[-1].cout) == (4, 3)
    for r, c in zip(rgb[1:-1], cfa[1:-1], strict=True):
        assert r._replace(offset=0) == c._replace(offset=0)
    assert ref.n_params(width, scales, True) == cfa[-1].end == (
        ref.n_params(width, scales) + width * 9 + 9 * width + 9)


def test_cfa_features_and_output_by_hand():
    """A mosaic whose photosites all differ (and whose other channels hold decoys): F's five
    planes are R = M(2x, 2y).r, G1 = M(2x+1, 2y).g, G2 = M(2x, 2y+1).g, B = M(2x+1, 2y+1).b
    and sigma of the base colour's luma, over s; O(2x+dx, 2y+dy) = base - s N[(2dy+dx)3 + c],
    pixel by pixel; tiles of 4 rows (2 cells) with their own (a, b)."""
    H, Wd, th = 8, 4, 4
    M = np.zeros((H, Wd, 3))
    M[..., 0] = 100 * np.arange(H)[:, None] + np.arange(Wd)[None]  # r
    M[..., 1] = M[..., 0] + 1000  # g
    M[..., 2] = M[..., 0] + 2000  # b
    M /= 4000.0
    a, b = np.array([300.0, 2000.0]), np.array([0.4, 0.05])
    F, s = ref.features(M, a, b, th, cfa=True)
    assert F.shape == (5, H // 2, Wd // 2)
    for y in range(H // 2):
        st = s[y // (th // 2)]
        at, bt = a[y // (th // 2)], b[y // (th // 2)]
        for x in range(Wd // 2):
            R, G1 = M[2 * y, 2 * x, 0], M[2 * y, 2 * x + 1, 1]
            G2, B = M[2 * y + 1, 2 * x, 1], M[2 * y + 1, 2 * x + 1, 2]
            lum = 0.2627 * R + 0.6780 * (G1 + G2) / 2 + 0.0593 * B
            sigma = np.sqrt(at + 65535 * bt * lum) / 65535
            assert np.allclose(F[:, y, x], np.array([R, G1, G2, B, sigma]) / st, rtol=1e-15)
    rng = np.random.default_rng(3)
    w = _cfa_weights(rng, 2, 2)
    O, cache = ref.forward(w, M, a, b, th, 2, 2, cfa=True)
    assert O.shape == M.shape and cache.N.shape == (12, H // 2, Wd // 2)
    for py in range(H):
        for px in range(Wd):
            y, x, dy, dx = py // 2, px // 2, py % 2, px % 2
            base = np.array([F[0, y, x], (F[1, y, x] + F[2, y, x]) / 2, F[3, y, x]])
            st = s[y // (th // 2)]
            want = base * st - st * cache.N[(2 * dy + dx) * 3: (2 * dy + dx) * 3 + 3, y, x]
            assert np.allclose(O[py, px], want, rtol=1e-12, atol=1e-14)


def test_cfa_reads_each_photosites_own_colour():
    """An RGB image and its mosaic (cnngenin's generate 3) give the same F and O."""
    rng = np.random.default_rng(2)
    img = rng.uniform(0.1, 0.9, (8, 8, 3))
    a, b = np.array([500.0]), np.array([0.2])
    w = _cfa_weights(rng, 2, 2)
    O1, c1 = ref.forward(w, img, a, b, 8, 2, 2, cfa=True)
    O2, c2 = ref.forward(w, ref.mosaic(img), a, b, 8, 2, 2, cfa=True)
    assert np.array_equal(c1.F, c2.F) and np.array_equal(O1, O2)


@pytest.mark.parametrize("width,scales,n,th,Wd,seed", [(2, 2, 2, 8, 8, 4), (3, 3, 1, 16, 16, 5)])
def test_cfa_backward_against_finite_differences(width, scales, n, th, Wd, seed):
    """test_backward_against_finite_differences for the cfa network: every bias and 200
    random weights (and the largest |dw|) against central differences of step 1e-6."""
    rng = np.random.default_rng(seed)
    X, R = _cfa_pair(rng, n, th, Wd)
    a, b = NOISE_A[:n], NOISE_B[:n]
    _check_backward(rng, _cfa_weights(rng, width, scales), X, R, a, b, th, width, scales,
                    cfa=True)


def test_cfa_bad_shapes():
    rng = np.random.default_rng(0)
    w = _cfa_weights(rng, 2, 2)
    a, b = np.array([1.0]), np.array([0.1])
    with pytest.raises(ValueError, match="multiples of 2 2"):
        ref.forward(w, np.zeros((6, 8, 3)), a, b, 6, 2, 2, cfa=True)  # 3 cells a tile
    with pytest.raises(ValueError, match="must be"):
        ref.forward(w[:-1], np.zeros((8, 8, 3)), a, b, 8, 2, 2, cfa=True)


# ----------------------------------------------------------------- RGB cells (cfa CELLS)


def test_cells_layers_differ_only_in_first_and_last():
    rgb, cells = ref.layers(3, 3), ref.layers(3, 3, ref.CELLS)
    assert (cells[0].cin, cells[-1].cout) == (13, 12)
    for r, c in zip(rgb[1:-1], cells[1:-1], strict=True):
        assert r._replace(offset=0) == c._replace(offset=0)


def test_cells_features_and_output_by_hand():
    """F's planes 3 (2 dy + dx) + c are pixel (2x + dx, 2y + dy)'s channel c, plane 12 the
    sigma of the cell's mean colour's luma, over s; O = X - s N[(2dy+dx)3 + c], pixel by
    pixel; tiles of 4 rows (2 cells) with their own (a, b)."""
    H, Wd, th = 8, 4, 4
    rng = np.random.default_rng(7)
    X = rng.uniform(0.05, 0.95, (H, Wd, 3))
    a, b = np.array([300.0, 2000.0]), np.array([0.4, 0.05])
    F, s = ref.features(X, a, b, th, cfa=ref.CELLS)
    assert F.shape == (13, H // 2, Wd // 2)
    for y in range(H // 2):
        t = y // (th // 2)
        for x in range(Wd // 2):
            px = [X[2 * y + dy, 2 * x + dx] for dy in (0, 1) for dx in (0, 1)]
            lum = np.mean(px, 0) @ np.array([0.2627, 0.6780, 0.0593])
            sigma = np.sqrt(a[t] + 65535 * b[t] * lum) / 65535
            assert np.allclose(F[:, y, x], np.concatenate(px + [[sigma]]) / s[t], rtol=1e-15)
    w = _cfa_weights(rng, 2, 2, ref.CELLS)
    O, cache = ref.forward(w, X, a, b, th, 2, 2, cfa=ref.CELLS)
    assert O.shape == X.shape and cache.N.shape == (12, H // 2, Wd // 2)
    for py in range(H):
        for px in range(Wd):
            y, x, d = py // 2, px // 2, 2 * (py % 2) + px % 2
            st = s[py // th]
            want = X[py, px] - st * cache.N[3 * d: 3 * d + 3, y, x]
            assert np.allclose(O[py, px], want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("width,scales,n,th,Wd,seed", [(2, 2, 2, 8, 8, 4), (3, 3, 1, 16, 16, 5)])
@pytest.mark.parametrize("cfa", ["CELLS", "MOSAIC"])
def test_cells_backward_against_finite_differences(width, scales, n, th, Wd, seed, cfa):
    """test_backward_against_finite_differences for the networks of RGB cells and of mosaics
    of any pattern (X-Trans at a phase off the origin)."""
    rng = np.random.default_rng(seed)
    R = rng.uniform(0.05, 0.95, (n * th, Wd, 3))
    X = R + 0.04 * rng.standard_normal(R.shape)
    mode = getattr(ref, cfa)
    if mode == ref.MOSAIC:
        X = _xtrans_mosaic(X, (3, 5))
    a, b = NOISE_A[:n], NOISE_B[:n]
    _check_backward(rng, _cfa_weights(rng, width, scales, mode), X, R, a, b, th, width,
                    scales, cfa=mode)


# ------------------------------------------------------ mosaics of any pattern (cfa MOSAIC)

def _xtrans_mosaic(R, phase=(0, 0)):
    """R (H, W, 3) as an X-Trans mosaic of any pattern: the value in r, g and b, the colour
    in alpha (cnngenin's pattern 1)."""
    from vkgraph.modules.cnngenin.reference import xtrans

    c = xtrans(R.shape[1], R.shape[0], phase)
    v = np.take_along_axis(R, c[..., None], -1)
    return np.concatenate([np.repeat(v, 3, -1), c[..., None].astype(np.float64)], -1)


def test_mosaic_features_and_output_by_hand():
    """F: the photosite (2x + dx, 2y + dy) = q, d = 2 dy + dx, puts v(q) / s in plane 3 d +
    c(q) and 1 in plane 12 + 3 d + c(q), zeros in the other planes of its three; plane 24 is
    sigma of the cell's mean value over s. O = base - s N, with base by hand: the own colour
    its value, another the (3 - |dx|)(3 - |dy|) weighted mean of that colour's photosites in
    the 5 x 5 window inside the tile (tiles of 8 rows with their own (a, b))."""
    H, Wd, th = 16, 8, 8
    rng = np.random.default_rng(11)
    X = _xtrans_mosaic(rng.uniform(0.05, 0.95, (H, Wd, 3)), (1, 2))
    X[..., 1] += 5.0  # decoys where the colour is not g: only the own channel may be read
    X[..., 1] = np.where(X[..., 3] == 1, X[..., 0], X[..., 1])
    a, b = np.array([300.0, 2000.0]), np.array([0.4, 0.05])
    F, s = ref.features(X, a, b, th, cfa=ref.MOSAIC)
    assert F.shape == (25, H // 2, Wd // 2)
    for y in range(H // 2):
        t = y // (th // 2)
        for x in range(Wd // 2):
            want = np.zeros(25)
            vals = []
            for d, (dy, dx) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1))):
                q = X[2 * y + dy, 2 * x + dx]
                c = int(q[3])
                want[3 * d + c] = q[0] / s[t]
                want[12 + 3 * d + c] = 1.0
                vals.append(q[0])
            want[24] = np.sqrt(a[t] + 65535 * b[t] * np.mean(vals)) / 65535 / s[t]
            assert np.allclose(F[:, y, x], want, rtol=1e-12, atol=0)
    w = _cfa_weights(rng, 2, 2, ref.MOSAIC)
    O, cache = ref.forward(w, X, a, b, th, 2, 2, cfa=ref.MOSAIC)
    assert O.shape == (H, Wd, 3) and cache.N.shape == (12, H // 2, Wd // 2)
    for py in range(H):
        for px in range(Wd):
            t = py // th
            own = int(X[py, px, 3])
            base = np.zeros(3)
            for c in range(3):
                num = den = 0.0
                for qy in range(max(py - 2, t * th), min(py + 3, (t + 1) * th)):
                    for qx in range(max(px - 2, 0), min(px + 3, Wd)):
                        if int(X[qy, qx, 3]) == c:
                            wq = (3 - abs(qx - px)) * (3 - abs(qy - py))
                            num, den = num + wq * X[qy, qx, 0], den + wq
                base[c] = X[py, px, 0] if c == own or den == 0 else num / den
            d = 2 * (py % 2) + px % 2
            want = base - s[t] * cache.N[3 * d: 3 * d + 3, py // 2, px // 2]
            assert np.allclose(O[py, px], want, rtol=1e-12, atol=1e-14)


def test_mosaic_base_keeps_a_flat_colour():
    """A flat colour's mosaic (any phase): every pixel's base is that colour."""
    X = _xtrans_mosaic(np.broadcast_to([0.2, 0.5, 0.7], (12, 12, 3)).copy(), (4, 1))
    assert np.allclose(ref.mosaic_base(X, 6), [0.2, 0.5, 0.7], rtol=1e-15)
