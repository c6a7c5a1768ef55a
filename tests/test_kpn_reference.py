"""Tests of the float64 numpy reference of kpn-t (modules/kpn-t/reference.py).

Every backward is checked against central finite differences of its forward, in float64, on
odd image sizes (37x23, 13x9) so that border and rounding-up bugs show. The forward maths is
piecewise smooth; finite differences are only meaningful where the perturbation stays inside one
smooth piece, so each check either builds its inputs away from the kinks (leaky ReLU at z = 0,
the tap limit |K| = 10, the plain normaliser floor S = 0.001, |.| in the losses at o = r and at
o = 0) or asserts that the perturbed evaluations did not cross one (``_regime``).
"""


import numpy as np
import pytest

from vkgraph.modules.kpn_t import reference as ref

SIZES = [(37, 23), (13, 9)]  # (W, H)


def _image(rng, w, h, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, (h, w, 3))


def _rel(a, n):
    return float(np.max(ref.gradcheck_rel(a, n)))


def _assert_fd_close(ana, num, E, eps, rtol=1e-6):
    """|ana - num| <= rtol max(|ana|, |num|) + the rounding noise of the central difference.

    Each float64 evaluation of a scalar E is good to about one ulp, so (E+ - E-)/(2 eps)
    carries about ulp(E)/eps of noise; we allow 4 ulps. That is what limits small entries of a
    gradient whose loss is a mean over many pixels (an error from a real bug is far larger).
    """
    ana, num = np.asarray(ana), np.asarray(num)
    err = np.abs(ana - num)
    bound = rtol * np.maximum(np.abs(ana), np.abs(num)) + 4 * np.spacing(abs(E)) / (2 * eps)
    worst = int(np.argmax(err / bound))
    assert np.all(err <= bound), (
        f"entry {worst}: analytic {ana.flat[worst]:.10e}, numeric {num.flat[worst]:.10e}"
    )


# ------------------------------------------------------------------------------ sampling


def test_mirror_matches_symmetric_padding_for_any_reach():
    for n in (1, 2, 3, 5, 8):
        reach = 4 * n
        padded = np.pad(np.arange(n), reach, mode="symmetric")
        i = np.arange(-reach, n + reach)
        assert np.array_equal(ref.mirror(i, n), padded)
    assert ref.mirror(-1, 7) == 0 and ref.mirror(7, 7) == 6 and ref.mirror(-8, 7) == 6


