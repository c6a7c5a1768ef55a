"""kpn-t training frame time: vkgraph's MLP kernel variants against the same maths in
PyTorch on the same GPU, in the same run.

Per input size (full image, 4 levels, default params: smape loss, plain filter, Adam):
  vkgraph  fused    fwd_cm + bck_fused (cooperative matrices; the backward recomputes the
                    activations, the weight gradient is summed in registers per workgroup)
           coopmat  fwd_cm + bck_cm + mulw_cm (cooperative matrices, f16 activations stored)
           portable fwd + bck + mulw (fp32, any device; skipped where its fp32 activation
                    buffer would exceed 4 GiB, 2048^2 and up)
           cpu      fwd_cpu + bck_cpu + mulw_cpu (CPU drivers: one pixel per SIMD lane)
  torch    eager    bf16 autocast, eager
           compile  the same frame through torch.compile (forward and backward graphs)
ms/frame is the median over --repeats blocks of --frames frames (after WARM = 13 warm-up
frames, and more, up to EXTRA, until WARM_S = 0.5 s of warm-up: a GPU's clocks ramp up
over a fraction of a second, which a short first block would otherwise pay) of the wall time
per frame (vkgraph: Build.run_frames, as `vkgraph cli` runs frames:
8 to a submission, submissions back to back, a wait at the block's end; PyTorch: steps
between two synchronisations); "GPU ms" is
the device's own time per frame (vkgraph: the first dispatch's start to the last one's end,
median over one more block of frames; PyTorch: CUDA events around each block, median). Mpx/s = input
pixels / wall time; "x eager" and "x compile" = PyTorch's wall time / ours (with --interleave:
the median over the turns of each turn's ratio); "roofline" = the
time the design's roofline allows / measured time, with these figures: 0.19 MFLOP per input
pixel (useful work, 4 levels) at the fp16 dense tensor peak, and per input pixel 5.5 KB of
memory traffic (stored f16 activations) or 0.4 KB (fused), at the memory bandwidth; the larger
of the two times is the bound. Peaks: H100 SXM (HBM3) 989 TFLOP/s and 3.35 TB/s, H100 PCIe 756
TFLOP/s and 2.0 TB/s (from the device name).

    python bench/kpn_train.py [--sizes 256,1024,2048,4096] [--variants fused,coopmat,portable]
                              [--torch eager,compile] [--frames 50] [--repeats 3] [--profile]
                              [--[no-]interleave] [--json FILE]
    python bench/kpn_train.py --cpu      # the CPU row: portable kernels on the Vulkan device
                                         # at hand (lavapipe) against PyTorch on the CPU, 64^2

--interleave (the default with --cpu) builds and warms up every row first, then runs
--repeats turns of one block per row (vkgraph variants, then PyTorch), so that load from
other work on shared cores falls on each turn's rows alike; without it each row runs all its
blocks in turn (a vkgraph row's child process then exits before PyTorch starts).

torch.compile runs at every size (each size compiles anew, ~30 s); --compile-sizes limits it
and the table then says which sizes were skipped and why.

--profile prints each vkgraph run's per-node GPU timestamps (summed per kernel over the
levels, and per node for the largest and smallest level) and PyTorch's check: its loss at the
Xavier init against vkgraph's frame-0 loss on the same image.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vkgraph.api import Session  # noqa: E402
from vkgraph.pipeline.cfg import apply_line  # noqa: E402
from vkgraph.pipeline.formats import write_pfm  # noqa: E402
from vkgraph.pipeline.graph import Graph  # noqa: E402
from vkgraph.pipeline.vk import Device  # noqa: E402

LEVELS = 4
WARM = 13  # untimed frames (the first compiles, torch.compile's warm-up); the loss check's frame
WARM_S = 0.5  # then more untimed frames until this many seconds of warm-up (clocks ramp up)
EXTRA = 4096  # at most this many of those
FLOP_PER_PX = 0.19e6  # forward + backward + weight gradient, 4 levels, per input px
BYTES_PER_PX = {"coopmat": 5.5e3, "fused": 0.4e3,  # fp32 stores: twice f16
                "portable": 11e3, "cpu": 11e3}
VARIANT_ENV = {"fused": {"VKGRAPH_KPN_MLP": "fused"}, "coopmat": {"VKGRAPH_KPN_MLP": "coopmat"},
               "portable": {"VKGRAPH_PORTABLE": "1"}, "cpu": {"VKGRAPH_KPN_MLP": "cpu"}}


def peaks(name: str) -> tuple[float, float, str]:
    if "PCIe" in name or "PCIE" in name:
        return 756e12, 2.0e12, "H100 PCIe: 756 TFLOP/s fp16 dense, 2.0 TB/s"
    return 989e12, 3.35e12, "H100 SXM: 989 TFLOP/s fp16 dense, 3.35 TB/s"


def image_pair(size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A smooth colour pattern (reference) and it with Gaussian noise (input), float32."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 8.0 * np.pi, size, dtype=np.float32)
    ref = np.empty((size, size, 3), np.float32)
    for c in range(3):
        ref[..., c] = 0.5 + 0.3 * np.sin(t[None, :] * (1 + 0.3 * c)) * np.cos(t[:, None] * 0.7)
    noisy = ref + rng.standard_normal(ref.shape, dtype=np.float32) * 0.05
    return noisy, ref


def kpn_graph(folder: Path) -> Graph:
    g = Graph()
    for line in ["module:i-pfm:main", "module:i-pfm:ref", "module:kpn-t:01", "module:o-lut:w",
                 f"param:o-lut:w:filename:{folder / 'w'}", "connect:kpn-t:01:w:o-lut:w:input",
                 f"param:i-pfm:main:filename:{folder / 'x.pfm'}",
                 f"param:i-pfm:ref:filename:{folder / 'r.pfm'}",
                 "param:kpn-t:01:init:1", f"param:kpn-t:01:levels:{LEVELS}",
                 "connect:i-pfm:main:output:kpn-t:01:input",
                 "connect:i-pfm:ref:output:kpn-t:01:ref"]:
        apply_line(g, line, "bench")
    return g


def run_vkgraph(variant: str, folder: Path, frames: int, repeats: int, profile: bool) -> dict:
    """In a child process (a driver crash costs only this row), with its own device (which
    owns and frees every buffer of the build)."""
    import subprocess

    res = subprocess.run(_child_cmd(variant, folder, frames, repeats, profile),
                         capture_output=True, text=True)
    return _child_result(res.returncode, res.stdout, res.stderr)


def _child_cmd(variant: str, folder: Path, frames: int, repeats: int, profile: bool,
               serve: bool = False) -> list[str]:
    return ([sys.executable, __file__, "--child", variant, str(folder), str(frames),
             str(repeats)] + (["--profile"] if profile else []) + (["--serve"] if serve else []))


def _child_result(code: int, stdout: str, stderr: str) -> dict:
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if code != 0 or not lines:
        tail = (stderr.strip().splitlines() or ["?"])[-1]
        return {"ms": None, "error": f"exit {code}: {tail}"[:200]}
    return json.loads(lines[-1])


class ServedVkgraph:
    """A vkgraph row run block by block on request (--interleave): the child builds and
    warms up, then times one block of frames per `block()` call, so that the rows' blocks
    can take turns and share whatever else loads the machine at the time."""

    def __init__(self, variant: str, folder: Path, frames: int, repeats: int, profile: bool):
        import subprocess

        self.proc = subprocess.Popen(_child_cmd(variant, folder, frames, repeats, profile,
                                                serve=True),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.ready = self._reply() == "ready"

    def _reply(self) -> str:
        line = self.proc.stdout.readline()
        return line.strip()

    def block(self) -> float | None:
        if not self.ready:
            return None
        self.proc.stdin.write("block\n")
        self.proc.stdin.flush()
        reply = self._reply()
        try:
            return float(reply)
        except ValueError:
            self.ready = False
            return None

    def finish(self) -> dict:
        if self.ready:
            self.proc.stdin.write("end\n")
            self.proc.stdin.flush()
        stdout, stderr = self.proc.communicate()
        return _child_result(self.proc.returncode, stdout, stderr)


def _child(variant: str, folder: Path, frames: int, repeats: int, profile: bool,
           serve: bool = False) -> None:
    try:
        out = _run_vkgraph(variant, folder, frames, repeats, profile, serve)
    except Exception as e:  # noqa: BLE001 - reported as the row's result
        out = {"ms": None, "error": f"{type(e).__name__}: {e}"[:200]}
    print(json.dumps(out))


def _blocks_on_request(run_block) -> list[float]:
    """--serve: "ready", then one timed block per "block" line on stdin (its ms a frame on
    stdout), until "end"."""
    print("ready", flush=True)
    blocks = []
    for line in sys.stdin:
        if line.strip() != "block":
            break
        blocks.append(run_block())
        print(f"{blocks[-1]:.6f}", flush=True)
    return blocks


def _run_vkgraph(variant: str, folder: Path, frames: int, repeats: int,
                 profile: bool, serve: bool = False) -> dict:
    saved = {k: os.environ.get(k) for k in ("VKGRAPH_KPN_MLP", "VKGRAPH_PORTABLE")}
    for k in saved:
        os.environ.pop(k, None)
    os.environ.update(VARIANT_ENV[variant])
    dev = Device.open()
    try:
        g = kpn_graph(folder)
        gpu_frames = min(frames, 20)
        g.frames = WARM + EXTRA + repeats * frames + gpu_frames
        b = Session(g, dev).prepare()  # timed without timestamps (they may serialise dispatches)
        m = g.modules[("kpn-t", "01")]
        used = {n.kernel for n in m.nodes}
        b.run_frame(0, download=False)
        loss0 = m.cls.hook("current_loss")(b.context, m)
        # the warm-up runs as the timed blocks do (batched submissions), so that recording
        # the batch lists (on first use) falls here and not into the first block
        t_warm = time.perf_counter()
        b.run_frames(1, WARM, last_frame_only=True, write_sinks=False)
        loss_warm = m.cls.hook("current_loss")(b.context, m)  # the agreement check's loss
        f = WARM
        while time.perf_counter() - t_warm < WARM_S and f + 8 <= WARM + EXTRA:
            b.run_frames(f, f + 8, last_frame_only=True, write_sinks=False)
            f += 8

        def run_block() -> float:
            nonlocal f
            t0 = time.perf_counter()  # as `vkgraph cli` runs frames (batched submissions)
            b.run_frames(f, f + frames, last_frame_only=True, write_sinks=False)
            f += frames
            return (time.perf_counter() - t0) / frames * 1e3

        if serve:
            blocks = _blocks_on_request(run_block)
        else:
            blocks = [run_block() for _ in range(repeats)]
        gpu = []
        b.program.set_profile(True)
        for _ in range(gpu_frames):  # apart from the timed blocks: reading the stamps costs
            b.run_frame(f, download=False)
            f += 1
            gpu.append(b.gpu_span())  # first dispatch start to last end
        ms = float(np.median(blocks))
        want = {"fused": "bck_fused", "coopmat": "mulw_cm", "portable": "mulw",
                "cpu": "fwd_cpu"}[variant]
        if want not in used:  # e.g. a device without cooperative matrices
            raise RuntimeError(f"the build chose other kernels: {sorted(used)}")
        out = {"ms": ms, "blocks": blocks, "gpu_ms": float(np.median(gpu)), "loss0": loss0,
               "loss_warm": loss_warm, "loss": m.cls.hook("current_loss")(b.context, m),
               "kernels": sorted(used), "frames": f}
        if profile:
            nodes = [n for n in b.plan.schedule if n.kernel is not None]
            times = b.timings()
            out["nodes"] = [(n.kernel, n.dispatch[0], n.dispatch[1], t)
                            for n, (_, t) in zip(nodes, times, strict=True)]
        return out
    finally:
        dev.close()
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v


# -- the same maths in PyTorch (modules/kpn-t/README.md), bf16 autocast for the MLP ------

TAPS = [(0, -2), (-2, -1), (-1, -1), (0, -1), (1, -1), (2, -1), (-1, 0), (0, 0), (1, 0),
        (-2, 1), (-1, 1), (0, 1), (1, 1), (2, 1), (0, 2)]


class TorchKpn:
    """Pyramid (binomial Sub, U), features (|D| luminance, 8x8 window), 7-layer MLP (leaky
    ReLU 0.001), plain 15-tap filter with vkdt's tap replacement, reconstruction, smape loss
    (mean over pixels), autograd, Adam with global-norm clipping and L2
    (modules/kpn-t/README.md)."""

    def __init__(self, torch, size: int, W: np.ndarray, compiled: bool, dev: str = "cuda"):
        self.t = torch
        self.dev = dev
        self.sizes = [(size, size)]
        for _ in range(LEVELS):
            w, h = self.sizes[-1]
            self.sizes.append(((w + 1) // 2, (h + 1) // 2))
        b = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0], device=dev) / 16.0
        self.binom = (b[:, None] * b[None, :]).expand(3, 1, 5, 5).contiguous()
        self.luma = torch.tensor([0.2627, 0.6780, 0.0593], device=dev).view(3, 1, 1)
        self.W = torch.nn.Parameter(torch.tensor(W, dtype=torch.float32, device=dev))
        self.opt = torch.optim.Adam([self.W], lr=0.01, betas=(0.99, 0.999), eps=1e-4,
                                    weight_decay=2 * 0.001, fused=dev == "cuda")
        self.idx = {}
        self.loss_fn = torch.compile(self.frame_loss) if compiled else self.frame_loss

    def sym(self, n: int, lo: int, hi: int):
        """Mirrored (symmetric) indices -lo .. n+hi-1 -> 0 .. n-1."""
        key = ("s", n, lo, hi)
        if key not in self.idx:
            i = np.arange(-lo, n + hi) % (2 * n)
            i = np.where(i < n, i, 2 * n - 1 - i)
            self.idx[key] = self.t.tensor(i, device=self.dev)
        return self.idx[key]

    def pad(self, x, lo: int, hi: int):
        h, w = x.shape[-2:]
        return x.index_select(-2, self.sym(h, lo, hi)).index_select(-1, self.sym(w, lo, hi))

    def sub(self, M):
        return self.t.nn.functional.conv2d(self.pad(M, 2, 2)[None], self.binom, stride=2,
                                           groups=3)[0]

    def up_index(self, n: int, nc: int):
        key = ("u", n, nc)
        if key not in self.idx:
            x = np.arange(n)
            k = np.minimum(x >> 1, nc - 1)
            k1 = np.minimum(k + (x & 1), nc - 1)
            self.idx[key] = (self.t.tensor(k, device=self.dev), self.t.tensor(k1, device=self.dev))
        return self.idx[key]

    def up(self, C, w: int, h: int):
        ky, ky1 = self.up_index(h, C.shape[-2])
        kx, kx1 = self.up_index(w, C.shape[-1])
        Cy = 0.5 * (C.index_select(-2, ky) + C.index_select(-2, ky1))
        return 0.5 * (Cy.index_select(-1, kx) + Cy.index_select(-1, kx1))

    def features(self, D):
        """(N, 64): feature c = Y(|D|) at offset (c div 8 - 4, c mod 8 - 4)."""
        h, w = D.shape[-2:]
        Y = self.pad((D.abs() * self.luma).sum(0), 4, 3)
        cols = self.t.nn.functional.unfold(Y[None, None], 8)  # (1, 64 = ky*8 + kx, N)
        return cols[0].view(8, 8, h * w).transpose(0, 1).reshape(64, h * w).t()

    def mlp(self, F, W):
        h = F
        for layer in range(6):
            h = self.t.nn.functional.leaky_relu(h @ W[layer].t(), 0.001)
        return h @ W[6, :16].t()

    def apply(self, D, K):
        h, w = D.shape[-2:]
        Dp = self.pad(D, 2, 2)
        k = K[:, :15].float().t().reshape(15, h, w)
        ok = self.t.isfinite(k) & (k.abs() < 10.0)
        k = self.t.where(ok, k, self.t.full_like(k, 0.001))
        num = 0.0
        for t, (dx, dy) in enumerate(TAPS):
            num = num + k[t] * Dp[:, 2 + dy:2 + dy + h, 2 + dx:2 + dx + w]
        return num / k.sum(0).clamp(min=0.001)

    def frame_loss(self, X, R, W):
        M = [X]
        for _ in range(LEVELS):
            M.append(self.sub(M[-1]))
        I = []
        for i in range(LEVELS):
            w, h = self.sizes[i]
            D = M[i] - self.up(M[i + 1], w, h)
            if self.dev == "cuda":
                with self.t.autocast("cuda", dtype=self.t.bfloat16):
                    K = self.mlp(self.features(D), W)
            else:  # the CPU row: fp32 (bf16 on a CPU emulates; the portable kernels are fp32)
                K = self.mlp(self.features(D), W)
            I.append(self.apply(D, K))
        O = M[LEVELS]
        for i in reversed(range(LEVELS)):
            w, h = self.sizes[i]
            O = self.up(O, w, h) + I[i]
        return ((O - R).abs() / (O.abs() + R.abs() + 1e-3)).sum(0).mean()

    def step(self, X, R):
        self.opt.zero_grad(set_to_none=True)
        E = self.loss_fn(X, R, self.W)
        E.backward()
        self.t.nn.utils.clip_grad_norm_([self.W], 1000.0)
        self.opt.step()
        return E


class TorchRunner:
    """One PyTorch row: the model built and warmed up (WARM steps) on creation, then timed
    blocks of `frames` steps."""

    def __init__(self, torch, mode, X, R, W, frames: int, dev: str):
        self.t, self.frames, self.cuda = torch, frames, dev == "cuda"
        self.Xt = torch.tensor(X, device=dev).permute(2, 0, 1).contiguous()
        self.Rt = torch.tensor(R, device=dev).permute(2, 0, 1).contiguous()
        self.model = TorchKpn(torch, X.shape[0], W, compiled=(mode == "compile"), dev=dev)
        with torch.no_grad():  # eager, also fills the index caches before any compile
            self.loss0 = float(self.model.frame_loss(self.Xt, self.Rt, self.model.W))
        t0 = time.perf_counter()
        for _ in range(WARM):
            E = self.model.step(self.Xt, self.Rt)
        self.loss_warm = float(E.detach())  # the agreement check's loss
        self.sync()
        for _ in range(EXTRA):  # as vkgraph's rows: at least WARM_S of warm-up
            if time.perf_counter() - t0 >= WARM_S:
                break
            E = self.model.step(self.Xt, self.Rt)
            self.sync()
        self.warm = time.perf_counter() - t0
        self.E = E
        self.blocks, self.gpu = [], []

    def sync(self):
        if self.cuda:
            self.t.cuda.synchronize()

    def block(self) -> float:
        if self.cuda:
            start = self.t.cuda.Event(enable_timing=True)
            end = self.t.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        for _ in range(self.frames):
            self.E = self.model.step(self.Xt, self.Rt)
        if self.cuda:
            end.record()
        self.sync()
        self.blocks.append((time.perf_counter() - t0) / self.frames * 1e3)
        if self.cuda:
            self.gpu.append(start.elapsed_time(end) / self.frames)
        return self.blocks[-1]

    def result(self) -> dict:
        return {"ms": float(np.median(self.blocks)), "blocks": self.blocks,
                "gpu_ms": float(np.median(self.gpu)) if self.gpu else None,
                "loss0": self.loss0, "loss_warm": self.loss_warm,
                "loss": float(self.E.detach()), "warmup_s": self.warm,
                "peak_gib": self.t.cuda.max_memory_allocated() / 2**30 if self.cuda else None}


def _torch_frames(torch, mode, X, R, W, frames, repeats, dev) -> dict:
    runner = TorchRunner(torch, mode, X, R, W, frames, dev)
    for _ in range(repeats):
        runner.block()
    return runner.result()


def run_torch(mode: str, X: np.ndarray, R: np.ndarray, W: np.ndarray, frames: int,
              repeats: int, dev: str = "cuda") -> dict:
    import torch

    if dev == "cpu":
        try:
            return _torch_frames(torch, mode, X, R, W, frames, repeats, dev)
        except Exception as e:  # noqa: BLE001 - reported as the row's result
            return {"ms": None, "error": f"{type(e).__name__}: {e}"[:200]}
    try:
        out = _torch_frames(torch, mode, X, R, W, frames, repeats, dev)
    except torch.cuda.OutOfMemoryError:
        out = {"ms": None, "error": "OOM", "peak_gib": torch.cuda.max_memory_allocated() / 2**30}
    _free_cuda(torch)
    return out


def _free_cuda(torch) -> None:
    """The models and their tensors are gone: give the memory back for the next run."""
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def profile_table(nodes, title: str) -> str:
    agg: dict[str, list] = {}
    for kernel, _, _, t in nodes:
        agg.setdefault(kernel, [0.0, 0])
        agg[kernel][0] += t
        agg[kernel][1] += 1
    total = sum(v[0] for v in agg.values())
    lines = [f"{title}: GPU timestamps per kernel (summed over its nodes), total "
             f"{total:.3f} ms", "| kernel | nodes | ms | share |", "|---|---|---|---|"]
    for k, (t, n) in sorted(agg.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"| {k} | {n} | {t:.3f} | {100 * t / total:.1f}% |")
    lines += ["", "nodes over 1% of the frame (dispatch = threads x, y):",
              "| kernel | dispatch | ms |", "|---|---|---|"]
    for kernel, dx, dy, t in nodes:
        if t > 0.01 * total:
            lines.append(f"| {kernel} | {dx} x {dy} | {t:.3f} |")
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
               "--profile" in sys.argv, "--serve" in sys.argv)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=None, help="input sizes (default 256,1024,2048,4096; "
                    "with --cpu 64)")
    ap.add_argument("--variants", default=None,
                    help="vkgraph kernel variants (default fused,coopmat,portable; --cpu: "
                    "portable,cpu)")
    ap.add_argument("--torch", default="eager,compile", help="'' to skip PyTorch")
    ap.add_argument("--frames", type=int, default=50, help="timed frames per block")
    ap.add_argument("--repeats", type=int, default=3, help="timed blocks (the median counts)")
    ap.add_argument("--cpu", action="store_true",
                    help="the CPU row: PyTorch on the CPU (fp32, all cores) against the portable "
                    "kernels on the Vulkan device at hand (lavapipe on a machine without a GPU)")
    ap.add_argument("--interleave", action=argparse.BooleanOptionalAction, default=None,
                    help="time the rows' blocks in turns (vkgraph, eager, compile, vkgraph, "
                    "...) and give x eager / x compile as the median of each turn's ratio "
                    "(default with --cpu, whose cores are shared)")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--budget", type=float, default=0, help="skip torch.compile runs once "
                    "this many seconds have passed (0: never)")
    ap.add_argument("--compile-sizes", default="all",
                    help="torch.compile only at these sizes (default: all)")
    args = ap.parse_args()
    t_start = time.perf_counter()
    sizes = [int(s) for s in (args.sizes or ("64" if args.cpu else "256,1024,2048,4096"))
             .split(",") if s]
    variants = [v for v in (args.variants or ("portable,cpu" if args.cpu else
                                              "fused,coopmat,portable")).split(",") if v]
    torch_modes = [m for m in args.torch.split(",") if m]
    compile_sizes = None if args.compile_sizes == "all" else args.compile_sizes.split(",")
    tdev = "cpu" if args.cpu else "cuda"
    interleave = args.cpu if args.interleave is None else args.interleave
    dev = Device.open()
    name = dev.info.name
    dev.close()
    flops, bw, peak_text = peaks(name)
    if args.cpu:
        import torch

        cores = os.cpu_count()
        torch.set_num_threads(cores)
        print(f"device: {name}; PyTorch {torch.__version__} on the CPU, fp32, {cores} threads",
              flush=True)
    else:
        print(f"device: {name}; roofline figures: {peak_text}", flush=True)
    W0 = _reference_module().xavier_init().astype(np.float32)  # vkgraph's frame-0 weights
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for size in sizes:
            X, R = image_pair(size)
            write_pfm(folder / "x.pfm", X)
            write_pfm(folder / "r.pfm", R)
            row = {"size": size, "vk": {}, "torch": {}}
            if interleave:
                _interleaved(row, variants, torch_modes, folder, X, R, W0, args, tdev,
                             compile_sizes)
                results.append(row)
                continue
            for v in variants:
                if why := vk_skip(v, size):
                    row["vk"][v] = {"ms": None, "error": why}
                    continue
                row["vk"][v] = run_vkgraph(v, folder, args.frames, args.repeats, args.profile)
                _print_vk(size, v, row["vk"][v], args.profile)
            for mode in torch_modes:
                late = args.budget and time.perf_counter() - t_start > args.budget
                if why := torch_skip(mode, size, compile_sizes, late):
                    row["torch"][mode] = {"ms": None, "error": why}
                    continue
                try:
                    row["torch"][mode] = run_torch(mode, X, R, W0, args.frames, args.repeats,
                                                   tdev)
                except Exception as e:  # noqa: BLE001
                    row["torch"][mode] = {"ms": None, "error": f"{type(e).__name__}: {e}"[:200]}
                _print_torch(size, mode, row["torch"][mode])
            results.append(row)
    print()
    where = "PyTorch on the CPU (fp32)" if args.cpu else "PyTorch bf16 autocast"
    turns = (" (blocks in turns; x eager / x compile: the median of the turns' ratios)"
             if interleave else "")
    print(f"kpn-t training frame, {LEVELS} levels, full image; {name}; {where}; median of "
          f"{args.repeats} x {args.frames} frames{turns}")
    print("| input | impl | wall ms/frame | GPU ms/frame | Mpx/s | x eager | x compile | "
          "roofline |")
    print("|---|---|---|---|---|---|---|---|")
    for row in results:
        size = row["size"]
        px = size * size
        for v, r in row["vk"].items():
            ms = r["ms"]
            if ms is None:
                print(f"| {size}² | vkgraph {v} | {r['error']} | | | | | |")
                continue
            xe, xc = (ratio(row, v, mode) for mode in ("eager", "compile"))
            bound = max(FLOP_PER_PX * px / flops, BYTES_PER_PX[v] * px / bw) * 1e3
            roof = "" if args.cpu else f"{100 * bound / ms:.0f}%"
            print(f"| {size}² | vkgraph {v} | {ms:.2f} | {fmt(r.get('gpu_ms'))} | "
                  f"{px / ms / 1e3:.1f} | {fmt(xe)} | {fmt(xc)} | {roof} |")
        for mode, r in row["torch"].items():
            ms = r["ms"]
            label = f"torch {mode} ({'cpu fp32' if args.cpu else 'bf16'})"
            if ms is None:
                print(f"| {size}² | {label} | {r['error']} | | | | | |")
                continue
            print(f"| {size}² | {label} | {ms:.2f} | {fmt(r.get('gpu_ms'))} | "
                  f"{px / ms / 1e3:.1f} | | | |")
    print(f"same maths: the loss at frame 0 and at frame {WARM} (the {WARM}th step; later, "
          "once a spike of the default recipe has come, correct implementations part ways)")
    for row in results:
        runs = [(f"vkgraph {v}", r) for v, r in row["vk"].items()]
        runs += [(f"torch {m}", r) for m, r in row["torch"].items()]
        print(f"  {row['size']}²: " + "; ".join(
            f"{name} {r['loss0']:.6f} -> {r['loss_warm']:.6f}" for name, r in runs
            if "loss_warm" in r))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


def vk_skip(v: str, size: int) -> str | None:
    """Why a vkgraph row is not run at this size (None: it is)."""
    if v == "portable" and 7 * 64 * size * size * 4 > 2**32 - 1:
        return "not run: fp32 A > 4 GiB"
    return None


def torch_skip(mode: str, size: int, compile_sizes, late: bool) -> str | None:
    """Why a PyTorch row is not run at this size (None: it is); `late`: past --budget."""
    if mode == "compile" and late:
        return "skipped: past --budget"
    if mode == "compile" and compile_sizes and str(size) not in compile_sizes:
        return "skipped: --compile-sizes"
    return None


def ratio(row: dict, v: str, mode: str) -> float | None:
    """PyTorch's time / vkgraph's for row variant v: the median of the turns' ratios where the
    blocks took turns, else the ratio of the medians."""
    r, t = row["vk"][v], row["torch"].get(mode, {})
    if not r.get("ms") or not t.get("ms"):
        return None
    if r.get("turns") and t.get("turns"):
        return float(np.median([b / a for a, b in zip(r["blocks"], t["blocks"], strict=True)]))
    return t["ms"] / r["ms"]


def _print_vk(size: int, v: str, r: dict, profile: bool) -> None:
    print(f"{size}^2 vkgraph {v}: {fmt(r['ms'])} ms/frame (blocks {fmt_list(r.get('blocks'))}), "
          f"GPU {fmt(r.get('gpu_ms'), '.3f')} ms {r.get('error', '')} loss0 "
          f"{r.get('loss0', '-')} kernels {r.get('kernels', '')}", flush=True)
    if profile and "nodes" in r:
        print(profile_table(r["nodes"], f"{size}^2 {v}"), flush=True)


def _print_torch(size: int, mode: str, r: dict) -> None:
    print(f"{size}^2 torch {mode}: {fmt(r['ms'])} ms/frame (blocks {fmt_list(r.get('blocks'))}), "
          f"GPU {fmt(r.get('gpu_ms'), '.3f')} ms {r.get('error', '')} loss0 "
          f"{r.get('loss0', '-')} warm-up {fmt(r.get('warmup_s'), '.1f')} s peak "
          f"{fmt(r.get('peak_gib'), '.1f')} GiB", flush=True)


def _interleaved(row, variants, torch_modes, folder, X, R, W0, args, tdev,
                 compile_sizes) -> None:
    """--interleave: every row built and warmed up first, then args.repeats turns of one
    block per row (vkgraph variants, then PyTorch modes), so each turn's rows share the
    machine's state of that moment."""
    import torch

    size = row["size"]
    runners = {}
    for v in variants:
        if why := vk_skip(v, size):
            row["vk"][v] = {"ms": None, "error": why}
        else:
            runners[("vk", v)] = ServedVkgraph(v, folder, args.frames, args.repeats,
                                               args.profile)
    for mode in torch_modes:
        if why := torch_skip(mode, size, compile_sizes, late=False):
            row["torch"][mode] = {"ms": None, "error": why}
            continue
        try:
            runners[("torch", mode)] = TorchRunner(torch, mode, X, R, W0, args.frames, tdev)
        except Exception as e:  # noqa: BLE001 - reported as the row's result
            row["torch"][mode] = {"ms": None, "error": f"{type(e).__name__}: {e}"[:200]}
    for _ in range(args.repeats):
        for runner in runners.values():
            runner.block()
    for (kind, name), runner in runners.items():
        if kind == "vk":
            r = row["vk"][name] = runner.finish()
            if r.get("ms") is not None:
                r["turns"] = True
            _print_vk(size, name, r, args.profile)
        else:
            r = row["torch"][name] = {**runner.result(), "turns": True}
            _print_torch(size, name, r)
    runners.clear()
    if tdev == "cuda":
        _free_cuda(torch)


def fmt_list(values) -> str:
    return "-" if not values else " ".join(f"{v:.2f}" for v in values)


def _reference_module():
    """modules/kpn-t/reference.py."""
    from vkgraph.modules.kpn_t import reference

    return reference


if __name__ == "__main__":
    sys.exit(main())
