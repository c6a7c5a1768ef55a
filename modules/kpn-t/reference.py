"""float64 numpy reference of the kpn-t kernel-predicting denoiser, forward and backward.

Every GPU kernel of kpn-t is checked against the function of the same step here. Conventions:
images are arrays (H, W, 3) indexed [y, x] (rgb; alpha is not part of the maths); pixel p of a
level is p = x + y*W (row-major flattening of (H, W)); the weights are one array W (7, 64, 64)
with W[l, o, c] = stored w[4096 l + 64 o + c] (row o = output neuron); matrix 6 uses rows 0..15
only (``USED``; arch 1: rows 0..31, ``USED_CTX``), the other rows are unused and kept 0.

Borders. Every out-of-range read uses the mirrored-repeat index
    mirror(i, n) = j if j < n else 2n - 1 - j,   j = i mod 2n      (-1 -> 0, n -> n - 1).

Pyramid (L = levels). M_0 = X,
    M_{i+1}(q) = sum_{dx,dy = -2..2} b[dx] b[dy] M_i(2q + (dx, dy)),   b = (1, 4, 6, 4, 1)/16,
of size ceil(W_i/2) x ceil(H_i/2);  D_i = M_i - U(M_{i+1}) for i < L.
U (upsample by 2, separable in x and y), for a coarse row C of length n_c = ceil(n/2):
    U(C)[2k] = C[k],   U(C)[2k+1] = (C[k] + C[k+1]) / 2,   C[n_c] := C[n_c - 1].
Its transpose U^T gathers G[2k] + G[2k+1]/2 + G[2k-1]/2 into coarse k (with the clamped
C[n_c] term folded back into k = n_c - 1).

Features of pixel p of a level with detail D (64 per pixel, c = 0..63):
    f_c(p) = Y(|D(p + (c div 8 - 4, c mod 8 - 4))|),   offsets (x, y),
    Y(v) = 0.2627 v_r + 0.6780 v_g + 0.0593 v_b  (Rec.2020 luminance of per-channel |.|).

MLP (no biases), leaky(z) = z if z > 0 else 0.001 z:
    h_0 = f;  z_{l+1} = W_l h_l,  h_{l+1} = leaky(z_{l+1})  (l = 0..5);  K = W_6[0:16] h_6.
Backward for an upstream dK (N, 16): g_6 = dK,  dW_6[0:16] = g^T h_6;  then for l = 5..0:
    dh_{l+1} = g_{l+1} W_{l+1},  g_l = leaky'(z_{l+1}) * dh_{l+1},  dW_l = g_l^T h_l,
with leaky'(z) = 1 if z > 0 else 0.001 (sums over pixels; no gradient to the features).

Filter (apply) with the 15-tap star T_k (dx, dy), k = 0..14 (``TAPS``); K_15 is unused:
  plain:   w_k = K_k, except w_k = 0.001 where K_k is non-finite or |K_k| >= 10 (such taps get
           zero gradient);  S = sum_k w_k;  I(p) = sum_k w_k D(p + T_k) / max(S, 0.001).
           dI/dw_k = (D(p + T_k) - I(p)) / S if S > 0.001, else D(p + T_k) / 0.001.
  softmax: s = softmax(K_0..14) (max-subtracted);  I(p) = sum_k s_k D(p + T_k);
           dI/dK_k = s_k (D(p + T_k) - I(p)).  No tap replacement in this mode.

Reconstruction:  O_{L-1} = U(M_L) + I_{L-1},  O_i = U(O_{i+1}) + I_i;  output O_0.
Adjoint:  dO_0 given;  dI_i = dO_i,  dO_{i+1} = U^T dO_i;  dM_L = U^T dO_{L-1}.
With identity filters (I_i = D_i) the reconstruction returns X (Laplacian pyramid).

Loss over the N = W*H pixels of O_0 against the reference R (mean over pixels, sum over rgb):
    E = (1/N) sum_{p,c} l(o, r);  smape l = |o-r| / (|o|+|r|+1e-3),  l2 (o-r)^2,  l1 |o-r|;
    dE/do = (1/N) l'(o):  smape  sign(o-r)/den - |o-r| sign(o)/den^2,  l2 2(o-r),  l1 sign(o-r)
(sign(0) = 0). The training gradient is dE/dW = sum over all L levels and their pixels.

Adam (on used weights only): g *= gradclip/||g|| if ||g||_2 > gradclip;  g += 2 L2 w;
    m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  w -= alpha (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps)
and the whole step is skipped (and reported) when any element of g is non-finite.

Init: vkdt's xorshift mrand (s ^= s<<13; s ^= s>>17; s ^= s<<5, mod 2^32; value (s>>8) 2^-24)
with seed s_i = i * 133700013 mod 2^32 for stored index i; w_i = (0.5 - value) 2 sqrt(6/128);
rows 16..63 of matrix 6 are then zeroed. (A float32 GPU computes the same values up to the
last bits of w; mrand's value itself is exact in float32.)

Arch 1 ("ctx", README "Beyond this architecture"; needs noise (a, b) and apply "blend"): one
pyramid level deeper, to M_{L+1}, so that D_L exists for the features (reconstruction unchanged).
Per level i = 0..L, with sigma_i = max(band_i sqrt(max(var_i, 0)), 1e-6), band_i of L + 1 levels:
    s_i = sign(y) log2(1 + |y| / sigma_i),  y = dot(D_i, LUMA)      (signed luma SNR)
    c_i = log2(1 + ||C D_i||_2 / sigma_i),  C = rows 1, 2 of P      (chroma SNR)
The 64 features of pixel (x, y) at level i < L (``ctx_features``): c = 0 the constant 1;
c = 1..49: s_i((x, y) + (j mod 7 - 3, j div 7 - 3)), j = c - 1; c = 50..58:
s_{i+1}((x div 2, y div 2) + (j mod 3 - 1, j div 3 - 1)), j = c - 50, mirrored in level i+1's
size; c = 59..63: c_i((x, y) + o), o = (0,-1), (-1,0), (0,0), (1,0), (0,1).
MLP unchanged but K = W_6[0:32] h_6 (N_OUT_CTX values a pixel).
Filter in the orthonormal opponent basis P (``OPPONENT``), Do(q) = P D(q):
    Io_0 = bY sum_k sY_k Do_0(p + T_k),     sY = softmax(K_0..14),  bY = sigmoid(K_15)
    Io_12 = bC sum_k sC_k Do_12(p + T_k),   sC = softmax(K_16..30), bC = sigmoid(K_31)
    I = P^T Io;  adjoint: dIo = P dI, then each half as "blend" (dK_k = b s_k <dIo, Do_k - F>,
    dK_15 = b (1 - b) <dIo, F>, F = sum_k s_k Do_k).

Arch 2 ("nl", arch 1 with nonlocal taps): per level i < L, ``block_match`` of M_i (its rgb
and the noise variance var_i) gives each pixel its NL_TAPS best-matching offsets m_j and
their features d_j. The 64 features (``ctx_features`` with the distances): c = 0 the
constant 1; c = 1..37: s_i on the 37 positions of the 7x7 window with |dx| + |dy| < 5
(``CTX_DISC``, dy-major); c = 38..46: s_{i+1} around the parent; c = 47..51: c_i on the star;
c = 52..63: d_0..d_11. K = W_6[0:56] h_6 (N_OUT_NL): per group 27 logits (the star's 15
taps, then the matched offsets) and a gain; the filter is arch 1's over those 27 taps
(``apply_ctx`` with the matches). No gradient reaches the matches.
"""

