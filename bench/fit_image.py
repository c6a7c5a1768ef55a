"""Image fit (graphs/fit-image.cfg) at a large batch: ms per training step of vkgraph's mlp-t
against the same network and training in PyTorch (eager, eager + CUDA graph, torch.compile)
and JAX (jax.jit) in the same run, and the PSNR of the fitted image after the same number of
steps. Target: <= 0.1 ms/step at batch 2^18 on an H100.

The network and training are fit-image.cfg's (modules/mlp-t/README.md): uv in [0,1)^2 ->
frequency encoding sin/cos(pi 2^k u), sin/cos(pi 2^k v), k = 0..2 (12 inputs, mlp-t's order)
-> 4 hidden layers of 64, leaky ReLU (0.01) -> 3 sigmoid outputs, no biases, L2 (mean over
batch and outputs), Adam (lr 1e-3, beta 0.9/0.999, eps 1e-8), a fresh batch of uniform random
uv per step, nearest-texel targets from graphs/images/scene.png in linear light. Every peer
starts from vkgraph's initial weights (read back after its frame 0). vkgraph's loss scale
(1024) is left out of the peers: in fp32 it only moves rounding.

Per step: vkgraph's wall time per frame (submit + wait, one step each) and its GPU time (the
sum of its dispatches' timestamps); the peers' wall time over the timed steps, between two
device synchronisations. PSNR (peak 1, linear rgb) of the network at every texel centre
against the target, after `--steps` optimizer steps (warm-up and compile steps included).

    python bench/fit_image.py [--batch 262144] [--steps 1000] [--device NAME] [--max-autotune]
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

from vkgraph.pipeline.cfg import apply_line, read_cfg  # noqa: E402
from vkgraph.pipeline.formats import read_image  # noqa: E402
from vkgraph.pipeline.runner import Build  # noqa: E402
from vkgraph.pipeline.vk import Device  # noqa: E402

CFG = ROOT / "graphs" / "fit-image.cfg"
MLP = ("mlp-t", "01")
LR, BETA1, BETA2, EPS = 1e-3, 0.9, 0.999, 1e-8
OCTAVES, SLOPE = 3, 0.01


class Row:
    def __init__(self, name: str, ms: float | None = None, psnr: float | None = None,
                 note: str = "", gpu_ms: float | None = None):
        self.name, self.ms, self.psnr, self.note, self.gpu_ms = name, ms, psnr, note, gpu_ms


def psnr(x: np.ndarray, ref: np.ndarray) -> float:
    mse = float(np.mean((x[..., :3].astype(np.float64) - ref[..., :3]) ** 2))
    return 10 * math.log10(1.0 / max(mse, 1e-20))


def failure(e: Exception) -> str:
    lines = str(e).strip().splitlines()
    return f"failed: {type(e).__name__}" + (f": {lines[0][:200]}" if lines else "")


def warm_steps(steps: int) -> int:
    """Untimed steps before the timed ones (compiles, CUDA-graph recording, caches)."""
    return max(1, min(20, steps // 2))


# -- vkgraph ------------------------------------------------------------------------------

def run_vkgraph(device_name, batch: int, steps: int, folder: Path):
    """(Row, initial weights as (L, W, W), the target) of fit-image.cfg at this batch."""
    g = read_cfg(CFG)
    for name, inst in [k for k in g.modules if k[0] == "display"]:
        g.remove_module(name, inst)
    for line in [f"param:mlp-t:01:batch:{batch}", "param:mlp-t:01:preview:0",
                 f"param:o-lut:w:filename:{folder / 'w'}",
                 "module:o-pfm:fit", f"param:o-pfm:fit:filename:{folder / 'fit'}",
                 "connect:mlp-t:01:output:o-pfm:fit:input"]:
        apply_line(g, line, "bench/fit_image.py")
    g.frames = steps + 1  # frame f applies the gradient of frame f-1: frame `steps` shows
    dev = Device.open(device_name)  # the weights after `steps` updates (eval: last frame)
    try:
        name = dev.info.name
        t0 = time.perf_counter()
        b = Build(g, dev, profile=True)
        m = g.modules[MLP]
        a = m.data["arch"]
        b.run_frame(0, download=False)
        w0 = b.read(m.data["adam"], "w").reshape(a.layers, a.width, a.width).copy()
        warm = warm_steps(steps)
        gpu = []
        for f in range(1, warm + 1):
            b.run_frame(f, download=False)
            if f > warm // 2:  # the dispatches of one frame, eval's early exit included
                gpu.append(sum(ms for _, ms in b.timings()))
        setup = time.perf_counter() - t0
        t0 = time.perf_counter()
        for f in range(warm + 1, steps):
            b.run_frame(f, download=False)
        n = steps - warm - 1
        ms = (time.perf_counter() - t0) / max(1, n) * 1e3
        b.run_frame(steps, download=False)  # the last frame also evaluates the image
        out = b.read(m.data["eval"], "output")
        loss = m.cls.hook("current_loss")(b, m)
        target = read_image(b.resolve(g.modules[("i-img", "main")].param("filename")))
    finally:
        dev.close()
    row = Row(f"vkgraph mlp-t ({name})", ms if n > 0 else None, psnr(out, target),
              f"wall per frame (submit + wait); GPU {np.median(gpu):.3f} ms/step (timestamps); "
              f"loss {loss:.4g}; setup {setup:.1f} s", gpu_ms=float(np.median(gpu)))
    return row, w0, a, target


def used_weights(w0: np.ndarray, a) -> list[np.ndarray]:
    """mlp-t's padded (L, W, W) matrices -> the used (out, in) blocks, fp32."""
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

