"""unet-t's forward pass as nodes, shared by unet-t (training) and unet (inference,
modules/unet): prep (the input -> F), one conv node per layer of net.py, and the output node
(loss.comp: O = X - s N, with the L1 loss and dE/dN where training gives a reference). Also
what unet needs to run weights from a `.lut`: the network's shape from the .lut's text, the
padded size, and how far a pixel's result reaches (vkgraph denoise's tile margin).

`cfa` (net.py's RGB, RGGB, CELLS or MOSAIC): RGGB (unet-t's param cfa 1, a .lut's line `cfa
rggb`) the network of RGGB mosaics (README.md, "Bayer mosaics"), MOSAIC (cfa 2, the line `cfa
any`) that of mosaics of any pattern, each photosite's colour in its alpha (README.md,
"Mosaics of any pattern"), CELLS (param cells, the line `cells rgb`) that of RGB on cells of
2 x 2 pixels (README.md, "Cells"). Each runs at half resolution, a cell of 2 x 2 pixels a
pixel of the network; sizes given here stay the full-resolution image's (even for a
mosaic)."""

from __future__ import annotations

import math
import os
import re
from typing import NamedTuple

from vkgraph.modules.unet_t.net import CELLS, MOSAIC, RGB, RGGB, Layer, layers, n_params
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.module import OPTIONAL, Roi, img, ssbo
from vkgraph.pipeline.variants import (
    cm_available,
    cm_defines,
    cpu_capable,
    env_choice,
    portable_forced,
)

SHADER = "unet-t"
KIND = "unet denoiser"  # the .lut's text names the network so (module.lut_text)


BLOCK_ENV = "VKGRAPH_UNET_BLOCK"  # "TN,RM,RN": another block shape, for bench/unet_train.py
BLOCK = (64, 4, 4)  # TN, RM, RN when the environment names none (the fastest on an H100)
TK = 16  # unet.glsl's step


