"""MLP forward on the tensor cores two ways: NVIDIA cooperative vectors (a Slang kernel,
pipeline/slang.py) against KHR cooperative matrices (a GLSL kernel on
shaders/include/mlp_coopmat.glsl, compiled by glslang like every vkgraph kernel).

The network is the shape vkgraph's MLPs use: 64 inputs -> 6 x 64 leaky ReLU -> 16 outputs,
f16 weights and activations, no biases, one sample per invocation (cooperative vectors) or
64 samples per warp (cooperative matrices), 2^20 samples read from a buffer and written to
one. Both results are checked against numpy (f32 maths, activations rounded to f16 between
layers, as the kernels store them) and one table is printed: ms per forward (median of GPU
timestamps over --runs dispatches), TFLOP/s (2 * multiply-adds), and the time relative to
cooperative matrices. Cooperative vectors run with the matrices row-major and in the
driver's "inferencing optimal" layout (vkConvertCooperativeVectorMatrixNV).

    python bench/coopvec_probe.py [--samples 1048576] [--runs 100] [--device NAME]
    python bench/coopvec_probe.py --emulate   # the GLSL kernel's maths without the extension

`--train` times a training step instead (bench/probe/mlp_coopvec_train.slang): the
forward, the backward through the transposed matrices, and the weight gradient by
coopVecOuterProductAccumulate, all with the matrices in the driver's training layout, as
three rows (forward only; forward + backward; + weight gradient) checked against numpy.

    python bench/coopvec_probe.py --train [--acc float32|float16]

A device without VK_NV_cooperative_vector (the CPU driver lavapipe, say) gets a message
and exit status 0; `--emulate` then still checks the cooperative-matrix kernel's indexing
in plain GLSL (shaders/include/mlp_coopmat.glsl's CM_EMULATE) against numpy.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vkgraph.pipeline.kernels import SHADERS  # noqa: E402
from vkgraph.pipeline.vk import Device, compile_glsl  # noqa: E402

HERE = Path(__file__).resolve().parent / "probe"
NIN, WIDTH, NHIDDEN, NOUT = 64, 64, 6, 16
SLOPE = 0.001  # leaky ReLU, as shaders/include/mlp.glsl
FLOPS_PER_SAMPLE = 2 * (NIN * WIDTH + (NHIDDEN - 1) * WIDTH * WIDTH + WIDTH * NOUT)


def network(rng) -> list[np.ndarray]:
    """The layers' f16 matrices, (outputs x inputs) row-major, He-scaled."""
    shapes = [(WIDTH, NIN)] + [(WIDTH, WIDTH)] * (NHIDDEN - 1) + [(NOUT, WIDTH)]
    return [(rng.standard_normal(s) * np.sqrt(2.0 / s[1])).astype(np.float16) for s in shapes]


def leaky(z):
    return np.maximum(z, SLOPE * z)


def reference(x: np.ndarray, mats: list[np.ndarray], chunk: int = 1 << 16) -> np.ndarray:
    out = np.empty((len(x), NOUT), np.float32)
    for i in range(0, len(x), chunk):
        h = x[i:i + chunk].astype(np.float32)
        for w in mats[:-1]:
            z = h @ w.astype(np.float32).T
            h = leaky(z).astype(np.float16).astype(np.float32)
        out[i:i + chunk] = h @ mats[-1].astype(np.float32).T
    return out