def torch_rows(ws0, target, batch: int, steps: int, which: str, report) -> None:
    """which = "eager": eager (+ CUDA graph) rows; "compile": the torch.compile rows;
    "max-autotune": torch.compile's max-autotune mode (minutes of compiling)."""
    try:
        import torch
    except ImportError:
        if which == "eager":
            report(Row("PyTorch", note="not installed"))
        return
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    where = torch.cuda.get_device_name(0) if cuda else "CPU"
    h, w = target.shape[:2]
    tgt = torch.from_numpy(np.ascontiguousarray(target[..., :3])).to(dev)
    scale = (math.pi * 2.0 ** torch.arange(OCTAVES, dtype=torch.float32)).to(dev)
    grid = torch.from_numpy(grid_uv(h, w)).to(dev)
    warm = warm_steps(steps)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def encode(uv):  # (B, 2) -> (B, 4 O): input (d O + k) 2 + s, as mlp-t
        a = uv[:, :, None] * scale
        return torch.stack([torch.sin(a), torch.cos(a)], -1).reshape(uv.shape[0], -1)

    def forward(params, uv):
        x = encode(uv)
        for p in params[:-1]:
            x = torch.nn.functional.leaky_relu(x @ p.t(), SLOPE)
        return torch.sigmoid(x @ params[-1].t())

    def loss_of(params, uv):
        ix = (uv[:, 0] * w).long().clamp_(max=w - 1)
        iy = (uv[:, 1] * h).long().clamp_(max=h - 1)
        t = tgt[iy, ix]
        return torch.mean((forward(params, uv) - t) ** 2)

    def fresh(capturable=False):
        torch.manual_seed(1)  # each variant draws the same batches (where its RNG use agrees)
        params = [torch.nn.Parameter(torch.from_numpy(x).to(dev)) for x in ws0]
        kw = {"fused": True} if cuda else {}
        opt = torch.optim.Adam(params, lr=LR, betas=(BETA1, BETA2), eps=EPS,
                               capturable=capturable, **kw)
        return params, opt

    def fitted(params) -> float:
        with torch.no_grad():
            img = forward(params, grid).reshape(h, w, 3).float().cpu().numpy()
        return psnr(img, target)

    def timed(step, n_warm) -> float:
        for _ in range(n_warm):
            step()
        sync()
        t0 = time.perf_counter()
        for _ in range(steps - n_warm):
            step()
        sync()
        return (time.perf_counter() - t0) / max(1, steps - n_warm) * 1e3

    def plain(name, fn_loss, note, tf32=False, mark=False):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        params, opt = fresh()

        def step():
            if mark:
                torch.compiler.cudagraph_mark_step_begin()
            uv = torch.rand(batch, 2, device=dev)
            loss = fn_loss(params, uv)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        t0 = time.perf_counter()
        ms = timed(step, warm)
        report(Row(name, ms, fitted(params),
                   f"{note}; {time.perf_counter() - t0:.1f} s in all"))

    def graphed(name, note, tf32=False):
        """The whole step (sampling, forward, backward, fused Adam) as one CUDA graph."""
        torch.backends.cuda.matmul.allow_tf32 = tf32
        params, opt = fresh(capturable=True)

        def step():
            uv = torch.rand(batch, 2, device=dev)
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
        t1 = time.perf_counter()
        n = steps - max(n_eager, warm)
        for _ in range(n):
            graph.replay()
        sync()
        ms = (time.perf_counter() - t1) / max(1, n) * 1e3
        report(Row(name, ms, fitted(params), f"{note}; {time.perf_counter() - t0:.1f} s in all"))

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
            report(Row(name, note=failure(e)))
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False
            if cuda:
                torch.cuda.empty_cache()


