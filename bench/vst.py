"""A variance-stabilising transform for the benchmarks' signal-dependent noise, and its exact
unbiased inverse: the classical way to run a denoiser built for white Gaussian noise (BM3D) on
Poisson-Gaussian-like noise.

The noise model is cnngenin's: z = y + s(y) n, n ~ N(0, 1), with variance
    s(y)^2 = alpha y + sigma^2,   alpha = b / 65535,   sigma^2 = a / 65535^2
(a, b in cnngenin's units, y linear in [0, 1]). The generalized Anscombe transform
    f(z) = (2 / alpha) sqrt(max(alpha z + 3/8 alpha^2 + sigma^2, 0))
has f'(y) s(y) ~ 1, so f(z) has about unit noise everywhere. A denoiser run on f(z) estimates
E[f(z) | y], not f(y); the exact unbiased inverse maps that expectation back to y. For this
Gaussian noise E[f(z) | y] = integral f(y + s(y) t) phi(t) dt, computed here by Gauss-Hermite
quadrature on a dense grid of y and inverted by interpolation (it is increasing in y). With
a = 0 and Poisson noise this is the inverse of Makitalo and Foi; here it is exact for the
noise the benchmarks add.
"""

from __future__ import annotations

import numpy as np


def _params(a: float, b: float) -> tuple[float, float]:
    alpha = max(float(b), 1e-9) / 65535.0
    return alpha, float(a) / 65535.0**2


def forward(z: np.ndarray, a: float, b: float) -> np.ndarray:
    """f(z): noise of about unit std."""
    alpha, s2 = _params(a, b)
    return (2.0 / alpha) * np.sqrt(np.maximum(alpha * z + 0.375 * alpha**2 + s2, 0.0))


def expected_forward(y: np.ndarray, a: float, b: float, nodes: int = 80) -> np.ndarray:
    """E[f(z) | y] for z = y + s(y) n, by Gauss-Hermite quadrature."""
    alpha, s2 = _params(a, b)
    t, w = np.polynomial.hermite_e.hermegauss(nodes)  # weight exp(-t^2/2)
    w = w / w.sum()
    s = np.sqrt(np.maximum(alpha * y + s2, 0.0))
    return forward(y[:, None] + s[:, None] * t[None, :], a, b) @ w


def inverse(d: np.ndarray, a: float, b: float) -> np.ndarray:
    """The exact unbiased inverse: y with E[f(z) | y] = d (per element)."""
    alpha, s2 = _params(a, b)
    top = max(2.0, float(np.max(d)) ** 2 * alpha / 4.0 + 1.0)  # f(y) ~ 2 sqrt(y / alpha)
    lo = -4.0 * np.sqrt(s2) - 0.05
    y = np.concatenate([np.linspace(lo, 1.0, 8193), np.linspace(1.0, top, 2049)[1:]])
    e = np.maximum.accumulate(expected_forward(y, a, b))  # increasing (guards rounding)
    return np.interp(d, e, y)
