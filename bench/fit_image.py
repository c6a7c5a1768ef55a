"""Image fit (graphs/fit-image.cfg, graphs/fit-image-hash.cfg) at a large batch: ms per
training step of vkgraph's mlp-t against the same network and training in PyTorch (eager,
eager + CUDA graph, torch.compile) and, for the frequency fit, JAX (jax.jit) in the same run,
and the PSNR of the fitted image after the same number of steps. Target: <= 0.25 ms/step at
batch 2^18 on an H100 (stretch: 0.1 ms).

The network and training are fit-image.cfg's (modules/mlp-t/README.md): uv in [0,1)^2 ->
frequency encoding sin/cos(pi 2^k u), sin/cos(pi 2^k v), k = 0..2 (12 inputs, mlp-t's order)
-> 4 hidden layers of 64, leaky ReLU (0.01) -> 3 sigmoid outputs, no biases, L2 (mean over
batch and outputs), Adam (lr 1e-3, beta 0.9/0.999, eps 1e-8), a fresh batch of uniform random
uv per step, nearest-texel targets from graphs/images/scene.png in linear light. Every peer
starts from vkgraph's initial weights (read back after its frame 0). vkgraph's loss scale
(1024) is left out of the peers: in fp32 it only moves rounding.

Per step: vkgraph's wall time per frame (Build.run_frames, the engine's own way of running a
cfg's frames: 8 frames a submission where nothing needs the host between them, submissions
back to back, a wait at the end of each block; no GPU timestamps) and its GPU time (profiled
after the blocks: the sum of the dispatches' times, and the span from the first dispatch's
start to the last one's end); the peers' wall time over the timed steps,
between two device synchronisations. The timed steps (all but the warm-up) run as 3 equal
blocks, each timed on its own; ms/step is the median block's (the notes list all three). PSNR
(peak 1, linear rgb) of the network at every texel centre against the target, after `--steps`
optimizer steps (warm-up and compile steps included).

The hash-grid fit (`--fits hash`) is fit-image-hash.cfg's: uv -> the multiresolution hash
grid of mlp-t (8 levels x 2 features, N_l = floor(16 * 1.5^l) cells per unit, a level stored
densely while its (N_l + 1)^2 grid points fit 2^16 entries, else hashed with
(c_x * 1 xor c_y * 2654435761) mod 2^16, bilinear weights) -> 3 hidden layers of 64, leaky
ReLU -> 3 outputs through exp, no biases, L2, Adam 1e-3 (network) and 1e-2 (table), one
jittered sample per texel and step (batch / texels samples each for a larger batch),
bilinear targets; the peers start from vkgraph's initial weights and table. It runs at
`--batch` and at the graph's own batch (65536); JAX has no hash-grid row.

    python bench/fit_image.py [--batch 262144] [--steps 1000] [--device NAME] [--max-autotune]
                              [--fits frequency,hash] [--hash-batches 262144,65536]
                              [--variants auto,portable]

--variants: mlp-t kernel variants, one vkgraph row each (VKGRAPH_MLP=auto|coopmat|portable;
auto picks the cooperative-matrix kernels where the device has them); the first is the
reference of the "÷ vkgraph" column.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vkgraph.api import Session  # noqa: E402
from vkgraph.pipeline.cfg import apply_line, read_cfg  # noqa: E402
from vkgraph.pipeline.formats import read_image  # noqa: E402
from vkgraph.pipeline.vk import Device  # noqa: E402

CFG = ROOT / "graphs" / "fit-image.cfg"
FITS = {"frequency": CFG, "hash": ROOT / "graphs" / "fit-image-hash.cfg"}
MLP = ("mlp-t", "01")
LR, BETA1, BETA2, EPS = 1e-3, 0.9, 0.999, 1e-8
OCTAVES, SLOPE = 3, 0.01
HASH_PRIMES = (1, 2654435761, 805459861)  # instant-NGP's spatial hash, one per dimension
GUARD_DB = 0.5  # hash fit: the PyTorch rows' PSNR must be this close to vkgraph's


class Row:
    def __init__(self, name: str, ms: float | None = None, psnr: float | None = None,
                 note: str = "", gpu_ms: float | None = None, fit: str = ""):
        self.name, self.ms, self.psnr, self.note, self.gpu_ms = name, ms, psnr, note, gpu_ms
        self.fit = fit  # the workload and batch: rows are compared within one fit


def psnr(x: np.ndarray, ref: np.ndarray) -> float:
    mse = float(np.mean((x[..., :3].astype(np.float64) - ref[..., :3]) ** 2))
    return 10 * math.log10(1.0 / max(mse, 1e-20))


def failure(e: Exception) -> str:
    lines = str(e).strip().splitlines()
    return f"failed: {type(e).__name__}" + (f": {lines[0][:200]}" if lines else "")


REPEATS = 3  # timed blocks: ms/step is the median block's


def blocks_ms(run, n: int) -> tuple[float, list[float]]:
    """Median ms per step over REPEATS blocks of the n timed steps: run(k) runs k steps and
    waits for the device."""
    sizes = [n // REPEATS + (i < n % REPEATS) for i in range(REPEATS)]
    out = []
    for k in sizes:
        if k <= 0:
            continue
        t0 = time.perf_counter()
        run(k)
        out.append((time.perf_counter() - t0) / k * 1e3)
    return (float(np.median(out)) if out else None), out


def blocks_note(blocks: list[float]) -> str:
    return "blocks " + " / ".join(f"{b:.3f}" for b in blocks) + " ms"


def warm_steps(steps: int) -> int:
    """Untimed steps before the timed ones (compiles, CUDA-graph recording, caches)."""
    return max(1, min(20, steps // 2))


# -- vkgraph ------------------------------------------------------------------------------

def run_vkgraph(device_name, batch: int, steps: int, folder: Path, cfg: Path = CFG,
                variant: str = "auto"):
    """(Row, initial params (weights then table, flat), Arch, the target, the module's params
    the peers need) of `cfg` (fit-image.cfg or fit-image-hash.cfg) at this batch."""
    g = read_cfg(cfg)
    for name, inst in [k for k in g.modules if k[0] == "display"]:
        g.remove_module(name, inst)
    for line in [f"param:mlp-t:01:batch:{batch}", "param:mlp-t:01:preview:0",
                 f"param:o-lut:w:filename:{folder / 'w'}",
                 "module:o-pfm:fit", f"param:o-pfm:fit:filename:{folder / 'fit'}",
                 "connect:mlp-t:01:output:o-pfm:fit:input"]:
        apply_line(g, line, "bench/fit_image.py")
    g.frames = steps + 1  # frame f applies the gradient of frame f-1: frame `steps` shows
    saved = os.environ.get("VKGRAPH_MLP")
    os.environ["VKGRAPH_MLP"] = variant
    dev = Device.open(device_name)  # the weights after `steps` updates (eval: last frame)
    try:
        name = dev.info.name
        t0 = time.perf_counter()
        b = Session(g, dev).prepare()  # timed without timestamps (they may serialise dispatches)
        m = g.modules[MLP]
        a = m.data["arch"]
        variant = m.data["variant"]  # VKGRAPH_MLP=coopmat|portable|auto picks it
        b.run_frame(0, download=False)
        p0 = b.read(m.trainable.adam, "w").ravel().copy()
        warm = warm_steps(steps)
        # warm-up as the timed blocks run (batched submissions): recording the batch lists
        # (on first use) falls here, not into the first timed block
        b.run_frames(1, warm + 1, last_frame_only=True, write_sinks=False)
        setup = time.perf_counter() - t0
        frame = [warm + 1]

        def run(k):  # as `vkgraph cli` runs frames (batches of several per submission)
            b.run_frames(frame[0], frame[0] + k, last_frame_only=True, write_sinks=False)
            frame[0] += k

        n_gpu = min(20, max(1, (steps - warm - 1) // 4))  # frames that read their timestamps
        n = steps - warm - 1 - n_gpu
        ms, blocks = blocks_ms(run, n)
        gpu, span, nodes = [], [], {}  # after the timed blocks (reading the stamps costs)
        b.program.set_profile(True)
        for _ in range(n_gpu):
            run(1)  # the dispatches of one frame, eval's early exit included
            stamps = b.timings()
            gpu.append(sum(ms_ for _, ms_ in stamps))
            span.append(b.gpu_span())
            for label, ms_ in stamps:
                nodes.setdefault(label.rsplit("/", 1)[-1], []).append(ms_)
        per_node = ", ".join(f"{k} {np.median(v):.3f}" for k, v in
                             sorted(nodes.items(), key=lambda kv: -np.median(kv[1])))
        b.run_frame(steps, download=False)  # the last frame also evaluates the image
        out = b.read(m.data["eval"], "output")
        loss = m.cls.hook("current_loss")(b, m)
        target = read_image(b.context.resolve(g.modules[("i-img", "main")].param("filename")))
        params = {k: m.param(k) for k in ("alpha", "talpha", "levels", "features",
                                          "log2size", "baseres", "perlevel", "batch")}
    finally:
        dev.close()
        if saved is None:
            os.environ.pop("VKGRAPH_MLP", None)
        else:
            os.environ["VKGRAPH_MLP"] = saved
    row = Row(f"vkgraph mlp-t {variant} ({name})", ms if n > 0 else None, psnr(out, target),
              f"wall per frame (back to back), {blocks_note(blocks)}; GPU "
              f"{np.median(gpu):.3f} ms/step (sum of dispatch timestamps; first start to last "
              f"end {np.median(span):.3f}); loss {loss:.4g}; setup {setup:.1f} s;"
              f" GPU ms per node: {per_node}", gpu_ms=float(np.median(gpu)))
    return row, p0, a, target, params


def graph_batch(cfg: Path) -> int:
    """The batch the graph itself trains with."""
    g = read_cfg(cfg)
    return int(g.modules[MLP].param("batch"))


def used_weights(p0: np.ndarray, a) -> list[np.ndarray]:
    """mlp-t's params (the padded (L, W, W) matrices first) -> the used (out, in) blocks, fp32."""
    w0 = p0[: a.layers * a.width * a.width].reshape(a.layers, a.width, a.width)
    out = []
    for layer in range(a.layers):
        nin, nout = a.fans(layer)
        out.append(np.ascontiguousarray(w0[layer, :nout, :nin], np.float32))
    return out