def timed(dev, kernel, bufs, groups, runs: int) -> float:
    """Median GPU time of one dispatch in ms, over `runs` dispatches (10 per submit)."""
    per = min(10, runs)
    cmds = dev.commands(timestamps=per)
    cmds.begin()
    set0 = [dev.buffer(16, host=True), dev.buffer(16), dev.buffer(16)]
    for i in range(per):
        cmds.dispatch(kernel, set0, bufs, b"", groups, label=f"fwd{i}")
        cmds.barrier()
    cmds.end()
    cmds.run()  # warm-up
    times = []
    for _ in range(max(1, runs // per)):
        cmds.run()
        times += [ms for _, ms in cmds.timings()]
    return float(np.median(times))


def run_kernel(dev, spirv, local, groups, x, wbytes, n, runs):
    xb, wb, yb = dev.buffer(x.nbytes), dev.buffer(len(wbytes)), dev.buffer(n * NOUT * 2)
    xb.upload(x)
    wb.upload(np.frombuffer(wbytes, np.uint8))
    kernel = dev.kernel(spirv, nconn=3, local=local)
    ms = timed(dev, kernel, [xb, wb, yb], groups, max(runs, 1))
    y = yb.download(np.float16, n * NOUT).reshape(n, NOUT).astype(np.float32)
    return y, ms


def coopvec_weights(dev, mats, layout: str) -> tuple[bytes, list[int], int]:
    """(buffer bytes, byte offset of each matrix, row stride in bytes or 0)."""
    from vkgraph.pipeline.vk.coopvec import ALIGN, convert_matrix
    blob, offsets = bytearray(), []
    for w in mats:
        offsets.append(len(blob))
        data = w.tobytes() if layout == "row" else convert_matrix(dev, w, layout)
        blob += data + b"\0" * (-len(data) % ALIGN)
    return bytes(blob), offsets, (2 * WIDTH if layout == "row" else 0)


def train_reference(x, go, mats, chunk: int = 1 << 16):
    """numpy's g_0 = W_0^T g_1 and dW_l = sum over samples of g_{l+1} h_l^T (f32 maths,
    activations and gradients rounded to f16 between layers, as the kernel keeps them)."""
    f16 = lambda a: a.astype(np.float16).astype(np.float32)  # noqa: E731
    w = [m.astype(np.float32) for m in mats]
    dw = [np.zeros(m.shape, np.float64) for m in mats]
    g0 = np.empty(x.shape, np.float32)
    for i in range(0, len(x), chunk):
        hs = [x[i:i + chunk].astype(np.float32)]
        for m in w[:-1]:
            hs.append(f16(leaky(hs[-1] @ m.T)))
        g = go[i:i + chunk].astype(np.float32)
        for l in range(len(w) - 1, -1, -1):
            dw[l] += g.T.astype(np.float64) @ hs[l].astype(np.float64)
            d = g @ w[l]
            g = f16(np.where(hs[l] > 0, d, SLOPE * d)) if l > 0 else d
        g0[i:i + chunk] = g
    return g0, dw


def train_rows(dev, mats, x, n, runs, acc: str) -> list:
    """(name, ms, max abs error) of the three training-step kernels."""
    from vkgraph.pipeline.slang import compile_slang
    from vkgraph.pipeline.vk.coopvec import ALIGN, convert, convert_matrix
    adt = np.float32 if acc == "float32" else np.float16
    wblob, woffs, dblob, doffs = bytearray(), [], bytearray(), []
    for m in mats:
        woffs.append(len(wblob))
        data = convert_matrix(dev, m, "training")
        wblob += data + b"\0" * (-len(data) % ALIGN)
        doffs.append(len(dblob))
        zero = np.zeros(m.shape, adt).tobytes()
        data = convert(dev, zero, *m.shape, "row", "training", adt, adt)
        dblob += data + b"\0" * (-len(data) % ALIGN)
    rng = np.random.default_rng(2)
    go = (rng.uniform(-1, 1, (n, NOUT)) / 64).astype(np.float16)
    g0_ref, dw_ref = train_reference(x, go, mats)
    bufs = [dev.buffer(x.nbytes), dev.buffer(len(wblob)), dev.buffer(go.nbytes),
            dev.buffer(len(dblob)), dev.buffer(n * 128)]
    bufs[0].upload(x)
    bufs[1].upload(np.frombuffer(bytes(wblob), np.uint8))
    bufs[2].upload(go)
    rows = []
    names = {0: "forward", 1: "forward + backward", 2: "forward + backward + dW"}
    for mode in (0, 1, 2):
        spirv = compile_slang(HERE / "mlp_coopvec_train.slang", defines={
            "N": n, "NHIDDEN": NHIDDEN, "SLOPE": SLOPE, "MODE": mode,
            "ACC": {"float32": "Float32", "float16": "Float16"}[acc],
            "WOFFSETS": ", ".join(map(str, woffs)), "DOFFSETS": ", ".join(map(str, doffs))})
        kernel = dev.kernel(spirv, nconn=5, local=(64, 1, 1))
        bufs[3].upload(np.frombuffer(bytes(dblob), np.uint8))  # zero gradients
        once = dev.commands()
        once.begin()
        set0 = [dev.buffer(16, host=True), dev.buffer(16), dev.buffer(16)]
        once.dispatch(kernel, set0, bufs, b"", (n // 64, 1, 1))
        once.end()
        once.run()
        if mode == 0:
            err = float("nan")
        else:
            g0 = bufs[4].download(np.float16, n * 64).reshape(n, 64).astype(np.float32)
            err = float(np.abs(g0 - g0_ref).max() / np.abs(g0_ref).max())
        if mode == 2:
            raw = bytes(bufs[3].download(np.uint8, len(dblob)))
            for l, m in enumerate(mats):
                end = doffs[l + 1] if l + 1 < len(mats) else len(dblob)
                got = np.frombuffer(convert(dev, raw[doffs[l]:end], *m.shape, "training",
                                            "row", adt, np.float32), np.float32)
                got = got.reshape(m.shape)
                err = max(err, float(np.abs(got - dw_ref[l]).max() / np.abs(dw_ref[l]).max()))
        ms = timed(dev, kernel, bufs, (n // 64, 1, 1), runs)
        rows.append((f"coopvec train: {names[mode]}", ms, err))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=1 << 20, help="a multiple of 256")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--device")
    ap.add_argument("--train", action="store_true",
                    help="time a training step (forward, backward, weight gradient)")
    ap.add_argument("--acc", choices=("float32", "float16"), default="float32",
                    help="--train: the weight gradient's type")
    ap.add_argument("--emulate", action="store_true",
                    help="run the cooperative-matrix kernel in plain GLSL (no timing)")
    args = ap.parse_args(argv)
    n = args.samples
    if n % 256 or n <= 0:
        ap.error("--samples must be a positive multiple of 256")
    dev = Device.open(args.device)
    info = dev.info
    print(f"device: {info.summary()}")
    rng = np.random.default_rng(1)
    mats = network(rng)
    x = rng.uniform(-1, 1, (n, NIN)).astype(np.float16)
    if not info.coopvec and not args.emulate:
        print(f"{info.name} lacks VK_NV_cooperative_vector (or its cooperativeVector "
              "feature): nothing to measure here; run on an NVIDIA GPU with driver >= 570 "
              "(--emulate checks the cooperative-matrix kernel's maths anywhere)")
        dev.close()
        return 0
    if args.train:
        from vkgraph.pipeline.vk.coopvec import training_accumulation
        print(f"outer-product accumulation: {training_accumulation(dev.pd)}")
        rows = train_rows(dev, mats, x, n, args.runs, args.acc)
        flop = FLOPS_PER_SAMPLE * n
        print(f"MLP {NIN} -> {NHIDDEN} x {WIDTH} -> {NOUT}, f16, {n} samples, "
              f"{flop / 1e9:.1f} GFLOP per forward (x3 for a full step), gradient {args.acc}, "
              f"median of {args.runs} runs; error: max |err| / max |ref| of g_0 and dW")
        for (name, ms, err), mult in zip(rows, (1, 2, 3), strict=True):
            print(f"{name:40s} {ms:9.3f} ms {mult * flop / (ms * 1e-3) / 1e12:9.1f} TFLOP/s "
                  f"err {err:.2e}")
        dev.close()
        return 0
    ref = reference(x, mats)
    rows = []  # (name, ms, max abs error)
    cm_defines = {"N": n, "NHIDDEN": NHIDDEN, "SLOPE": SLOPE}
    if args.emulate or not (info.has_coopmat_f16 and info.subgroup_size == 32):
        cm_defines["CM_EMULATE"] = 1
    emulated = "CM_EMULATE" in cm_defines
    rt = 1 if emulated else 4  # the CPU driver has 32 KiB of shared memory
    cm_defines.update(RT=rt, CM_EMU_WARPS=4)
    spirv = compile_glsl(HERE / "mlp_coopmat.comp", [SHADERS / "include"], cm_defines)
    wcm = b"".join(w.tobytes() for w in mats)
    y, ms = run_kernel(dev, spirv, (128, 1, 1), (n // (64 * rt), 1, 1), x, wcm, n,
                       1 if emulated else args.runs)
    ms = float("nan") if emulated else ms  # the CPU's time says nothing
    rows.append(("coopmat (KHR, GLSL)" + (" emulated" if emulated else ""), ms,
                 float(np.abs(y - ref).max())))
    if info.coopvec:
        from vkgraph.pipeline.slang import compile_slang
        for layout, name in (("row", "RowMajor"), ("inference", "InferencingOptimal")):
            try:
                wbytes, offsets, stride = coopvec_weights(dev, mats, layout)
                spirv = compile_slang(HERE / "mlp_coopvec.slang", defines={
                    "N": n, "NHIDDEN": NHIDDEN, "SLOPE": SLOPE, "LAYOUT": name,
                    "STRIDE": stride, "OFFSETS": ", ".join(map(str, offsets))})
                y, ms = run_kernel(dev, spirv, (64, 1, 1), (n // 64, 1, 1), x, wbytes, n,
                                   args.runs)
                rows.append((f"coopvec (NV, Slang) {layout}", ms, float(np.abs(y - ref).max())))
            except Exception as e:  # noqa: BLE001 - one failed variant must not hide the rest
                print(f"coopvec {layout}: {type(e).__name__}: {e}")
    flop = FLOPS_PER_SAMPLE * n
    base = rows[0][1]
    print(f"MLP {NIN} -> {NHIDDEN} x {WIDTH} -> {NOUT}, f16, {n} samples, "
          f"{flop / 1e9:.1f} GFLOP per forward, median of {args.runs} runs")
    print(f"{'kernel':32s} {'ms':>9s} {'TFLOP/s':>9s} {'vs coopmat':>11s} {'max |err|':>10s}")
    for name, ms, err in rows:
        tf = flop / (ms * 1e-3) / 1e12 if ms == ms else float("nan")
        ratio = ms / base if base == base else float("nan")
        print(f"{name:32s} {ms:9.3f} {tf:9.1f} {ratio:10.2f}x {err:10.4f}")
    dev.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
