"""Float64 numpy reference of mlp-t's kernels (README.md here has the maths): the samples a
frame draws, the encodings, target lookup, forward, loss, backward, weight gradient, init and
the optimizer step. Tests compare the device against it; it imports nothing from the engine.

Weights are passed as an array of shape (nets, layers, width, width), row = output neuron.
A `spec` is a dict with the keys of module.Arch plus `batch`, `seed`, `shift`, `lscale`.
"""

from __future__ import annotations

import numpy as np

M32 = np.uint64(0xFFFFFFFF)
LEAKY_SLOPE = 0.01


# -- random numbers (shaders/include/rng.glsl) -------------------------------------------

def hash32(x) -> np.ndarray:
    x = np.asarray(x, np.uint64) & M32
    x ^= x >> np.uint64(16)
    x = (x * np.uint64(0x21F0AAAD)) & M32
    x ^= x >> np.uint64(15)
    x = (x * np.uint64(0x735A2D97)) & M32
    x ^= x >> np.uint64(15)
    return x


def rng_state(a, b, c, d) -> np.ndarray:
    s = hash32(np.asarray(d, np.uint64) + hash32(np.asarray(c, np.uint64) + hash32(
        np.asarray(b, np.uint64) + hash32(a))))
    s &= M32
    return np.where(s == 0, np.uint64(1), s)