def grid_uv(h: int, w: int) -> np.ndarray:
    """Texel centres of an h x w image, row-major, as (h*w, 2) uv."""
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([(x.ravel() + 0.5) / w, (y.ravel() + 0.5) / h], 1).astype(np.float32)


# -- PyTorch ------------------------------------------------------------------------------

class HashLayout:
    """The hash grid's levels (modules/mlp-t/README.md, "Table encodings"): level l has
    N_l = floor(N0 b^l) cells per unit (float64), is dense while its (N_l + 1)^dims grid
    points fit 2^log2size entries (entry sum_d c_d (N_l + 1)^d), else hashed into 2^log2size
    entries; level l's entries follow level l-1's."""

    def __init__(self, levels: int, features: int, log2size: int, baseres: int,
                 perlevel: float, dims: int = 2):
        self.levels, self.features, self.log2size, self.dims = levels, features, log2size, dims
        self.res = [int(math.floor(baseres * perlevel ** lv)) for lv in range(levels)]
        self.dense = [(n + 1) ** dims <= 2 ** log2size for n in self.res]
        self.sizes = [(n + 1) ** dims if d else 2 ** log2size
                      for n, d in zip(self.res, self.dense, strict=True)]
        self.offsets = [int(x) for x in np.cumsum([0, *self.sizes[:-1]])]
        self.entries = int(sum(self.sizes))

    @classmethod
    def of(cls, params: dict, dims: int = 2) -> HashLayout:
        return cls(int(params["levels"]), int(params["features"]), int(params["log2size"]),
                   int(params["baseres"]), float(params["perlevel"]), dims)