# -- JAX ----------------------------------------------------------------------------------

def jax_rows(ws0, target, batch: int, steps: int, report) -> None:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # PyTorch shares the GPU
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        report(Row("JAX", note="not installed"))
        return
    try:
        backend = jax.default_backend()
        where = jax.devices()[0].device_kind
    except Exception as e:
        report(Row("JAX", note="no device: " + failure(e)))
        return
    if backend == "cpu" and batch * steps > 2 ** 22:
        report(Row(f"JAX {jax.__version__}", note="found no GPU (cpu backend): skipped at "
                                                  "this size"))
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
        t1 = time.perf_counter()
        for i in range(warm, steps):
            state = step(state, keys[i])
        jax.block_until_ready(state)
        ms = (time.perf_counter() - t1) / max(1, steps - warm) * 1e3
        img = np.asarray(jax.jit(forward)(state[0], grid)).reshape(h, w, 3)
        report(Row(name, ms, psnr(img, target), f"{note}; {time.perf_counter() - t0:.1f} s "
                                                "in all"))

    for name, precision, note in [
            (f"JAX {jax.__version__} jit fp32 ({where})", jax.lax.Precision.HIGHEST,
             "precision HIGHEST, hand-written Adam"),
            ("JAX jit, default precision", jax.lax.Precision.DEFAULT,
             "XLA's default for f32 dots (TF32 on tensor-core GPUs)")]:
        try:
            one(name, precision, note)
        except Exception as e:
            report(Row(name, note=failure(e)))


# -- table --------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=2 ** 18, help="samples per step (2^18)")
    ap.add_argument("--steps", type=int, default=1000, help="optimizer steps per run")
    ap.add_argument("--device", help="Vulkan device (substring of its name)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    ap.add_argument("--no-jax", action="store_true", help="skip JAX")
    ap.add_argument("--max-autotune", action="store_true",
                    help="add torch.compile(mode='max-autotune') (slow to compile)")
    args = ap.parse_args()
    rows: list[Row] = []

    def report(row: Row) -> None:  # as each finishes: a run cut short keeps its rows
        rows.append(row)
        ms = f"{row.ms:.3f} ms" if row.ms is not None else "-"
        print(f"  {row.name}: {ms}, PSNR "
              f"{'-' if row.psnr is None else f'{row.psnr:.2f}'} dB; {row.note}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        vk, w0, a, target = run_vkgraph(args.device, args.batch, args.steps, Path(tmp))
    report(vk)
    ws0 = used_weights(w0, a)
    torch_rows(ws0, target, args.batch, args.steps, "eager", report)
    if not args.no_jax:
        jax_rows(ws0, target, args.batch, args.steps, report)
    if not args.no_compile:  # last: the compiles take the longest
        torch_rows(ws0, target, args.batch, args.steps, "compile", report)
    if args.max_autotune:
        torch_rows(ws0, target, args.batch, args.steps, "max-autotune", report)

    h, w = target.shape[:2]
    print(f"\nfit-image (12 -> 64x4 leaky -> 3 sigmoid, L2, Adam 1e-3), batch {args.batch}, "
          f"{args.steps} steps, target {w}x{h}; {warm_steps(args.steps)} warm-up steps "
          "untimed; PSNR of the fit after all steps (linear rgb, peak 1)")
    print("| implementation | ms/step | ÷ vkgraph | PSNR dB | notes |")
    print("|---|---|---|---|---|")
    for r in rows:
        ms = f"{r.ms:.3f}" if r.ms is not None else "-"
        ratio = f"{r.ms / vk.ms:.2f}" if r.ms is not None and vk.ms else "-"
        ps = f"{r.psnr:.2f}" if r.psnr is not None else "-"
        print(f"| {r.name} | {ms} | {ratio} | {ps} | {r.note} |")
    print("target for vkgraph: <= 0.1 ms/step at batch 2^18 (H100); ÷ vkgraph < 1: "
          "faster than vkgraph")


if __name__ == "__main__":
    main()
