"""The trainers' optimisers in float64 numpy: the reference of shaders/include/optim.glsl
(`opt_step`, `muon_step`, `clipped`) and shaders/trainer/muon.comp (Newton-Schulz), which
every trainable module's optimiser runs.

Step t >= 1 on weights w with gradient g (already clipped, plus any coupled L2 term):
  adam (0):     m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
                w -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
  sgd (1):      w -= lr g                                  (m, v unchanged)
  adamw (2):    Adam's step and w -= lr wd w (the decay decoupled from the moments; the decay
                term uses w before the step)
  momentum (3): m = mu m + g;  w -= lr m                   (heavy ball, not Nesterov; v
                unchanged; mu 0 is plain SGD's step, but opt 1 stays its own kernel path)
  muon (4):     on each 2-D weight matrix W (a `Matrix` block of the param vector):
                M = mu M + G;  U = G + mu M (Nesterov);  O = NS5(U) sqrt(max(1, rows/cols));
                W -= lr O + lr wd W                       (v unchanged)
                every other param (biases, encoding tables, padding that is used): AdamW.
An element whose new w, m or v is not finite keeps its old values (the kernel skips it)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

OPTIMIZERS = {"adam": 0, "sgd": 1, "adamw": 2, "momentum": 3, "muon": 4}
# Newton-Schulz: the quintic's coefficients (Keller Jordan's Muon), its steps, the norm's eps
NS_COEFFS = (3.4445, -4.7750, 2.0315)
NS_STEPS = 5
NS_EPS = 1e-7


@dataclass(frozen=True)
class Matrix:
    """A 2-D weight matrix inside a trainer's param vector: element (r, c) of its `rows` x
    `cols` block is param `offset + stride r + c`; `net` is the net whose gradient norm
    clips it (gn's pair)."""

    offset: int
    rows: int
    cols: int
    stride: int
    net: int = 0

    def index(self) -> np.ndarray:
        """The params of the block, as a rows x cols array of indices."""
        r = np.arange(self.rows)[:, None] * self.stride
        return self.offset + r + np.arange(self.cols)[None, :]


def clipped(g: np.ndarray, norm: float, clip: float) -> np.ndarray:
    """g scaled to norm `clip` where the gradient's norm exceeds it (clip <= 0: no clip)."""
    return g * (clip / norm) if clip > 0 and norm > clip else g


def newton_schulz(u: np.ndarray, steps: int = NS_STEPS) -> np.ndarray:
    """The quintic Newton-Schulz iteration towards the orthogonal factor of u (rows x cols):
    X = u / (||u||_F + eps); `steps` times X <- a X + (b A + c A^2) X with A = X X^T, on
    the wide orientation (a tall u is transposed, so A is the smaller Gram matrix)."""
    a, b, c = NS_COEFFS
    tall = u.shape[0] > u.shape[1]
    x = u.T if tall else u
    x = x / (np.linalg.norm(x) + NS_EPS)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def muon_update(u: np.ndarray) -> np.ndarray:
    """Muon's update of one matrix from its direction u: NS5(u) sqrt(max(1, rows/cols))."""
    return newton_schulz(u) * max(1.0, u.shape[0] / u.shape[1]) ** 0.5


def step(w, m, v, g, lr: float, t: int, opt: int, b1: float = 0.9, b2: float = 0.999,
         eps: float = 1e-8, wd: float = 0.0, mu: float = 0.9, matrices=()):
    """One optimiser step of every element: (w, m, v) after it, as float64 arrays.
    `matrices` (Muon): the `Matrix` blocks that take Muon's step."""
    w, m, v, g = (np.asarray(x, np.float64) for x in (w, m, v, g))
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite steps are dropped below
        if opt == OPTIMIZERS["muon"]:
            return _muon(w, m, v, g, lr, t, b1, b2, eps, wd, mu, matrices)
        return _step(w, m, v, g, lr, t, opt, b1, b2, eps, wd, mu)


def _keep(ok, new, old):
    return tuple(np.where(ok, a, b) for a, b in zip(new, old, strict=True))


def _step(w, m, v, g, lr, t, opt, b1, b2, eps, wd, mu):
    if opt == OPTIMIZERS["sgd"]:
        wn = w - lr * g
        return _keep(np.isfinite(wn), (wn,), (w,)) + (m.copy(), v.copy())
    if opt == OPTIMIZERS["momentum"]:
        mi = mu * m + g
        wn = w - lr * mi
        return _keep(np.isfinite(wn) & np.isfinite(mi), (wn, mi), (w, m)) + (v.copy(),)
    mi = b1 * m + (1 - b1) * g
    vi = b2 * v + (1 - b2) * g * g
    mh = mi / (1 - b1 ** t)
    vh = vi / (1 - b2 ** t)
    wn = w - lr * mh / (np.sqrt(vh) + eps)
    if opt == OPTIMIZERS["adamw"]:
        wn = wn - lr * wd * w
    ok = np.isfinite(wn) & np.isfinite(mi) & np.isfinite(vi)
    return _keep(ok, (wn, mi, vi), (w, m, v))


def _muon(w, m, v, g, lr, t, b1, b2, eps, wd, mu, matrices):
    """Muon on the matrix blocks, AdamW on every other element."""
    wn, mn, vn = _step(w, m, v, g, lr, t, OPTIMIZERS["adamw"], b1, b2, eps, wd, mu)
    for mat in matrices:
        k = mat.index()
        mi = mu * m[k] + g[k]
        o = muon_update(g[k] + mu * mi)
        wk = w[k] - lr * o - lr * wd * w[k]
        ok = np.isfinite(wk) & np.isfinite(mi)
        wn[k], mn[k], vn[k] = np.where(ok, wk, w[k]), np.where(ok, mi, m[k]), v[k]
    return wn, mn, vn