def hash_encoder(torch, lay: HashLayout, dev):
    """encode(table (entries, F), x (B, dims) in [0, 1]) -> (B, levels F), input l F + f =
    feature f of level l: p = N_l x (float32), i = min(floor p, N_l - 1), a = p - i, the 2^dims
    corners c = i + bits with weights prod_d (bit ? a_d : 1 - a_d), summed from the table.
    Autograd's backward of the gather is the scatter of the same weights."""
    dims = lay.dims
    res = torch.tensor(lay.res, dtype=torch.float32, device=dev)  # (L,)
    top = res - 1
    side = torch.tensor(lay.res, dtype=torch.int64, device=dev) + 1
    dense = torch.tensor(lay.dense, device=dev)
    offset = torch.tensor(lay.offsets, dtype=torch.int64, device=dev)
    mask = 2 ** lay.log2size - 1

    def encode(table, x):
        p = x[:, None, :] * res[:, None]  # (B, L, dims)
        i = torch.minimum(torch.floor(p), top[:, None])
        a = p - i
        i = i.long()
        idx, wts = [], []
        for k in range(2 ** dims):
            bits = [(k >> d) & 1 for d in range(dims)]
            c = [i[..., d] + bits[d] for d in range(dims)]
            wt = a[..., 0] if bits[0] else 1 - a[..., 0]
            for d in range(1, dims):
                wt = wt * (a[..., d] if bits[d] else 1 - a[..., d])
            flat = c[0] + side * c[1] + (side * side * c[2] if dims == 3 else 0)
            hashed = c[0] * HASH_PRIMES[0]  # keys >= 0, products < 2^63: the low bits are
            for d in range(1, dims):  # those of the 32-bit products
                hashed = hashed ^ (c[d] * HASH_PRIMES[d])
            idx.append(torch.where(dense, flat, hashed & mask) + offset)
            wts.append(wt)
        feats = table[torch.stack(idx, -1)]  # (B, L, 2^dims, F)
        out = (torch.stack(wts, -1)[..., None] * feats).sum(2)
        return out.reshape(x.shape[0], -1)

    return encode


