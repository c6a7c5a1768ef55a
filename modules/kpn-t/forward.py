"""The kpn forward pass, shared by kpn-t (training) and kpn (inference): the weight layout
(compiled into the kernels as layout.gen), the pyramid's band noise, the MLP kernel variants
and their launch shapes, and `forward_nodes`, which builds the pyramid, the MLP and the
filter at every level and the reconstruction (modules/kpn-t/README.md has the maths).
"""

from __future__ import annotations

import functools
import logging
import math

import numpy as np

from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.module import OPTIONAL, Roi, img, ssbo
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
# layout.gen (LAYOUT_GEN, kpn-t's HEADERS, compiled in like params.gen: pipeline/kernels.py)
MATRICES, WIDTH, OUT_ROWS = 7, 64, 16
NW = MATRICES * WIDTH * WIDTH
LAYOUT_GEN = "".join(f"#define {k} {v}u\n" for k, v in (
    ("KPN_NW", NW), ("KPN_MATRIX", WIDTH * WIDTH), ("KPN_LAST", (MATRICES - 1) * WIDTH * WIDTH),
    ("KPN_LAST_USED", OUT_ROWS * WIDTH)))
# what each `arch` needs (README.md): its kernels' defines, K's values a pixel (the MLP's
# outputs and K's stride) and the rows of the last matrix it uses; arch 1 and 2 also read
# the context plane of one level deeper than the filtered ones
# (arch 2: per group the star's taps, NL_TAPS matched ones and the gain, in a K 64 wide)
NL_TAPS = 12  # arch 2's matched taps a pixel (kpn.glsl)
ARCHS = {0: ({}, OUT_ROWS, OUT_ROWS), 1: ({"KPN_CTX": 1}, 2 * OUT_ROWS, 2 * OUT_ROWS),
         2: ({"KPN_CTX": 1, "KPN_NL": 1}, WIDTH, 2 * (OUT_ROWS + NL_TAPS))}


def arch_shape(arch: int) -> tuple[dict, int, int]:
    """(defines, K's values a pixel, rows of the last matrix used) of `arch`."""
    defines, nout, rows = ARCHS[arch]
    return dict(defines), nout, rows


MLP_BATCH = 32  # pixels per fwd/bck workgroup (shaders/kpn-t/fwd.comp)
CPU_PX = 8  # pixels per invocation of fwd_cpu (shaders/kpn-t/fwd_cpu.comp)
# kpn (inference) runs fwd_cpu with 2 pixels an invocation: llvmpipe compiles that kernel in
# a fifth of the time (measured, one process, 512^2, shipped weights: 2.0 CPU s against
# 9.8 at 8) and runs it in the same CPU time (0.95 s against 0.84); at 8 the compile is
# most of a small image's run. Training keeps 8 (bck_cpu shares it).
INFER_PX = 2


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

