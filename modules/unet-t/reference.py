"""float64 numpy reference of the unet-t U-Net denoiser, forward and backward.

Every GPU kernel of unet-t is checked against the function of the same step here (README.md
states the maths; this docstring restates it in the reference's conventions).

Images. The input X is (H, W, 3) indexed [y, x] (linear rgb; alpha is no part of the maths), a
stack of n tiles of th rows each, H = n th: rows t th .. (t+1) th - 1 are tile t. Activations
are (C, H_k, W_k) arrays indexed [channel, y, x], H_k = n (th >> k), W_k = W >> k at scale k;
reshaped per tile they are (C, n, th >> k, W_k). W and th must be multiples of 2^(S-1).

Features (per tile t with noise profile (a_t, b_t), cnngenin's units):
    s_t      = max(sqrt(max(a_t + 65535 * 0.18 * b_t, 0)) / 65535, 1e-5)
    sigma(p) = sqrt(max(a_t + 65535 b_t max(Y(X(p)), 0), 0)) / 65535
    Y(c)     = 0.2627 c.r + 0.6780 c.g + 0.0593 c.b
    F = (X.r / s_t, X.g / s_t, X.b / s_t, sigma / s_t)     (4, H, W)
(the README writes s_t without the inner max(., 0); it only differs for a_t + 65535 0.18 b_t
< 0, where the README's sqrt is undefined and this gives the floor 1e-5).

Network, S = scales >= 2, w_k = width << k channels:
    for k in 0 .. S-1:
        E_k^a = relu(conv3(in_k))  (w_k out)     in_0 = F, in_k = D_{k-1}
        E_k   = relu(conv3(E_k^a)) (w_k out)     the skip of scale k
        if k < S-1: D_k = down(E_k) (w_k out, no activation)
    G_{S-1} = E_{S-1}
    for k in S-2 .. 0:
        U_k   = up(G_{k+1}) (w_k out, no activation)
        G_k^a = relu(conv3(cat(U_k, E_k)))       (2 w_k in: U_k's channels, then E_k's)
        G_k   = relu(conv3(G_k^a))
    N = conv1(G_0) (3 out);    O = X - s_t N     (N as (H, W, 3))

Weights. One flat float array w; layer L (``layers``: enc0a, enc0, down0, enc1a, ..., enc{S-1},
up{S-2}, dec{S-2}a, dec{S-2}, ..., up0, dec0a, dec0, out) has W_L[co][ci][ky][kx] at
w[offset : offset + cout cin k k] (C order) and its bias b_L[co] at the next cout values;
the layers follow each other without gaps from offset 0.

Layers (I the input (cin, ...), O the output (cout, ...), per tile):
    conv3: O[co, y, x] = b[co] + sum_ci sum_{ky,kx = 0..2} W[co][ci][ky][kx] I[ci, y+ky-1, x+kx-1]
           (I is 0 outside the tile: tiles never see each other, nor anything past the image)
    down:  O[co, y, x] = b[co] + sum_ci sum_{ky,kx = 0..1} W[co][ci][ky][kx] I[ci, 2y+ky, 2x+kx]
    up:    O[co, 2y+ky, 2x+kx] = b[co] + sum_ci W[co][ci][ky][kx] I[ci, y, x]
    conv1: O[co, y, x] = b[co] + sum_ci W[co][ci][0][0] I[ci, y, x]
(down, up and conv1 never reach across a tile border as th >> k is even where they run.)

Loss over the P = W n th pixels against the clean R (H, W, 3):
    E = (1/P) sum_p sum_{r,g,b} |O(p) - R(p)|,   dE/dO = sign(O - R) / P   (sign(0) = 0).

Backward: dN[c, y, x] = -s_t dO[y, x, c]; through each layer in reverse, with relu'(z) = 1 if
z > 0 else 0 (z the pre-activation), and for a layer with upstream dO:
    db[co] = sum dO[co, .],   dW[co][ci][ky][kx] = sum_{y,x} dO[co, y, x] (the input it read)
    conv3: dI = conv3 of dO (zero outside the tile) with W'[ci][co][ky][kx] = W[co][ci][2-ky][2-kx]
    down:  dI[ci, 2y+ky, 2x+kx] = sum_co W[co][ci][ky][kx] dO[co, y, x]
    up:    dI[ci, y, x] = sum_{co,ky,kx} W[co][ci][ky][kx] dO[co, 2y+ky, 2x+kx]
    conv1: dI[ci] = sum_co W[co][ci] dO[co]
dE_k (the skip) sums the gradient from dec{k}a's E_k channels and from down{k}; no gradient
flows to the features (dE/dw only).

RGGB mosaics (cfa=True; README.md, "Bayer mosaics"). X (H, W, 3) is a mosaic M: photosite
(x, y) is red at (even, even), green at (odd, even) and (even, odd), blue at (odd, odd), and
only its own colour's channel is read. The network runs on the cells, (H/2, W/2), a tile th/2
rows (th, W even and th/2, W/2 multiples of 2^(S-1)); cell (x, y):
    R = M[2y, 2x].r, G1 = M[2y, 2x+1].g, G2 = M[2y+1, 2x].g, B = M[2y+1, 2x+1].b
    base = (R, (G1 + G2) / 2, B),  sigma from Y(base),  F = (R, G1, G2, B, sigma) / s_t  (5)
    N = the network's 12 planes (conv1 with 12 out);
    O[2y+dy, 2x+dx, c] = base_c - s_t N[(2 dy + dx) 3 + c, y, x]     (O: (H, W, 3))
and the loss as above over the H W full-resolution pixels; dN[(2 dy + dx) 3 + c, y, x] =
-s_t dO[2y+dy, 2x+dx, c].

RGB cells (cfa=CELLS; README.md, "Cells"). X (H, W, 3) is RGB, the network runs on its cells
of 2 x 2 pixels as above; cell (x, y):
    F = (X[2y+dy, 2x+dx, c] in plane (2 dy + dx) 3 + c, sigma) / s_t   (13 planes)
with sigma from Y of the cell's mean colour, and
    O[2y+dy, 2x+dx, c] = X[2y+dy, 2x+dx, c] - s_t N[(2 dy + dx) 3 + c, y, x],
the loss and dN as for mosaics.

Mosaics of any pattern (cfa=MOSAIC; README.md, "Mosaics of any pattern"). X (H, W, 4): photosite
(x, y) has the colour c = X[y, x, 3] (0 r, 1 g, 2 b) and the value v = X[y, x, c]. The network
runs on the cells of 2 x 2 photosites; cell (x, y), d = 2 dy + dx its photosite (2x+dx, 2y+dy):
    F = (v / s_t in plane 3 d + c, 0 in the other two of 3 d .. 3 d + 2;
         1 in plane 12 + 3 d + c, 0 in the other two of 12 + 3 d ..;  sigma / s_t)  (25)
with sigma from the mean of the cell's 4 values (Y of grey), and
    O[p, c] = base_c(p) - s_t N[(2 dy + dx) 3 + c, y, x]
with base_c(p) = v(p) for p's own colour, else the mean of the values of colour c in the 5 x 5
window around p within p's tile, weighted by (3 - |dx|) (3 - |dy|), v(p) where there is none
(mosaic_base); the loss and dN as for mosaics.
"""

