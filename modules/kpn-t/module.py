"""kpn-t: trains the kernel-predicting MLP denoiser frame by frame (README.md here has the maths).

Nodes per level i (sizes s_0 = input, s_{i+1} = ceil(s_i / 2)):
  forward   (cooperative-matrix variants: wpack, w -> packed fragments, once)
            sub_i (M_i -> M_{i+1}), diff_i (-> D_i), fwd_i (D_i, w -> K_i, A_i),
            apply_i (D_i, K_i -> I_i), up_i (I_i, O_{i+1} or M_L -> O_i)
  loss      loss (O_0, ref -> dO_0, partials), lsum (-> loss history, current loss)
  backward  dup_i (dO_i -> dO_{i+1}), dapply_i (-> dK_i), bck_i (-> G_i),
            mulw_i (A_i, G_i, dK_i -> partials), reduce_i (sum over chunks and levels -> dw)
  update    norm (dw and loss of the last frame -> ||g||, finite?), adam (-> w, m, v, w16,
            stats)
adam reads dw and the norm through feedback edges: frame f applies the gradient of f-1.
Checkpoints (hooks state/load_state): adam's w, m, v, stats and the loss history; the engine
adds the feedback buffers (the last frame's dw and loss).
"""

from __future__ import annotations

import functools
import logging
import math

import numpy as np

from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.module import OPTIONAL, Roi, img, ssbo
from vkgraph.pipeline.trainer import Network, Trains, Weights
from vkgraph.pipeline.variants import (
    cm_available,
    cm_defines,
    cpu_capable,
    emulated,
    env_choice,
    portable_forced,
    sm_count,
    tuning,
)

log = logging.getLogger("vkgraph")

# the weight layout: MATRICES matrices of WIDTH x WIDTH (row = output neuron), the last one
# using its first OUT_ROWS rows (15 taps and the blend weight); the kernels see it as
# layout.gen (HEADERS, compiled in like params.gen: pipeline/kernels.py, shader_headers)
MATRICES, WIDTH, OUT_ROWS = 7, 64, 16
NW = MATRICES * WIDTH * WIDTH
HEADERS = {"layout.gen": "".join(f"#define {k} {v}u\n" for k, v in (
    ("KPN_NW", NW), ("KPN_MATRIX", WIDTH * WIDTH), ("KPN_LAST", (MATRICES - 1) * WIDTH * WIDTH),
    ("KPN_LAST_USED", OUT_ROWS * WIDTH)))}
MLP_BATCH = 32  # pixels per fwd/bck workgroup (shaders/kpn-t/fwd.comp)
CPU_PX = 8  # pixels per invocation of fwd_cpu (shaders/kpn-t/fwd_cpu.comp)
# kpn (inference) runs fwd_cpu with 2 pixels an invocation: llvmpipe compiles that kernel in
# a fifth of the time (measured, one process, 512^2, shipped weights: 2.0 CPU s against
# 9.8 at 8) and runs it in the same CPU time (0.95 s against 0.84); at 8 the compile is
# most of a small image's run. Training keeps 8 (bck_cpu shares it).
INFER_PX = 2
LUT_TEXT = "\n".join([
    "lut contains weights for",
    "multi-level kernel predicting mlp with:",
    "6 hidden layers",
    "64 network width",
    "{apply} kernel weight activation",
    "{blend} alpha blending activation",
    "leaky relu mlp activation",
    "{loss} loss",
])
# the lines kpn-t adds for weights that need the noise profile, and for arch 1 (kpn reads
# them back)
FEAT_TEXT = "noise-normalised features"
CTX_TEXT = "chroma and context features"
LOSS_NAMES = {0: "SMAPE", 1: "L2", 2: "L1"}
APPLY_NAMES = {0: "plain", 1: "softmax", 2: "softmax"}  # 2: softmax taps, sigmoid blend


LEVELS_TEXT = "{} pyramid levels"


def lut_text(apply: int, loss: int, feat: int, levels: int, arch: int = 0) -> str:
    """The .lut's trailing text: vkdt's description, then what kpn must match (levels, and
    the noise-normalised features and arch 1 when used)."""
    text = LUT_TEXT.format(apply=APPLY_NAMES.get(apply, "plain"),
                           blend="sigmoid" if apply == 2 else "const",
                           loss=LOSS_NAMES.get(loss, "SMAPE"))
    return "\n".join([text, LEVELS_TEXT.format(levels)] + ([FEAT_TEXT] if feat else [])
                     + ([CTX_TEXT] if arch else []))


def trained_with(text: str) -> dict:
    """What a kpn-t .lut's trailing text says the weights need: `apply`, `levels` (None
    where the text does not say), `feat` and `arch` (0 or 1)."""
    out = {"apply": None, "levels": None, "feat": int(FEAT_TEXT in text),
           "arch": int(CTX_TEXT in text)}
    if "softmax kernel weight activation" in text:
        out["apply"] = 2 if "sigmoid alpha blending activation" in text else 1
    elif "plain kernel weight activation" in text:
        out["apply"] = 0
    for line in text.splitlines():
        words = line.split()
        if line.endswith(" pyramid levels") and words and words[0].isdigit():
            out["levels"] = int(words[0])
    return out


