"""kpn-t: trains the kernel-predicting MLP denoiser frame by frame (README.md here has the maths).

kpn-t supplies its optimiser's params (`weights`), its network (`network`: forward, loss,
backward) and its views; the engine's trainer scaffold (pipeline/trainer.py) adds adam,
lsum, norm, the feedback edges and the trainer hooks. Nodes per level i (sizes s_0 = input,
s_{i+1} = ceil(s_i / 2)):
  forward   (forward.py; cooperative-matrix variants: wpack, w -> packed fragments, once)
            sub_i (M_i -> M_{i+1}), diff_i (-> D_i), fwd_i (D_i, w -> K_i, A_i),
            apply_i (D_i, K_i -> I_i), up_i (I_i, O_{i+1} or M_L -> O_i)
  loss      loss (O_0, ref -> dO_0, partials), lsum (scaffold: -> loss history, current loss)
  backward  dup_i (dO_i -> dO_{i+1}), dapply_i (-> dK_i), bck_i (-> G_i),
            mulw_i (A_i, G_i, dK_i -> partials), reduce_i (sum over chunks and levels -> dw)
  update    (scaffold) norm (dw and loss of the last frame -> ||g||, finite?), adam (-> w, m,
            v, w16, stats)
adam reads dw and the norm through feedback edges: frame f applies the gradient of f-1.
Checkpoints (hooks state/load_state): adam's w, m, v, stats and the loss history; the engine
adds the feedback buffers (the last frame's dw and loss).
"""

from __future__ import annotations

import math

import numpy as np

from vkgraph.modules.kpn_t.forward import (
    CPU_PX,
    LAYOUT_GEN,
    MATRICES,
    MLP_BATCH,
    NW,
    WIDTH,
    arch_shape,
    bind_ctx,
    bind_last,
    cm_tuning,
    connect_features,
    cpu_texel,
    forward_nodes,
    fused_groups,
    pad,
)
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.module import Roi, img, ssbo
from vkgraph.pipeline.optim import OPTIMIZERS, Matrix
from vkgraph.pipeline.trainer import GRAPH_SIZE, Network, Trains, Weights, loss_plot
from vkgraph.pipeline.variants import cm_defines, emulated

# the generated header of kpn-t's kernels: the weight layout (forward.py)
HEADERS = {"layout.gen": LAYOUT_GEN}

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
# the lines kpn-t adds for weights that need the noise profile, and for arch 1 and 2 (kpn
# reads them back)
FEAT_TEXT = "noise-normalised features"
CTX_TEXT = "chroma and context features"
NL_TEXT = "nonlocal taps"
LOSS_NAMES = {0: "SMAPE", 1: "L2", 2: "L1"}
APPLY_NAMES = {0: "plain", 1: "softmax", 2: "softmax"}  # 2: softmax taps, sigmoid blend


LEVELS_TEXT = "{} pyramid levels"


def lut_text(apply: int, loss: int, feat: int, levels: int, arch: int = 0) -> str:
    """The .lut's trailing text: vkdt's description, then what kpn must match (levels, and
    the noise-normalised features and arch 1 or 2 when used)."""
    text = LUT_TEXT.format(apply=APPLY_NAMES.get(apply, "plain"),
                           blend="sigmoid" if apply == 2 else "const",
                           loss=LOSS_NAMES.get(loss, "SMAPE"))
    return "\n".join([text, LEVELS_TEXT.format(levels)] + ([FEAT_TEXT] if feat else [])
                     + ([CTX_TEXT] if arch else []) + ([NL_TEXT] if arch == 2 else []))


def trained_with(text: str) -> dict:
    """What a kpn-t .lut's trailing text says the weights need: `apply`, `levels` (None
    where the text does not say), `feat` and `arch` (0, 1 or 2)."""
    out = {"apply": None, "levels": None, "feat": int(FEAT_TEXT in text),
           "arch": 2 if NL_TEXT in text else int(CTX_TEXT in text)}
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