def mrand(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One xorshift32 step: (new state, float32 uniform in [0, 1))."""
    s = s.copy()
    s ^= (s << np.uint64(13)) & M32
    s ^= s >> np.uint64(17)
    s ^= (s << np.uint64(5)) & M32
    return s, ((s >> np.uint64(8)).astype(np.float32) * np.float32(2.0 ** -24))


def samples(seed: int, frame: int, net: int, batch: int) -> np.ndarray:
    """The (batch, 2) float32 input coordinates net `net` trains on in frame `frame`."""
    s = rng_state(seed, frame, net, np.arange(batch, dtype=np.uint64))
    s, u = mrand(s)
    s, v = mrand(s)
    return np.stack([u, v], -1)


# -- inputs ---------------------------------------------------------------------------

def tile_rect(size: tuple[int, int], tiles: tuple[int, int], n: int) -> tuple[int, ...]:
    """(x0, y0, width, height) of net n's tile in a target of size (wd, ht)."""
    tx, ty = n % tiles[0], n // tiles[0]
    x0, y0 = tx * size[0] // tiles[0], ty * size[1] // tiles[1]
    x1, y1 = (tx + 1) * size[0] // tiles[0], (ty + 1) * size[1] // tiles[1]
    return x0, y0, x1 - x0, y1 - y0


def xform(uv: np.ndarray, kind: int) -> np.ndarray:
    uv = uv.astype(np.float32)
    if kind == 1:
        return uv[:, ::-1].copy()
    if kind == 2:
        return uv * np.float32(0.5) + np.float32(0.25)
    return uv


def fetch(target: np.ndarray, rect, uv: np.ndarray, kind: int, filt: int) -> np.ndarray:
    """Target values (rows, 4) at T(uv) inside the tile: nearest texel or bilinear, edges
    clamped to the tile. Positions are computed in float32 as on the device."""
    x0, y0, tw, th = rect
    q = xform(uv, kind) * np.array([tw, th], np.float32)

    def at(px, py):
        px = np.clip(px, 0, tw - 1)
        py = np.clip(py, 0, th - 1)
        return target[y0 + py, x0 + px].astype(np.float64)

    if filt == 0:
        p = np.floor(q).astype(np.int64)
        return at(p[:, 0], p[:, 1])
    f = q - np.float32(0.5)
    p = np.floor(f).astype(np.int64)
    a = (f - p).astype(np.float64)
    ax, ay = a[:, :1], a[:, 1:]
    top = at(p[:, 0], p[:, 1]) * (1 - ax) + at(p[:, 0] + 1, p[:, 1]) * ax
    bot = at(p[:, 0], p[:, 1] + 1) * (1 - ax) + at(p[:, 0] + 1, p[:, 1] + 1) * ax
    return top * (1 - ay) + bot * ay


def encode(uv: np.ndarray, enc: int, octaves: int, shift: float = 0.0) -> np.ndarray:
    """(rows, n_in) encoded inputs; column (d * octaves + k) * 2 + s, s = 0 sine, 1 cosine."""
    uv = uv.astype(np.float64)
    if enc == 0:
        return uv
    cols = []
    for d in range(2):
        for k in range(octaves):
            if enc == 1:
                a = np.pi * 2.0 ** k * uv[:, d]
                cols += [np.sin(a), np.cos(a)]
            else:
                t = 2.0 ** k * uv[:, d] + np.float32(shift) * k
                for u in (t - 0.25, t):
                    cols.append(1.0 - 4.0 * np.abs(u - np.floor(u + 0.5)))
    return np.stack(cols, -1)


def inputs(spec: dict, uv: np.ndarray) -> np.ndarray:
    """h_0 padded to the stored width, with the bias neuron."""
    x = encode(uv, spec["enc"], spec["octaves"], spec.get("shift", 0.0))
    h = np.zeros((len(uv), spec["width"]))
    h[:, : x.shape[1]] = x
    if spec["bias"]:
        h[:, -1] = 1.0
    return h


# -- the network --------------------------------------------------------------------------

def act(z: np.ndarray, kind: int) -> np.ndarray:
    if kind == 1:
        return np.maximum(z, 0.0)
    if kind == 2:
        return np.where(z > 0, z, LEAKY_SLOPE * z)
    if kind == 3:
        return 1.0 / (1.0 + np.exp(-z))
    if kind == 4:
        return np.tanh(z)
    if kind == 5:
        return np.exp(z)
    if kind == 6:
        return np.where(z > 20, z, np.log1p(np.exp(np.minimum(z, 20))))
    return z


def act_grad(z: np.ndarray, kind: int) -> np.ndarray:
    """d act / d z from the pre-activation (the device uses the output; same value)."""
    if kind == 1:
        return (z > 0).astype(np.float64)
    if kind == 2:
        return np.where(z > 0, 1.0, LEAKY_SLOPE)
    if kind == 3:
        s = act(z, 3)
        return s * (1 - s)
    if kind == 4:
        return 1 - np.tanh(z) ** 2
    if kind == 5:
        return np.exp(z)
    if kind == 6:
        return np.where(z > 20, 1.0, 1.0 / (1.0 + np.exp(-np.minimum(z, 20))))
    return np.ones_like(z)


def forward(spec: dict, W: np.ndarray, h0: np.ndarray):
    """One net: W (layers, width, width), h0 (rows, width) -> (y, hs, zs) with hs[l] the
    input of matrix l and zs[l] its output; padded neurons are 0, the bias neuron 1."""
    L, width = W.shape[0], W.shape[1]
    hs, zs = [h0], []
    h = h0
    for layer in range(L):
        last = layer == L - 1
        nout = spec["nout"] if last else spec["hidden"]
        z = h @ W[layer].T
        zs.append(z)
        h = np.zeros_like(z)
        h[:, :nout] = act(z[:, :nout], spec["outact"] if last else spec["act"])
        if spec["bias"] and not last:
            h[:, width - 1] = 1.0
        if not last:
            hs.append(h)
    return h[:, : spec["nout"]], hs, zs


def loss(y: np.ndarray, t: np.ndarray, kind: int) -> tuple[np.ndarray, np.ndarray]:
    """Elementwise loss and its exact derivative with respect to y."""
    d = y - t
    if kind == 1:
        return np.abs(d), np.sign(d)
    if kind == 2:
        den = y * y + 0.01
        return d * d / den, 2 * d / den - d * d * 2 * y / den ** 2
    if kind == 3:
        den = np.abs(y) + np.abs(t) + 0.01
        return np.abs(d) / den, np.sign(d) / den - np.abs(d) * np.sign(y) / den ** 2
    return d * d, 2 * d


def net_loss_grad(spec: dict, W: np.ndarray, uv: np.ndarray, t: np.ndarray):
    """E_n = 1/(B K) sum l(y, t) of one net and dE_n/dW (layers, width, width)."""
    B, K = len(uv), spec["nout"]
    y, hs, zs = forward(spec, W, inputs(spec, uv))
    lv, lg = loss(y, t[:, :K], spec["loss"])
    E = lv.sum() / (B * K)
    L, width = W.shape[0], W.shape[1]
    g = np.zeros((B, width))
    g[:, :K] = lg / (B * K) * act_grad(zs[-1][:, :K], spec["outact"])
    dW = np.zeros_like(W)
    for layer in reversed(range(L)):
        dW[layer] = g.T @ hs[layer]
        if layer == 0:
            break
        dh = g @ W[layer]
        g = np.zeros_like(dh)
        H = spec["hidden"]
        g[:, :H] = dh[:, :H] * act_grad(zs[layer - 1][:, :H], spec["act"])
    return E, dW, y


def frame_loss_grad(spec: dict, W: np.ndarray, target: np.ndarray, frame: int):
    """E = sum over nets of E_n for frame `frame`, and dE/dW for all nets (W as stored)."""
    ht, wd = target.shape[:2]
    E, dW = 0.0, np.zeros_like(W)
    for n in range(W.shape[0]):
        uv = samples(spec["seed"], frame, n, spec["batch"])
        rect = tile_rect((wd, ht), spec["tiles"], n)
        t = fetch(target, rect, uv, spec["xform"], spec["filter"])
        En, dW[n], _ = net_loss_grad(spec, W[n], uv, t)
        E += En
    return E, dW


def evaluate(spec: dict, W: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """The `output` image (ht, wd, nout): each tile's net at its texel centres."""
    wd, ht = size
    out = np.zeros((ht, wd, spec["nout"]))
    for n in range(W.shape[0]):
        x0, y0, tw, th = tile_rect(size, spec["tiles"], n)
        yy, xx = np.mgrid[0:th, 0:tw]
        uv = np.stack([(xx.ravel() + 0.5) / tw, (yy.ravel() + 0.5) / th], -1)
        y, _, _ = forward(spec, W[n], inputs(spec, uv.astype(np.float32)))
        out[y0:y0 + th, x0:x0 + tw] = y.reshape(th, tw, -1)
    return out


# -- init and optimizers ------------------------------------------------------------------

def init_weights(spec: dict, seed: int) -> np.ndarray:
    """Xavier-uniform +-sqrt(6/(fan_in + fan_out)) per used weight, biases and padding 0."""
    nets, L, w = spec["nets"], spec["layers"], spec["width"]
    i = np.arange(nets * L * w * w, dtype=np.uint64)
    _, u = mrand(rng_state(seed, 0x6D6C7074, i, 0))
    W = (2.0 * u.astype(np.float64) - 1.0).reshape(nets, L, w, w)
    for layer in range(L):
        nin = spec["n_in"] if layer == 0 else spec["hidden"]
        nout = spec["nout"] if layer == L - 1 else spec["hidden"]
        bound = np.sqrt(np.float32(6.0 / (nin + nout)))
        W[:, layer] *= bound
        W[:, layer, nout:, :] = 0
        W[:, layer, :, nin:] = 0
    return W


def adam_step(w, m, v, g, t, alpha, beta1=0.9, beta2=0.999, eps=1e-8):
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    mh = m / (1 - beta1 ** t)
    vh = v / (1 - beta2 ** t)
    return w - alpha * mh / (np.sqrt(vh) + eps), m, v


def sgd_step(w, g, alpha):
    return w - alpha * g