def check_start_weights(graph, module) -> None:
    """Training that starts from a .lut (wcp, init 0) must train the variant the weights were
    trained as: the same features (feat) and filter (apply), says the .lut's text. (The
    MLP is shared by all levels, so `levels` may differ.)"""
    if int(module.param("init")):
        return
    text = graph.meta(module, "wcp").get("text")
    if not text:
        return
    said = trained_with(text)
    for name in ("feat", "apply", "arch"):
        want, value = said[name], int(module.param(name))
        if want is not None and want != value:
            raise GraphError(f"{module}: the weights on wcp were trained with {name} {want} "
                             f"(says their .lut's text) but {name} is {value}; set "
                             f"param:{module.name}:{module.inst}:{name}:{want}")


def _sub_matrix(n: int) -> np.ndarray:
    """1-D `sub`: coarse q = sum_d b_d fine(2q + d), b = (1,4,6,4,1)/16, mirrored borders."""
    nc = (n + 1) // 2
    out = np.zeros((nc, n))
    for q in range(nc):
        for d, b in zip(range(-2, 3), (1, 4, 6, 4, 1), strict=True):
            j = 2 * q + d
            j = -1 - j if j < 0 else (2 * n - 1 - j if j >= n else j)
            out[q, j] += b / 16
    return out


def _up_matrix(n: int) -> np.ndarray:
    """1-D U: fine 2k -> C[k], 2k+1 -> (C[k] + C[k+1]) / 2, C[nc] := C[nc-1]."""
    nc = (n + 1) // 2
    out = np.zeros((n, nc))
    for x in range(n):
        k = x // 2
        out[x, k] += 0.5 if x % 2 else 1.0
        if x % 2:
            out[x, min(k + 1, nc - 1)] += 0.5
    return out


