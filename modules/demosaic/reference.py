"""numpy reference of the demosaic kernels (README.md here has the maths); the tests compare
shaders/demosaic/*.comp with it, and it is the host-side demosaicer of bench/raw_quality.py's
VST-BM3D row.

    rgb = demosaic(mosaic, cfa, gains=(2.0, 1.0, 1.5))     # (h, w, 3) float32
    out = colour(rgb, rgb_cam)                             # linear Rec.709

Borders: a mosaic is extended by reflection without repeating the edge (index -1 -> 1,
-2 -> 2, n -> n - 2), which keeps every photosite's colour for a 2 x 2 pattern; the X-Trans
interpolation looks the colour of each reflected photosite up where it really is.
"""

from __future__ import annotations

import numpy as np

# Malvar-He-Cutler 5 x 5 filters (x 8), indexed [dy + 2][dx + 2]
G_AT_RB = np.array([[0, 0, -1, 0, 0],
                    [0, 0, 2, 0, 0],
                    [-1, 2, 4, 2, -1],
                    [0, 0, 2, 0, 0],
                    [0, 0, -1, 0, 0]], np.float64) / 8
# the colour whose photosites are left and right of a green one
ROW_AT_G = np.array([[0, 0, 0.5, 0, 0],
                     [0, -1, 0, -1, 0],
                     [-1, 4, 5, 4, -1],
                     [0, -1, 0, -1, 0],
                     [0, 0, 0.5, 0, 0]], np.float64) / 8
COL_AT_G = ROW_AT_G.T.copy()  # the colour above and below a green photosite
# red at a blue photosite and blue at a red one
RB_AT_BR = np.array([[0, 0, -1.5, 0, 0],
                     [0, 2, 0, 2, 0],
                     [-1.5, 0, 6, 0, -1.5],
                     [0, 2, 0, 2, 0],
                     [0, 0, -1.5, 0, 0]], np.float64) / 8
XTRANS_REACH = 2  # the X-Trans interpolation's window: 5 x 5


def reflect_index(i: np.ndarray, n: int) -> np.ndarray:
    """-1 -> 1, -2 -> 2, n -> n - 2 (any reach; n >= 2)."""
    p = 2 * (n - 1)
    i = np.abs(i) % p
    return np.where(i < n, i, p - i)


def colours_of(cfa, ht: int, wd: int) -> np.ndarray:
    tile = np.asarray(cfa, np.int32)
    p = tile.shape[0]
    return np.tile(tile, (-(-ht // p), -(-wd // p)))[:ht, :wd]


def balance(mosaic: np.ndarray, cfa, gains) -> np.ndarray:
    """Each photosite times the white-balance gain of its colour; a saturated one (>= 1, the
    white level) is 1 whatever its gain."""
    ht, wd = mosaic.shape
    z = np.asarray(mosaic, np.float64)
    return np.where(z >= 1.0, 1.0, z * np.asarray(gains, np.float64)[colours_of(cfa, ht, wd)])


def _correlate(z: np.ndarray, f: np.ndarray) -> np.ndarray:
    ht, wd = z.shape
    ys, xs = np.arange(ht), np.arange(wd)
    out = np.zeros_like(z)
    for dy in range(-2, 3):
        for dx in range(-2, 3):
            k = f[dy + 2, dx + 2]
            if k:
                out += k * z[np.ix_(reflect_index(ys + dy, ht), reflect_index(xs + dx, wd))]
    return out


def bayer(mosaic: np.ndarray, cfa) -> np.ndarray:
    """Malvar-He-Cutler on a (balanced) Bayer mosaic of any of the four phases: (h, w, 3)."""
    z = np.asarray(mosaic, np.float64)
    ht, wd = z.shape
    col = colours_of(cfa, ht, wd)
    # a green photosite's row neighbours' colour: the colour of the photosite beside it
    beside = colours_of(cfa, ht, wd + 1)[:, 1:]
    g_rb, row_g, col_g, rb_br = (_correlate(z, f) for f in (G_AT_RB, ROW_AT_G, COL_AT_G,
                                                             RB_AT_BR))
    out = np.empty((ht, wd, 3))
    for c in (0, 2):
        other = 2 - c
        out[..., c] = np.select(
            [col == c, (col == 1) & (beside == c), col == 1, col == other],
            [z, row_g, col_g, rb_br])
    out[..., 1] = np.where(col == 1, z, g_rb)
    return out.astype(np.float32)


def tent_mean(z: np.ndarray, col: np.ndarray, c: int) -> np.ndarray:
    """At every pixel, the mean of z over the colour-c photosites of the 5 x 5 window,
    weighted by the tent (3 - |dx|) (3 - |dy|) (0 where the window has none)."""
    ht, wd = z.shape
    ys, xs = np.arange(ht), np.arange(wd)
    num = np.zeros((ht, wd))
    den = np.zeros((ht, wd))
    r = XTRANS_REACH
    for dy in range(-r, r + 1):
        for dx in range(-r, r + 1):
            idx = np.ix_(reflect_index(ys + dy, ht), reflect_index(xs + dx, wd))
            w = (r + 1 - abs(dx)) * (r + 1 - abs(dy))
            hit = col[idx] == c
            num += np.where(hit, w * z[idx], 0.0)
            den += np.where(hit, w, 0.0)
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def tent(mosaic: np.ndarray, cfa) -> np.ndarray:
    """Each colour interpolated on its own (tent_mean), a photosite keeping its own colour:
    bilinear interpolation on any pattern (the baseline the tests compare with)."""
    z = np.asarray(mosaic, np.float64)
    col = colours_of(cfa, *z.shape)
    return np.stack([np.where(col == c, z, tent_mean(z, col, c)) for c in range(3)],
                    -1).astype(np.float32)


def xtrans(mosaic: np.ndarray, cfa) -> np.ndarray:
    """The X-Trans interpolation, in two passes: green everywhere, g = the photosite's own
    or tent_mean of the green ones; then red and blue as colour differences, c = g +
    tent_mean of (z - g) over the colour-c photosites (a photosite keeps its own colour).
    Colour differences vary more slowly than the colours, so they interpolate better."""
    z = np.asarray(mosaic, np.float64)
    col = colours_of(cfa, *z.shape)
    g = xtrans_green(z, cfa).astype(np.float64)
    out = np.empty(z.shape + (3,))
    out[..., 1] = g
    for c in (0, 2):
        out[..., c] = np.where(col == c, z, g + tent_mean(z - g, col, c))
    return out.astype(np.float32)


def xtrans_green(mosaic: np.ndarray, cfa) -> np.ndarray:
    """The first pass alone: xtrans_g.comp's `g` (float32, as the buffer holds it)."""
    z = np.asarray(mosaic, np.float64)
    col = colours_of(cfa, *z.shape)
    return np.where(col == 1, z, tent_mean(z, col, 1)).astype(np.float32)


def demosaic(mosaic: np.ndarray, cfa, gains=(1.0, 1.0, 1.0)) -> np.ndarray:
    """Balance, then Malvar-He-Cutler (2 x 2 pattern) or the X-Trans interpolation (6 x 6)."""
    z = balance(mosaic, cfa, gains)
    return bayer(z, cfa) if len(cfa) == 2 else xtrans(z, cfa)


def colour(rgb: np.ndarray, matrix) -> np.ndarray:
    """Balanced camera rgb -> linear Rec.709: each pixel times the 3 x 3 matrix."""
    m = np.asarray(matrix, np.float64)
    return np.einsum("ij,hwj->hwi", m, np.asarray(rgb, np.float64)[..., :3]).astype(
        np.float32)
