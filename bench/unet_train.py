"""unet-t training frame time against the same U-Net step in PyTorch on the same GPU, in the
same run.

The frame: graphs/train-unet.cfg's (16 tiles of 128x128 from the training photographs with
fresh noise, width 32, 3 scales: 487,459 weights; forward, L1 loss, backward, Adam with
gradient clipping). vkgraph runs it as `vkgraph cli` does (run_frames, batched submissions);
PyTorch runs bench/kpn_arch.py's `unetmid` (the same network, features and loss; the same
batch drawn on the GPU) with Adam and clip_grad_norm_, eager and through torch.compile, in
its default precision (TF32 convolutions). ms/frame: the median over --repeats blocks of
--frames frames after warm-up (wall time, synchronised at each block's end); "x" = the row's
time / vkgraph's. --profile adds vkgraph's GPU time per kernel (timestamps, summed over a
frame's nodes of that kernel), which says where a frame goes. --blocks times vkgraph with
each of the layer kernels' block shapes given ("TN,RM,RN": a workgroup sums TM x TN of its
matrix product, RM x RN a thread; modules/unet-t/forward.py's Block), a row each, the first
the one the x column divides by. --kernels times each of the layer kernels' variants
(modules/unet-t/forward.py's `kernels`: coopmat, f16 operands with f32 sums on tensor cores,
or portable, fp32; the blocks apply to portable), a row each. PyTorch's `amp` row is eager
with autocast to f16 and a GradScaler: the mixed precision the coopmat kernels use.

    python bench/unet_train.py [--frames 30] [--repeats 3] [--profile]
                               [--torch eager,compile,amp] [--kernels coopmat portable]
                               [--blocks 32,4,4 64,4,8 ...] [--batch N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from vkgraph.api import Session  # noqa: E402
from vkgraph.pipeline.cfg import read_cfg  # noqa: E402
from vkgraph.pipeline.vk import Device  # noqa: E402

WARM = 10


def run_vkgraph(frames: int, repeats: int, profile: bool, batch: int | None = None) -> dict:
    dev = Device.open()
    try:
        g = read_cfg(ROOT / "graphs" / "train-unet.cfg")
        if batch:  # fewer tiles a frame: a quick check of the bench itself (the CPU driver)
            g.modules[("cnngenin", "01")].set_param("batch", batch)
        g.frames = WARM + repeats * frames + 5
        b = Session(g, dev).prepare()
        b.run_frames(0, WARM, last_frame_only=True, write_sinks=False)
        f, blocks = WARM, []
        for _ in range(repeats):
            t0 = time.perf_counter()
            b.run_frames(f, f + frames, last_frame_only=True, write_sinks=False)
            f += frames
            blocks.append((time.perf_counter() - t0) / frames * 1e3)
        m = g.modules[("unet-t", "01")]
        out = {"ms": float(np.median(blocks)), "loss": m.cls.hook("current_loss")(b.context, m)}
        if profile:
            b.program.set_profile(True)
            per = defaultdict(list)
            nodes = [n for n in b.plan.schedule if n.kernel is not None]
            for _ in range(5):
                b.run_frame(f, download=False)
                f += 1
                sums = defaultdict(float)
                for n, (_, t) in zip(nodes, b.timings(), strict=True):
                    sums[n.kernel] += t
                for k, t in sums.items():
                    per[k].append(t)
            out["kernels"] = {k: float(np.median(v)) for k, v in per.items()}
        return out
    finally:
        dev.close()


def run_torch(mode: str, frames: int, repeats: int) -> dict:
    import torch
    from kpn_arch import VARIANTS, Cnn, batch, load_training

    dev = "cuda"
    model = Cnn(torch, VARIANTS["unetmid"], dev, 1)
    opt = torch.optim.Adam(model.W, lr=1e-3)
    imgs = load_training(torch, dev)
    rng = np.random.default_rng(1)

    def step(X, R, A, B):
        loss = (model.forward(X, A, B) - R).abs().sum(1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.W, 1.0)
        opt.step()
        return loss

    scaler = torch.amp.GradScaler("cuda")

    def step_amp(X, R, A, B):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = (model.forward(X, A, B) - R).abs().sum(1).mean()
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.W, 1.0)
        scaler.step(opt)
        scaler.update()
        return loss

    if mode == "amp":
        step = step_amp
    if mode == "compile":
        step = torch.compile(step)
    data = [batch(torch, imgs, rng, dev=dev) for _ in range(8)]  # drawn outside the timing
    for i in range(WARM):
        step(*data[i % 8])
    torch.cuda.synchronize()
    blocks = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(frames):
            loss = step(*data[i % 8])
        torch.cuda.synchronize()
        blocks.append((time.perf_counter() - t0) / frames * 1e3)
    return {"ms": float(np.median(blocks)), "loss": float(loss)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--torch", default="eager,compile")
    ap.add_argument("--blocks", nargs="+", metavar="TN,RM,RN")
    ap.add_argument("--kernels", nargs="+", choices=("coopmat", "portable"))
    ap.add_argument("--batch", type=int, help="vkgraph's tiles a frame (default the cfg's 16; "
                    "fewer only to check the bench on a slow device)")
    args = ap.parse_args()
    rows = {}
    runs = [(k, b) for k in args.kernels or [None]
            for b in (args.blocks if k != "coopmat" and args.blocks else [None])]
    for kern, block in runs:
        if kern:
            os.environ["VKGRAPH_UNET_KERNELS"] = kern
        if block:
            os.environ["VKGRAPH_UNET_BLOCK"] = block
        name = " ".join(["vkgraph"] + [v for v in (kern, block) if v])
        rows[name] = run_vkgraph(args.frames, args.repeats, args.profile, args.batch)
    for mode in filter(None, args.torch.split(",")):
        rows[f"torch {mode}"] = run_torch(mode, args.frames, args.repeats)
    first = next(iter(rows))
    base = rows[first]["ms"]
    print("| run | ms/frame | frames/s | x vkgraph's time |")
    print("|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['ms']:.2f} | {1e3 / r['ms']:.1f} | {r['ms'] / base:.2f} |")
    for name, r in rows.items() if args.profile else ():
        if "kernels" not in r:
            continue
        ks = r["kernels"]
        total = sum(ks.values())
        print(f"\n{name} GPU time per kernel (ms a frame, {total:.2f} in all):")
        print("| kernel | ms | share |")
        print("|---|---|---|")
        for k, t in sorted(ks.items(), key=lambda kv: -kv[1]):
            print(f"| {k} | {t:.2f} | {100 * t / total:.0f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