def check_arch(module) -> int:
    """`arch`, checked: arch 1 and 2 filter with softmax taps and a band gain (apply 2) and
    read the noise-normalised features (feat 1)."""
    arch = int(module.param("arch"))
    if arch and (int(module.param("feat")) != 1 or int(module.param("apply")) != 2):
        raise GraphError(f"{module}: arch {arch} needs feat 1 and apply 2 (it filters with softmax "
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
    module.connector("graph").roi = Roi(*GRAPH_SIZE)
    module.connector("vis").roi = Roi(512, 256)
    # what o-lut writes after the weights, and kpn reads back from its .lut
    graph.meta(module, "w")["text"] = lut_text(
        int(module.param("apply")), int(module.param("loss")), int(module.param("feat")),
        int(module.param("levels")), arch)


def mulw_chunks(n: int) -> tuple[int, int]:
    """(chunks, pixels per chunk) of the blocked weight-gradient product: enough workgroups
    to fill a GPU, few enough partials to sum cheaply."""
    chunks = max(1, min(64, math.ceil(n / 256)))
    return chunks, math.ceil(n / chunks)


def weights(graph, module) -> Weights:
    """The optimiser's params: the NW weights, started from the .lut on wcp (f16) where one is
    connected; the f16 copy w16 is the module's weight output (the .lut layout) and feeds
    the cooperative-matrix kernels; arch 1 and 2 use more rows of the last matrix."""
    wcp = module.connector("wcp")
    if wcp.source is not None and wcp.roi.wd * wcp.roi.ht != NW:  # adam would misread it
        raise GraphError(f"{module}: input 'wcp' holds {wcp.roi.wd}x{wcp.roi.ht} = "
                         f"{wcp.roi.wd * wcp.roi.ht} elements; kpn-t starts from its own "
                         f"weights, {WIDTH}x{NW // WIDTH} = {NW} (a .lut written by kpn-t's "
                         "w output)")
    lut = Roi(WIDTH, NW // WIDTH)  # the .lut layout: w16 and the best weights
    arch = int(module.param("arch"))
    _, _, rows = arch_shape(arch)  # checked by modify_roi_out
    return Weights(NW, "w16", best=("f16", lut), w16=lut, start=wcp.source is not None,
                   wcp="f16", defines={"KPN_ROWS": f"{rows}u"}, matrices=matrices(arch),
                   muon=int(module.param("opt")) == OPTIMIZERS["muon"],
                   coupled="2.0 * params.L2")


def matrices(arch: int) -> tuple[Matrix, ...]:
    """The 2-D weight matrices Muon orthogonalises: the seven WIDTH x WIDTH matrices, the last
    one's used rows only (arch_shape): its unused rows stay 0."""
    full = [Matrix(k * WIDTH * WIDTH, WIDTH, WIDTH, WIDTH) for k in range(MATRICES - 1)]
    _, _, rows = arch_shape(arch)
    return (*full, Matrix((MATRICES - 1) * WIDTH * WIDTH, rows, WIDTH, WIDTH))


def network(graph, module, scaffold) -> Network:
    """The forward at every level, the loss against ref and the backward down to dE/dW (the
    last level's reduce sums every level's partials)."""
    levels = int(module.param("levels"))  # 1..12 (modules/kpn-t/ranges)
    module.data["levels"] = levels
    adam, arch = scaffold.adam, int(module.param("arch"))
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
    used[(MATRICES - 1) * WIDTH * WIDTH + arch_shape(arch)[2] * WIDTH:] = False  # unused rows

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
        if arch == 2:  # the filter's adjoint over the star and the matched taps
            dap = graph.add_node(module, "dapply_nl", (w, h), [
                img("detail", "read"), ssbo("K", "read"), ssbo("nltap", "read"),
                img("dI", "read"), ssbo("dK", "write", n["nout"] * npx)], shader="kpn-t",
                defines=n["ctx"])
            graph.node_connect(n["match"][i], "nltap", dap, "nltap")
        else:
            dap = graph.add_node(module, "dapply", (w, h), [
                img("detail", "read"), ssbo("K", "read"), img("filtered", "read"),
                img("dI", "read"), ssbo("dK", "write", n["nout"] * npx)], shader="kpn-t",
                push=[int(module.param("apply"))], defines=n["ctx"])
            graph.node_connect(n["apply"][i], "filtered", dap, "filtered")
        graph.node_connect(n["diff"][i], "detail", dap, "detail")
        graph.node_connect(n["fwd"][i], "K", dap, "K")
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
    npad = pad(npx)
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
            bind_ctx(conns, defines, arch)
        bind_last(conns, defines, "ASCALE_B", ssbo("stats", "read"))
        bind_last(conns, defines, "LSC_B", ssbo("lsc", "read"))
        node = graph.add_node(module, "bck_fused", (groups * 32 * warps, 1), conns,
                              shader="kpn-t", local=(32 * warps, 1, 1),
                              push=[npx, per, scale, 1.0 / scale], defines=defines)
        graph.node_connect(adam, "stats", node, "stats")
        graph.node_connect(n["wscale"], "lsc", node, "lsc")
        connect_features(graph, n, i, node)
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


def views(graph, module):
    """graph (the loss plot, the scaffold's loss_plot), vis (weights and gradients), debug
    (kernels), each only when something reads it. The vis bars get a small reduction pass
    first, so no pixel scans all weights."""
    readers = graph.readers
    t, n = module.trainable, module.data["forward"]
    adam, dw_node = t.adam, t.dw
    if readers(module, "graph"):
        loss_plot(graph, module)
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