from dataclasses import dataclass, field

import numpy as np

N_LAYERS = 7
WIDTH = 64
N_OUT = 16
N_TAPS = 15
LEAKY_SLOPE = 0.001
LUMA = np.array([0.2627, 0.6780, 0.0593])
BINOMIAL = np.array([1.0, 4.0, 6.0, 4.0, 1.0]) / 16.0
TAP_LIMIT = 10.0  # |K_k| >= TAP_LIMIT (or non-finite) -> tap replaced by TAP_FALLBACK
TAP_FALLBACK = 0.001
S_FLOOR = 0.001  # plain apply divides by max(S, S_FLOOR)
SMAPE_EPS = 1e-3
XAVIER_BOUND = float(np.sqrt(6.0 / 128.0))
SEED_MULT = 133700013

# (dx, dy) of the 15-tap star, k = 0..14
TAPS = np.array(
    [(0, -2)]
    + [(dx, -1) for dx in range(-2, 3)]
    + [(-1, 0), (0, 0), (1, 0)]
    + [(dx, 1) for dx in range(-2, 3)]
    + [(0, 2)],
    dtype=np.int64,
)

# USED[l, o, c]: True for the 25,600 weights that take part in the network
USED = np.ones((N_LAYERS, WIDTH, WIDTH), dtype=bool)
USED[N_LAYERS - 1, N_OUT:, :] = False