def level_sizes(wd: int, ht: int, levels: int) -> list[tuple[int, int]]:
    sizes = [(wd, ht)]
    for _ in range(levels):
        w, h = sizes[-1]
        sizes.append(((w + 1) // 2, (h + 1) // 2))
    return sizes


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


def pad(n: int) -> int:
    """n rounded up to whole CM_PAD tiles (the cooperative-matrix buffers' rows)."""
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
    the MLP predicts 32 values a pixel. arch 2: arch 1's features and filter with nonlocal
    taps: match_i finds each pixel's best-matching offsets at level i, whose distances are
    features and whose pixels are taps (apply_nl). `scale`: the (node, connector) whose
    element 2 is the fused kernels' activation scale (kpn-t: adam's stats;
    kpn-t/adam.comp). Returns the per-level nodes as a dict of lists (and "variant": the MLP
    kernels chosen)."""
    inp = module.connector("input").roi
    deeper = int(arch > 0)  # the context plane of one level past the filtered ones
    sizes = level_sizes(inp.wd, inp.ht, levels + deeper)
    ctx, nout, _ = arch_shape(arch)
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

    n = {k: [] for k in ("sub", "diff", "match", "fwd", "apply", "up")}
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
        bands = band_noise(levels + deeper)  # only the noise-normalised features need them
    elif arch:
        raise GraphError(f"{module}: arch {arch} needs the noise-normalised features (feat 1)")
    # the cooperative-matrix kernels gather vkdt's features from an f16 plane
    plane = variant in ("fused", "coopmat") and not arch
    n["arch"], n["nout"], n["ctx"], n["plane"] = arch, nout, ctx, plane
    for i in range(levels + deeper):  # the pyramid: sub_i (-> M_{i+1}), diff_i (-> D_i)
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
    for i in range(levels if arch == 2 else 0):  # block matching on M_i (-> taps, features)
        w, h = sizes[i]
        match = graph.add_node(module, "match", (w, h), [
            img("fine", "read"), ssbo("nltap", "write", NL_TAPS // 4 * w * h),
            ssbo("nldist", "write", NL_TAPS * w * h)], shader="kpn-t", push=[bands[i]])
        graph.node_connect(*((nmap, "output") if i == 0 else (n["sub"][i - 1], "coarse")),
                           match, "fine")
        n["match"].append(match)
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
                bind_ctx(conns, defines, arch)
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
                bind_ctx(conns, defines, arch)
            fwd = graph.add_node(module, "fwd", (math.ceil(npx / batch) * 64, 1), conns,
                                 shader="kpn-t", local=(64, 1, 1), defines=defines)
        else:  # fwd_warps x fwd_rows 16-pixel row blocks a workgroup; whole 256-pixel tiles
            npad = pad(npx)
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
                bind_ctx(conns, defines, arch)
            if scale is not None and variant == "fused":
                bind_last(conns, defines, "ASCALE_B", ssbo("stats", "read"))
            if n["wscale"] is not None:
                bind_last(conns, defines, "LSC_B", ssbo("lsc", "read"))
            fwd = graph.add_node(module, "fwd_cm", (npad * 2 // rows, 1), conns,
                                 shader="kpn-t", local=(32 * warps, 1, 1), defines=defines)
        app_conns = [img("detail", "read"), ssbo("K", "read")]
        if arch == 2:
            app_conns.append(ssbo("nltap", "read"))
        app_conns.append(img("filtered", "write", Roi(w, h)))
        if precise:
            app_conns += [ssbo("Kd", "read"), ssbo("Id", "write", 8 * npx)]
        app = graph.add_node(module, "apply_nl" if arch == 2 else "apply", (w, h), app_conns,
                             shader="kpn-t", push=[] if arch == 2 else [apply_mode],
                             defines={**({"PRECISE": 1} if precise else {}), **ctx})
        if arch == 2:
            graph.node_connect(n["match"][i], "nltap", app, "nltap")
        if precise:
            graph.node_connect(fwd, "Kd", app, "Kd")
        if "ASCALE_B" in fwd.defines:
            graph.node_connect(scale[0], scale[1], fwd, "stats")
        if "LSC_B" in fwd.defines:
            graph.node_connect(n["wscale"], "lsc", fwd, "lsc")
        connect_features(graph, n, i, fwd)
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
    n["bias"] = nmap is not None
    graph.bind(module, "output", ups[0], "output")
    return n


def bind_ctx(conns: list, defines: dict, arch: int) -> None:
    """The feature inputs arch 1 and 2 bind past a kernel's own: the next coarser level's
    context plane (CTXC_B) and arch 2's match features (NLD_B; kpn.glsl's CTX_INPUTS)."""
    bind_last(conns, defines, "CTXC_B", img("ctxc", "read"))
    if arch == 2:
        bind_last(conns, defines, "NLD_B", ssbo("nldist", "read"))


def connect_features(graph, n, i: int, node) -> None:
    """Level i's feature sources into `node` (fwd_i, bck_fused_i; `n`: forward_nodes'):
    arch 1 and 2's context planes of the level and the next coarser one and arch 2's match
    features (what bind_ctx declared), else diff's f16 feature plane (the cooperative-matrix
    kernels) or its detail."""
    arch, diff = n["arch"], n["diff"][i]
    if arch:
        graph.node_connect(diff, "ctx", node, "ctxf")
        graph.node_connect(n["diff"][i + 1], "ctx", node, "ctxc")
    else:
        src = "feat" if n["plane"] else "detail"
        graph.node_connect(diff, src, node, src)
    if arch == 2:
        graph.node_connect(n["match"][i], "nldist", node, "nldist")


def bind_last(conns: list, defines: dict, define: str, conn) -> None:
    """conn as the kernel's last connector, its binding number in `define`: arch 1's second
    context plane (CTXC_B), arch 2's match features (NLD_B), the fused kernels' activation
    scale (adam's stats, ASCALE_B) and per-layer scales (wscale's lsc, LSC_B)."""
    defines[define] = len(conns)
    conns.append(conn)