from typing import NamedTuple

import numpy as np

from vkgraph.modules.cnngenin.reference import cfa as rggb_colours
from vkgraph.modules.unet_t.net import (  # noqa: F401
    CELLS,
    KSIZE,
    MOSAIC,
    RGB,
    RGGB,
    Layer,
    layers,
    n_params,
)

LUMA = np.array([0.2627, 0.6780, 0.0593])
RANGE = 65535.0  # cnngenin's units: noise variance (a + RANGE b x) / RANGE^2
MID_GREY = 0.18  # s_t is the noise std at this value
S_FLOOR = 1e-5  # s_t = max(., S_FLOOR)


# the layout (Layer, layers, n_params) is net.py's, which module.py builds the kernels from


def _check_net(width: int, scales: int) -> None:
    if int(scales) != scales or scales < 2:
        raise ValueError(f"unet-t: scales must be an integer >= 2, got {scales}")
    if int(width) != width or width < 1:
        raise ValueError(f"unet-t: width must be an integer >= 1, got {width}")


def unpack(w: np.ndarray, layer: Layer) -> tuple[np.ndarray, np.ndarray]:
    """(W (cout, cin, k, k), b (cout,)) of `layer`: views into the flat array w."""
    end = layer.offset + layer.weights
    W = w[layer.offset: end].reshape(layer.cout, layer.cin, layer.k, layer.k)
    return W, w[end: layer.end]