class Block(NamedTuple):
    """The shape of a layer kernel's blocks (conv.comp, convb.comp, convw.comp; unet.glsl): a
    workgroup of `threads` sums a tm x tn block of its matrix product, rm x rn a thread."""

    tm: int
    tn: int
    rm: int
    rn: int

    @property
    def threads(self) -> int:
        return (self.tm // self.rm) * (self.tn // self.rn)

    def defines(self) -> dict:
        return {"TM": self.tm, "TN": self.tn, "RM": self.rm, "RN": self.rn}

    def groups(self, rows: int, columns: int) -> tuple[int, int]:
        """A node's dispatch size (invocations along x, workgroups along y) for a matrix
        product of `rows` x `columns`: columns over x, rows over y."""
        return self.threads * tiles(columns, self.tn), tiles(rows, self.tm)


def block_rows(channels: int) -> int:
    """The rows TM of a layer kernel's blocks: the channels rounded up to 4, 8, 16 or 32, so
    that narrow layers waste no rows."""
    return next(t for t in (4, 8, 16, 32) if channels <= t or t == 32)


def block_of(channels: int) -> Block:
    """The block of a layer kernel whose rows are `channels`: block_rows of them, and TN, RM,
    RN from $VKGRAPH_UNET_BLOCK ("TN,RM,RN", powers of two; RM is at most TM) or BLOCK. Any
    shape gives the same sums in the same order within a thread's block, not across blocks'
    steps: the results agree to rounding."""
    text = os.environ.get(BLOCK_ENV, "")
    try:
        tn, rm, rn = (int(v) for v in text.split(",")) if text else BLOCK
    except ValueError:
        raise GraphError(f"{BLOCK_ENV}={text!r}: expected TN,RM,RN (three integers)") from None
    tm = block_rows(channels)
    block = Block(tm, tn, min(rm, tm), rn)
    if not (all(v > 0 and v & (v - 1) == 0 for v in (tn, rm, rn)) and rn <= tn
            and block.threads <= min(1024, TK * tn)):
        raise GraphError(f"{BLOCK_ENV}={text!r}: TN, RM and RN must be powers of two, RN at "
                         f"most TN, and a workgroup ((TM / RM) (TN / RN) threads) at most "
                         f"{min(1024, TK * tn)}")
    return block


KERNELS_ENV = "VKGRAPH_UNET_KERNELS"  # auto (default), coopmat, portable or cpu
CM_WARPS = 4  # cm.glsl's warps a workgroup
CPU_PX = 8  # conv_cpu: the pixels of an invocation
CPU_CB = 16  # conv_cpu: its output channels (64 gave wrong sums at width 32 on llvmpipe)
CM_FN = 2  # conv_cm / convb_cm: a warp's fragments of 16 pixels
CM_FW = 2  # convw_cm: a warp's fragments of 16 columns
CM_KP = 32  # convw_cm: the pixels a step
CM3_WARPS = 8  # conv3_cm's warps a workgroup (on an H100 the 3x3 layers of 12 MP took 73 ms
#               with 8 and 119 with 4, measured before the kernel's reads were batched)


def kernels(graph, precise: bool = False) -> str:
    """The layer kernels of a build: "coopmat" (conv_cm, convb_cm, convw_cm: f16 operands,
    f32 sums, on tensor cores) where the device runs cooperative matrices (or
    VKGRAPH_COOPMAT_EMULATE emulates them), else "cpu" on a CPU driver (the forward layers as
    conv_cpu, README.md, "Kernels"; the backward portable), else "portable" (conv, convb,
    convw: fp32). $VKGRAPH_UNET_KERNELS = auto (that choice), coopmat (portable where the
    device cannot), portable, or cpu (portable where the device is not a CPU driver);
    `precise` (float64) and VKGRAPH_PORTABLE=1 are always portable."""
    want = env_choice(KERNELS_ENV, ("auto", "coopmat", "portable", "cpu"))
    if portable_forced(precise) or want == "portable":
        return "portable"
    if want == "cpu":
        return "cpu" if cpu_capable(graph) else "portable"
    if cm_available(graph):
        return "coopmat"
    return "cpu" if want == "auto" and cpu_capable(graph) else "portable"


def cm_rows(channels: int) -> int:
    """A cooperative-matrix kernel's block rows: the channels rounded up to 16, 32 or 64."""
    return next(t for t in (16, 32, 64) if channels <= t or t == 64)


def cm_layer(graph, kind: str, defines: dict, rows: int, columns: int, taps: int = 1) -> dict:
    """A cooperative-matrix layer node's dispatch size, workgroup and defines: `kind` conv
    or convb, the layer's `defines` (layer_defines and the kernel's own), a product of `rows`
    channels by `columns` pixels (workgroups of cm_rows(rows) by 16 CM_FN CM_WARPS), `taps`
    such products (workgroup z: conv_cm's UP_SPLIT)."""
    tm, threads = cm_rows(rows), 32 * CM_WARPS
    return {"kernel": kind + "_cm", "groups": (threads * tiles(columns, 16 * CM_FN * CM_WARPS),
                                               tiles(rows, tm), taps),
            "local": (threads, 1, 1),
            "defines": cm_defines(graph, **defines, CM_TM=tm, CM_WARPS=CM_WARPS, CM_FN=CM_FN)}


def cm3_rows(cout: int) -> int:
    """conv3_cm's block rows of pixels for `cout` output channels: CM3_WARPS warps of CM_WR
    rows each, 2 where the block's channel rows are 32 or fewer (8 accumulators a warp),
    else 1."""
    return CM3_WARPS * (2 if cm_rows(cout) <= 32 else 1)


def window_fits(tile: int | None, scale: int, cout: int, cfa: int = RGB) -> bool:
    """Whether conv3_cm's blocks (32 x cm3_rows(cout) pixels at the layer's `scale`) each lie
    in one of noiseab's tiles: `tile` the tiles' size T (full-resolution pixels; 0 the whole
    image; None not known when the graph is built: no)."""
    if tile is None:
        return False
    if tile == 0:
        return True
    shift = scale + (1 if cfa else 0)
    t = tile >> shift
    return t << shift == tile and t % 32 == 0 and t % cm3_rows(cout) == 0


def windowed(L, tile: int | None, scale: int, rows: int, cfa: int = RGB) -> bool:
    """Whether the layer L is a 3x3 one whose window kernels' blocks (`rows` the channels they
    make: conv3_cm's and convw3_cm's cout, convb3_cm's cin) lie in tiles at `scale`."""
    return L.kind == "conv3" and window_fits(tile, scale, rows, cfa)


def cm_conv3(graph, defines: dict, cout: int, wd: int, ht: int,
             kernel: str = "conv3_cm") -> dict:
    """conv3_cm's node (a 3x3 layer whose blocks each lie in one tile: window_fits) for
    `cout` output channels at wd x ht: CM3_WARPS warps, blocks of 32 x cm3_rows(cout)
    pixels; kernel "convb3_cm": the layer's input gradient, `cout` then its input channels
    (the rows of its product, shaders/unet-t/conv3.glsl)."""
    tm, threads = cm_rows(cout), 32 * CM3_WARPS
    wr = cm3_rows(cout) // CM3_WARPS
    return {"kernel": kernel,
            "groups": (threads * tiles(wd, 32), tiles(ht, CM3_WARPS * wr), tiles(cout, tm)),
            "local": (threads, 1, 1),
            "defines": cm_defines(graph, **defines, CM_TM=tm, CM_WARPS=CM3_WARPS, CM_WR=wr)}


def gscale(pixels: int) -> str:
    """cm.glsl's GSCALE for a loss over `pixels` pixels: 16 times the power of two at or
    above them (dE/dY ~ s / pixels then becomes ~16 s in f16), as a GLSL float."""
    return f"{float(2 ** (max(pixels - 1, 0).bit_length() + 4))!r}"


def tiles(n: int, size: int = 32) -> int:
    """The blocks of `size` that cover n rows or columns."""
    return -(-n // size)


def layer_defines(L: Layer, precise: bool) -> dict:
    return {"KIND": ("conv3", "down", "up", "conv1").index(L.kind), "CIN": L.cin,
            "CINA": L.cina, "COUT": L.cout, "WOFF": L.offset, "RELU": int(L.relu),
            **({"PRECISE": 1} if precise else {})}


def multiple(scales: int, cfa: int = RGB) -> int:
    """What the image's width and height must be multiples of: 2^(scales - 1), and twice
    that with cfa (the network runs on cells of 2 x 2 photosites)."""
    return (2 if cfa else 1) << (scales - 1)


def padded(wd: int, ht: int, scales: int, cfa: int = RGB) -> tuple[int, int]:
    """The full-resolution size the network covers for a wd x ht image: each side rounded up
    to multiple() (with cfa, 2 2^(scales - 1): whole cells, a multiple of 2^(scales - 1) of
    them)."""
    m = multiple(scales, cfa)
    return -(-wd // m) * m, -(-ht // m) * m


def layer_push(L: Layer, sizes: list, cfa: int = RGB) -> list[int]:
    """A layer kernel's push constants: its input and output sizes and the shift k that
    takes noiseab's tile size T (full-resolution pixels) to the layer's input scale (the
    scale, and one more with cfa: a cell is 2 x 2 pixels)."""
    (wi, hi), (wo, ho) = sizes[L.scale_in], sizes[L.scale_out]
    return [wi, hi, wo, ho, L.scale_in + (1 if cfa else 0)]


def connect_inputs(graph, node, L: Layer, made: dict) -> None:
    """node's inA from layer L's input a, inB from its input b (a concatenation's second
    part) or left open (an optional input), from `made` (name -> (node, connector))."""
    graph.node_connect(*made[L.a], node, "inA")
    if L.b:
        graph.node_connect(*made[L.b], node, "inB")
    else:
        node.connector("inB").flags |= OPTIONAL


def forward_nodes(graph, module, net: tuple[int, int], weights, size: tuple[int, int],
                  noise: str = "noiseab", precise: bool = False, ref: bool = False,
                  cfa: int = RGB, fp32: bool = False, l2: bool = False,
                  tile: int | None = None) -> dict:
    """prep, a conv node per layer (net.py's order) and the output node `loss`, for the
    network `net` (width, scales), run at `size` (wd, ht: multiples of
    2^(scales - 1)) on the module input `input` (at most `size`; prep reads it mirrored to
    `size`, and `loss` writes the module output `output` at the input's size: the top left
    of the network's result). `weights`: the (node, connector) that writes the weights
    (unet-t: adam's `w`) or the name of a module input (unet: `w`, from a .lut); f32, net.py's
    layout. `noise`: where the noise profile comes from: "noiseab" (unet-t: the module input
    with cnngenin's per-tile records, whose tile size the convs read too) or "params" (unet:
    its params `noise a`, `noise b`; the convs' noiseab stays unconnected, which reads zeros:
    tile size 0, the whole image). `ref`: the loss against the module input `ref` too (dN:
    dE/dN, Epart: the loss's partial sums; l2: the squared error instead of L1). Returns
    {"prep", "conv" (name -> node), "made"
    (name -> (node, connector) of every activation, "F" included), "loss", "groups" (the
    loss's partials), "sizes" (wd, ht of every scale)}.
    `cfa`: the input is an RGGB mosaic of even width and height; `size` is then the
    full-resolution size (multiples of 2 2^(scales - 1)), the network runs on its cells (half
    of it: "sizes" are the cells') and `loss` writes the full-resolution RGB.
    The layer kernels are `kernels`' choice ("kernels" in the result), portable with `fp32`;
    with cooperative matrices a 3x3 layer runs conv3_cm where its blocks lie in noiseab's
    tiles (window_fits: `tile` their size where the graph fixes it; "params": the whole
    image, one tile)."""
    width, scales = net
    ls = layers(width, scales, cfa)
    kind = kernels(graph, precise or fp32)
    cm = kind == "coopmat"
    W, H = size
    m = multiple(scales, cfa)
    inp = module.connector("input").roi  # of even size with cfa (the modules' modify_roi_out)
    if W % m or H % m:
        raise GraphError(f"{module}: the network runs at {W}x{H}; with scales {scales}"
                         f"{' on cells' if cfa else ''} its width and height must be "
                         f"multiples of {m}")
    words = 2 if precise else 1  # f32 words a value
    defs = {"PRECISE": 1} if precise else {}
    if noise == "params":
        defs["FROM_PARAMS"] = 1
    elif noise != "noiseab":
        raise ValueError(f"noise '{noise}': 'noiseab' or 'params'")
    if cfa:
        defs[{RGGB: "CFA", CELLS: "CELLS", MOSAIC: "MOSAIC"}[cfa]] = 1
        W, H = W // 2, H // 2  # the network's pixels: cells
    sizes = [(W >> k, H >> k) for k in range(scales)]

    def noiseab(node) -> None:
        if noise == "noiseab":
            graph.bind(module, "noiseab", node, "noiseab")
        else:  # an open optional input reads zeros: T = 0, the whole image one tile
            node.connector("noiseab").flags |= OPTIONAL

    def feed_weights(node) -> None:
        if isinstance(weights, str):
            graph.bind(module, weights, node, "w")
        else:
            graph.node_connect(weights[0], weights[1], node, "w")

    prep = graph.add_node(module, "prep", (W, H), [
        img("input", "read"), ssbo("noiseab", "read"),
        ssbo("F", "write", words * ls[0].cin * W * H)],
        shader=SHADER, push=[inp.wd, inp.ht, W, H, 0], defines=defs)
    graph.bind(module, "input", prep, "input")
    noiseab(prep)
    made = {"F": (prep, "F")}
    conv = {}
    for L in ls:
        wo, ho = sizes[L.scale_out]
        if cm and windowed(L, 0 if noise == "params" else tile, L.scale_out, L.cout, cfa):
            k = cm_conv3(graph, layer_defines(L, False), L.cout, wo, ho)
        elif cm and L.kind == "up":  # a product a tap, over the input pixels
            wi, hi = sizes[L.scale_in]
            k = cm_layer(graph, "conv", {**layer_defines(L, False), "UP_SPLIT": 1}, L.cout,
                         wi * hi, taps=4)
        elif cm:
            k = cm_layer(graph, "conv", layer_defines(L, False), L.cout, wo * ho)
        elif kind == "cpu":  # CPU_CB output channels of CPU_PX pixels in one SIMD lane
            k = {"kernel": "conv_cpu", "groups": (64 * tiles(wo * ho, 64 * CPU_PX),
                                                  tiles(L.cout, CPU_CB)),
                 "local": (64, 1, 1),
                 "defines": {**layer_defines(L, False), "PX": CPU_PX, "CB": CPU_CB}}
        else:
            blk = block_of(L.cout)
            k = {"kernel": "conv", "groups": blk.groups(L.cout, wo * ho),
                 "local": (blk.threads, 1, 1),
                 "defines": {**layer_defines(L, precise), **blk.defines()}}
        node = graph.add_node(module, k["kernel"], k["groups"], [
            ssbo("w", "read"), ssbo("inA", "read"), ssbo("inB", "read"),
            ssbo("outp", "write", words * L.cout * wo * ho), ssbo("noiseab", "read")],
            shader=SHADER, local=k["local"], push=layer_push(L, sizes, cfa),
            defines=k["defines"])
        feed_weights(node)
        connect_inputs(graph, node, L, made)
        noiseab(node)
        made[L.name] = (node, "outp")
        conv[L.name] = node

    groups = math.ceil(inp.wd / 8) * math.ceil(inp.ht / 8)
    conns = [ssbo("N", "read"), img("input", "read"), ssbo("noiseab", "read"),
             img("output", "write", Roi(inp.wd, inp.ht))]
    if ref:
        conns += [img("ref", "read"), ssbo("dN", "write", words * ls[-1].cout * W * H),
                  ssbo("Epart", "write", 2 * groups)]
    loss = graph.add_node(module, "loss", (inp.wd, inp.ht), conns, shader=SHADER,
                          push=[W, H, inp.wd, inp.ht, 0],
                          defines={**({"REF": 1} if ref else {}),
                                   **({"L2": 1} if ref and l2 else {}), **defs})
    graph.node_connect(conv["out"], "outp", loss, "N")
    graph.bind(module, "input", loss, "input")
    noiseab(loss)
    if ref:
        graph.bind(module, "ref", loss, "ref")
    graph.bind(module, "output", loss, "output")
    return {"prep": prep, "conv": conv, "made": made, "loss": loss, "groups": groups,
            "sizes": sizes, "kernels": kind}


def shape_of_text(text: str | None, where: str = "") -> tuple[int, int]:
    """(width, scales) from the text of a .lut unet-t wrote (module.lut_text); GraphError
    where there is no text, it is not a unet's, or its numbers are missing or out of range."""
    if not text:
        raise GraphError("the weights' .lut has no text; unet needs the weights unet-t writes "
                         f"(their text says '{KIND}', the width and the scales)", where=where)
    if KIND not in text:
        first = " ".join(text.split())[:80]
        raise GraphError(f"the weights' .lut says '{first}', not '{KIND}': these are not "
                         "unet-t's weights", where=where)
    got = {}
    for name in ("width", "scales"):
        found = re.findall(rf"^{name} (\S+)$", text, re.MULTILINE)
        if len(found) != 1 or not found[0].isdigit():
            raise GraphError(f"the weights' .lut says '{KIND}' but not its {name} (a line "
                             f"'{name} N')", where=where)
        got[name] = int(found[0])
    try:
        layers(got["width"], got["scales"])
    except ValueError as e:
        raise GraphError(f"the weights' .lut: {e}", where=where) from None
    return got["width"], got["scales"]


CFA_LINE = "cfa rggb"  # the .lut text's line of a network of RGGB mosaics (module.lut_text)
CELLS_LINE = "cells rgb"  # and of a network of RGB cells
MOSAIC_LINE = "cfa any"  # and of a network of mosaics of any pattern
LINES = {RGGB: CFA_LINE, CELLS: CELLS_LINE, MOSAIC: MOSAIC_LINE}
WHAT = {RGB: "", RGGB: " of RGGB mosaics", CELLS: " on cells of RGB",
        MOSAIC: " of mosaics of any pattern"}


def cfa_of_text(text: str | None, where: str = "") -> int:
    """What a unet-t .lut's text (shape_of_text's) says its network reads: RGGB (its line
    `cfa rggb`), MOSAIC (`cfa any`), CELLS (`cells rgb`) or RGB (none); any other `cfa` or
    `cells` line, or two, a GraphError."""
    found = [m.strip() for m in re.findall(r"^((?:cfa|cells)\b.*)$", text or "", re.MULTILINE)]
    if not found:
        return RGB
    known = {v: k for k, v in LINES.items()}
    if len(found) != 1 or found[0] not in known:
        raise GraphError(f"the weights' .lut says '{KIND}' with the line(s) "
                         f"{', '.join(repr(f) for f in found)}; these weights can have one of "
                         f"{' or '.join(repr(v) for v in LINES.values())}", where=where)
    return known[found[0]]


def network_of_text(text: str | None, count: int, where: str = "") -> tuple[int, int, int]:
    """(width, scales, cfa) of the network a unet-t .lut's text names (shape_of_text,
    cfa_of_text), checked against the `count` weights the .lut holds: GraphError where they
    are not that network's."""
    width, scales = shape_of_text(text, where=where)
    cfa = cfa_of_text(text, where=where)
    want = n_params(width, scales, cfa)
    if count != want:
        raise GraphError(f"holds {count} values, but a U-Net of width {width} and {scales} "
                         f"scales{WHAT[cfa]} (says the .lut's text) "
                         f"has {want}", where=where, hint="a .lut that unet-t's w output wrote")
    return width, scales, cfa


def is_unet_text(text: str | None) -> bool:
    """Whether a .lut's text says it holds unet-t's weights."""
    return bool(text) and KIND in text


def reach(scales: int, cfa: int = RGB) -> int:
    """How far (pixels at full resolution, either way and along either axis) the output at
    a pixel depends on the input, for the worst pixel of the 2^(scales - 1) grid: a conv3 at
    scale k reads 2^k pixels further, a down reads the pair, an up its one source. Zero
    outside the image, which tiles see where the whole image has pixels, reaches no further
    into a tile than this (the width does not matter).
    cfa (RGGB or CELLS): the network's pixels are cells of 2 x 2 pixels, so a pixel reaches the
    pixels of the cells within the cells' reach r: 2 r + 1 (the +1: the far pixel of the
    farthest cell), for the worst pixel of the grid of 2 2^(scales - 1) pixels. Tiles must
    start on even pixels (on cells) for this, and a mosaic's to keep the colour phase."""
    if cfa:
        return 2 * reach(scales) + 1
    net = layers(1, scales)
    by = {L.name: L for L in net}
    memo: dict = {}

    def dep(name: str, i: int) -> tuple[int, int]:
        """The interval of input pixels (full resolution) that pixel i of `name` reads."""
        if name == "F":
            return i, i
        key = (name, i)
        if key not in memo:
            L = by[name]
            if L.kind == "conv3":
                src = [(s, j) for s in (L.a, L.b) if s for j in (i - 1, i, i + 1)]
            elif L.kind == "down":
                src = [(L.a, 2 * i), (L.a, 2 * i + 1)]
            elif L.kind == "up":
                src = [(L.a, i // 2)]
            else:
                src = [(L.a, i)]
            spans = [dep(s, j) for s, j in src]
            memo[key] = min(s[0] for s in spans), max(s[1] for s in spans)
        return memo[key]

    m = multiple(scales)  # the grid of the network's pixels
    lo_hi = [dep("out", x) for x in range(m)]
    return max(max(x - lo, hi - x) for x, (lo, hi) in enumerate(lo_hi))


def bytes_per_pixel(width: int, scales: int, precise: bool = False,
                    cfa: int = RGB) -> tuple[int, int]:
    """(bytes of the largest buffer, bytes of all the buffers) of forward_nodes' nodes per
    pixel of the padded image (the input and output images counted at the padded size: an
    upper bound). cfa: per full-resolution pixel, the network's buffers a quarter of a cell's."""
    words = 2 if precise else 1
    net = layers(width, scales, cfa)
    cell = 4 if cfa else 1  # pixels a network pixel
    per = [4 * words * net[0].cin / cell, 16, 16]  # F, the input and output images
    for L in net:
        per.append(4 * words * L.cout / 4 ** L.scale_out / cell)
    return int(math.ceil(max(per))), int(math.ceil(sum(per)))
