"""What NVIDIA's VK_NV_cooperative_matrix2 does for vkgraph's MLPs, measured: the tensor
throughput of workgroup-scope matrices against the warp-scope (KHR) ones the kernels use,
and an MLP forward whose activations never leave the matrices (use conversions).

glslang 13 cannot compile the extension; the kernels are Slang (bench/probe/mma_peak.slang,
bench/probe/mlp_coopmat2.slang), compiled through the Slang library of the `slangpy` wheel
(pipeline/slang.py; `pip install 'vkgraph[slang]'`). Two tables:

* peak: each kind of matrix product on register-resident operands in a loop (no memory
  traffic), TFLOP/s and the share of --peak-tflops (989: the H100 SXM's dense f16 rate).
  Warp scope runs 16 x 16 x 16 products, as vkgraph's KHR kernels; workgroup scope the
  shapes the driver lists (`vkgraph devices` prints the features; this script the shapes).
* mlp: the forward of bench/coopvec_probe.py's network (64 -> 6 x 64 leaky ReLU -> 16, f16,
  2^20 samples) at warp and workgroup scope, checked against numpy, and the KHR GLSL kernel
  of that probe as the baseline.

Every configuration is compiled and run in a child process of its own, so that a driver
crash in one (pipelines with new matrix kinds have crashed NVIDIA's compiler before) costs
one row, not the run.

    python bench/coopmat2_probe.py [--runs 50] [--samples 1048576] [--device NAME]

A device without the extension's workgroup scope and conversions (the CPU driver, say) gets
a message and exit status 0.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import coopvec_probe as cvp  # noqa: E402

from vkgraph.pipeline.vk import Device  # noqa: E402

HERE = Path(__file__).resolve().parent / "probe"
ITERS = 4096  # rounds of the peak kernel's loop


def peak_configs(shapes, sm_count: int) -> list[dict]:
    """Warp scope at two chain counts, and workgroup scope at every f16 x f16 + f32 shape
    granularity the driver lists, scaled to a few sizes."""
    groups = 8 * max(sm_count, 1)
    cfgs = [dict(kind="peak", name=f"warp 16x16x16, {c} chains, 8 warps", SCOPE="Subgroup",
                 M=16, N=16, K=16, NT=256, CHAINS=c, groups=groups, mats=8)
            for c in (2, 4, 8)]
    seen = set()
    for s in shapes:
        if s.scope != "workgroup" or (s.a, s.b, s.c) != ("f16", "f16", "f32"):
            continue
        for m, n, k in ((64, 64, 64), (128, 128, 32), (128, 128, 64), (256, 128, 32)):
            if m % s.m or n % s.n or k % s.k or (m, n, k, s.invocations) in seen:
                continue
            seen.add((m, n, k, s.invocations))
            cfgs.append(dict(kind="peak", name=f"workgroup {m}x{n}x{k}, {s.invocations} inv.",
                             SCOPE="Workgroup", M=m, N=n, K=k, NT=s.invocations, CHAINS=1,
                             groups=groups, mats=1))
    return cfgs


def mlp_configs(shapes) -> list[dict]:
    cfgs = [dict(kind="mlp", name="warp 16 rows, W via L1", SCOPE="Subgroup", R=16, NT=128,
                 WG=0, STAGE=0),
            dict(kind="mlp", name="warp 16 rows, W staged, 16 warps", SCOPE="Subgroup", R=16,
                 NT=512, WG=0, STAGE=1)]
    inv = sorted({s.invocations for s in shapes
                  if s.scope == "workgroup" and (s.a, s.b, s.c) == ("f16", "f16", "f32")
                  and 64 % s.k == 0 and 16 % s.n == 0})
    for nt in inv:
        for r in (64, 128, 256):
            cfgs.append(dict(kind="mlp", name=f"workgroup {r} rows, {nt} inv.",
                             SCOPE="Workgroup", R=r, NT=nt, WG=1, STAGE=0))
    return cfgs


def run_one(cfg: dict, args) -> dict:
    """One configuration in this process: {"ms", "tflops", "err"} or {"error"}."""
    from vkgraph.pipeline.slang import compile_slang
    dev = Device.open(args.device)
    try:
        defines = {k: v for k, v in cfg.items() if k.isupper()}
        if cfg["kind"] == "peak":
            defines["ITERS"] = ITERS
            spirv = compile_slang(HERE / "mma_peak.slang", defines=defines)
            inp = (np.random.default_rng(0).uniform(-1, 1, cfg["M"] * cfg["K"]
                                                   + cfg["K"] * cfg["N"]) / 64)
            ib = dev.buffer(inp.size * 2)
            ib.upload(inp.astype(np.float16))
            ob = dev.buffer(cfg["M"] * cfg["N"] * 4)
            kernel = dev.kernel(spirv, nconn=2, local=(cfg["NT"], 1, 1))
            ms = cvp.timed(dev, kernel, [ib, ob], (cfg["groups"], 1, 1), args.runs)
            flop = (2 * cfg["M"] * cfg["N"] * cfg["K"] * cfg["CHAINS"] * ITERS
                    * cfg["groups"] * cfg["mats"])
            return {"ms": ms, "tflops": flop / (ms * 1e-3) / 1e12, "err": float("nan")}
        n = args.samples
        defines.update(NHIDDEN=cvp.NHIDDEN, SLOPE=cvp.SLOPE)
        spirv = compile_slang(HERE / "mlp_coopmat2.slang", defines=defines)
        rng = np.random.default_rng(1)
        mats = cvp.network(rng)
        x = rng.uniform(-1, 1, (n, cvp.NIN)).astype(np.float16)
        per_group = cfg["R"] if cfg["WG"] else cfg["R"] * cfg["NT"] // 32
        wbytes = b"".join(w.tobytes() for w in mats)
        y, ms = cvp.run_kernel(dev, spirv, (cfg["NT"], 1, 1), (n // per_group, 1, 1), x,
                               wbytes, n, args.runs)
        err = float(np.abs(y - cvp.reference(x, mats)).max())
        return {"ms": ms, "tflops": cvp.FLOPS_PER_SAMPLE * n / (ms * 1e-3) / 1e12, "err": err}
    finally:
        dev.close()


def khr_baseline(args) -> dict:
    """bench/coopvec_probe.py's KHR GLSL kernel (warp scope, W via L1, activations through
    shared memory), timed by that script in a child process (its table row read back)."""
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("coopvec_probe.py")),
                          "--samples", str(args.samples), "--runs", str(args.runs)]
                         + (["--device", args.device] if args.device else []),
                         capture_output=True, text=True, timeout=600)
    for line in out.stdout.splitlines():
        if line.startswith("coopmat (KHR, GLSL)"):
            f = line.split()
            return {"ms": float(f[3]), "tflops": float(f[4]), "err": float(f[-1])}
    return {"error": (out.stdout + out.stderr).strip().splitlines()[-1:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=1 << 20, help="a multiple of 1024")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--device")
    ap.add_argument("--peak-tflops", type=float, default=989.0,
                    help="the device's dense f16 tensor rate, for the share column")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # a configuration as JSON (child)
    args = ap.parse_args(argv)
    if args.samples % 1024 or args.samples <= 0:
        ap.error("--samples must be a positive multiple of 1024")
    if args.one:
        try:
            res = run_one(json.loads(args.one), args)
        except Exception as e:  # noqa: BLE001 - the parent prints it as the row
            res = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
        print("RESULT " + json.dumps(res))
        return 0
    from vkgraph.pipeline.vk.coopmat2 import flexible_shapes, limits
    dev = Device.open(args.device)
    info = dev.info
    print(f"device: {info.summary()}")
    need = {"WorkgroupScope", "Conversions"}
    if not need <= set(info.coopmat2):
        print(f"{info.name} lacks VK_NV_cooperative_matrix2's workgroup scope and "
              f"conversions (has: {', '.join(info.coopmat2) or 'none'}): nothing to measure")
        dev.close()
        return 0
    shapes = flexible_shapes(dev.pd)
    print(f"features: {', '.join(info.coopmat2)}; limits: {limits(dev.pd)}")
    for s in shapes:
        print(f"  flexible shape: {s}")
    sm = info.sm_count
    dev.close()
    rows = []
    for cfg in peak_configs(shapes, sm) + mlp_configs(shapes):
        try:
            out = subprocess.run(
                [sys.executable, __file__, "--one", json.dumps(cfg), "--runs", str(args.runs),
                 "--samples", str(args.samples)] + (["--device", args.device]
                                                    if args.device else []),
                capture_output=True, text=True, timeout=300)
            res = next((json.loads(ln[7:]) for ln in out.stdout.splitlines()
                        if ln.startswith("RESULT ")),
                       {"error": f"exit {out.returncode}: "
                                 + " ".join((out.stdout + out.stderr).split()[-12:])})
        except subprocess.TimeoutExpired:
            res = {"error": "timed out"}
        rows.append((cfg, res))
        print(f"  {cfg['kind']} {cfg['name']}: {res}", flush=True)
    rows.append((dict(kind="mlp", name="KHR GLSL (coopvec_probe.py), W via L1"),
                 khr_baseline(args)))
    for kind, title in (("peak", f"products on registers, {ITERS} rounds"),
                        ("mlp", f"MLP forward, {args.samples} samples")):
        print(f"\n{title}")
        print(f"| {'kernel':44s} | ms | TFLOP/s | share of {args.peak_tflops:g} | max abs err |")
        print("|---|---|---|---|---|")
        for cfg, res in rows:
            if cfg["kind"] != kind:
                continue
            if "error" in res:
                print(f"| {cfg['name']:44s} | failed: {res['error']} | | | |")
                continue
            print(f"| {cfg['name']:44s} | {res['ms']:.3f} | {res['tflops']:.1f} | "
                  f"{100 * res['tflops'] / args.peak_tflops:.0f}% | {res['err']:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
