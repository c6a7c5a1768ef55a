"""Float64 numpy reference of mlp-t's kernels (README.md here has the maths): the samples a
frame draws, the encodings, target lookup, forward, loss, backward, weight gradient, init and
the optimizer step. Tests compare the device against it; it imports nothing from the engine.

Weights are passed as an array of shape (nets, layers, width, width), row = output neuron;
the table of a hashgrid/permuto encoding as a flat float array (entry e's features at e F ..
e F + F - 1). A `spec` is a dict with the keys of module.Arch plus `batch`, `seed`, `shift`,
`lscale` and, for table encodings, `levels`, `features`, `log2size`, `baseres`, `perlevel`.
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


def samples(seed: int, frame: int, net: int, batch: int, dims: int = 2) -> np.ndarray:
    """The (batch, dims) float32 uniform numbers of net `net` in frame `frame`: its input
    coordinates, or with jitter their offsets inside the texels (see `jittered`)."""
    s = rng_state(seed, frame, net, np.arange(batch, dtype=np.uint64))
    out = []
    for _ in range(dims):
        s, u = mrand(s)
        out.append(u)
    return np.stack(out, -1)


def texel_pos(j: np.ndarray, o: np.ndarray, rect, slices: int = 1) -> np.ndarray:
    """Positions (float32) of texels j of a tile at offsets o inside them; 3-D (o has 3
    columns): texel (x, y) of the stack is voxel (x, y mod hs, y div hs), hs = height/slices."""
    _, _, tw, th = rect
    x, y = j % tw, j // tw
    if o.shape[1] == 3:
        hs = th // slices
        q = np.stack([x, y % hs, y // hs], -1).astype(np.float32)
        return (q + o.astype(np.float32)) / np.array([tw, hs, slices], np.float32)
    q = np.stack([x, y], -1).astype(np.float32)
    return (q + o.astype(np.float32)) / np.array([tw, th], np.float32)


def positions(spec: dict, frame: int, net: int, rect) -> np.ndarray:
    """The inputs net `net` trains on in frame `frame`: uniform, or one per texel (sample i
    at texel (i k + rot) mod texels, k = max(1, texels // batch), rot a random rotation per
    frame) at a uniform offset inside it (`jitter`)."""
    o = samples(spec["seed"], frame, net, spec["batch"], spec.get("dims", 2))
    if not spec.get("jitter"):
        return o
    texels = rect[2] * rect[3]
    rot = int(rng_state(spec["seed"], frame, net, 0x6A697474)) % texels
    stride = max(1, texels // spec["batch"])
    j = (np.arange(spec["batch"]) % texels * stride + rot) % texels
    return texel_pos(j, o, rect, spec.get("slices", 1))


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


def fetch(target: np.ndarray, rect, uv: np.ndarray, kind: int, filt: int,
          slices: int = 1) -> np.ndarray:
    """Target values (rows, 4) at T(uv) inside the tile: nearest texel or bilinear, edges
    clamped to the tile; 3-D: the nearest voxel of the slice stack. Positions are computed in
    float32 as on the device."""
    x0, y0, tw, th = rect
    if uv.shape[1] == 3:
        hs = th // slices
        size = np.array([tw, hs, slices])
        q = np.minimum(np.floor(uv * size.astype(np.float32)).astype(np.int64), size - 1)
        return target[y0 + q[:, 1] + hs * q[:, 2], x0 + q[:, 0]].astype(np.float64)
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
    for d in range(uv.shape[1]):
        for k in range(octaves):
            if enc == 1:
                a = np.pi * 2.0 ** k * uv[:, d]
                cols += [np.sin(a), np.cos(a)]
            else:
                t = 2.0 ** k * uv[:, d] + np.float32(shift) * k
                for u in (t - 0.25, t):
                    cols.append(1.0 - 4.0 * np.abs(u - np.floor(u + 0.5)))
    return np.stack(cols, -1)


# -- table encodings (hashgrid, permuto) --------------------------------------------------

HASH_PRIMES = (1, 2654435761, 805459861)


def table_layout(spec: dict) -> dict:
    """Per level: entries, first entry, and the resolution (hashgrid: cells per unit, dense
    when (N+1)^dims entries fit 2^log2size) or scale and shift (permuto, float32)."""
    kind, dims, size = spec["enc"], spec.get("dims", 2), 2 ** spec["log2size"]
    lay = {"sizes": [], "res": [], "dense": [], "scale": [], "shift": []}
    for lv in range(spec["levels"]):
        grow = spec["baseres"] * spec["perlevel"] ** lv
        if kind == 3:
            n = int(np.floor(grow))
            lay["res"].append(n)
            lay["dense"].append((n + 1) ** dims <= size)
            lay["sizes"].append(min(size, (n + 1) ** dims))
        else:
            lay["scale"].append(np.float32(grow))
            lay["shift"].append(np.array([((lv + 1) * np.sqrt(p)) % 1.0
                                          for p in (2, 3, 5)[:dims]], np.float32))
            lay["sizes"].append(size)
    lay["offsets"] = np.cumsum([0, *lay["sizes"][:-1]]).tolist()
    lay["floats"] = int(sum(lay["sizes"])) * spec["features"]
    return lay


def spatial_hash(keys: np.ndarray, log2size: int) -> np.ndarray:
    """(rows, dims) integer keys -> xor of key_d * prime_d modulo 2^log2size (32-bit)."""
    h = np.zeros(len(keys), np.uint64)
    for d in range(keys.shape[1]):
        h ^= (keys[:, d].astype(np.int64).astype(np.uint64) & M32) * np.uint64(
            HASH_PRIMES[d]) & M32
    return (h & np.uint64(2 ** log2size - 1)).astype(np.int64)


def grid_cell(spec: dict, lay: dict, lv: int, x: np.ndarray):
    """Hashgrid level lv: (entries (rows, 2^dims), weights (rows, 2^dims)) of the cell around
    each x: p = N x (float32), i = min(floor p, N - 1), a = p - i; corner k = i + bits of k,
    weight prod_d (bit ? a_d : 1 - a_d); entry sum_d i_d (N+1)^d when dense, else hashed."""
    n = lay["res"][lv]
    dims = x.shape[1]
    p = x.astype(np.float32) * np.float32(n)
    i = np.minimum(np.floor(p), n - 1).astype(np.int64)
    a = (p - i).astype(np.float64)
    idx, wt = [], []
    for k in range(2 ** dims):
        bits = np.array([(k >> d) & 1 for d in range(dims)])
        c = i + bits
        wt.append(np.prod(np.where(bits == 1, a, 1 - a), axis=1))
        if lay["dense"][lv]:
            e = sum(c[:, d] * (n + 1) ** d for d in range(dims))
        else:
            e = spatial_hash(c, spec["log2size"])
        idx.append(lay["offsets"][lv] + e)
    return np.stack(idx, -1), np.stack(wt, -1)


def elevate(p: np.ndarray) -> np.ndarray:
    """(rows, d) -> (rows, d+1) on the plane sum = 0: column j of E is c_j (1 (j+1 times),
    -(j+1), 0, ...) with c_j = sqrt(d (d+1) / ((j+1)(j+2))); a unit step is one lattice edge."""
    rows, d = p.shape
    E = np.zeros((d + 1, d))
    for j in range(d):
        c = np.sqrt(d * (d + 1) / ((j + 1) * (j + 2)))
        E[: j + 1, j] = c
        E[j + 1, j] = -(j + 1) * c
    return p @ E.T


def simplex(y: np.ndarray):
    """The simplex of the permutohedral lattice A*_d around elevated points y (rows, d+1):
    (vertex keys (rows, d+1, d+1) = vertex r's d+1 coordinates, barycentric weights
    (rows, d+1)). Adams et al. 2010: the nearest remainder-0 point, the ranks of the
    differences, made consistent, vertex r = rem0 + r - (d+1) [rank > d - r]."""
    rows, d1 = y.shape
    d = d1 - 1
    v = np.floor(y / d1 + 0.5)
    rem0 = v * d1
    total = v.sum(1).astype(np.int64)
    diff = y - rem0
    rank = np.zeros((rows, d1), np.int64)
    for i in range(d):
        for j in range(i + 1, d1):
            less = diff[:, i] < diff[:, j]
            rank[:, i] += less
            rank[:, j] += ~less
    rank += total[:, None]
    low, high = rank < 0, rank > d
    rank = np.where(low, rank + d1, np.where(high, rank - d1, rank))
    rem0 = np.where(low, rem0 + d1, np.where(high, rem0 - d1, rem0))
    b = np.zeros((rows, d + 2))
    vals = (y - rem0) / d1
    r_idx = np.arange(rows)
    for i in range(d1):
        np.add.at(b, (r_idx, d - rank[:, i]), vals[:, i])
        np.add.at(b, (r_idx, d1 - rank[:, i]), -vals[:, i])
    b[:, 0] += 1 + b[:, d1]
    keys = np.stack([rem0 + r - d1 * (rank > d - r) for r in range(d1)], 1)
    return keys.astype(np.int64), b[:, :d1]


def lattice_cell(spec: dict, lay: dict, lv: int, x: np.ndarray):
    """Permuto level lv: (entries, weights) of the simplex around E (s_l x + shift_l)."""
    p = x.astype(np.float64) * float(lay["scale"][lv]) + lay["shift"][lv].astype(np.float64)
    keys, b = simplex(elevate(p))
    d = x.shape[1]
    idx = np.stack([spatial_hash(keys[:, r, :d], spec["log2size"]) for r in range(d + 1)], -1)
    return lay["offsets"][lv] + idx, b


def cells(spec: dict, lay: dict, lv: int, x: np.ndarray):
    return (grid_cell if spec["enc"] == 3 else lattice_cell)(spec, lay, lv, x)


def encode_table(spec: dict, table: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(rows, levels F): input l F + f = sum_k w_k T[e_k F + f] over the level's cell."""
    lay, F = table_layout(spec), spec["features"]
    cols = []
    for lv in range(spec["levels"]):
        idx, wt = cells(spec, lay, lv, x)
        for f in range(F):
            cols.append((wt * table[idx * F + f]).sum(1))
    return np.stack(cols, -1)


def table_grad(spec: dict, x: np.ndarray, dh0: np.ndarray, n_table: int) -> np.ndarray:
    """dE/dT: dE/dh_0 (rows, levels F) scattered through the interpolation weights."""
    lay, F = table_layout(spec), spec["features"]
    dT = np.zeros(n_table)
    for lv in range(spec["levels"]):
        idx, wt = cells(spec, lay, lv, x)
        for f in range(F):
            np.add.at(dT, (idx * F + f).ravel(), (wt * dh0[:, lv * F + f, None]).ravel())
    return dT


def init_table(spec: dict, seed: int, n_table: int, offset: int) -> np.ndarray:
    """Table entries uniform in +-1e-4 (param i = offset + entry); padding 0."""
    i = np.arange(offset, offset + n_table, dtype=np.uint64)
    _, u = mrand(rng_state(seed, 0x74626C65, i, 0))
    t = (2.0 * u.astype(np.float64) - 1.0) * np.float32(1e-4)
    t[table_layout(spec)["floats"]:] = 0
    return t


def inputs(spec: dict, uv: np.ndarray, table: np.ndarray | None = None) -> np.ndarray:
    """h_0 padded to the stored width, with the bias neuron."""
    if spec["enc"] in (3, 4):
        x = encode_table(spec, table, uv)
    else:
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


def net_loss_grad(spec: dict, W: np.ndarray, uv: np.ndarray, t: np.ndarray,
                  table: np.ndarray | None = None):
    """E_n = 1/(B K) sum l(y, t) of one net, dE_n/dW (layers, width, width) and y; with a
    table also dE/dT (4th value)."""
    B, K = len(uv), spec["nout"]
    y, hs, zs = forward(spec, W, inputs(spec, uv, table))
    lv, lg = loss(y, t[:, :K], spec["loss"])
    E = lv.sum() / (B * K)
    L, width = W.shape[0], W.shape[1]
    g = np.zeros((B, width))
    g[:, :K] = lg / (B * K) * act_grad(zs[-1][:, :K], spec["outact"])
    dW = np.zeros_like(W)
    for layer in reversed(range(L)):
        dW[layer] = g.T @ hs[layer]
        if layer == 0:
            if table is not None:  # dE/dh_0 = W_0^T g_0, into the table
                return E, dW, y, table_grad(spec, uv, g @ W[0], table.size)
            break
        dh = g @ W[layer]
        g = np.zeros_like(dh)
        H = spec["hidden"]
        g[:, :H] = dh[:, :H] * act_grad(zs[layer - 1][:, :H], spec["act"])
    return E, dW, y


def frame_loss_grad(spec: dict, W: np.ndarray, target: np.ndarray, frame: int,
                    table: np.ndarray | None = None):
    """E = sum over nets of E_n for frame `frame`, and dE/dW for all nets (W as stored); with
    a table (one net) also dE/dT."""
    ht, wd = target.shape[:2]
    E, dW = 0.0, np.zeros_like(W)
    for n in range(W.shape[0]):
        rect = tile_rect((wd, ht), spec["tiles"], n)
        uv = positions(spec, frame, n, rect)
        t = fetch(target, rect, uv, spec["xform"], spec["filter"], spec.get("slices", 1))
        out = net_loss_grad(spec, W[n], uv, t, table)
        dW[n] = out[1]
        E += out[0]
        if table is not None:
            return E, dW, out[3]
    return E, dW


def evaluate(spec: dict, W: np.ndarray, size: tuple[int, int],
             table: np.ndarray | None = None) -> np.ndarray:
    """The `output` image (ht, wd, nout): each tile's net at its texel centres."""
    wd, ht = size
    out = np.zeros((ht, wd, spec["nout"]))
    for n in range(W.shape[0]):
        rect = x0, y0, tw, th = tile_rect(size, spec["tiles"], n)
        half = np.full((tw * th, spec.get("dims", 2)), 0.5)
        uv = texel_pos(np.arange(tw * th), half, rect, spec.get("slices", 1))
        y, _, _ = forward(spec, W[n], inputs(spec, uv, table))
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