def torch_rows(fit: dict, target, batch: int, steps: int, which: str, report) -> None:
    """which = "eager": eager (+ CUDA graph) rows; "compile": the torch.compile rows;
    "max-autotune": torch.compile's max-autotune mode (minutes of compiling). `fit`: "kind"
    (frequency or hash), "ws0" (the initial weights), "table0" (hash: the initial table,
    (entries, F)), "layout" (hash: HashLayout), "lr" and "tlr" (network and table rates),
    "label" (the rows' fit column)."""
    try:
        import torch
    except ImportError:
        if which == "eager":
            report(Row("PyTorch", note="not installed", fit=fit["label"]))
        return
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    where = torch.cuda.get_device_name(0) if cuda else "CPU"
    h, w = target.shape[:2]
    tgt = torch.from_numpy(np.ascontiguousarray(target[..., :3])).to(dev)
    grid = torch.from_numpy(grid_uv(h, w)).to(dev)
    warm = warm_steps(steps)
    hashed = fit["kind"] == "hash"
    ws0 = fit["ws0"]
    init = [*ws0, fit["table0"]] if hashed else list(ws0)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    if hashed:
        encode_table = hash_encoder(torch, fit["layout"], dev)
        texels = h * w
        stride = max(1, texels // batch)  # mlp-t's jitter: a smaller batch spread evenly
        spread = (torch.arange(batch, device=dev) % texels) * stride
        size = torch.tensor([w, h], dtype=torch.float32, device=dev)

        def encode(params, x):
            return encode_table(params[-1], x)

        def draw():  # one sample per texel (turned by a random offset) at a random point in it
            j = (spread + torch.randint(texels, (1,), device=dev)) % texels
            return (torch.stack([j % w, j // w], 1).float()
                    + torch.rand(batch, 2, device=dev)) / size

        def fetch(x):  # bilinear: texel centres at k + 1/2, edges clamped
            q = x * size - 0.5
            p = torch.floor(q)
            a = q - p
            p = p.long()
            x0, y0 = p[:, 0].clamp(0, w - 1), p[:, 1].clamp(0, h - 1)
            x1, y1 = (p[:, 0] + 1).clamp(0, w - 1), (p[:, 1] + 1).clamp(0, h - 1)
            ax, ay = a[:, :1], a[:, 1:]
            return ((tgt[y0, x0] * (1 - ax) + tgt[y0, x1] * ax) * (1 - ay)
                    + (tgt[y1, x0] * (1 - ax) + tgt[y1, x1] * ax) * ay)

        out_act = torch.exp
    else:
        scale = (math.pi * 2.0 ** torch.arange(OCTAVES, dtype=torch.float32)).to(dev)

        def encode(params, uv):  # (B, 2) -> (B, 4 O): input (d O + k) 2 + s, as mlp-t
            a = uv[:, :, None] * scale
            return torch.stack([torch.sin(a), torch.cos(a)], -1).reshape(uv.shape[0], -1)

        def draw():
            return torch.rand(batch, 2, device=dev)

        def fetch(uv):  # nearest texel
            ix = (uv[:, 0] * w).long().clamp_(max=w - 1)
            iy = (uv[:, 1] * h).long().clamp_(max=h - 1)
            return tgt[iy, ix]

        out_act = torch.sigmoid

    def forward(params, uv):
        x = encode(params, uv)
        for p in params[: len(ws0) - 1]:
            x = torch.nn.functional.leaky_relu(x @ p.t(), SLOPE)
        return out_act(x @ params[len(ws0) - 1].t())

    def loss_of(params, uv):
        return torch.mean((forward(params, uv) - fetch(uv)) ** 2)

    def fresh(capturable=False):
        torch.manual_seed(1)  # each variant draws the same batches (where its RNG use agrees)
        params = [torch.nn.Parameter(torch.from_numpy(x).to(dev)) for x in init]
        groups = [{"params": params[: len(ws0)], "lr": fit["lr"]}]
        if hashed:
            groups.append({"params": params[len(ws0):], "lr": fit["tlr"]})
        kw = {"fused": True} if cuda else {}
        opt = torch.optim.Adam(groups, lr=fit["lr"], betas=(BETA1, BETA2), eps=EPS,
                               capturable=capturable, **kw)
        return params, opt

    def fitted(params) -> float:
        with torch.no_grad():
            img = forward(params, grid).reshape(h, w, 3).float().cpu().numpy()
        return psnr(img, target)

    def timed(step, n_warm) -> tuple[float, list[float]]:
        for _ in range(n_warm):
            step()
        sync()

        def run(k):
            for _ in range(k):
                step()
            sync()

        return blocks_ms(run, steps - n_warm)

    def plain(name, fn_loss, note, tf32=False, mark=False):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        params, opt = fresh()

        def step():
            if mark:
                torch.compiler.cudagraph_mark_step_begin()
            uv = draw()
            loss = fn_loss(params, uv)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        t0 = time.perf_counter()
        ms, blocks = timed(step, warm)
        report(Row(name, ms, fitted(params), f"{note}; {blocks_note(blocks)}; "
                   f"{time.perf_counter() - t0:.1f} s in all", fit=fit["label"]))

    def graphed(name, note, tf32=False):
        """The whole step (sampling, forward, backward, fused Adam) as one CUDA graph."""
        torch.backends.cuda.matmul.allow_tf32 = tf32
        params, opt = fresh(capturable=True)

        def step():
            uv = draw()
            loss = loss_of(params, uv)
            loss.backward()
            opt.step()

        t0 = time.perf_counter()
        n_eager = 3  # eager steps on a side stream before capture (as the PyTorch docs do)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(n_eager):
                opt.zero_grad(set_to_none=True)
                step()
        torch.cuda.current_stream().wait_stream(side)
        opt.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # recording runs nothing: not a step
            step()
        for _ in range(max(0, warm - n_eager)):
            graph.replay()
        sync()

        def run(k):
            for _ in range(k):
                graph.replay()
            sync()

        ms, blocks = blocks_ms(run, steps - max(n_eager, warm))
        report(Row(name, ms, fitted(params), f"{note}; {blocks_note(blocks)}; "
                   f"{time.perf_counter() - t0:.1f} s in all", fit=fit["label"]))

    adam = "fused Adam" if cuda else "Adam"
    runs = []  # (name, function of the name)
    if which == "eager":
        runs.append((f"PyTorch {torch.__version__} eager fp32 ({where})",
                     lambda n: plain(n, loss_of, adam)))
    if which == "eager" and cuda:
        runs += [("PyTorch eager fp32 + CUDA graph",
                  lambda n: graphed(n, f"whole step captured ({adam})")),
                 ("PyTorch eager TF32 + CUDA graph",
                  lambda n: graphed(n, "whole step captured, TF32 matmuls (not fp32 maths)",
                                    tf32=True))]
    if which == "compile":
        runs += [("PyTorch torch.compile fp32",
                  lambda n: plain(n, torch.compile(loss_of),
                                  f"default mode, sampling + backward + {adam} outside")),
                 ("PyTorch torch.compile fp32 reduce-overhead",
                  lambda n: plain(n, torch.compile(loss_of, mode="reduce-overhead"),
                                  f"CUDA graphs of fwd and bwd; {adam} outside", mark=cuda))]
    if which == "max-autotune":
        runs.append(("PyTorch torch.compile fp32 max-autotune",
                     lambda n: plain(n, torch.compile(loss_of, mode="max-autotune"),
                                     f"GEMM autotuning + CUDA graphs; {adam} outside",
                                     mark=cuda)))
    for name, run in runs:
        try:
            run(name)
        except Exception as e:  # one peer failing must not lose the others' rows
            report(Row(name, note=failure(e), fit=fit["label"]))
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False
            if cuda:
                torch.cuda.empty_cache()


# -- JAX ----------------------------------------------------------------------------------

def jax_rows(ws0, target, batch: int, steps: int, report, label: str = "") -> None:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # PyTorch shares the GPU
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        report(Row("JAX", note="not installed", fit=label))
        return
    try:
        backend = jax.default_backend()
        where = jax.devices()[0].device_kind
    except Exception as e:
        report(Row("JAX", note="no device: " + failure(e), fit=label))
        return
    if backend == "cpu" and batch * steps > 2 ** 22:
        report(Row(f"JAX {jax.__version__}", note="found no GPU (cpu backend): skipped at "
                                                  "this size", fit=label))
        return
    h, w = target.shape[:2]
    tgt = jnp.asarray(target[..., :3])
    scale = jnp.asarray(math.pi * 2.0 ** np.arange(OCTAVES), jnp.float32)
    grid = jnp.asarray(grid_uv(h, w))
    warm = warm_steps(steps)

    def one(name, precision, note):
        def forward(params, uv):
            a = uv[:, :, None] * scale
            x = jnp.stack([jnp.sin(a), jnp.cos(a)], -1).reshape(uv.shape[0], -1)
            for p in params[:-1]:
                x = jax.nn.leaky_relu(jnp.dot(x, p.T, precision=precision), SLOPE)
            return jax.nn.sigmoid(jnp.dot(x, params[-1].T, precision=precision))

        def loss_of(params, key):
            uv = jax.random.uniform(key, (batch, 2), jnp.float32)
            ix = jnp.minimum((uv[:, 0] * w).astype(jnp.int32), w - 1)
            iy = jnp.minimum((uv[:, 1] * h).astype(jnp.int32), h - 1)
            return jnp.mean((forward(params, uv) - tgt[iy, ix]) ** 2)

        def step(state, key):
            params, m, v, t = state
            g = jax.grad(loss_of)(params, key)
            t = t + 1
            c1, c2 = 1 - BETA1 ** t, 1 - BETA2 ** t
            m = [BETA1 * mi + (1 - BETA1) * gi for mi, gi in zip(m, g, strict=True)]
            v = [BETA2 * vi + (1 - BETA2) * gi * gi for vi, gi in zip(v, g, strict=True)]
            params = [p - LR * (mi / c1) / (jnp.sqrt(vi / c2) + EPS)
                      for p, mi, vi in zip(params, m, v, strict=True)]
            return params, m, v, t

        step = jax.jit(step, donate_argnums=0)
        params = [jnp.asarray(x) for x in ws0]
        state = (params, [jnp.zeros_like(p) for p in params],
                 [jnp.zeros_like(p) for p in params], jnp.float32(0))
        keys = jax.random.split(jax.random.PRNGKey(1), steps)
        t0 = time.perf_counter()
        for i in range(warm):
            state = step(state, keys[i])
        jax.block_until_ready(state)
        at = [warm]

        def run(k):
            nonlocal state
            for _ in range(k):
                state = step(state, keys[at[0]])
                at[0] += 1
            jax.block_until_ready(state)

        ms, blocks = blocks_ms(run, steps - warm)
        img = np.asarray(jax.jit(forward)(state[0], grid)).reshape(h, w, 3)
        report(Row(name, ms, psnr(img, target), f"{note}; {blocks_note(blocks)}; "
                   f"{time.perf_counter() - t0:.1f} s in all", fit=label))

    for name, precision, note in [
            (f"JAX {jax.__version__} jit fp32 ({where})", jax.lax.Precision.HIGHEST,
             "precision HIGHEST, hand-written Adam"),
            ("JAX jit, default precision", jax.lax.Precision.DEFAULT,
             "XLA's default for f32 dots (TF32 on tensor-core GPUs)")]:
        try:
            one(name, precision, note)
        except Exception as e:
            report(Row(name, note=failure(e), fit=label))


# -- table --------------------------------------------------------------------------------

def batch_label(batch: int) -> str:
    return f"2^{batch.bit_length() - 1}" if batch & (batch - 1) == 0 else str(batch)


def peer_fit(kind: str, p0: np.ndarray, a, params: dict, batch: int) -> dict:
    """What the peers need to train as vkgraph does: its initial weights (and table)."""
    fit = {"kind": kind, "ws0": used_weights(p0, a), "lr": float(params["alpha"]),
           "label": f"{kind} {batch_label(batch)}"}
    if kind == "hash":
        lay = HashLayout.of(params, a.dims)
        if lay.entries * lay.features != a.table.used:  # our layout against the engine's
            raise SystemExit(f"hash layout: {lay.entries} entries x {lay.features}, the "
                             f"engine's table has {a.table.used} floats")
        start = a.layers * a.width * a.width
        fit["table0"] = np.ascontiguousarray(
            p0[start: start + a.table.used].reshape(lay.entries, lay.features), np.float32)
        fit["layout"] = lay
        fit["tlr"] = float(params["talpha"]) or fit["lr"]
    return fit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=2 ** 18, help="samples per step (2^18)")
    ap.add_argument("--steps", type=int, default=1000, help="optimizer steps per run")
    ap.add_argument("--device", help="Vulkan device (substring of its name)")
    ap.add_argument("--fits", default="frequency,hash",
                    help="workloads: frequency (fit-image.cfg), hash (fit-image-hash.cfg)")
    ap.add_argument("--hash-batches",
                    help="batches of the hash fit (default: --batch and the graph's own)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    ap.add_argument("--no-jax", action="store_true", help="skip JAX")
    ap.add_argument("--variants", default="auto",
                    help="mlp-t kernel variants, one vkgraph row each (auto, coopmat, portable)")
    ap.add_argument("--max-autotune", action="store_true",
                    help="add torch.compile(mode='max-autotune') (slow to compile)")
    args = ap.parse_args()
    fits = [f.strip() for f in args.fits.split(",") if f.strip()]
    if not fits or set(fits) - set(FITS):
        ap.error(f"--fits: a comma-separated subset of {', '.join(FITS)}")
    runs = []  # (kind, batch)
    for kind in fits:
        if kind == "hash":
            own = graph_batch(FITS["hash"])
            batches = ([int(b) for b in args.hash_batches.split(",")] if args.hash_batches
                       else sorted({args.batch, own}, reverse=True))
            runs += [(kind, b) for b in batches]
        else:
            runs.append((kind, args.batch))
    rows: list[Row] = []
    vk: dict[str, Row] = {}

    def report(row: Row) -> None:  # as each finishes: a run cut short keeps its rows
        rows.append(row)
        ms = f"{row.ms:.3f} ms" if row.ms is not None else "-"
        print(f"  [{row.fit}] {row.name}: {ms}, PSNR "
              f"{'-' if row.psnr is None else f'{row.psnr:.2f}'} dB; {row.note}", flush=True)

    target = None
    variants = [v for v in args.variants.split(",") if v]
    if not variants or set(variants) - {"auto", "coopmat", "portable"}:
        ap.error("--variants: a comma-separated subset of auto, coopmat, portable")
    for kind, batch in runs:
        for i, variant in enumerate(variants):
            with tempfile.TemporaryDirectory() as tmp:
                row, p0, a, target, params = run_vkgraph(args.device, batch, args.steps,
                                                         Path(tmp), FITS[kind], variant)
            fit = peer_fit(kind, p0, a, params, batch)
            row.fit = fit["label"]
            if i == 0:
                vk[row.fit] = row
            report(row)
        torch_rows(fit, target, batch, args.steps, "eager", report)
        if kind == "frequency" and not args.no_jax:
            jax_rows(fit["ws0"], target, batch, args.steps, report, fit["label"])
        if not args.no_compile:  # last: the compiles take the longest
            torch_rows(fit, target, batch, args.steps, "compile", report)
        if args.max_autotune:
            torch_rows(fit, target, batch, args.steps, "max-autotune", report)

    h, w = target.shape[:2]
    what = {"frequency": "frequency: 12 -> 64x4 leaky -> 3 sigmoid, L2, Adam 1e-3, uniform uv, "
                         "nearest targets",
            "hash": "hash: hash grid 8x2 (2^16 per level) -> 64x3 leaky -> 3 exp, L2, Adam "
                    "1e-3 / table 1e-2, jittered uv, bilinear targets"}
    print(f"\nfit-image ({'; '.join(what[k] for k in fits)}), {args.steps} steps, target "
          f"{w}x{h}; {warm_steps(args.steps)} warm-up steps untimed; PSNR of the fit after "
          "all steps (linear rgb, peak 1)")
    print("| fit | implementation | ms/step | ÷ vkgraph | PSNR dB | notes |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        ref = vk.get(r.fit)
        ms = f"{r.ms:.3f}" if r.ms is not None else "-"
        ratio = f"{r.ms / ref.ms:.2f}" if r.ms is not None and ref and ref.ms else "-"
        ps = f"{r.psnr:.2f}" if r.psnr is not None else "-"
        print(f"| {r.fit} | {r.name} | {ms} | {ratio} | {ps} | {r.note} |")
    print("target for vkgraph: <= 0.25 ms/step (stretch 0.1) at batch 2^18 (H100); ÷ vkgraph < 1: "
          "faster than vkgraph (the vkgraph row of the same fit and batch)")
    bad = 0
    for label, ref in vk.items():  # the hash peers must train as vkgraph does
        if not label.startswith("hash") or ref.psnr is None:
            continue
        for r in rows:
            if r.fit != label or r is ref or r.psnr is None:
                continue
            ok = abs(r.psnr - ref.psnr) <= GUARD_DB
            bad += not ok
            print(f"PSNR guard [{label}] {r.name}: {r.psnr:.2f} dB against vkgraph's "
                  f"{ref.psnr:.2f} dB: {'ok' if ok else 'MISMATCH'} (within {GUARD_DB} dB)")
    if bad:
        print(f"PSNR guard: {bad} hash-grid peer rows differ from vkgraph by more than "
              f"{GUARD_DB} dB: not the same training")


if __name__ == "__main__":
    main()
