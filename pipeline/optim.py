"""The trainers' optimisers in float64 numpy: the reference of shaders/include/optim.glsl
(`opt_step`, `clipped`), which every trainable module's adam kernel runs.

Step t >= 1 on weights w with gradient g (already clipped, plus any coupled L2 term):
  adam (0):  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
             w -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
  sgd (1):   w -= lr g                                  (m, v unchanged)
  adamw (2): Adam's step and w -= lr wd w (the decay decoupled from the moments; the decay
             term uses w before the step)
An element whose new w, m or v is not finite keeps its old values (the kernel skips it)."""

from __future__ import annotations

import numpy as np

OPTIMIZERS = {"adam": 0, "sgd": 1, "adamw": 2}


def clipped(g: np.ndarray, norm: float, clip: float) -> np.ndarray:
    """g scaled to norm `clip` where the gradient's norm exceeds it (clip <= 0: no clip)."""
    return g * (clip / norm) if clip > 0 and norm > clip else g


def step(w, m, v, g, lr: float, t: int, opt: int, b1: float = 0.9, b2: float = 0.999,
         eps: float = 1e-8, wd: float = 0.0):
    """One optimiser step of every element: (w, m, v) after it, as float64 arrays."""
    w, m, v, g = (np.asarray(x, np.float64) for x in (w, m, v, g))
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite steps are dropped below
        return _step(w, m, v, g, lr, t, opt, b1, b2, eps, wd)


def _step(w, m, v, g, lr, t, opt, b1, b2, eps, wd):
    if opt == OPTIMIZERS["sgd"]:
        wn = w - lr * g
        ok = np.isfinite(wn)
        return np.where(ok, wn, w), m.copy(), v.copy()
    mi = b1 * m + (1 - b1) * g
    vi = b2 * v + (1 - b2) * g * g
    mh = mi / (1 - b1 ** t)
    vh = vi / (1 - b2 ** t)
    wn = w - lr * mh / (np.sqrt(vh) + eps)
    if opt == OPTIMIZERS["adamw"]:
        wn = wn - lr * wd * w
    ok = np.isfinite(wn) & np.isfinite(mi) & np.isfinite(vi)
    return np.where(ok, wn, w), np.where(ok, mi, m), np.where(ok, vi, v)