def _sub_loops(M):
    """Direct transcription of the `sub` maths (modules/kpn-t/README.md) with scalar loops
    (independent of the vectorised code)."""
    h, w = M.shape[:2]
    b = [1 / 16, 4 / 16, 6 / 16, 4 / 16, 1 / 16]
    out = np.zeros(((h + 1) // 2, (w + 1) // 2, M.shape[2]))
    for qy in range(out.shape[0]):
        for qx in range(out.shape[1]):
            for dy in range(-2, 3):
                for dx in range(-2, 3):
                    y = int(ref.mirror(2 * qy + dy, h))
                    x = int(ref.mirror(2 * qx + dx, w))
                    out[qy, qx] += b[dx + 2] * b[dy + 2] * M[y, x]
    return out


@pytest.mark.parametrize("w,h", SIZES + [(1, 1), (2, 3), (5, 1)])
def test_sub_matches_loops_and_keeps_constants(w, h):
    rng = np.random.default_rng(1)
    M = _image(rng, w, h)
    S = ref.sub(M)
    assert S.shape == ((h + 1) // 2, (w + 1) // 2, 3)
    np.testing.assert_allclose(S, _sub_loops(M), rtol=0, atol=1e-14)
    const = np.full((h, w, 3), 0.3712)
    np.testing.assert_allclose(ref.sub(const), 0.3712, rtol=0, atol=1e-15)


def test_up_follows_the_even_odd_rule():
    c = np.array([[2.0, 4.0, 10.0]])[..., None]  # one row, 3 coarse texels, 1 channel
    np.testing.assert_array_equal(ref.up(c, 5, 1)[0, :, 0], [2, 3, 4, 7, 10])
    # even fine width: the last odd texel mixes C[2] with C[3] := C[2]
    np.testing.assert_array_equal(ref.up(c, 6, 1)[0, :, 0], [2, 3, 4, 7, 10, 10])
    col = np.transpose(c, (1, 0, 2))  # the same along y
    np.testing.assert_array_equal(ref.up(col, 1, 6)[:, 0, 0], [2, 3, 4, 7, 10, 10])
    const = np.full((5, 7, 3), -0.25)
    np.testing.assert_array_equal(ref.up(const, 13, 9), -0.25)


@pytest.mark.parametrize("w,h", SIZES + [(1, 1), (2, 3), (6, 1), (8, 4)])
def test_up_adjoint_is_the_transpose(w, h):
    rng = np.random.default_rng(2)
    wc, hc = (w + 1) // 2, (h + 1) // 2
    x = _image(rng, wc, hc)
    y = _image(rng, w, h)
    lhs = np.sum(ref.up(x, w, h) * y)
    rhs = np.sum(x * ref.up_adjoint(y, wc, hc))
    assert abs(lhs - rhs) <= 1e-12 * max(1.0, abs(lhs))
    # and the full matrix on a small case: columns of U are U applied to basis images
    if w * h <= 64:
        n_c = wc * hc
        U = np.stack([ref.up(np.eye(n_c)[j].reshape(hc, wc, 1), w, h).ravel() for j in range(n_c)])
        UT = np.stack([ref.up_adjoint(np.eye(w * h)[j].reshape(h, w, 1), wc, hc).ravel()
                       for j in range(w * h)])  # fmt: skip
        np.testing.assert_array_equal(U, UT.T)


@pytest.mark.parametrize("w,h", SIZES)
def test_sub_adjoint_is_the_transpose(w, h):
    rng = np.random.default_rng(3)
    x = _image(rng, w, h)
    y = _image(rng, (w + 1) // 2, (h + 1) // 2)
    lhs = np.sum(ref.sub(x) * y)
    rhs = np.sum(x * ref.sub_adjoint(y, w, h))
    assert abs(lhs - rhs) <= 1e-12 * max(1.0, abs(lhs))


@pytest.mark.parametrize("w,h,levels", [(37, 23, 4), (13, 9, 5), (13, 9, 1), (64, 64, 4)])
def test_identity_filters_reconstruct_the_input(w, h, levels):
    rng = np.random.default_rng(4)
    X = _image(rng, w, h, 0.0, 2.0)
    M, D = ref.pyramid(X, levels)
    assert [m.shape[1::-1] for m in M] == ref.level_sizes(w, h, levels)
    O = ref.reconstruct(M[levels], D)
    np.testing.assert_allclose(O[0], X, rtol=0, atol=1e-13)
    # and through apply: K = 1 at the centre tap (k = 7, offset (0, 0)), 0 elsewhere
    for d in D:
        K = np.zeros((d.shape[0] * d.shape[1], 16))
        K[:, 7] = 1.0
        np.testing.assert_allclose(ref.apply(d, K, "plain"), d, rtol=0, atol=1e-15)
        K[:, 7] = 60.0  # softmax: the other taps leak e^-60, below float64 resolution
        np.testing.assert_allclose(ref.apply(d, K, "softmax"), d, rtol=0, atol=1e-15)


@pytest.mark.parametrize("w,h,levels", [(37, 23, 4), (13, 9, 3)])
def test_reconstruct_adjoint_is_the_transpose(w, h, levels):
    rng = np.random.default_rng(5)
    sizes = ref.level_sizes(w, h, levels)
    I = [_image(rng, *sizes[i]) for i in range(levels)]
    M_L = _image(rng, *sizes[levels])
    G = _image(rng, w, h)
    lhs = np.sum(ref.reconstruct(M_L, I)[0] * G)
    dI, dM = ref.reconstruct_adjoint(G, levels)
    rhs = sum(np.sum(a * b) for a, b in zip(I, dI, strict=True)) + np.sum(M_L * dM)
    assert abs(lhs - rhs) <= 1e-12 * max(1.0, abs(lhs))
    np.testing.assert_array_equal(dI[0], G)


# ------------------------------------------------------------------------------ features


def test_features_against_loops():
    rng = np.random.default_rng(6)
    w, h = 13, 9
    D = _image(rng, w, h)
    F = ref.features(D)
    assert F.shape == (w * h, 64)
    luma = (0.2627, 0.6780, 0.0593)
    for x, y in [(0, 0), (12, 8), (5, 4), (12, 0), (1, 7)]:
        p = x + y * w
        for c in range(64):
            xx = int(ref.mirror(x + c // 8 - 4, w))
            yy = int(ref.mirror(y + c % 8 - 4, h))
            expect = sum(lc * abs(D[yy, xx, ch]) for ch, lc in enumerate(luma))
            assert F[p, c] == pytest.approx(expect, rel=1e-14)
    # feature 36 = offset (0, 0)
    np.testing.assert_allclose(F[:, 36], (np.abs(D) @ ref.LUMA).ravel(), rtol=1e-14)


def test_taps_are_the_star():
    grid = np.full((5, 5), -1)
    for k, (dx, dy) in enumerate(ref.TAPS):
        grid[dy + 2, dx + 2] = k
    expect = [
        [-1, -1, 0, -1, -1],
        [1, 2, 3, 4, 5],
        [-1, 6, 7, 8, -1],
        [9, 10, 11, 12, 13],
        [-1, -1, 14, -1, -1],
    ]
    np.testing.assert_array_equal(grid, expect)


# ------------------------------------------------------------------------------- apply


def _kernels_plain(rng, n):
    """K away from every kink of plain apply, with all its branches represented.

    Pixels p % 4 == 0: positive taps, S ~ 4.7 (normal branch). p % 4 == 1: negative taps,
    S ~ -4.7 (the floor max(S, 0.001) is active). p % 4 == 2: mixed signs, S in [0.5, 1.5].
    p % 4 == 3: some taps out of range (+15, -12, inf, nan) -> replaced by 0.001, zero gradient.
    Every in-range |K| <= 0.6, far from the tap limit 10.
    """
    K = rng.uniform(0.02, 0.6, (n, 16))
    p = np.arange(n)
    K[p % 4 == 1, :15] *= -1.0
    mixed = p % 4 == 2
    K[mixed, :15] = rng.uniform(-0.3, 0.3, (mixed.sum(), 15))
    K[mixed, 7] += 1.0 - K[mixed, :15].sum(axis=1)  # S = 1 before the next jitter
    K[mixed, 7] += rng.uniform(-0.5, 0.5, mixed.sum())
    assert np.all(np.abs(K[mixed, :15]).max() < 9.0)
    bad = np.flatnonzero(p % 4 == 3)
    K[bad, 0] = 15.0
    K[bad, 5] = -12.0
    K[bad[::2], 9] = np.inf
    K[bad[1::2], 14] = np.nan
    return K


def _apply_fd(D, K, G, mode, eps):
    """Numeric dE/dK (N, 16) of E = <G, apply(D, K)>."""
    return _filter_fd(lambda k: ref.apply(D, k, mode), K, G, eps)


def _filter_fd(filt, K, G, eps):
    """Numeric dE/dK (N, n_out) of E = <G, filt(K)>. I(p) depends on K[p] only, so perturbing
    a whole column of K at once still gives every pixel's own derivative."""
    n = K.shape[0]
    num = np.zeros(K.shape)
    g = G.reshape(n, 3)
    for k in range(K.shape[1]):
        kp, km = K.copy(), K.copy()
        kp[:, k] += eps
        km[:, k] -= eps
        diff = filt(kp) - filt(km)
        num[:, k] = np.sum(g * diff.reshape(n, 3), axis=1) / (2 * eps)
    return num


@pytest.mark.parametrize("w,h", SIZES)
def test_apply_backward_plain(w, h):
    rng = np.random.default_rng(7)
    D = _image(rng, w, h)
    G = _image(rng, w, h)
    K = _kernels_plain(rng, w * h)
    I = ref.apply(D, K, "plain")
    assert np.all(np.isfinite(I))
    ana = ref.apply_backward(G, D, K, "plain")
    num = _apply_fd(D, K, G, "plain", 1e-6)
    bad = ~np.isfinite(K[:, :15]) | (np.abs(K[:, :15]) >= 10)
    assert bad.sum() > 0 and np.all(ana[:, :15][bad] == 0.0)
    assert np.all(ana[:, 15] == 0.0)
    assert _rel(ana, num) < 1e-6


def test_apply_plain_floor_and_replacement_by_hand():
    D = np.zeros((1, 5, 3))
    D[0, :, 0] = [1.0, 2.0, 3.0, 4.0, 5.0]  # a ramp in x, one row
    K = np.zeros((5, 16))
    p = 2  # centre pixel; taps 6, 7, 8 are x - 1, x, x + 1
    K[p, 6], K[p, 7], K[p, 8] = 0.25, 0.5, 0.25
    I = ref.apply(D, K, "plain")
    assert I[0, p, 0] == pytest.approx(3.0, rel=1e-14)
    K[p, 7] = -0.5  # S = 0: the floor divides by 0.001
    I = ref.apply(D, K, "plain")
    assert I[0, p, 0] == pytest.approx((0.25 * 2 - 0.5 * 3 + 0.25 * 4) / 0.001, rel=1e-12)
    K[p] = 0.0
    K[p, 7], K[p, 8] = 1.0, 10.0  # |K| >= 10 -> 0.001
    I = ref.apply(D, K, "plain")
    assert I[0, p, 0] == pytest.approx((3.0 + 0.001 * 4.0) / 1.001, rel=1e-14)


@pytest.mark.parametrize("w,h", SIZES)
def test_apply_backward_softmax(w, h):
    rng = np.random.default_rng(8)
    D = _image(rng, w, h)
    G = _image(rng, w, h)
    K = rng.normal(0.0, 2.0, (w * h, 16))
    K[::7, 3] = 40.0  # large logits are fine: max-subtracted, no tap replacement in softmax
    ana = ref.apply_backward(G, D, K, "softmax")
    num = _apply_fd(D, K, G, "softmax", 1e-6)
    assert np.all(ana[:, 15] == 0.0)
    assert _rel(ana, num) < 1e-6


@pytest.mark.parametrize("w,h", SIZES)
def test_apply_backward_blend(w, h):
    """apply 2: the softmax filter times the band gain sigmoid(K_15); K_15 gets a gradient."""
    rng = np.random.default_rng(9)
    D = _image(rng, w, h)
    G = _image(rng, w, h)
    K = rng.normal(0.0, 2.0, (w * h, 16))
    ana = ref.apply_backward(G, D, K, "blend")
    num = _apply_fd(D, K, G, "blend", 1e-6)
    assert np.abs(ana[:, 15]).max() > 1e-3
    assert _rel(ana, num) < 1e-6
    K[:, 15] = 40.0  # gain 1: the softmax filter
    np.testing.assert_allclose(ref.apply(D, K, "blend"), ref.apply(D, K, "softmax"), atol=1e-12)


# --------------------------------------------------------------------------------- MLP


def _signs(acts):
    return [np.signbit(z) for z in acts.z[1:]]


def test_mlp_backward_every_used_weight():
    rng = np.random.default_rng(9)
    F = rng.uniform(0.0, 1.0, (11, 64))  # features are luminances of |D|: non-negative
    W = ref.xavier_init()
    dK = rng.normal(size=(11, 16))
    _, acts = ref.mlp_forward(F, W)
    ana = ref.mlp_backward(dK, acts, W)
    assert np.all(ana[6, 16:] == 0.0)
    base = _signs(acts)
    eps = 1e-6
    E = float(np.sum(np.abs(dK * ref.mlp_forward(F, W)[0])))  # the scale of E's rounding
    num = np.zeros_like(W)
    crossed = np.zeros(W.shape, dtype=bool)
    for l, o, c in zip(*np.nonzero(ref.USED), strict=True):
        vals = []
        for s in (eps, -eps):
            Wp = W.copy()
            Wp[l, o, c] += s
            K, a = ref.mlp_forward(F, Wp)
            vals.append(np.sum(dK * K))
            # a leaky ReLU kink crossed inside [w - eps, w + eps] makes the FD meaningless
            crossed[l, o, c] |= any(np.any(x != y) for x, y in zip(_signs(a), base, strict=True))
        num[l, o, c] = (vals[0] - vals[1]) / (2 * eps)
    check = ref.USED & ~crossed
    assert crossed.sum() < 0.01 * ref.USED.sum()
    # K is linear in each single weight inside one piece, so the FD is exact up to rounding
    # of E, whose terms are larger than E (numpy 2.4's sums left 1.03e-6 relative error on the
    # smallest entries, past the 1e-6 this test had)
    _assert_fd_close(ana[check], num[check], E, eps)


# -------------------------------------------------------------------------------- loss


@pytest.mark.parametrize("kind", ["smape", "l2", "l1"])
@pytest.mark.parametrize("w,h", SIZES)
def test_loss_gradient(kind, w, h):
    rng = np.random.default_rng(10)
    R = _image(rng, w, h)
    # o = r + offset with |offset| >= 0.05 (l1/smape kink at o = r), and |o| >= 0.05 (smape's
    # |o| at 0): move any o that landed near 0 further out, keeping its side of r
    off = rng.uniform(0.05, 0.5, R.shape) * rng.choice([-1.0, 1.0], R.shape)
    O = R + off
    near0 = np.abs(O) < 0.05
    O[near0] += 0.1 * np.sign(off[near0])
    assert np.min(np.abs(O - R)) >= 0.05 and np.min(np.abs(O)) >= 0.05
    E, grad = ref.loss(O, R, kind)
    eps = 1e-6
    num = np.zeros_like(O)
    for idx in np.ndindex(O.shape):
        op, om = O.copy(), O.copy()
        op[idx] += eps
        om[idx] -= eps
        num[idx] = (ref.loss(op, R, kind)[0] - ref.loss(om, R, kind)[0]) / (2 * eps)
    _assert_fd_close(grad, num, E, eps)


def test_loss_values_by_hand():
    O = np.array([[[1.0, 0.5, -1.0], [0.2, 0.2, 0.2]]])
    R = np.array([[[0.0, 0.5, 1.0], [0.1, 0.3, 0.2]]])
    E, g = ref.loss(O, R, "smape")
    expect = (1 / 1.001 + 0 + 2 / 2.001 + 0.1 / 0.301 + 0.1 / 0.501 + 0) / 2
    assert E == pytest.approx(expect, rel=1e-14)
    assert g[0, 0, 1] == 0.0 and g[0, 1, 2] == 0.0  # o = r: sign(0) = 0
    E, g = ref.loss(O, R, "l2")
    assert E == pytest.approx((1 + 0 + 4 + 0.01 + 0.01 + 0) / 2, rel=1e-14)
    np.testing.assert_allclose(g, (O - R), rtol=1e-15)  # 2 (o - r) / N with N = 2
    E, g = ref.loss(O, R, "l1")
    assert E == pytest.approx((1 + 0 + 2 + 0.1 + 0.1 + 0) / 2, rel=1e-14)
    np.testing.assert_array_equal(g, np.sign(O - R) / 2)


# ------------------------------------------------------------------- whole forward/backward


def _regime(cache, R):
    """Everything whose change would put a kink between the two FD evaluations."""
    parts = []
    for i, acts in enumerate(cache.acts):
        parts += _signs(acts)
        w, bad = ref.plain_weights(cache.K[i])
        parts += [bad, w.sum(axis=1) > ref.S_FLOOR]
    parts += [np.signbit(cache.O[0] - R), np.signbit(cache.O[0])]
    return parts


def _trained_like_weights():
    """Xavier, but with positive last-layer rows: plain kernels then sum to S well above the
    0.001 floor on most pixels, as after training (random init puts S ~ 0 everywhere)."""
    W = ref.xavier_init()
    W[6, :15] = np.abs(W[6, :15])
    return W


@pytest.mark.parametrize(
    "w,h,levels,mode,kind",
    [
        (37, 23, 3, "plain", "smape"),
        (13, 9, 4, "softmax", "l2"),
        (13, 9, 2, "plain", "l1"),
        (13, 9, 3, "softmax", "smape"),
    ],
)
def test_forward_backward_against_finite_differences(w, h, levels, mode, kind):
    rng = np.random.default_rng(11)
    R = _image(rng, w, h, 0.1, 1.0)
    X = R + 0.1 * rng.standard_normal(R.shape)
    W = _trained_like_weights() if mode == "plain" else ref.xavier_init()
    E, O, cache = ref.forward(X, R, W, levels, mode, kind)
    assert np.isfinite(E) and O.shape == (h, w, 3)
    ana = ref.backward(cache)
    assert np.all(ana[6, 16:] == 0.0)
    base = _regime(cache, R)

    def fd(direction, eps):
        vals, same = [], True
        for s in (eps, -eps):
            e, _, c = ref.forward(X, R, W + s * direction, levels, mode, kind)
            vals.append(e)
            same &= all(np.array_equal(a, b) for a, b in zip(_regime(c, R), base, strict=True))
        return (vals[0] - vals[1]) / (2 * eps), same

    # the largest entry and a stratified sample of single weights: 10 per layer
    eps = 1e-6
    picks = [np.unravel_index(np.argmax(np.abs(ana)), W.shape)]
    for layer in range(7):
        rows = 16 if layer == 6 else 64
        for j in rng.choice(rows * 64, 10, replace=False):
            picks.append((layer, j // 64, j % 64))
    _check_fd(lambda d: fd(d, eps), picks, ana, ref.USED, E, eps, rng)


def _check_fd(fd, picks, ana, used, E, eps, rng):
    """dE/dW (ana) against central differences fd(direction) -> (value, same kink regime):
    the single weights `picks`, then random unit directions over the `used` weights. FD steps
    that crossed a kink (rare at eps = 1e-6) say nothing and are left out; moving every weight
    moves every pre-activation, so some directions cross one: two of four must not."""
    a, n = [], []
    for idx in picks:
        e = np.zeros_like(ana)
        e[idx] = 1.0
        num, same = fd(e)
        if same:
            a.append(ana[idx])
            n.append(num)
    assert len(a) >= 0.9 * len(picks)
    _assert_fd_close(a, n, E, eps)
    checked = 0
    for _ in range(4):
        v = rng.normal(size=ana.shape) * used
        v /= np.linalg.norm(v)
        num, same = fd(v)
        if same:
            _assert_fd_close(np.sum(ana * v), num, E, eps)
            checked += 1
    assert checked >= 2


# ------------------------------------------------------------------------ arch 1 (ctx)

NOISE = (5e6, 400.0)  # cnngenin's (a, b): sigma ~ 0.034 at level 0 for mid-grey


def _noisy_pair(rng, w, h, scale=0.05):
    R = _image(rng, w, h, 0.1, 1.0)
    return R + scale * rng.standard_normal(R.shape), R


def _ctx_weights(rng):
    """Uniform +-sqrt(6/64) (He) on every weight arch 1 uses (W_6 rows 0..31): activations and
    K stay O(1) through the leaky layers, so the softmaxes and gains are far from saturated."""
    return rng.uniform(-1.0, 1.0, (7, 64, 64)) * np.sqrt(6.0 / 64.0) * ref.USED_CTX


def test_opponent_basis_is_orthonormal():
    P = ref.OPPONENT
    np.testing.assert_allclose(P @ P.T, np.eye(3), rtol=0, atol=1e-15)
    np.testing.assert_allclose(P[0], np.full(3, 1 / np.sqrt(3)), rtol=1e-15)
    np.testing.assert_allclose(P[1] * np.sqrt(2), [1, 0, -1], rtol=1e-15)
    np.testing.assert_allclose(P[2] * np.sqrt(6), [1, -2, 1], rtol=1e-15)


@pytest.mark.parametrize("w,h", SIZES + [(13, 11)])
def test_apply_ctx_backward(w, h):
    """apply_ctx_backward is the exact adjoint: every one of the 32 columns of K (taps, and the
    gains 15 and 31) against central differences of apply_ctx."""
    rng = np.random.default_rng(15)
    D = _image(rng, w, h)
    G = _image(rng, w, h)
    K = rng.normal(0.0, 2.0, (w * h, 32))
    ana = ref.apply_ctx_backward(G, D, K)
    assert ana.shape == (w * h, 32)
    num = _filter_fd(lambda k: ref.apply_ctx(D, k), K, G, 1e-6)
    assert np.abs(ana[:, 15]).max() > 1e-3 and np.abs(ana[:, 31]).max() > 1e-3
    assert _rel(ana, num) < 1e-6


@pytest.mark.parametrize("w,h", SIZES)
def test_apply_ctx_backward_with_matches(w, h):
    """Arch 2's filter (the star and 12 matched taps, block_match's) and its exact adjoint:
    all 56 columns of K against central differences of apply_ctx with the matches."""
    rng = np.random.default_rng(16)
    D = _image(rng, w, h)
    G = _image(rng, w, h)
    M = np.dstack([_image(rng, w, h), np.full((h, w), 1e-3)])
    idx, _ = ref.block_match(M, 0.7)
    K = rng.normal(0.0, 2.0, (w * h, ref.N_OUT_NL))
    ana = ref.apply_ctx_backward(G, D, K, idx)
    assert ana.shape == (w * h, 56)
    num = _filter_fd(lambda k: ref.apply_ctx(D, k, idx), K, G, 1e-6)
    assert np.abs(ana[:, 15:27]).max() > 1e-3 and np.abs(ana[:, 27]).max() > 1e-3
    assert _rel(ana, num) < 1e-6


def test_apply_nl_without_matched_taps_is_arch1():
    """With the matched taps' logits far below the star's, arch 2's filter is arch 1's."""
    rng = np.random.default_rng(17)
    D = _image(rng, 9, 7)
    M = np.dstack([_image(rng, 9, 7), np.full((7, 9), 1e-3)])
    idx, _ = ref.block_match(M, 0.7)
    K1 = rng.normal(0.0, 1.0, (63, 32))
    K2 = np.full((63, ref.N_OUT_NL), -80.0)
    for g in range(2):  # per group: the star's 15 logits and the gain move over
        K2[:, 28 * g : 28 * g + 15] = K1[:, 16 * g : 16 * g + 15]
        K2[:, 28 * g + 27] = K1[:, 16 * g + 15]
    np.testing.assert_allclose(ref.apply_ctx(D, K2, idx), ref.apply_ctx(D, K1), atol=1e-12)


@pytest.mark.parametrize("w,h", SIZES + [(13, 11)])
def test_apply_ctx_centre_tap_is_the_identity(w, h):
    """One-hot softmaxes on the centre tap (k = 7 and 16 + 7) and gains 1 give Io = P D, and
    P^T P = I returns D; with the chroma gain 0 only D's projection on the luma axis remains."""
    rng = np.random.default_rng(16)
    D = _image(rng, w, h)
    K = np.zeros((w * h, 32))
    K[:, [7, 15, 23, 31]] = 60.0  # e^-60 leaks below float64 resolution
    np.testing.assert_allclose(ref.apply_ctx(D, K), D, rtol=0, atol=1e-15)
    K[:, 31] = -60.0
    grey = np.repeat(D.mean(axis=2, keepdims=True), 3, axis=2)
    np.testing.assert_allclose(ref.apply_ctx(D, K), grey, rtol=0, atol=1e-15)


def _planes_at(D, var, band, x, y):
    """(s, c) of the spec at pixel (x, y), by hand: scalar maths on one pixel."""
    r, g, b = D[y, x]
    sigma = max(band * np.sqrt(max(var[y, x], 0.0)), 1e-6)
    luma = 0.2627 * r + 0.6780 * g + 0.0593 * b
    s = float(np.sign(luma)) * np.log2(1 + abs(luma) / sigma)
    chroma = np.hypot((r - b) / np.sqrt(2), (r - 2 * g + b) / np.sqrt(6))
    return s, np.log2(1 + chroma / sigma)


def _ctx_features_at(D, var, bands, i, x, y):
    """The 64 features of the spec at pixel (x, y) of level i, by hand (loops)."""
    h, w = D[i].shape[:2]
    hc, wc = D[i + 1].shape[:2]
    f = [1.0]
    for j in range(49):  # 7x7 window, dy-major
        xx, yy = int(ref.mirror(x + j % 7 - 3, w)), int(ref.mirror(y + j // 7 - 3, h))
        f.append(_planes_at(D[i], var[i], bands[i], xx, yy)[0])
    for j in range(9):  # 3x3 around the parent, mirrored in level i+1's size
        xx, yy = int(ref.mirror(x // 2 + j % 3 - 1, wc)), int(ref.mirror(y // 2 + j // 3 - 1, hc))
        f.append(_planes_at(D[i + 1], var[i + 1], bands[i + 1], xx, yy)[0])
    for dx, dy in [(0, -1), (-1, 0), (0, 0), (1, 0), (0, 1)]:
        xx, yy = int(ref.mirror(x + dx, w)), int(ref.mirror(y + dy, h))
        f.append(_planes_at(D[i], var[i], bands[i], xx, yy)[1])
    return np.array(f)


def test_ctx_features_by_hand():
    """forward(arch=1)'s h_0 is the spec's feature vector: checked pixel by pixel at borders and
    odd sizes (13x11 -> 7x6 -> 4x3 -> 2x2: the parent x div 2 + 1 of x = 12 mirrors 7 -> 6),
    and at the last level, whose parent plane needs D_L (one level below the filtered ones)."""
    rng = np.random.default_rng(17)
    w, h, levels = 13, 11, 3
    X, R = _noisy_pair(rng, w, h)
    bands = ref.band_noise_mc(levels + 1)
    _, _, cache = ref.forward(X, R, _ctx_weights(rng), levels, "blend", "l2", NOISE, bands, 1)
    _, D = ref.pyramid(X, levels + 1)
    var = [ref.noise_variance(X, *NOISE)[..., None]]
    for _ in range(levels):
        var.append(ref.sub(var[-1]))
    var = [v[..., 0] for v in var]
    pixels = {0: [(0, 0), (12, 10), (12, 0), (5, 4), (1, 9), (11, 3)], 1: [(6, 5), (3, 0)],
              2: [(3, 2), (0, 0), (2, 1)]}  # fmt: skip
    for i, xys in pixels.items():
        wi = D[i].shape[1]
        for x, y in xys:
            got = cache.acts[i].h[0][x + y * wi]
            np.testing.assert_allclose(got, _ctx_features_at(D, var, bands, i, x, y), rtol=1e-14)
    # signed luma: negative detail gives negative s, zero detail s = c = 0
    Dz = np.zeros((1, 3, 3))
    Dz[0, 0] = [-0.1, -0.2, 0.0]
    Dz[0, 2] = [0.2, 0.0, 0.0]
    s, c = ref.ctx_planes(Dz, np.full((1, 3), 1e-3), 1.0)
    assert s[0, 0] < 0 < s[0, 2] and s[0, 1] == 0.0 and c[0, 1] == 0.0 and c[0, 2] > 0


def test_arch1_needs_noise_and_blend():
    rng = np.random.default_rng(18)
    X, R = _noisy_pair(rng, 5, 4)
    W = _ctx_weights(rng)
    with pytest.raises(ValueError, match="arch 1"):
        ref.forward(X, R, W, 2, "blend", arch=1)  # no noise
    with pytest.raises(ValueError, match="arch 1"):
        ref.forward(X, R, W, 2, "softmax", noise=NOISE, arch=1)
    with pytest.raises(ValueError, match="arch 2"):
        ref.forward(X, R, W, 2, "blend", arch=2)  # no noise
    with pytest.raises(ValueError, match="arch"):
        ref.forward(X, R, W, 2, "blend", noise=NOISE, arch=3)
    # the default bands are those of L + 1 levels (band_noise_mc)
    E, _, _ = ref.forward(X, R, W, 2, "blend", noise=NOISE, arch=1)
    assert E == ref.forward(X, R, W, 2, "blend", noise=NOISE, bands=ref.band_noise_mc(3),
                            arch=1)[0]  # fmt: skip


@pytest.mark.parametrize("kind,arch", [("l2", 1), ("l1", 1), ("l2", 2), ("l1", 2)])
def test_forward_backward_ctx_against_finite_differences(kind, arch):
    """dE/dW of backward(arch 1 and 2) against central differences of forward's E: 10 single
    weights of every layer (of W_6: 5 of the luma rows and 5 of the chroma rows), the largest
    entry and random directions over all used weights."""
    rng = np.random.default_rng(19)
    w, h, levels = 13, 11, 3
    X, R = _noisy_pair(rng, w, h)
    used = ref.USED_CTX if arch == 1 else ref.USED_NL
    W = _ctx_weights(rng) * used
    bands = ref.band_noise_mc(levels + 1)
    nout = used[6].any(axis=1).sum()  # K's values a pixel: 32, 56

    def run(Wx):
        return ref.forward(X, R, Wx, levels, "blend", kind, NOISE, bands, arch=arch)

    E, O, cache = run(W)
    assert np.isfinite(E) and O.shape == (h, w, 3) and cache.K[0].shape == (w * h, nout)
    ana = ref.backward(cache)
    assert np.all(ana[6, nout:] == 0.0) and np.abs(ana[6, nout // 2:nout]).max() > 1e-6
    base = _regime(cache, R)
    eps = 1e-6

    def fd(direction):
        vals, same = [], True
        for s in (eps, -eps):
            e, _, c = run(W + s * direction)
            vals.append(e)
            same &= all(np.array_equal(a, b) for a, b in zip(_regime(c, R), base, strict=True))
        return (vals[0] - vals[1]) / (2 * eps), same

    picks = [np.unravel_index(np.argmax(np.abs(ana)), W.shape)]
    for layer in range(6):
        picks += [(layer, j // 64, j % 64) for j in rng.choice(64 * 64, 10, replace=False)]
    for first in (0, nout // 2):  # luma rows, chroma rows of W_6
        picks += [(6, first + j // 64, j % 64)
                  for j in rng.choice(nout // 2 * 64, 5, replace=False)]
    _check_fd(fd, picks, ana, used, E, eps, rng)


def test_nl_features_and_taps():
    """forward(arch=2)'s h_0: the bias, s on the 37-position disc, the parent's 3x3 and the
    chroma star as arch 1 orders them, then the 12 match features of block_match on the
    level's image and noise variance; the filter's matched taps are block_match's."""
    rng = np.random.default_rng(20)
    w, h, levels = 13, 11, 2
    X, R = _noisy_pair(rng, w, h)
    bands = ref.band_noise_mc(levels + 1)
    W = _ctx_weights(rng) * ref.USED_NL
    _, _, c1 = ref.forward(X, R, W, levels, "blend", "l2", NOISE, bands, arch=1)
    _, _, c2 = ref.forward(X, R, W, levels, "blend", "l2", NOISE, bands, arch=2)
    assert len(ref.CTX_DISC) == 37 and np.all(np.abs(ref.CTX_DISC).sum(1) <= 4)
    M, _ = ref.pyramid(X, levels + 1)
    var = ref.noise_variance(X, *NOISE)[..., None]
    for i in range(levels):
        f1, f2 = c1.acts[i].h[0], c2.acts[i].h[0]
        keep = [1 + j for j, o in enumerate(ref.CTX_WINDOW) if np.abs(o).sum() < 5]
        np.testing.assert_array_equal(f2[:, :38], f1[:, [0] + keep])
        np.testing.assert_array_equal(f2[:, 38:52], f1[:, 50:64])
        idx, dist = ref.block_match(np.concatenate([M[i], var], axis=-1), bands[i])
        np.testing.assert_array_equal(f2[:, 52:], dist.reshape(-1, 12))
        np.testing.assert_array_equal(c2.matches[i][0], idx)
        var = ref.sub(var)


@pytest.mark.parametrize(
    "args,expect",
    [
        (dict(apply_mode="blend", loss="l1", noise=NOISE, bands=[0.9, 0.2, 0.1]),
         (0.643653813425566, 11.413726388655427, 0.04307637403921328)),
        (dict(apply_mode="plain", loss="smape"),
         (2.3709418181871786, 177.82522942225296, 19.30985803412573)),
    ],
)  # fmt: skip
def test_arch0_is_the_default_and_unchanged(args, expect):
    """arch 0 is today's network: arch=0 is the default, bit for bit, and E, |O| and |dE/dW| are
    the values the reference gave before arch 1 existed (pinned)."""
    rng = np.random.default_rng(14)
    X, R = _noisy_pair(rng, 13, 11)
    W = ref.xavier_init()
    E, O, cache = ref.forward(X, R, W, 3, **args)
    E0, O0, cache0 = ref.forward(X, R, W, 3, **args, arch=0)
    dW = ref.backward(cache)
    assert E == E0 and np.array_equal(O, O0) and np.array_equal(dW, ref.backward(cache0))
    assert cache.K[0].shape[1] == 16 and np.all(dW[6, 16:] == 0.0)
    got = (E, float(np.linalg.norm(O)), float(np.linalg.norm(dW)))
    np.testing.assert_allclose(got, expect, rtol=1e-10)


# ------------------------------------------------------------------------- init and Adam


def test_mrand_by_hand():
    # seed 1: s ^= s << 13 -> 8193 (bits 13, 0); s ^= s >> 17 -> 8193;
    # s ^= s << 5 -> bits 18, 13, 5, 0 = 270369; value (270369 >> 8) 2^-24 = 1056 / 2^24
    s, r = ref.mrand(1)
    assert int(s) == 270369 and float(r) == 1056 / 2**24
    # seed 0 is a fixed point of xorshift
    s, r = ref.mrand(0)
    assert int(s) == 0 and float(r) == 0.0
    # the states of the first Xavier seeds (i * 133700013 mod 2^32), vectorised
    s, r = ref.mrand(np.array([133700013, 267400026], dtype=np.uint32))
    assert s.dtype == np.uint32 and s.tolist() == [2642068139, 989169015]
    np.testing.assert_array_equal(r, [(2642068139 >> 8) / 2**24, (989169015 >> 8) / 2**24])
    # top bit survives, wrap-around is mod 2^32
    s, _ = ref.mrand(np.array([0xFFFFFFFF], dtype=np.uint32))
    expect = 0xFFFFFFFF
    expect ^= (expect << 13) & 0xFFFFFFFF
    expect ^= expect >> 17
    expect ^= (expect << 5) & 0xFFFFFFFF
    assert int(s[0]) == expect


def test_xavier_init():
    W = ref.xavier_init()
    assert W.shape == (7, 64, 64) and W.dtype == np.float64
    np.testing.assert_array_equal(W, ref.xavier_init())
    assert np.all(W[6, 16:] == 0.0)
    used = W[ref.USED]
    assert used.size == 25600
    bound = np.sqrt(6 / 128)
    assert np.all(np.abs(used) <= bound) and used.min() < -0.95 * bound
    assert used.max() > 0.95 * bound and abs(used.mean()) < 0.01
    # index 0: seed 0 -> value 0 -> +bound; index 1: state 2642068139 -> (2642068139 >> 8) 2^-24
    assert W[0, 0, 0] == pytest.approx(bound, rel=1e-15)
    assert W[0, 0, 1] == pytest.approx((0.5 - (2642068139 >> 8) / 2**24) * 2 * bound, rel=1e-15)
    assert W[0, 0, 2] == pytest.approx((0.5 - (989169015 >> 8) / 2**24) * 2 * bound, rel=1e-15)


def _adam_manual(w, m, v, g, t, alpha, b1, b2, eps, L2, clip):
    g = g.copy()
    norm = np.sqrt(np.sum(g[ref.USED] ** 2))
    if norm > clip:
        g *= clip / norm
    g = g + 2 * L2 * w
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    w = w - alpha * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    return w * ref.USED, m * ref.USED, v * ref.USED


def test_adam_step_clipping_l2_and_skip():
    rng = np.random.default_rng(12)
    w = ref.xavier_init()
    m = rng.normal(size=w.shape) * 1e-2 * ref.USED
    v = rng.uniform(0, 1e-3, w.shape) * ref.USED
    g = rng.normal(size=w.shape) * ref.USED  # ||g|| ~ 160 > gradclip
    hp = dict(alpha=0.003, beta1=0.9, beta2=0.999, eps=1e-4, L2=0.01, gradclip=2.0)
    w1, m1, v1, skipped = ref.adam_step(w, m, v, g, 3, **hp)
    assert not skipped
    expect = _adam_manual(w, m, v, g, 3, 0.003, 0.9, 0.999, 1e-4, 0.01, 2.0)
    for got, want in zip((w1, m1, v1), expect, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-16)
    # clipping to the norm is the same as feeding the rescaled gradient unclipped
    g_small = g * (2.0 / np.linalg.norm(g))
    hp_noclip = dict(hp, gradclip=1e9)
    w2, _, _, _ = ref.adam_step(w, m, v, g_small, 3, **hp_noclip)
    np.testing.assert_allclose(w1, w2, rtol=1e-13, atol=1e-16)
    # the first step from zero moments moves every weight by alpha * g/(|g| + eps)
    z = np.zeros_like(w)
    w3, _, _, _ = ref.adam_step(w, z, z, g, 1, alpha=0.01, L2=0.0, gradclip=1e9)
    np.testing.assert_allclose(w - w3, 0.01 * g / (np.abs(g) + 1e-4) * ref.USED, atol=1e-15)
    assert np.all(w3[6, 16:] == 0.0)
    # a non-finite gradient anywhere skips the whole step
    g_bad = g.copy()
    g_bad[2, 3, 4] = np.nan
    w4, m4, v4, skipped = ref.adam_step(w, m, v, g_bad, 3, **hp)
    assert skipped and w4 is w and m4 is m and v4 is v
    g_bad[2, 3, 4] = np.inf
    assert ref.adam_step(w, m, v, g_bad, 3, **hp)[3]


def test_gradcheck_rel():
    a = np.array([1.0, -2.0, 0.0, 1e-9, 0.0])
    n = np.array([1.1, -2.0, 0.0, 0.0, 1e-6])
    rel = ref.gradcheck_rel(a, n)
    np.testing.assert_allclose(rel, [0.1 / 1.1, 0.0, 0.0, 1e-9 / 2e-3, 1e-6 / 2e-3])


# ----------------------------------------------------------------------------- training


def test_adam_training_lowers_the_loss():
    rng = np.random.default_rng(13)
    yy, xx = np.mgrid[0:32, 0:32] / 32.0
    clean = np.stack(
        [0.5 + 0.3 * np.sin(6 * xx), 0.4 + 0.3 * np.cos(5 * yy), 0.3 + 0.2 * xx * yy], axis=-1
    )
    noisy = clean + 0.05 * rng.standard_normal(clean.shape)
    noisy_loss, _ = ref.loss(noisy, clean, "smape")
    W = ref.xavier_init()
    m = np.zeros_like(W)
    v = np.zeros_like(W)
    losses = []
    for t in range(1, 121):
        E, _, cache = ref.forward(noisy, clean, W, levels=2)
        losses.append(E)
        W, m, v, skipped = ref.adam_step(
            W, m, v, ref.backward(cache), t, alpha=0.003, L2=0.0, gradclip=1.0
        )
        assert not skipped
    assert np.all(W[6, 16:] == 0.0)
    assert losses[-1] < 0.2 * losses[0]
    assert losses[-1] < 0.5 * noisy_loss  # it denoises, not just undoes the random init