@functools.cache
def band_noise(levels: int) -> tuple[float, ...]:
    """The std of D_i (i < levels) for unit white noise at level 0, exactly: the pyramid is
    separable and linear, D_i = (A (x) A - B (x) B) x with the 1-D level maps A = S^i and
    B = U S^(i+1), so var D_i(p) = |a_x|^2 |a_y|^2 - 2 (a_x.b_x)(a_y.b_y) + |b_x|^2 |b_y|^2
    (rows of A and B at p's coordinates), averaged over the middle half of a 1024-pixel-wide
    level 0 (away from the mirrored borders; levels past 7 repeat level 7's ratio)."""
    n = 1024
    A = np.eye(n)
    out = []
    for _ in range(min(levels, 8)):
        size = A.shape[0]
        S = _sub_matrix(size)
        B = _up_matrix(size) @ (S @ A)
        aa, ab, bb = (A * A).sum(1), (A * B).sum(1), (B * B).sum(1)
        mid = slice(size // 4, max(size // 4 + 1, 3 * size // 4))
        var = (np.outer(aa[mid], aa[mid]) - 2 * np.outer(ab[mid], ab[mid])
               + np.outer(bb[mid], bb[mid]))
        out.append(float(np.sqrt(var.mean())))
        A = S @ A
    while len(out) < levels:
        out.append(out[-1] * out[-1] / out[-2])
    return tuple(out)


def check_arch(module) -> int:
    """`arch`, checked: arch 1 filters with softmax taps and a band gain (apply 2) and reads
    the noise-normalised features (feat 1)."""
    arch = int(module.param("arch"))
    if arch and (int(module.param("feat")) != 1 or int(module.param("apply")) != 2):
        raise GraphError(f"{module}: arch 1 needs feat 1 and apply 2 (it filters with softmax "
                         "taps and a band gain on noise-normalised features); set "
                         f"param:{module.name}:{module.inst}:feat:1 and "
                         f"param:{module.name}:{module.inst}:apply:2")
    return arch


def modify_roi_out(graph, module):
    check_start_weights(graph, module)
    arch = check_arch(module)
    inp = module.connector("input").roi
    module.connector("output").roi = Roi(inp.wd, inp.ht)
    module.connector("debug").roi = Roi(inp.wd, inp.ht)
    module.connector("w").roi = Roi(WIDTH, NW // WIDTH)
    module.connector("graph").roi = Roi(500, 200)
    module.connector("vis").roi = Roi(512, 256)
    # what o-lut writes after the weights, and kpn reads back from its .lut
    graph.meta(module, "w")["text"] = lut_text(
        int(module.param("apply")), int(module.param("loss")), int(module.param("feat")),
        int(module.param("levels")), arch)


def level_sizes(wd: int, ht: int, levels: int) -> list[tuple[int, int]]:
    sizes = [(wd, ht)]
    for _ in range(levels):
        w, h = sizes[-1]
        sizes.append(((w + 1) // 2, (h + 1) // 2))
    return sizes


def mulw_chunks(n: int) -> tuple[int, int]:
    """(chunks, pixels per chunk) of the blocked weight-gradient product: enough workgroups
    to fill a GPU, few enough partials to sum cheaply."""
    chunks = max(1, min(64, math.ceil(n / 256)))
    return chunks, math.ceil(n / chunks)


# MLP kernel variants (shaders/include/mlp_coopmat.glsl, bench/README.md): "portable" (fp32,
# any device: fwd, bck, mulw), "coopmat" (cooperative matrices, f16 activations stored:
# fwd_cm, bck_cm, mulw_cm), "fused" (cooperative matrices, the backward recomputes the forward
# and sums the weight gradient in registers: fwd_cm, bck_fused).
WPACK_FRAGS = 112  # wpack.comp: 7 x 16 packed B fragments of 2 x 32 uvec4 (512 halves)
CM_PAD = 256  # coopmat buffers hold whole 256-pixel tiles (zero rows past the image)
# launch shapes of the cooperative-matrix kernels (VKGRAPH_CM_TUNE=key=value,... overrides
# them, for benchmarking): fwd_cm's warps per workgroup and 16-pixel row blocks per warp (the
# tile, 16 rows warps pixels, must divide CM_PAD; shared memory 144 B a pixel),
# bck_fused's warps per workgroup (8 pixels each; 16: 45 KiB of shared memory) and its
# largest number of workgroups (and weight-gradient partials). Measured on the H100 at 1024^2
# (`VKGRAPH_CM_TUNE=... python bench/kpn_train.py --variants fused --sizes 1024 --profile`):
# fwd_cm 1.43 ms at 2 warps x 4 rows, 0.77 at 4 x 4, 0.89 at 4 x 2, 0.91 at 2 x 2, 1.31 at
# 2 x 8; bck_fused 2.64 / 2.68 / 2.69 ms at 264 / 512 / 1056 groups, 5.01 with 4 warps.
# Session 7 (feature plane in): fwd_cm 0.732 ms at 4 x 4, 0.547 at 8 x 2, 0.680 at 8 x 1,
# 0.514 at 16 x 1, 0.861 at 2 x 2. Session 8: one 512-thread bck_fused group fills an SM's
# registers, so fused_groups 0 (the default) means one group per SM where the device says
# how many it has (VK_NV_shader_sm_builtins), else 264; on the H100 (132 SMs) bck_fused took
# 1.892 / 1.886 ms at 132 groups, 1.918 at 264 and 2.510 at 198 (a second, partial wave).
# Session 10: fwd_cm reads packed weights (wpack.comp) and has no workgroup barrier left, so
# small groups do best: 0.370 ms at 4 x 1, 2 x 1 or 1 x 1, 0.405 at 8 x 1, 0.422 at 16 x 1,
# 0.42 at 2 x 2 and 1 x 2, 0.47-0.49 at 4 x 2 and 8 x 2, 0.58-0.68 at 1 x 4 and 4 x 4; with
# the output tiles' products interleaved: 0.299 at 4 x 1, 0.296 at 2 x 1, 0.317 at 8 x 1.
CM_TUNING = {"fwd_warps": 4, "fwd_rows": 1, "fused_warps": 16, "fused_groups": 0}
FUSED_GROUPS = 264  # where the SM count is unknown


def cpu_texel(graph, npx: int) -> dict:
    """The cpu kernels' define for a level of npx pixels: TEXEL (read the weights,
    activations and gradients through texel views, shaders/kpn-t/cpu.glsl) where the largest
    of them, the 7 x 64 activations a pixel, fits a texel view on the device; else nothing
    (storage-buffer loads)."""
    limit = graph.capabilities.max_texel_elements if graph.capabilities else 0
    return {"TEXEL": 1} if 0 < 7 * 64 * npx // 4 <= limit else {}


def fused_groups(graph) -> int:
    """bck_fused's workgroups at most: one per SM (each fills an SM's registers), or
    FUSED_GROUPS where the device does not say how many SMs it has."""
    return sm_count(graph, FUSED_GROUPS)


def mlp_variant(graph, precise: bool = False) -> str:
    """The MLP kernels for this build. VKGRAPH_KPN_MLP = auto (default: "fused" where the
    device is cm_capable, "cpu" where it is cpu_capable, else "portable"), fused, coopmat,
    cpu or portable; a variant asked for on a device that cannot run it falls back to
    portable. "cpu" is the portable maths one pixel per SIMD lane (fwd_cpu, bck_cpu, mulw_cpu).
    VKGRAPH_PORTABLE=1 and `precise` mode (the gradient check's float64 forward) always run
    portable. VKGRAPH_COOPMAT_EMULATE=1 runs the cooperative-matrix kernels in plain GLSL on
    any device (tests; slow)."""
    if portable_forced(precise):
        return "portable"
    want = env_choice("VKGRAPH_KPN_MLP", ("auto", "fused", "coopmat", "cpu", "portable"))
    if want == "portable":
        return want
    if want == "cpu":
        return want if cpu_capable(graph) else "portable"
    if want == "auto":
        if not cm_available(graph):
            return "cpu" if cpu_capable(graph) else "portable"
        want = "fused"
    return want if cm_available(graph) else "portable"


def cm_tuning() -> dict:
    t, _ = tuning("VKGRAPH_CM_TUNE", CM_TUNING)
    if CM_PAD % (16 * t["fwd_warps"] * t["fwd_rows"]):
        raise GraphError(f"VKGRAPH_CM_TUNE: fwd_warps x fwd_rows must divide {CM_PAD // 16}")
    if t["fused_warps"] not in (4, 8, 16):
        raise GraphError("VKGRAPH_CM_TUNE: fused_warps must be 4, 8 or 16")
    if emulated():  # the CPU driver has 32 KiB of shared memory
        t["fwd_warps"], t["fused_warps"] = 2, 4
    return t


def _pad(n: int) -> int:
    return math.ceil(n / CM_PAD) * CM_PAD




def forward_nodes(graph, module, levels: int, train: bool, weights, weights16=None,
                  noise=None, fp32: bool = False, arch: int = 0, scale=None):
    """Pyramid, MLP and filter at every level, reconstruction; shared with kpn (inference).
    `noise`: None for vkdt's features; for the noise-normalised features (`feat 1`) where the
    noise profile comes from: "noiseab" (kpn-t: the module input carrying cnngenin's per-tile
    records) or "params" (kpn: its params `noise a`, `noise b`).
    `weights`: the (node, connector) that writes the weights (kpn-t: adam's f32 master
    weights), or the name of a module input (kpn: `w`, f16 from a lut), which feeds every
    fwd node (the cooperative-matrix variants: through wpack's packed copy). f16 weights
    select fwd's W16 variant (the cpu variant: through w32's f32 copy). `weights16`: an f16
    copy for the cooperative-matrix kernels (kpn-t: adam's w16). `fp32`: the fp32 MLP
    kernels where the f16 cooperative-matrix ones would run (kpn's `fp32`). `arch` 1: the
    chroma and context variant (README.md, `arch`; needs the noise profile): diff also
    writes each level's context plane `ctx`, one level deeper than the filtered ones, and
    the MLP predicts 32 values a pixel. `scale`: the (node, connector) whose element 2 is the
    fused kernels' activation scale (kpn-t: adam's stats; kpn-t/adam.comp). Returns the
    per-level nodes as a dict of lists (and "variant": the MLP kernels chosen)."""
    inp = module.connector("input").roi
    sizes = level_sizes(inp.wd, inp.ht, levels + arch)
    nout = OUT_ROWS * (2 if arch else 1)  # K's values a pixel
    ctx = {"KPN_CTX": 1} if arch else {}
    apply_mode = int(module.param("apply"))
    # double-float forward for the gradient check (training modules only)
    precise = train and "precise" in module.values and int(module.param("precise")) != 0
    if isinstance(weights, str):
        w16 = module.connector(weights).format == "f16"
    else:
        w16 = weights[0].connector(weights[1]).format == "f16"
    variant = mlp_variant(graph, precise)
    if variant == "coopmat" and arch:  # bck_cm and mulw_cm know 16 outputs only
        variant = "fused"
    if variant in ("fused", "coopmat") and fp32:
        variant = "portable"  # kpn's fp32: f16 activations overflowed with these weights
    if variant not in ("portable", "cpu") and not w16:
        if weights16 is None:
            variant = "portable"
        else:
            weights, w16 = weights16, True
    log.info("%s: %s MLP kernels", module, variant)
    def feed_weights(node, conn: str) -> None:
        if isinstance(weights, str):
            graph.bind(module, weights, node, conn)
        else:
            graph.node_connect(weights[0], weights[1], node, conn)

    n = {k: [] for k in ("sub", "diff", "fwd", "apply", "up")}
    n["wpack"] = n["w32"] = None
    n["variant"] = variant
    if variant == "cpu" and w16:  # fwd_cpu reads f32 weights: kpn's .lut ones converted
        n["w32"] = graph.add_node(module, "w32", (NW, 1), [
            ssbo("w16", "read", fmt="f16"), ssbo("w", "write", NW)],
            shader="kpn-t", local=(256, 1, 1))
        feed_weights(n["w32"], "w16")
        weights, w16 = (n["w32"], "w"), False
    if variant in ("fused", "coopmat"):  # the weights as packed fragments, once a frame
        n["wpack"] = graph.add_node(module, "wpack", (WPACK_FRAGS * 32, 1), [
            ssbo("w", "read", fmt="f16"), ssbo("wp", "write", WPACK_FRAGS * 512, "f16")],
            shader="kpn-t", local=(32, 1, 1), defines=cm_defines(graph))
        feed_weights(n["wpack"], "w")
    n["wscale"] = None
    if variant == "fused" or (variant == "coopmat" and not train):  # fwd_cm's layer scales
        n["wscale"] = graph.add_node(module, "wscale", (7 * 256, 1), [
            ssbo("w", "read", fmt="f16"), ssbo("lsc", "write", 8)], shader="kpn-t",
            local=(256, 1, 1), defines=dict(ctx))
        feed_weights(n["wscale"], "w")
    nmap = None
    if noise is not None:  # level 0 with the noise variance in alpha
        w0, h0 = sizes[0]
        nmap = graph.add_node(module, "nmap", (w0, h0), [
            img("input", "read"), ssbo("noiseab", "read"), img("output", "write", Roi(w0, h0))],
            shader="kpn-t", defines={} if noise == "noiseab" else {"FROM_PARAMS": 1})
        graph.bind(module, "input", nmap, "input")
        if noise == "noiseab":
            graph.bind(module, noise, nmap, "noiseab")
        else:
            nmap.connector("noiseab").flags |= OPTIONAL
        bands = band_noise(levels + arch)  # only the noise-normalised features need them
    elif arch:
        raise GraphError(f"{module}: arch 1 needs the noise-normalised features (feat 1)")
    # the cooperative-matrix kernels gather vkdt's features from an f16 plane
    plane = variant in ("fused", "coopmat") and not arch
    for i in range(levels + arch):  # the pyramid: sub_i (-> M_{i+1}), diff_i (-> D_i)
        (w, h), (cw, ch) = sizes[i], sizes[i + 1]
        sub = graph.add_node(module, "sub", (cw, ch), [img("fine", "read"),
                             img("coarse", "write", Roi(cw, ch))], shader="kpn-t")
        diff = graph.add_node(module, "diff", (w, h), [
            img("fine", "read"), img("coarse", "read"), img("detail", "write", Roi(w, h))]
            + ([("feat", "write", "ssbo", "f16", Roi(w, h))] if plane else [])
            + ([img("ctx", "write", Roi(w, h))] if arch else []),
            shader="kpn-t", push=[bands[i]] if nmap else [],
            defines={**({"NOISE_FEATURES": 1} if nmap else {}),
                     **({"FEATURE_PLANE": 1} if plane else {}), **ctx})
        if i == 0 and nmap is not None:
            graph.node_connect(nmap, "output", sub, "fine")
            graph.node_connect(nmap, "output", diff, "fine")
        elif i == 0:
            graph.bind(module, "input", sub, "fine")
            graph.bind(module, "input", diff, "fine")
        else:
            graph.node_connect(n["sub"][-1], "coarse", sub, "fine")
            graph.node_connect(n["sub"][-1], "coarse", diff, "fine")
        graph.node_connect(sub, "coarse", diff, "coarse")
        n["sub"].append(sub)
        n["diff"].append(diff)
    for i in range(levels):  # features + MLP (fwd_i -> K_i), the filter (apply_i -> I_i)
        w, h = sizes[i]
        npx = w * h
        diff = n["diff"][i]
        src = "ctxf" if arch else "detail"  # the portable kernels' feature source
        if variant == "cpu":  # one pixel per lane, CPU_PX pixels per invocation
            conns = [img(src, "read"), ssbo("w", "read"), ssbo("K", "write", nout * npx)]
            px = CPU_PX if train else INFER_PX
            defines = {"PX": px, **cpu_texel(graph, npx), **ctx}
            if nmap is not None:
                defines["KPN_BIAS"] = 1
            if train:
                conns.append(ssbo("A", "write", 7 * 64 * npx))
                defines["TRAIN"] = 1
            groups = math.ceil(npx / (8 * px))
            if arch:
                _bind_last(conns, defines, "CTXC_B", img("ctxc", "read"))
            fwd = graph.add_node(module, "fwd_cpu", (groups * 8, 1), conns, shader="kpn-t",
                                 local=(8, 1, 1), defines=defines, push=[npx])
        elif variant == "portable":
            conns = [img(src, "read"), ssbo("w", "read"), ssbo("K", "write", nout * npx)]
            defines = dict(ctx)
            if train:
                conns.append(ssbo("A", "write", 7 * 64 * npx))
                defines["TRAIN"] = 1
            if w16:
                defines["W16"] = 1
            if precise:  # float64 copies for the gradient check (2 floats per double)
                conns.append(ssbo("Kd", "write", 2 * nout * npx))
                defines["PRECISE"] = 1
            if nmap is not None:
                defines["KPN_BIAS"] = 1
            batch = MLP_BATCH // 2 if precise else MLP_BATCH
            if arch:
                _bind_last(conns, defines, "CTXC_B", img("ctxc", "read"))
            fwd = graph.add_node(module, "fwd", (math.ceil(npx / batch) * 64, 1), conns,
                                 shader="kpn-t", local=(64, 1, 1), defines=defines)
        else:  # fwd_warps x fwd_rows 16-pixel row blocks a workgroup; whole 256-pixel tiles
            npad = _pad(npx)
            conns = [img("ctxf", "read") if arch else ssbo("feat", "read", fmt="f16"),
                     ssbo("wp", "read", fmt="f16"), ssbo("K", "write", nout * npad)]
            tune = cm_tuning()
            warps, rows = tune["fwd_warps"], tune["fwd_rows"]
            defines = cm_defines(graph, FWD_WARPS=f"{warps}u", FWD_ROWS=f"{rows}u", **ctx)
            if nmap is not None:
                defines["KPN_BIAS"] = 1
            if train and variant == "coopmat":  # h_0..h_6, one f16 buffer each
                conns += [ssbo(f"A{s}", "write", 64 * npad, "f16") for s in range(7)]
                defines["TRAIN"] = 1
            if arch:
                _bind_last(conns, defines, "CTXC_B", img("ctxc", "read"))
            if scale is not None and variant == "fused":
                _bind_last(conns, defines, "ASCALE_B", ssbo("stats", "read"))
            if n["wscale"] is not None:
                _bind_last(conns, defines, "LSC_B", ssbo("lsc", "read"))
            fwd = graph.add_node(module, "fwd_cm", (npad * 2 // rows, 1), conns,
                                 shader="kpn-t", local=(32 * warps, 1, 1), defines=defines)
        app_conns = [img("detail", "read"), ssbo("K", "read"), img("filtered", "write", Roi(w, h))]
        if precise:
            app_conns += [ssbo("Kd", "read"), ssbo("Id", "write", 8 * npx)]
        app = graph.add_node(module, "apply", (w, h), app_conns, shader="kpn-t",
                             push=[apply_mode], defines={**({"PRECISE": 1} if precise else {}),
                                                         **ctx})
        if precise:
            graph.node_connect(fwd, "Kd", app, "Kd")
        if "ASCALE_B" in fwd.defines:
            graph.node_connect(scale[0], scale[1], fwd, "stats")
        if "LSC_B" in fwd.defines:
            graph.node_connect(n["wscale"], "lsc", fwd, "lsc")
        if arch:  # the level's context plane and the next coarser one's
            graph.node_connect(diff, "ctx", fwd, "ctxf")
            graph.node_connect(n["diff"][i + 1], "ctx", fwd, "ctxc")
        else:
            src = "feat" if plane else "detail"  # the features' source
            graph.node_connect(diff, src, fwd, src)
        if n["wpack"] is not None:
            graph.node_connect(n["wpack"], "wp", fwd, "wp")
        else:
            feed_weights(fwd, "w")
        graph.node_connect(diff, "detail", app, "detail")
        graph.node_connect(fwd, "K", app, "K")
        n["fwd"].append(fwd)
        n["apply"].append(app)
    ups = [None] * levels
    for i in reversed(range(levels)):
        w, h = sizes[i]
        up_conns = [img("filtered", "read"), img("coarse", "read"),
                    img("output", "write", Roi(w, h))]
        up_defs = {}
        if precise:
            up_conns += [ssbo("Id", "read"), ssbo("Od", "write", 8 * w * h)]
            up_defs["PRECISE"] = 1
            if i == levels - 1:
                up_defs["COARSEST"] = 1
            else:
                up_conns.append(ssbo("Cd", "read"))
        up = graph.add_node(module, "up", (w, h), up_conns, shader="kpn-t", defines=up_defs)
        graph.node_connect(n["apply"][i], "filtered", up, "filtered")
        if precise:
            graph.node_connect(n["apply"][i], "Id", up, "Id")
            if i < levels - 1:
                graph.node_connect(ups[i + 1], "Od", up, "Cd")
        if i == levels - 1:
            graph.node_connect(n["sub"][i], "coarse", up, "coarse")
        else:
            graph.node_connect(ups[i + 1], "output", up, "coarse")
        ups[i] = up
    n["up"] = ups
    n["sizes"] = sizes
    n["precise"] = precise
    n["variant"] = variant
    n["bias"] = nmap is not None
    n["arch"], n["nout"], n["ctx"] = arch, nout, ctx
    graph.bind(module, "output", ups[0], "output")
    return n


def _bind_last(conns: list, defines: dict, define: str, conn) -> None:
    """conn as the kernel's last connector, its binding number in `define`: arch 1's second
    context plane (CTXC_B), the fused kernels' activation scale (adam's stats, ASCALE_B) and
    per-layer scales (wscale's lsc, LSC_B)."""
    defines[define] = len(conns)
    conns.append(conn)


def weights(graph, module) -> Weights:
    """The optimiser's params: the NW weights, started from the .lut on wcp (f16) where one is
    connected; the f16 copy w16 is the module's weight output (the .lut layout) and feeds
    the cooperative-matrix kernels; arch 1 uses more rows of the last matrix (KPN_CTX)."""
    wcp = module.connector("wcp")
    if wcp.source is not None and wcp.roi.wd * wcp.roi.ht != NW:  # adam would misread it
        raise GraphError(f"{module}: input 'wcp' holds {wcp.roi.wd}x{wcp.roi.ht} = "
                         f"{wcp.roi.wd * wcp.roi.ht} elements; kpn-t starts from its own "
                         f"weights, {WIDTH}x{NW // WIDTH} = {NW} (a .lut written by kpn-t's "
                         "w output)")
    lut = Roi(WIDTH, NW // WIDTH)  # the .lut layout: w16 and the best weights
    ctx = {"KPN_CTX": 1} if int(module.param("arch")) else {}  # checked by modify_roi_out
    return Weights(NW, "w16", best=("f16", lut), w16=lut, start=wcp.source is not None,
                   wcp="f16", defines=ctx)


def network(graph, module, scaffold) -> Network:
    """The forward at every level, the loss against ref and the backward down to dE/dW (the
    last level's reduce sums every level's partials)."""
    levels = int(module.param("levels"))  # 1..12 (modules/kpn-t/ranges)
    module.data["levels"] = levels
    adam, arch = scaffold.adam, int(module.param("arch"))
    ctx = {"KPN_CTX": 1} if arch else {}
    noise = None
    if int(module.param("feat")):
        if module.connector("noiseab").source is None:
            raise GraphError(f"{module}: feat 1 (noise-normalised features) needs the noise "
                             "profile: connect cnngenin's noiseab to kpn-t's noiseab")
        noise = "noiseab"
    n = forward_nodes(graph, module, levels, True, (adam, "w"), weights16=(adam, "w16"),
                      noise=noise, arch=arch, scale=(adam, "stats"))
    module.data["forward"] = n
    sizes = n["sizes"]
    w0, h0 = sizes[0]
    groups = math.ceil(w0 / 8) * math.ceil(h0 / 8)
    loss_conns = [img("output", "read"), img("ref", "read"), img("dO", "write", Roi(w0, h0)),
                  ssbo("Epart", "write", 2 * groups)]
    if n["precise"]:
        loss_conns.append(ssbo("Od", "read"))
    loss = graph.add_node(module, "loss", (w0, h0), loss_conns, shader="kpn-t",
                          push=[int(module.param("loss"))],
                          defines={"PRECISE": 1} if n["precise"] else {})
    graph.node_connect(n["up"][0], "output", loss, "output")
    if n["precise"]:
        graph.node_connect(n["up"][0], "Od", loss, "Od")
    graph.bind(module, "ref", loss, "ref")
    scaffold.loss_sum(loss, groups)
    used = np.ones(NW, bool)
    used[(MATRICES - 1) * WIDTH * WIDTH + n["nout"] * WIDTH:] = False  # its rows past K's

    grad = (loss, "dO")  # dE/dO_i, which is also dE/dI_i
    acc = None
    for i in range(levels):
        w, h = sizes[i]
        npx = w * h
        if i > 0:
            cw, ch = sizes[i]
            dup = graph.add_node(module, "dup", (cw, ch), [
                img("gfine", "read"), img("gcoarse", "write", Roi(cw, ch))], shader="kpn-t")
            graph.node_connect(grad[0], grad[1], dup, "gfine")
            grad = (dup, "gcoarse")
        dap = graph.add_node(module, "dapply", (w, h), [
            img("detail", "read"), ssbo("K", "read"), img("filtered", "read"),
            img("dI", "read"), ssbo("dK", "write", n["nout"] * npx)], shader="kpn-t",
            push=[int(module.param("apply"))], defines=ctx)
        graph.node_connect(n["diff"][i], "detail", dap, "detail")
        graph.node_connect(n["fwd"][i], "K", dap, "K")
        graph.node_connect(n["apply"][i], "filtered", dap, "filtered")
        graph.node_connect(grad[0], grad[1], dap, "dI")
        if n["variant"] in ("portable", "cpu"):
            mulw, chunks = _backward_portable(graph, module, n, i, adam, dap)
        else:
            mulw, chunks = _backward_coopmat(graph, module, n, i, adam, dap)
        conns = [ssbo("part", "read")] + ([ssbo("acc", "read")] if acc else [])
        serial = n["variant"] == "cpu"  # one invocation a weight (shaders/kpn-t/reduce.comp)
        red = graph.add_node(module, "reduce", (NW // 4 if serial else 8 * NW, 1),
                             conns + [ssbo("dw", "write", NW)], shader="kpn-t",
                             local=(64 if serial else 256, 1, 1), push=[chunks],
                             defines={**({"SERIAL": 1} if serial else {}),
                                      **({} if acc else {"FIRST": 1})})
        graph.node_connect(mulw, "part", red, "part")
        if acc:
            graph.node_connect(acc, "dw", red, "acc")
        acc = red
    return Network(dw=acc, used=used, layout=(MATRICES, WIDTH),
                   scale="activation scale" if n["variant"] == "fused" else "")


def _backward_portable(graph, module, n, i, adam, dap):
    """bck (-> G) and mulw (-> per-chunk partials of dE/dW) of level i, fp32."""
    ctx = n["ctx"]
    w, h = n["sizes"][i]
    npx = w * h
    conns = [ssbo("w", "read"), ssbo("A", "read"), ssbo("dK", "read"),
             ssbo("G", "write", 6 * 64 * npx)]
    if n["variant"] == "cpu":  # one pixel per SIMD lane, as fwd_cpu
        bck = graph.add_node(module, "bck_cpu", (math.ceil(npx / (8 * CPU_PX)) * 8, 1), conns,
                             shader="kpn-t", local=(8, 1, 1), push=[npx],
                             defines={"PX": CPU_PX, **cpu_texel(graph, npx), **ctx})
    else:
        bck = graph.add_node(module, "bck", (math.ceil(npx / MLP_BATCH) * 64, 1), conns,
                             shader="kpn-t", local=(64, 1, 1), push=[npx], defines=ctx)
    graph.node_connect(adam, "w", bck, "w")
    graph.node_connect(n["fwd"][i], "A", bck, "A")
    graph.node_connect(dap, "dK", bck, "dK")
    chunks, chunk = mulw_chunks(npx)
    conns = [ssbo("A", "read"), ssbo("G", "read"), ssbo("dK", "read"),
             ssbo("part", "write", NW * chunks)]
    if n["variant"] == "cpu":  # one subgroup per (chunk, layer)
        mulw = graph.add_node(module, "mulw_cpu", (8 * chunks, 7), conns, shader="kpn-t",
                              local=(8, 1, 1), push=[npx, chunk],
                              defines={**cpu_texel(graph, npx), **ctx})
    else:
        mulw = graph.add_node(module, "mulw", (16 * chunks, 16 * 7), conns, shader="kpn-t",
                              local=(16, 16, 1), push=[npx, chunk], defines=ctx)
    graph.node_connect(n["fwd"][i], "A", mulw, "A")
    graph.node_connect(bck, "G", mulw, "G")
    graph.node_connect(dap, "dK", mulw, "dK")
    return mulw, chunks


def _backward_coopmat(graph, module, n, i, adam, dap):
    """Level i's MLP backward with cooperative matrices -> (node writing `part`, count of
    partials). Loss scale: the level's pixel count / 16. dE/dK carries 1/N_0 of the mean loss
    and grows with the area a coarse pixel stands for (4^i), so N_i dE/dK is O(0.1..1) at
    every level (f16 keeps ~3 decades below and above that with the /16; measured: the
    largest N_i dE/dK was 5e3 at level 0 and 6.7e4, past f16's 65504, at level 3 of a 256^2
    frame). The kernels saturate what still overflows and divide the scale out of dE/dW.
    "coopmat": bck_cm (-> g_1..g_6, scaled dK, f16) and mulw_cm (dW per pixel chunk).
    "fused": bck_fused recomputes the forward and sums dW per workgroup in registers."""
    w, h = n["sizes"][i]
    npx = w * h
    npad = _pad(npx)
    scale = max(1.0, npx / 16.0)
    if n["variant"] == "fused":
        tune = cm_tuning()
        warps = tune["fused_warps"]
        tiles = math.ceil(npx / (8 * warps))  # warps pair up on 16-pixel row blocks
        cap = tune["fused_groups"] or fused_groups(graph)
        per = math.ceil(tiles / min(tiles, cap))
        groups = math.ceil(tiles / per)
        arch = n["arch"]
        conns = [img("ctxf", "read") if arch else ssbo("feat", "read", fmt="f16"),
                 ssbo("w", "read", fmt="f16"), ssbo("dK", "read"),
                 ssbo("scr", "write", groups * warps // 2 * 6 * 1024, "f16"),
                 ssbo("part", "write", NW * groups)]
        defines = cm_defines(graph, WARPS=f"{warps}u", **({"KPN_BIAS": 1} if n["bias"] else {}),
                             **n["ctx"])
        if arch:
            _bind_last(conns, defines, "CTXC_B", img("ctxc", "read"))
        _bind_last(conns, defines, "ASCALE_B", ssbo("stats", "read"))
        _bind_last(conns, defines, "LSC_B", ssbo("lsc", "read"))
        node = graph.add_node(module, "bck_fused", (groups * 32 * warps, 1), conns,
                              shader="kpn-t", local=(32 * warps, 1, 1),
                              push=[npx, per, scale, 1.0 / scale], defines=defines)
        graph.node_connect(adam, "stats", node, "stats")
        graph.node_connect(n["wscale"], "lsc", node, "lsc")
        if arch:
            graph.node_connect(n["diff"][i], "ctx", node, "ctxf")
            graph.node_connect(n["diff"][i + 1], "ctx", node, "ctxc")
        else:
            graph.node_connect(n["diff"][i], "feat", node, "feat")
        graph.node_connect(adam, "w16", node, "w")
        graph.node_connect(dap, "dK", node, "dK")
        return node, groups
    fwd = n["fwd"][i]
    rows = 2 if emulated() else 4  # CPU driver: 32 KiB shared
    bck = graph.add_node(module, "bck_cm", (npad * 2 // rows, 1), [
        ssbo("w", "read", fmt="f16"), ssbo("dK", "read")]
        + [ssbo(f"A{s}", "read", fmt="f16") for s in range(1, 7)]
        + [ssbo(f"G{s}", "write", 64 * npad, "f16") for s in range(1, 7)]
        + [ssbo("dK16", "write", 16 * npad, "f16")], shader="kpn-t", local=(64, 1, 1),
        push=[npx, scale], defines=cm_defines(graph, BCK_ROWS=f"{rows}u"))
    graph.node_connect(adam, "w16", bck, "w")
    graph.node_connect(dap, "dK", bck, "dK")
    chunks = max(1, min(256, npad // 4096))
    chunk = math.ceil(npad / chunks / 64) * 64  # whole 64-pixel steps (mulw_cm's MW_P)
    chunks = math.ceil(npad / chunk)
    mulw = graph.add_node(module, "mulw_cm", (128 * chunks, 7), [
        ssbo(f"A{s}", "read", fmt="f16") for s in range(7)]
        + [ssbo(f"G{s}", "read", fmt="f16") for s in range(1, 7)]
        + [ssbo("dK16", "read", fmt="f16"), ssbo("part", "write", NW * chunks)],
        shader="kpn-t", local=(128, 1, 1), push=[npad, chunk, 1.0 / scale],
        defines=cm_defines(graph))
    for s in range(7):
        graph.node_connect(fwd, f"A{s}", mulw, f"A{s}")
        if s:
            graph.node_connect(fwd, f"A{s}", bck, f"A{s}")
            graph.node_connect(bck, f"G{s}", mulw, f"G{s}")
    graph.node_connect(bck, "dK16", mulw, "dK16")
    return mulw, chunks


GRAPH_SIZE = (500, 200)
GRAPH_PLOT = (60, 14, 492, 178)  # plot area x0, y0, x1, y1 (exclusive) of the loss plot
GRAPH_COLS = 3 * 512 + 4  # grange: per column min, max (at most 512 columns), 4 values, smoothed


def views(graph, module):
    """graph (loss plot), vis (weights and gradients), debug (kernels), each only when
    something reads it. The plot and the vis bars get a small reduction pass first, so no
    pixel scans the loss history or all weights."""
    readers = graph.readers
    t, n = module.trainable, module.data["forward"]
    adam, dw_node, lsum, hist_len = t.adam, t.dw, t.lsum, t.hist_len
    if readers(module, "graph"):
        x0, y0, x1, y1 = GRAPH_PLOT
        rng = graph.add_node(module, "grange", (256, 1), [
            ssbo("hist", "read"), ssbo("cols", "write", GRAPH_COLS)], shader="kpn-t",
            local=(256, 1, 1), push=[hist_len, x1 - x0])
        graph.node_connect(lsum, "hist", rng, "hist")
        node = graph.add_node(module, "graph", GRAPH_SIZE, [
            ssbo("cols", "read"), img("plot", "write", Roi(*GRAPH_SIZE))], shader="kpn-t",
            push=[hist_len, x0, y0, x1, y1])
        graph.node_connect(rng, "cols", node, "cols")
        graph.bind(module, "graph", node, "plot")
    if readers(module, "vis"):
        stat = graph.add_node(module, "vstat", (256, 7), [
            ssbo("w", "read"), ssbo("dw", "read"), ssbo("stats", "write", 16)],
            shader="kpn-t", local=(256, 1, 1))
        graph.node_connect(adam, "w", stat, "w")
        graph.node_connect(dw_node, "dw", stat, "dw")  # this frame's gradient, at these w
        node = graph.add_node(module, "vis", (512, 256), [
            ssbo("w", "read"), ssbo("dw", "read"), ssbo("stats", "read"),
            img("vis", "write", Roi(512, 256))], shader="kpn-t")
        graph.node_connect(adam, "w", node, "w")
        graph.node_connect(dw_node, "dw", node, "dw")
        graph.node_connect(stat, "stats", node, "stats")
        graph.bind(module, "vis", node, "vis")
    if readers(module, "debug"):
        w, h = n["sizes"][0]
        node = graph.add_node(module, "debug", (w, h), [
            img("detail", "read"), ssbo("K", "read"), img("debug", "write", Roi(w, h))],
            shader="kpn-t", push=[int(module.param("apply"))],
            defines=n["ctx"])
        graph.node_connect(n["diff"][0], "detail", node, "detail")
        graph.node_connect(n["fwd"][0], "K", node, "K")
        graph.bind(module, "debug", node, "debug")


TRAINABLE = Trains(weights, network, views, precise="precise", rates=("alpha",),
                   clip="gradclip")