FEATURE_OFFSETS = np.array(
    [(c // 8 - 4, c % 8 - 4) for c in range(WIDTH)], dtype=np.int64
)  # (dx, dy) of feature c

# arch 1: K has 32 values a pixel (luma taps and gain, then chroma taps and gain)
N_OUT_CTX = 2 * N_OUT
USED_CTX = np.ones((N_LAYERS, WIDTH, WIDTH), dtype=bool)
USED_CTX[N_LAYERS - 1, N_OUT_CTX:, :] = False

# orthonormal opponent basis, rows: luma, red-blue, green-magenta (P P^T = I)
OPPONENT = np.array(
    [
        np.array([1.0, 1.0, 1.0]) / np.sqrt(3.0),
        np.array([1.0, 0.0, -1.0]) / np.sqrt(2.0),
        np.array([1.0, -2.0, 1.0]) / np.sqrt(6.0),
    ]
)
OPPONENT_AXES = (slice(0, 1), slice(1, 3))  # luma, chroma: the axes K's halves filter

# (dx, dy) of the arch-1 features: 7x7 window (dy-major), 3x3 around the parent, chroma star
CTX_WINDOW = np.array([(j % 7 - 3, j // 7 - 3) for j in range(49)], dtype=np.int64)
CTX_PARENT = np.array([(j % 3 - 1, j // 3 - 1) for j in range(9)], dtype=np.int64)
CTX_CHROMA = np.array([(0, -1), (-1, 0), (0, 0), (1, 0), (0, 1)], dtype=np.int64)
# arch 2: the 7x7 window without the 12 positions nearest its corners
CTX_DISC = CTX_WINDOW[np.abs(CTX_WINDOW).sum(1) < 5]


# --------------------------------------------------------------------------------- sampling


def mirror(i: "int | np.ndarray", n: int) -> np.ndarray:
    """Mirrored-repeat index of i (any integer or integer array) into [0, n)."""
    j = np.mod(i, 2 * n)
    return np.where(j >= n, 2 * n - 1 - j, j)


def level_sizes(width: int, height: int, levels: int) -> list[tuple[int, int]]:
    """(W_i, H_i) of M_0 .. M_levels: each level halves, rounding up."""
    sizes = [(width, height)]
    for _ in range(levels):
        w, h = sizes[-1]
        sizes.append(((w + 1) // 2, (h + 1) // 2))
    return sizes


def _sub_index(n: int) -> np.ndarray:
    """(ceil(n/2), 5): the fine indices 2q + d, d = -2..2, read by coarse q."""
    q = np.arange((n + 1) // 2)
    return mirror(2 * q[:, None] + np.arange(-2, 3)[None, :], n)


def _sub_axis(M: np.ndarray, axis: int) -> np.ndarray:
    taps = np.take(M, _sub_index(M.shape[axis]), axis=axis)  # axis becomes (n_c, 5)
    return np.tensordot(taps, BINOMIAL, axes=([axis + 1], [0]))


def sub(M: np.ndarray) -> np.ndarray:
    """M_{i+1} = 5x5 binomial blur centred on 2q, size ceil(W/2) x ceil(H/2)."""
    return _sub_axis(_sub_axis(np.asarray(M, dtype=np.float64), 1), 0)


def sub_adjoint(G: np.ndarray, W: int, H: int) -> np.ndarray:
    """Transpose of sub: coarse (ceil(H/2), ceil(W/2), ...) -> fine (H, W, ...)."""
    G = np.asarray(G, dtype=np.float64)
    for axis, n in ((0, H), (1, W)):
        nc = G.shape[axis]
        assert nc == (n + 1) // 2, "coarse size must be ceil(n/2)"
        idx = _sub_index(n).ravel()
        g = np.moveaxis(G, axis, 0)
        contrib = (g[:, None] * BINOMIAL.reshape((1, 5) + (1,) * (g.ndim - 1))).reshape(
            (nc * 5,) + g.shape[1:]
        )
        out = np.zeros((n,) + g.shape[1:])
        np.add.at(out, idx, contrib)
        G = np.moveaxis(out, 0, axis)
    return G


def _up_axis(C: np.ndarray, n: int, axis: int) -> np.ndarray:
    c = np.moveaxis(C, axis, 0)
    nc = c.shape[0]
    assert nc == (n + 1) // 2, f"coarse size {nc} is not ceil({n}/2)"
    nxt = np.concatenate([c[1:], c[-1:]], axis=0)  # C[k+1] with C[nc] := C[nc-1]
    out = np.empty((2 * nc,) + c.shape[1:])
    out[0::2] = c
    out[1::2] = 0.5 * (c + nxt)
    return np.moveaxis(out[:n], 0, axis)


def _up_adjoint_axis(G: np.ndarray, nc: int, axis: int) -> np.ndarray:
    g = np.moveaxis(G, axis, 0)
    n = g.shape[0]
    assert nc == (n + 1) // 2, f"coarse size {nc} is not ceil({n}/2)"
    pad = np.zeros((2 * nc,) + g.shape[1:])
    pad[:n] = g
    even, odd = pad[0::2], 0.5 * pad[1::2]
    out = even + odd  # C[k] from fine 2k and 2k+1
    out[1:] += odd[:-1]  # C[k+1] from fine 2k+1
    out[-1] += odd[-1]  # the clamped C[nc] := C[nc-1] term
    return np.moveaxis(out, 0, axis)


def up(C: np.ndarray, W: int, H: int) -> np.ndarray:
    """U: coarse (ceil(H/2), ceil(W/2), ...) -> fine (H, W, ...)."""
    C = np.asarray(C, dtype=np.float64)
    return _up_axis(_up_axis(C, W, 1), H, 0)


def up_adjoint(G: np.ndarray, Wc: int, Hc: int) -> np.ndarray:
    """U^T: fine (H, W, ...) -> coarse (Hc, Wc, ...), the exact transpose of ``up``."""
    G = np.asarray(G, dtype=np.float64)
    return _up_adjoint_axis(_up_adjoint_axis(G, Hc, 0), Wc, 1)


def shifted(a: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """(len(offsets), H, W, ...): a(p + offset) for each (dx, dy) offset, mirrored borders."""
    H, W = a.shape[:2]
    xs = mirror(np.arange(W)[None, :] + offsets[:, 0:1], W)  # (n_off, W)
    ys = mirror(np.arange(H)[None, :] + offsets[:, 1:2], H)  # (n_off, H)
    return a[ys[:, :, None], xs[:, None, :]]


def pyramid(X: np.ndarray, levels: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(M_0..M_L, D_0..D_{L-1}) with D_i = M_i - U(M_{i+1})."""
    M = [np.asarray(X, dtype=np.float64)]
    for _ in range(levels):
        M.append(sub(M[-1]))
    D = [M[i] - up(M[i + 1], M[i].shape[1], M[i].shape[0]) for i in range(levels)]
    return M, D


# --------------------------------------------------------------------------------- features


def luminance_abs(D: np.ndarray) -> np.ndarray:
    """Y(|D|) per pixel, (H, W)."""
    return np.abs(D[..., :3]) @ LUMA


def features(D: np.ndarray, source: np.ndarray | None = None, bias: bool = False) -> np.ndarray:
    """(H*W, 64): f_c(p) = Y(|D(p + (c div 8 - 4, c mod 8 - 4))|), mirrored borders; or, with
    `source` (H, W), the same window of that per-pixel feature source. bias: feature 0 is a
    constant 1 (the noise-normalised variant's bias)."""
    if source is None:
        source = luminance_abs(np.asarray(D, dtype=np.float64))
    f = shifted(np.asarray(source, dtype=np.float64), FEATURE_OFFSETS)  # (64, H, W)
    f = f.reshape(WIDTH, -1).T.copy()
    if bias:
        f[:, 0] = 1.0
    return f


SIGMA_FLOOR = 1e-6


def noise_variance(X: np.ndarray, a: float, b: float) -> np.ndarray:
    """(H, W): the noise variance of each pixel of the noisy X under cnngenin's model,
    (a + 65535 max(Y(X), 0) b) / 65535^2, Y the Rec.2020 luminance."""
    x = np.maximum(np.asarray(X, dtype=np.float64)[..., :3] @ LUMA, 0.0)
    return np.maximum(a + 65535.0 * x * b, 0.0) / 65535.0**2


def band_noise_mc(levels: int, size: int = 1024, seed: int = 0) -> list[float]:
    """Monte-Carlo estimate of the std of D_i for unit white noise at level 0 (the middle half
    of a size x size image), the constants of the noise-normalised features."""
    x = np.random.default_rng(seed).standard_normal((size, size, 1))
    _, D = pyramid(x, levels)
    out = []
    for d in D:
        n = d.shape[0]
        out.append(float(d[n // 4: 3 * n // 4, n // 4: 3 * n // 4].std()))
    return out


def noise_sigma(var: np.ndarray, band: float) -> np.ndarray:
    """(H, W): sigma = max(band sqrt(max(var, 0)), SIGMA_FLOOR), the noise std of a level's
    detail; var is the level's blurred noise variance."""
    return np.maximum(band * np.sqrt(np.maximum(var, 0.0)), SIGMA_FLOOR)


def noise_features(D: np.ndarray, var: np.ndarray, band: float) -> np.ndarray:
    """(H, W): the signal-to-noise feature log2(1 + Y(|D|) / sigma), sigma = noise_sigma."""
    return np.log2(1.0 + luminance_abs(D) / noise_sigma(var, band))


def ctx_planes(D: np.ndarray, var: np.ndarray, band: float) -> tuple[np.ndarray, np.ndarray]:
    """(s, c), each (H, W), arch 1's feature planes of one level, sigma = noise_sigma:
    s = sign(y) log2(1 + |y| / sigma), y = dot(D, LUMA) (signed luma SNR);
    c = log2(1 + ||C D||_2 / sigma), C = rows 1, 2 of OPPONENT (chroma SNR)."""
    rgb = np.asarray(D, dtype=np.float64)[..., :3]
    sigma = noise_sigma(var, band)
    y = rgb @ LUMA
    s = np.sign(y) * np.log2(1.0 + np.abs(y) / sigma)
    chroma = np.linalg.norm(rgb @ OPPONENT[1:].T, axis=-1)
    return s, np.log2(1.0 + chroma / sigma)


def shifted_parent(a: np.ndarray, W: int, H: int, offsets: np.ndarray) -> np.ndarray:
    """(len(offsets), H, W): a((x div 2, y div 2) + offset) for each pixel (x, y) of the finer
    W x H level, a the next coarser level's plane, mirrored in a's size."""
    Hc, Wc = a.shape[:2]
    xs = mirror(np.arange(W)[None, :] // 2 + offsets[:, 0:1], Wc)  # (n_off, W)
    ys = mirror(np.arange(H)[None, :] // 2 + offsets[:, 1:2], Hc)  # (n_off, H)
    return a[ys[:, :, None], xs[:, None, :]]


def ctx_features(s: np.ndarray, s_next: np.ndarray, c: np.ndarray,
                 dist: np.ndarray | None = None) -> np.ndarray:
    """(H*W, 64): arch 1's features of a level from its planes s, c (H, W) and the next coarser
    level's s_next: 1 (bias), s on the 7x7 window (CTX_WINDOW), s_next on the 3x3 around the
    parent (CTX_PARENT), c on the 5-point star (CTX_CHROMA); mirrored borders. With dist
    (arch 2: block_match's features, (H, W, NL_TAPS)) s on CTX_DISC and dist last."""
    H, W = s.shape
    window = CTX_WINDOW if dist is None else CTX_DISC
    f = np.concatenate(
        [
            np.ones((1, H, W)),
            shifted(np.asarray(s, dtype=np.float64), window),
            shifted_parent(np.asarray(s_next, dtype=np.float64), W, H, CTX_PARENT),
            shifted(np.asarray(c, dtype=np.float64), CTX_CHROMA),
        ]
        + ([] if dist is None else [np.asarray(dist, dtype=np.float64).transpose(2, 0, 1)])
    )
    return f.reshape(WIDTH, -1).T.copy()


# ------------------------------------------------------------------------------------- MLP


def leaky(z: np.ndarray) -> np.ndarray:
    return np.where(z > 0, z, LEAKY_SLOPE * z)


def leaky_grad(z: np.ndarray) -> np.ndarray:
    return np.where(z > 0, 1.0, LEAKY_SLOPE)


@dataclass
class MlpActivations:
    """h[0..6] (h[0] = features, h[l] post-activation) and z[1..6] pre-activation (z[0] None)."""

    h: list = field(default_factory=list)
    z: list = field(default_factory=list)


def mlp_forward(
    F: np.ndarray, W: np.ndarray, n_out: int = N_OUT
) -> tuple[np.ndarray, MlpActivations]:
    """K (N, n_out) = W_6[0:n_out] h_6 and the stored activations (n_out 16; arch 1: 32)."""
    W = np.asarray(W, dtype=np.float64)
    acts = MlpActivations(h=[np.asarray(F, dtype=np.float64)], z=[None])
    for layer in range(N_LAYERS - 1):
        z = acts.h[-1] @ W[layer].T
        acts.z.append(z)
        acts.h.append(leaky(z))
    K = acts.h[-1] @ W[N_LAYERS - 1, :n_out].T
    return K, acts


def mlp_backward(dK: np.ndarray, acts: MlpActivations, W: np.ndarray) -> np.ndarray:
    """dW (7, 64, 64) for the upstream dE/dK (N, n_out), n_out = 16 (arch 1: 32); rows
    n_out..63 of layer 6 are 0."""
    W = np.asarray(W, dtype=np.float64)
    dW = np.zeros((N_LAYERS, WIDTH, WIDTH))
    g = np.asarray(dK, dtype=np.float64)
    n_out = g.shape[1]
    last = N_LAYERS - 1
    dW[last, :n_out] = g.T @ acts.h[last]
    dh = g @ W[last, :n_out]
    for layer in range(last - 1, -1, -1):
        g = dh * leaky_grad(acts.z[layer + 1])
        dW[layer] = g.T @ acts.h[layer]
        if layer > 0:
            dh = g @ W[layer]
    return dW


# ----------------------------------------------------------------------------------- apply


def gather_taps(D: np.ndarray) -> np.ndarray:
    """(15, H*W, 3): D(p + T_k) with mirrored borders."""
    t = shifted(np.asarray(D, dtype=np.float64)[..., :3], TAPS)  # (15, H, W, 3)
    return t.reshape(N_TAPS, -1, 3)


def plain_weights(K: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(w (N, 15), replaced mask): non-finite or |K_k| >= 10 taps become 0.001."""
    k = np.asarray(K, dtype=np.float64)[:, :N_TAPS]
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(k) | (np.abs(k) >= TAP_LIMIT)
    return np.where(bad, TAP_FALLBACK, k), bad


def softmax_weights(K: np.ndarray, n: int = N_TAPS) -> np.ndarray:
    """(N, n): softmax(K_0..n-1), max-subtracted."""
    k = np.asarray(K, dtype=np.float64)[:, :n]
    e = np.exp(k - k.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def apply(D: np.ndarray, K: np.ndarray, mode: str = "plain") -> np.ndarray:
    """I (H, W, 3): the predicted 15-tap filter of K (N, 16) applied to the detail D."""
    D = np.asarray(D, dtype=np.float64)
    H, W = D.shape[:2]
    taps = gather_taps(D)
    if mode == "plain":
        w, _ = plain_weights(K)
        S = w.sum(axis=1)
        I = np.einsum("nk,knc->nc", w, taps) / np.maximum(S, S_FLOOR)[:, None]
    elif mode == "softmax":
        I = np.einsum("nk,knc->nc", softmax_weights(K), taps)
    elif mode == "blend":  # softmax taps times the band's gain sigmoid(K_15)
        I = blend_filter(taps, K)
    else:
        raise ValueError(f"unknown apply mode {mode!r} (plain, softmax, blend)")
    return I.reshape(H, W, 3)


def _softmax_gain(K: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(s = softmax(K_0..n-1), beta = sigmoid(K_n)) for n taps."""
    return softmax_weights(K, n), 1.0 / (1.0 + np.exp(-np.asarray(K, dtype=np.float64)[:, n]))


def blend_filter(taps: np.ndarray, K: np.ndarray) -> np.ndarray:
    """(N, C): beta F, F = sum_k s_k taps_k, s = softmax(K_0..n-1), beta = sigmoid(K_n), for
    taps (n, N, C) (apply 2's filter, n = 15; arch 2's, n = 27; C channels)."""
    s, beta = _softmax_gain(K, taps.shape[0])
    return np.einsum("nk,knc->nc", s, taps) * beta[:, None]


def blend_backward(g: np.ndarray, taps: np.ndarray, K: np.ndarray) -> np.ndarray:
    """dE/dK (N, n + 1) of blend_filter for the upstream g (N, C), n = len(taps):
    dK_k = beta s_k <g, taps_k - F>,  dK_n = beta (1 - beta) <g, F>."""
    n = taps.shape[0]
    s, beta = _softmax_gain(K, n)
    F = np.einsum("nk,knc->nc", s, taps)
    dK = np.zeros((g.shape[0], n + 1))
    dK[:, :n] = beta[:, None] * s * np.einsum("nc,knc->nk", g, taps - F[None])
    dK[:, n] = np.einsum("nc,nc->n", g, F) * beta * (1.0 - beta)
    return dK


def apply_backward(dI: np.ndarray, D: np.ndarray, K: np.ndarray, mode: str = "plain") -> np.ndarray:
    """dE/dK (N, 16) for the upstream dE/dI (H, W, 3); column 15 is 0 but for "blend"."""
    D = np.asarray(D, dtype=np.float64)
    H, W = D.shape[:2]
    taps = gather_taps(D)
    g = np.asarray(dI, dtype=np.float64).reshape(H * W, 3)
    I = apply(D, K, mode).reshape(H * W, 3)
    dK = np.zeros((H * W, N_OUT))
    if mode == "plain":
        w, bad = plain_weights(K)
        S = w.sum(axis=1)
        normal = S > S_FLOOR
        # dI/dw_k = (D(p+T_k) - I)/S where S > floor, D(p+T_k)/floor where the floor is active
        centred = np.where(normal[None, :, None], taps - I[None], taps)
        den = np.where(normal, S, S_FLOOR)
        dw = np.einsum("nc,knc->nk", g, centred) / den[:, None]
        dK[:, :N_TAPS] = np.where(bad, 0.0, dw)
    elif mode == "softmax":
        s = softmax_weights(K)
        dK[:, :N_TAPS] = s * np.einsum("nc,knc->nk", g, taps - I[None])
    elif mode == "blend":  # I = beta F, F = sum s_k D_k
        dK = blend_backward(g, taps, K)
    else:
        raise ValueError(f"unknown apply mode {mode!r} (plain, softmax, blend)")
    return dK


def opponent_taps(D: np.ndarray) -> np.ndarray:
    """(15, H*W, 3): Do(p + T_k) = P D(p + T_k), the taps in the opponent basis, mirrored."""
    return gather_taps(D) @ OPPONENT.T


def _halves(K: np.ndarray) -> list[tuple[slice, np.ndarray]]:
    """[(axes of Do, K's columns that filter them)]: luma the first half of K's columns
    (arch 1: K_0..15; arch 2: K_0..27), chroma the second."""
    n = K.shape[1] // 2
    return [(ax, K[:, n * j : n * (j + 1)]) for j, ax in enumerate(OPPONENT_AXES)]


def _opponent_taps_of(D: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
    """The filter's taps in the opponent basis: the star's (arch 1), or with idx (arch 2,
    block_match's) the star's and then the matched ones (nl_taps)."""
    return opponent_taps(D) if idx is None else nl_taps(D, idx) @ OPPONENT.T


def apply_ctx(D: np.ndarray, K: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
    """I (H, W, 3) of arch 1 for K (N, 32): Io = (bY FY, bC FC), blend_filter of the luma axis
    of Do with K_0..15 and of the two chroma axes with K_16..31; I = P^T Io. With idx (arch
    2): the same over 27 taps, the star's and the 12 matched ones, for K (N, 56)."""
    D = np.asarray(D, dtype=np.float64)
    H, W = D.shape[:2]
    taps = _opponent_taps_of(D, idx)
    K = np.asarray(K, dtype=np.float64)
    Io = np.concatenate([blend_filter(taps[..., ax], k) for ax, k in _halves(K)], axis=1)
    return (Io @ OPPONENT).reshape(H, W, 3)


def apply_ctx_backward(dI: np.ndarray, D: np.ndarray, K: np.ndarray,
                       idx: np.ndarray | None = None) -> np.ndarray:
    """dE/dK (N, 32; with idx (N, 56)) of apply_ctx for the upstream dE/dI (H, W, 3): dIo =
    P dI, then blend_backward of each half (its axes of dIo and Do). No gradient reaches the
    matches: they are chosen, not computed from K."""
    D = np.asarray(D, dtype=np.float64)
    H, W = D.shape[:2]
    taps = _opponent_taps_of(D, idx)
    g = np.asarray(dI, dtype=np.float64).reshape(H * W, 3) @ OPPONENT.T
    K = np.asarray(K, dtype=np.float64)
    return np.concatenate(
        [blend_backward(g[:, ax], taps[..., ax], k) for ax, k in _halves(K)], axis=1
    )


# --------------------------------------------------------------------------- reconstruction


def reconstruct(M_L: np.ndarray, I: list[np.ndarray]) -> list[np.ndarray]:
    """[O_0, .., O_{L-1}]: O_{L-1} = U(M_L) + I_{L-1}, O_i = U(O_{i+1}) + I_i."""
    L = len(I)
    O: list = [None] * L
    coarse = np.asarray(M_L, dtype=np.float64)
    for i in range(L - 1, -1, -1):
        H, W = I[i].shape[:2]
        O[i] = up(coarse, W, H) + I[i]
        coarse = O[i]
    return O


def reconstruct_adjoint(dO0: np.ndarray, levels: int) -> tuple[list[np.ndarray], np.ndarray]:
    """([dI_0, .., dI_{L-1}], dM_L) from dE/dO_0: dI_i = dO_i, dO_{i+1} = U^T dO_i."""
    dO = np.asarray(dO0, dtype=np.float64)
    sizes = level_sizes(dO.shape[1], dO.shape[0], levels)
    dI = []
    for i in range(levels):
        dI.append(dO)
        wc, hc = sizes[i + 1]
        dO = up_adjoint(dO, wc, hc)
    return dI, dO


# ------------------------------------------------------------------------------------ loss


def loss(O: np.ndarray, R: np.ndarray, kind: str = "smape") -> tuple[float, np.ndarray]:
    """(E, dE/dO): mean over pixels of the sum over rgb of l(o, r)."""
    o = np.asarray(O, dtype=np.float64)[..., :3]
    r = np.asarray(R, dtype=np.float64)[..., :3]
    n = o.shape[0] * o.shape[1]
    d = o - r
    if kind == "smape":
        den = np.abs(o) + np.abs(r) + SMAPE_EPS
        value = np.abs(d) / den
        grad = np.sign(d) / den - np.abs(d) * np.sign(o) / den**2
    elif kind == "l2":
        value, grad = d * d, 2.0 * d
    elif kind == "l1":
        value, grad = np.abs(d), np.sign(d)
    else:
        raise ValueError(f"unknown loss {kind!r} (smape, l2, l1)")
    return float(value.sum() / n), grad / n


_loss = loss  # forward's keyword ``loss`` shadows the function


# ------------------------------------------------------------------------ one training frame


@dataclass
class Cache:
    """Everything ``backward`` needs from ``forward``."""

    W: np.ndarray
    apply_mode: str
    M: list
    D: list
    K: list
    acts: list
    I: list
    O: list
    dEdO: np.ndarray
    arch: int = 0
    planes: list | None = None  # arch 1 and 2: (s_i, c_i) of levels 0..L
    matches: list | None = None  # arch 2: block_match's (indices, features) of levels 0..L-1


def forward(
    X: np.ndarray,
    R: np.ndarray,
    W: np.ndarray,
    levels: int = 4,
    apply_mode: str = "plain",
    loss: str = "smape",
    noise: tuple[float, float] | None = None,
    bands: list[float] | None = None,
    arch: int = 0,
    match_idx: list | None = None,
) -> tuple[float, np.ndarray, Cache]:
    """(E, O_0, cache) of one training frame: pyramid, features, MLP, apply, reconstruct, loss.
    With `noise` = (a, b) the features are noise-normalised: the noise variance of each pixel
    goes through the same pyramid (sub), level i's feature source is noise_features with
    bands[i] (default: band_noise_mc), and feature 0 is the constant 1.
    arch 1 (needs `noise` and apply_mode "blend"): the pyramid runs to M_{L+1}, level i's
    features are ctx_features of ctx_planes of levels i and i+1 (bands of L + 1 levels, default
    band_noise_mc(L + 1)), K has 32 values a pixel and apply_ctx filters. arch 2: arch 1 with
    block_match's taps and features at each level (K has 56 values a pixel); `match_idx`
    (per level (H, W, NL_TAPS)) replaces block_match's taps (the features stay its), for
    comparing with a float32 device whose ties may fall the other way."""
    if arch not in (0, 1, 2):
        raise ValueError(f"unknown arch {arch!r} (0, 1, 2)")
    if arch and (noise is None or apply_mode != "blend"):
        raise ValueError(f"arch {arch} needs noise (a, b) and apply mode 'blend'")
    X = np.asarray(X, dtype=np.float64)[..., :3]
    W = np.asarray(W, dtype=np.float64)
    deeper = int(arch > 0)
    M, D = pyramid(X, levels + deeper)
    if noise is not None:
        bands = band_noise_mc(levels + deeper) if bands is None else bands
        var = [noise_variance(X, *noise)[..., None]]
        for _ in range(levels):
            var.append(sub(var[-1]))
    planes = matches = None
    if arch:
        planes = [ctx_planes(D[i], var[i][..., 0], bands[i]) for i in range(levels + 1)]
    if arch == 2:
        matches = [block_match(np.concatenate([M[i], var[i]], axis=-1), bands[i])
                   for i in range(levels)]
        if match_idx is not None:
            matches = [(np.asarray(j), m[1]) for j, m in zip(match_idx, matches, strict=True)]
        F = [ctx_features(planes[i][0], planes[i + 1][0], planes[i][1], matches[i][1])
             for i in range(levels)]
    elif arch == 1:
        F = [ctx_features(planes[i][0], planes[i + 1][0], planes[i][1]) for i in range(levels)]
    elif noise is not None:
        source = [noise_features(D[i], var[i][..., 0], bands[i]) for i in range(levels)]
        F = [features(D[i], source[i], bias=True) for i in range(levels)]
    else:
        F = [features(D[i]) for i in range(levels)]
    D = D[:levels]
    K, acts, I = [], [], []
    for i in range(levels):
        k, a = mlp_forward(F[i], W, {0: N_OUT, 1: N_OUT_CTX, 2: N_OUT_NL}[arch])
        K.append(k)
        acts.append(a)
        if arch:
            I.append(apply_ctx(D[i], k, matches[i][0] if matches else None))
        else:
            I.append(apply(D[i], k, apply_mode))
    O = reconstruct(M[levels], I)
    E, dEdO = _loss(O[0], R, loss)
    return E, O[0], Cache(W, apply_mode, M, D, K, acts, I, O, dEdO, arch, planes, matches)


def backward(cache: Cache) -> np.ndarray:
    """dE/dW (7, 64, 64), summed over all levels and pixels."""
    dI, _ = reconstruct_adjoint(cache.dEdO, len(cache.D))
    dW = np.zeros((N_LAYERS, WIDTH, WIDTH))
    for i, D in enumerate(cache.D):
        if cache.arch:
            idx = cache.matches[i][0] if cache.matches else None
            dK = apply_ctx_backward(dI[i], D, cache.K[i], idx)
        else:
            dK = apply_backward(dI[i], D, cache.K[i], cache.apply_mode)
        dW += mlp_backward(dK, cache.acts[i], cache.W)
    return dW


# ------------------------------------------------------------------------- init and Adam


def mrand(state: "int | np.ndarray") -> tuple[np.ndarray, np.ndarray]:
    """vkdt's xorshift32: (new state, (state >> 8) * 2^-24 in [0, 1)); vectorised over uint."""
    s = np.asarray(state, dtype=np.uint64) & 0xFFFFFFFF
    s = s ^ ((s << np.uint64(13)) & 0xFFFFFFFF)
    s = s ^ (s >> np.uint64(17))
    s = s ^ ((s << np.uint64(5)) & 0xFFFFFFFF)
    return s.astype(np.uint32), (s >> np.uint64(8)).astype(np.float64) * 2.0**-24


def xavier_init() -> np.ndarray:
    """W (7, 64, 64): (0.5 - mrand(i * 133700013)) * 2 sqrt(6/128), unused rows zeroed."""
    i = np.arange(N_LAYERS * WIDTH * WIDTH, dtype=np.uint64)
    seed = (i * np.uint64(SEED_MULT)) & 0xFFFFFFFF
    _, r = mrand(seed)
    W = ((0.5 - r) * 2.0 * XAVIER_BOUND).reshape(N_LAYERS, WIDTH, WIDTH)
    W[~USED] = 0.0
    return W


def adam_step(
    w: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    g: np.ndarray,
    t: int,
    alpha: float = 0.01,
    beta1: float = 0.99,
    beta2: float = 0.999,
    eps: float = 1e-4,
    L2: float = 0.001,
    gradclip: float = 1000.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """(w, m, v, skipped): one Adam step t >= 1 over the used weights.

    A non-finite gradient skips the step (inputs returned unchanged, skipped = True).
    Unused weights and their moments are (kept) 0.
    """
    g = np.asarray(g, dtype=np.float64)
    if not np.all(np.isfinite(g)):
        return w, m, v, True
    w = np.where(USED, w, 0.0)
    g = np.where(USED, g, 0.0)
    norm = float(np.sqrt(np.sum(g * g)))
    if norm > gradclip:
        g = g * (gradclip / norm)
    g = g + 2.0 * L2 * w
    m = np.where(USED, beta1 * m + (1.0 - beta1) * g, 0.0)
    v = np.where(USED, beta2 * v + (1.0 - beta2) * g * g, 0.0)
    mhat = m / (1.0 - beta1**t)
    vhat = v / (1.0 - beta2**t)
    w = w - alpha * mhat / (np.sqrt(vhat) + eps)
    return w, m, v, False


# ----------------------------------------------------------------------------- gradcheck


# ------------------------------------------------------------------ arch 2: block matching

NL_RADIUS = 5  # the search window: offsets within (2 NL_RADIUS + 1)^2, the centre left out
NL_PATCH = 2  # patches of (2 NL_PATCH + 1)^2 pixels
NL_TAPS = 12  # matched offsets kept per pixel


def nl_offsets() -> np.ndarray:
    """The search window's offsets (dx, dy) in row-major order without (0, 0): 120 of them;
    a matched tap is stored as its index here."""
    r = NL_RADIUS
    return np.array([(dx, dy) for dy in range(-r, r + 1) for dx in range(-r, r + 1)
                     if (dx, dy) != (0, 0)], dtype=np.int64)


def block_match(M: np.ndarray, band: float) -> tuple[np.ndarray, np.ndarray]:
    """Block matching at one level, as the nonlocal taps of arch 2 (the candidate nl64 of
    bench/kpn_arch.py, measured there; shaders/kpn-t/match.comp computes it). M (H, W, 4):
    the level's image (rgb) and the noise variance diff reads (alpha). With Y = dot(M.rgb,
    LUMA) and positions mirrored (``mirror``), the distance of pixel p to offset o is
        d(p, o) = mean over u in [-NL_PATCH, NL_PATCH]^2 of (Y(p + u + o) - Y(p + u))^2.
    Per pixel, the NL_TAPS offsets of smallest d in ascending order (equal distances: the
    lower index first) as indices into ``nl_offsets`` (H, W, NL_TAPS), and their features
    log2(1 + d / (2 sigma^2)), sigma = max(band sqrt(max(alpha, 0)), SIGMA_FLOOR): the
    distance over what two noisy patches differ by on average."""
    Y = M[..., :3] @ LUMA
    offsets = nl_offsets()
    d = np.zeros((len(offsets),) + Y.shape)
    for uy in range(-NL_PATCH, NL_PATCH + 1):
        for ux in range(-NL_PATCH, NL_PATCH + 1):
            u = np.array([ux, uy])
            d += (shifted(Y, offsets + u) - shifted(Y, u[None])[0]) ** 2
    d /= (2 * NL_PATCH + 1) ** 2
    order = np.argsort(d, axis=0, kind="stable")[:NL_TAPS]
    dist = np.take_along_axis(d, order, 0)
    feat = np.log2(1.0 + dist / (2.0 * noise_sigma(M[..., 3], band) ** 2))
    return order.transpose(1, 2, 0), feat.transpose(1, 2, 0)


N_TAPS_NL = N_TAPS + NL_TAPS  # arch 2's taps: the star, then the matched ones
N_OUT_NL = 2 * (N_TAPS_NL + 1)  # per group (luma, chroma) 27 logits and a gain: 56
USED_NL = np.ones((N_LAYERS, WIDTH, WIDTH), dtype=bool)
USED_NL[N_LAYERS - 1, N_OUT_NL:, :] = False


def nl_taps(D: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """(27, H*W, 3): D at the star's taps T_k, then at each pixel's matched offsets
    (idx (H, W, NL_TAPS) into nl_offsets, block_match's), mirrored."""
    D = np.asarray(D, dtype=np.float64)[..., :3]
    H, W = D.shape[:2]
    off = nl_offsets()[np.asarray(idx)]  # (H, W, NL_TAPS, 2)
    xs = mirror(np.arange(W)[None, :, None] + off[..., 0], W)
    ys = mirror(np.arange(H)[:, None, None] + off[..., 1], H)
    matched = D[ys, xs].transpose(2, 0, 1, 3).reshape(NL_TAPS, H * W, 3)
    return np.concatenate([gather_taps(D), matched], axis=0)


def gradcheck_rel(a: "float | np.ndarray", n: "float | np.ndarray") -> np.ndarray:
    """|a - n| / max(|a|, |n|, 1e-3 max|a|) elementwise (0 where a = n = 0)."""
    a = np.asarray(a, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    floor = 1e-3 * (np.max(np.abs(a)) if a.size else 0.0)
    den = np.maximum(np.maximum(np.abs(a), np.abs(n)), floor)
    diff = np.abs(a - n)
    return np.divide(diff, den, out=np.zeros_like(diff), where=den > 0)