# --------------------------------------------------------------------------------- layers


def _tiles(I: np.ndarray, th: int) -> tuple[np.ndarray, int]:
    """I (C, n th, W) as (C, n, th, W), and n."""
    C, H, W = I.shape
    if th < 1 or H % th:
        raise ValueError(f"unet-t: {H} rows are not a whole number of tiles of {th} rows")
    return I.reshape(C, H // th, th, W), H // th


def _windows(I: np.ndarray, th: int) -> np.ndarray:
    """(C, n, th, W, 3, 3): I[c, y+ky-1, x+kx-1] of each tile, zero outside the tile."""
    T, _ = _tiles(I, th)
    P = np.pad(T, ((0, 0), (0, 0), (1, 1), (1, 1)))
    return np.lib.stride_tricks.sliding_window_view(P, (3, 3), axis=(2, 3))


def _even(I: np.ndarray, th: int, kind: str) -> None:
    _tiles(I, th)
    if th % 2 or I.shape[2] % 2:
        raise ValueError(f"unet-t: {kind} needs an even tile height and width, "
                         f"got {th} rows a tile and {I.shape[2]} columns")


def conv(kind: str, W: np.ndarray, b: np.ndarray, I: np.ndarray, th: int) -> np.ndarray:
    """One layer without activation: O (cout, H', W') from I (cin, H, W) of tiles of th rows
    (th: the rows a tile at I's scale), W (cout, cin, k, k), b (cout,); kind conv3, down, up or
    conv1 as the module docstring defines (H', W' = H, W; H/2, W/2 for down; 2H, 2W for up)."""
    W = np.asarray(W, dtype=np.float64)
    I = np.asarray(I, dtype=np.float64)
    cout, cin = W.shape[:2]
    if kind not in KSIZE or W.shape[2:] != (KSIZE[kind],) * 2 or I.shape[0] != cin:
        raise ValueError(f"unet-t: {kind} with weights {W.shape} cannot read input {I.shape}")
    C, H, Wd = I.shape
    if kind == "conv3":
        out = np.tensordot(W, _windows(I, th), axes=([1, 2, 3], [0, 4, 5]))  # (co, n, th, W)
        out = out.reshape(cout, H, Wd)
    elif kind == "down":
        _even(I, th, kind)
        Ir = I.reshape(C, H // 2, 2, Wd // 2, 2)
        out = np.tensordot(W, Ir, axes=([1, 2, 3], [0, 2, 4]))  # (co, H/2, W/2)
    elif kind == "up":
        _tiles(I, th)
        out = np.tensordot(W, I, axes=([1], [0]))  # (co, ky, kx, H, W)
        out = out.transpose(0, 3, 1, 4, 2).reshape(cout, 2 * H, 2 * Wd)
    else:
        _tiles(I, th)
        out = np.tensordot(W[:, :, 0, 0], I, axes=1)
    return out + np.asarray(b, dtype=np.float64)[:, None, None]


def conv_backward(kind: str, W: np.ndarray, I: np.ndarray, dO: np.ndarray,
                  th: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dI, dW, db) of ``conv(kind, W, b, I, th)`` for the upstream dE/dO: the adjoint of the
    layer (module docstring) and the gradients of its weights (cout, cin, k, k) and bias."""
    W = np.asarray(W, dtype=np.float64)
    I = np.asarray(I, dtype=np.float64)
    dO = np.asarray(dO, dtype=np.float64)
    cout, cin = W.shape[:2]
    C, H, Wd = I.shape
    db = dO.sum(axis=(1, 2))
    if kind == "conv3":
        T, n = _tiles(dO, th)
        dW = np.tensordot(T, _windows(I, th), axes=([1, 2, 3], [1, 2, 3]))
        Wt = np.flip(W, (2, 3)).transpose(1, 0, 2, 3)  # W'[ci][co][ky][kx] = W[co][ci][2-ky][2-kx]
        dI = np.tensordot(Wt, _windows(dO, th), axes=([1, 2, 3], [0, 4, 5])).reshape(C, H, Wd)
    elif kind == "down":
        Ir = I.reshape(C, H // 2, 2, Wd // 2, 2)
        dW = np.tensordot(dO, Ir, axes=([1, 2], [1, 3]))  # (co, ci, ky, kx)
        dI = np.tensordot(W, dO, axes=([0], [0]))  # (ci, ky, kx, H/2, W/2)
        dI = dI.transpose(0, 3, 1, 4, 2).reshape(C, H, Wd)
    elif kind == "up":
        d6 = dO.reshape(cout, H, 2, Wd, 2)
        dW = np.tensordot(d6, I, axes=([1, 3], [1, 2])).transpose(0, 3, 1, 2)  # (co,ky,kx,ci)
        dI = np.tensordot(W, d6, axes=([0, 2, 3], [0, 2, 4]))
    elif kind == "conv1":
        dW = np.tensordot(dO, I, axes=([1, 2], [1, 2]))[:, :, None, None]
        dI = np.tensordot(W[:, :, 0, 0].T, dO, axes=1)
    else:
        raise ValueError(f"unet-t: unknown layer kind {kind!r}")
    return dI, dW, db


def relu(z: np.ndarray) -> np.ndarray:
    return np.maximum(z, 0.0)


def relu_grad(z: np.ndarray) -> np.ndarray:
    """relu'(z) = 1 where z > 0, else 0 (0 at z = 0)."""
    return (z > 0).astype(np.float64)


# -------------------------------------------------------------------------------- network


def cells(X: np.ndarray) -> np.ndarray:
    """(H/2, W/2, 4): the R, G1, G2, B photosites of each cell of the RGGB mosaic X (H, W, 3)
    (module docstring), each read from its own colour's channel."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 3 or X.shape[2] != 3 or X.shape[0] % 2 or X.shape[1] % 2:
        raise ValueError(f"unet-t: a mosaic must be (H, W, 3) with H and W even, got {X.shape}")
    return np.stack([X[0::2, 0::2, 0], X[0::2, 1::2, 1], X[1::2, 0::2, 1], X[1::2, 1::2, 2]],
                    -1)


def pack(X: np.ndarray) -> np.ndarray:
    """(12, H/2, W/2): the pixels of each cell of 2 x 2 pixels of X (H, W, 3), pixel (2x + dx,
    2y + dy)'s channel c in plane (2 dy + dx) 3 + c (the layout of F and N with cells)."""
    H, W = X.shape[0] // 2, X.shape[1] // 2
    return X.reshape(H, 2, W, 2, 3).transpose(1, 3, 4, 0, 2).reshape(12, H, W)


def unpack_cells(N: np.ndarray) -> np.ndarray:
    """pack's inverse: (H, W, 3) from (12, H/2, W/2)."""
    H, W = N.shape[1:]
    return N.reshape(2, 2, 3, H, W).transpose(3, 0, 4, 1, 2).reshape(2 * H, 2 * W, 3)


def base_of(C: np.ndarray) -> np.ndarray:
    """(H/2, W/2, 3): each cell's base colour (R, (G1 + G2) / 2, B) from ``cells``."""
    return np.stack([C[..., 0], (C[..., 1] + C[..., 2]) * 0.5, C[..., 3]], -1)


def mosaic(img: np.ndarray) -> np.ndarray:
    """The RGGB mosaic of an RGB image (H, W, 3), each photosite's value in r, g and b (as
    cnngenin's generate 3 writes it)."""
    img = np.asarray(img)
    v = np.take_along_axis(img, rggb_colours(img.shape[1], img.shape[0])[..., None], -1)
    return np.repeat(v, 3, -1)


def colours_of(X: np.ndarray) -> np.ndarray:
    """(H, W) int: each photosite's colour (0 r, 1 g, 2 b) of a mosaic of any pattern X
    (H, W, 4): its alpha."""
    return np.clip(np.rint(X[..., 3]), 0, 2).astype(int)


def values_of(X: np.ndarray) -> np.ndarray:
    """(H, W): each photosite's value of a mosaic of any pattern X (H, W, 4), from its own
    colour's channel."""
    return np.take_along_axis(X[..., :3], colours_of(X)[..., None], -1)[..., 0]


def mosaic_base(X: np.ndarray, th: int) -> np.ndarray:
    """(H, W, 3): base_c(p) of the mosaic of any pattern X (H, W, 4) of tiles of th rows
    (module docstring): a photosite's own colour its value, each other colour the weighted
    mean of that colour's photosites in the 5 x 5 window within the tile."""
    X = np.asarray(X, dtype=np.float64)
    T, n = _tiles(values_of(X)[None], th)
    C, _ = _tiles(colours_of(X)[None], th)
    v = np.pad(T[0], ((0, 0), (2, 2), (2, 2)))
    c = np.pad(C[0], ((0, 0), (2, 2), (2, 2)), constant_values=-1)  # no colour outside
    W = X.shape[1]
    num = np.zeros((n, th, W, 3))
    den = np.zeros((n, th, W, 3))
    for dy in range(-2, 3):
        for dx in range(-2, 3):
            w = (3 - abs(dx)) * (3 - abs(dy))
            vv = v[:, 2 + dy:2 + dy + th, 2 + dx:2 + dx + W]
            cc = c[:, 2 + dy:2 + dy + th, 2 + dx:2 + dx + W]
            for k in range(3):
                num[..., k] += np.where(cc == k, w * vv, 0.0)
                den[..., k] += np.where(cc == k, w, 0.0)
    own = T[0][..., None]
    base = np.where(den > 0, num / np.maximum(den, 1), own)
    np.put_along_axis(base, C[0][..., None], own, -1)
    return base.reshape(X.shape[0], W, 3)


def _check_image(X: np.ndarray, a: np.ndarray, b: np.ndarray, th: int, cfa: int = RGB) -> int:
    """n, the tiles of X; ValueError when the shapes disagree."""
    want = 4 if cfa == MOSAIC else 3
    if X.ndim != 3 or X.shape[2] != want:
        raise ValueError(f"unet-t: X must be (H, W, {want}), got {X.shape}")
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"unet-t: a and b must be (n,) for n tiles, got {a.shape}, {b.shape}")
    n = a.shape[0]
    if int(th) != th or th < 1 or n < 1 or X.shape[0] != n * th:
        raise ValueError(f"unet-t: X has {X.shape[0]} rows, not {n} tiles (len(a)) of "
                         f"th = {th} rows")
    return n


def features(X: np.ndarray, a: np.ndarray, b: np.ndarray,
             th: int, cfa: int = RGB) -> tuple[np.ndarray, np.ndarray]:
    """(F (4, H, W), s (n,)): the network's input and each tile's scale (module docstring),
    for X (H, W, 3) of n = len(a) tiles of th rows and the noise profiles a, b (n,).
    cfa RGGB: X is an RGGB mosaic and F (5, H/2, W/2) its cells' (R, G1, G2, B, sigma) / s;
    CELLS: F (13, H/2, W/2) its cells' 12 values (pack) and sigma, over s; MOSAIC: X (H, W,
    4) a mosaic of any pattern and F (25, H/2, W/2) (module docstring)."""
    X = np.asarray(X, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    _check_image(X, a, b, th, cfa)
    s = np.maximum(np.sqrt(np.maximum(a + RANGE * MID_GREY * b, 0.0)) / RANGE, S_FLOOR)
    if cfa:
        if th % 2 or X.shape[0] % 2 or X.shape[1] % 2:
            raise ValueError(f"unet-t: cells need an even width and tile height, got "
                             f"{X.shape[1]} and {th}")
        th //= 2
    if cfa == RGGB:
        C = cells(X)
        planes, colour = C.transpose(2, 0, 1), base_of(C)
    elif cfa == CELLS:
        planes = pack(X)
        colour = planes.reshape(4, 3, *planes.shape[1:]).mean(0).transpose(1, 2, 0)
    elif cfa == MOSAIC:
        onehot = (colours_of(X)[..., None] == np.arange(3)).astype(np.float64)
        planes = pack(onehot * values_of(X)[..., None])
        mask = pack(onehot)
        mean = planes.reshape(12, -1).sum(0).reshape(planes.shape[1:]) / 4
        colour = np.repeat(mean[..., None], 3, -1)  # grey: Y is the mean
    else:
        planes, colour = X.transpose(2, 0, 1), X
    a_p, b_p, s_p = (np.repeat(v, th)[:, None] for v in (a, b, s))  # per row (H, 1)
    y = np.maximum(colour @ LUMA, 0.0)
    sigma = np.sqrt(np.maximum(a_p + RANGE * b_p * y, 0.0)) / RANGE
    F = np.concatenate([planes, sigma[None]]) / s_p[None]
    if cfa == MOSAIC:  # the colours' planes, not over s
        F = np.concatenate([F[:12], mask, F[12:]])
    return F, s


class Cache(NamedTuple):
    """What ``forward`` computed: F and s (``features``), N (3, H, W), and per layer name the
    input it read (inputs[name], (cin, H_k, W_k)) and its output before the activation
    (z[name]; relu(z) for conv3 layers, the output itself for down, up and out)."""

    F: np.ndarray
    s: np.ndarray
    N: np.ndarray
    inputs: dict
    z: dict


def _check_all(w, X, a, b, th, width, scales, cfa=RGB):
    _check_net(width, scales)
    X = np.asarray(X, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    _check_image(X, a, b, th, cfa)
    m = (2 if cfa else 1) << (scales - 1)
    if th % m or X.shape[1] % m:
        raise ValueError(f"unet-t: the width W = {X.shape[1]} and tile height th = {th} must be "
                         f"multiples of {'2 ' if cfa else ''}2^(scales-1) = {m}")
    w = np.asarray(w, dtype=np.float64)
    n = n_params(width, scales, cfa)
    if w.shape != (n,):
        raise ValueError(f"unet-t: w must be ({n},) for width {width}, scales {scales}"
                         f"{', cfa' if cfa else ''}, got {w.shape}")
    return w, X, a, b


def forward(w: np.ndarray, X: np.ndarray, a: np.ndarray, b: np.ndarray, th: int, width: int,
            scales: int, cfa: int = RGB) -> tuple[np.ndarray, Cache]:
    """(O (H, W, 3), cache): the denoised tiles O = X - s_t N(F) and the activations.
    cfa RGGB: X an RGGB mosaic, th its tiles' rows (full resolution); O the full-resolution
    RGB; CELLS: X RGB on cells; MOSAIC: X (H, W, 4) a mosaic of any pattern (module
    docstring)."""
    w, X, a, b = _check_all(w, X, a, b, th, width, scales, cfa)
    F, s = features(X, a, b, th, cfa)
    full, th = th, (th // 2 if cfa else th)  # th: the network's rows a tile
    net = {layer.name: layer for layer in layers(width, scales, cfa)}
    inputs, zs = {}, {}

    def run(name, I, th_k):
        inputs[name] = I
        zs[name] = conv(net[name].kind, *unpack(w, net[name]), I, th_k)
        return zs[name]

    h, skips = F, []
    for k in range(scales):
        h = relu(run(f"enc{k}a", h, th >> k))
        h = relu(run(f"enc{k}", h, th >> k))
        skips.append(h)
        if k < scales - 1:
            h = run(f"down{k}", h, th >> k)
    for k in range(scales - 2, -1, -1):
        u = run(f"up{k}", h, th >> (k + 1))
        h = relu(run(f"dec{k}a", np.concatenate([u, skips[k]]), th >> k))
        h = relu(run(f"dec{k}", h, th >> k))
    N = run("out", h, th)
    s_rows = np.repeat(s, full)[:, None, None]
    if cfa == RGGB:  # each photosite's base: its cell's, (H, W, 3)
        base = np.repeat(np.repeat(base_of(cells(X)), 2, 0), 2, 1)
        O = base - s_rows * unpack_cells(N)
    elif cfa == CELLS:
        O = X - s_rows * unpack_cells(N)
    elif cfa == MOSAIC:
        O = mosaic_base(X, full) - s_rows * unpack_cells(N)
    else:
        O = X - s_rows * N.transpose(1, 2, 0)
    return O, Cache(F, s, N, inputs, zs)


def loss(O: np.ndarray, R: np.ndarray, l2: bool = False) -> tuple[float, np.ndarray]:
    """(E, dE/dO): E = (1/P) sum |O - R| over the P pixels and 3 channels, dE/dO = sign(O-R)/P;
    l2 (param `loss` 1): E = (1/P) sum (O - R)^2, dE/dO = 2 (O - R) / P."""
    O = np.asarray(O, dtype=np.float64)
    R = np.asarray(R, dtype=np.float64)
    if O.shape != R.shape or O.ndim != 3 or O.shape[2] != 3:
        raise ValueError(f"unet-t: O {O.shape} and R {R.shape} must both be (H, W, 3)")
    P = O.shape[0] * O.shape[1]
    d = O - R
    if l2:
        return float((d * d).sum() / P), 2 * d / P
    return float(np.abs(d).sum() / P), np.sign(d) / P


def backward(w: np.ndarray, X: np.ndarray, R: np.ndarray, a: np.ndarray, b: np.ndarray, th: int,
             width: int, scales: int, cfa: int = RGB, l2: bool = False
             ) -> tuple[float, np.ndarray]:
    """(E, dw): the loss of forward's O against R and its exact gradient dE/dw (w's shape).
    cfa RGGB: X an RGGB mosaic, R the clean full-resolution RGB; CELLS: X RGB on cells
    (module docstring); l2: loss's."""
    w, X, a, b = _check_all(w, X, a, b, th, width, scales, cfa)
    R = np.asarray(R, dtype=np.float64)
    if R.shape != X.shape[:2] + (3,):
        raise ValueError(f"unet-t: R {R.shape} must be (H, W, 3) of X's {X.shape}")
    O, cache = forward(w, X, a, b, th, width, scales, cfa)
    E, dO = loss(O, R, l2)
    net = {layer.name: layer for layer in layers(width, scales, cfa)}
    dw = np.zeros_like(w)

    def back(name, g, th_k, activated):
        layer = net[name]
        if activated:
            g = g * relu_grad(cache.z[name])
        W, _ = unpack(w, layer)
        dI, dW, db = conv_backward(layer.kind, W, cache.inputs[name], g, th_k)
        dw[layer.offset: layer.offset + layer.weights] = dW.ravel()
        dw[layer.offset + layer.weights: layer.end] = db
        return dI

    dX = -np.repeat(cache.s, th)[:, None, None] * dO  # dE/dN, pixel by pixel (H, W, 3)
    if cfa:
        th //= 2  # the network's rows a tile
        dN = pack(dX)
    else:
        dN = dX.transpose(2, 0, 1)
    g = back("out", dN, th, False)  # dG_0
    dskip = []
    for k in range(scales - 1):
        g = back(f"dec{k}", g, th >> k, True)
        g = back(f"dec{k}a", g, th >> k, True)  # d cat(U_k, E_k)
        c = net[f"up{k}"].cout
        dskip.append(g[c:])
        g = back(f"up{k}", g[:c], th >> (k + 1), False)  # dG_{k+1}
    dE = g  # dE_{S-1} = dG_{S-1}
    for k in range(scales - 1, -1, -1):
        g = back(f"enc{k}", dE, th >> k, True)
        g = back(f"enc{k}a", g, th >> k, True)  # d in_k (= dD_{k-1} for k > 0)
        if k > 0:
            dE = back(f"down{k - 1}", g, th >> (k - 1), False) + dskip[k - 1]
    return E, dw
