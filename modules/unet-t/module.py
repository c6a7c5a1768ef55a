"""unet-t: trains a U-Net denoiser frame by frame (README.md here has the maths).

unet-t supplies its optimiser's params (`weights`) and its network (`network`: forward, loss,
backward); the engine's trainer scaffold (pipeline/trainer.py) adds adam, lsum, norm, the
feedback edges and the trainer hooks. Nodes, for the layers of net.py in order:
  forward   prep (input, noiseab -> F), conv per layer (its inputs -> Y), loss (N, input,
            ref -> output, dE/dN, partials), lsum (scaffold)
  backward  per layer, the last first: convb (dE/dY -> dE/d its inputs; none for the first
            layer, whose input is F), convw (dE/dY, its inputs -> partial sums of dE/dW of
            the layer over runs of pixels), wsum (-> the layer's dE/dW after the layers
            before it's: the last layer's is dw)
  update    (scaffold) norm, adam
The layer kernels (conv, convb, convw) are fp32 (float64 with `precise`, the gradient check's
forward and backward), or their cooperative-matrix versions (conv_cm, convb_cm, convw_cm: f16
operands, f32 sums; forward.kernels picks them where the device runs them).
The forward nodes (prep, conv, loss) are forward.py's `forward_nodes`, which the inference
module unet (modules/unet) builds too.
"""

from __future__ import annotations

import numpy as np

from vkgraph.modules.unet_t.forward import (
    CM_FW,
    CM_KP,
    CM_WARPS,
    LINES,
    SHADER,
    block_of,
    cm_conv3,
    cm_layer,
    cm_rows,
    connect_inputs,
    forward_nodes,
    gscale,
    layer_defines,
    layer_push,
    multiple,
    tiles,
    windowed,
)
from vkgraph.modules.unet_t.net import CELLS, MOSAIC, RGB, RGGB, layers
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.module import OPTIONAL, Roi, ssbo
from vkgraph.pipeline.trainer import GRAPH_SIZE, Network, Trains, Weights, loss_plot
from vkgraph.pipeline.variants import cm_defines, env_choice


def shape(module) -> tuple[int, int]:
    return int(module.param("width")), int(module.param("scales"))


def reads(module) -> int:
    """What the network reads (net.py): param cfa 1 RGGB mosaics (README.md, "Bayer
    mosaics"), cfa 2 mosaics of any pattern (README.md, "Mosaics of any pattern"), param cells
    1 RGB on cells of 2 x 2 pixels (README.md, "Cells"), else RGB pixels; a mosaic and cells
    at once a GraphError."""
    cfa, cells = int(module.param("cfa")), int(module.param("cells")) != 0
    if cfa and cells:
        raise GraphError(f"{module}: cfa {cfa} and cells 1: the network reads either mosaics "
                         "or RGB cells", hint="set one of them to 0")
    return {1: RGGB, 2: MOSAIC}.get(cfa, CELLS if cells else RGB)


def lut_text(width: int, scales: int, cfa: int = RGB) -> str:
    """What o-lut writes after the weights: enough to rebuild the network (the line
    `cfa rggb` for a network of RGGB mosaics, `cfa any` for one of mosaics of any pattern,
    `cells rgb` for one of RGB cells)."""
    return (f"lut contains weights for\nunet denoiser with:\nwidth {width}\nscales {scales}\n"
            + (f"{LINES[cfa]}\n" if cfa else ""))


def upstream_tile(module) -> int | None:
    """cnngenin's tile size where it feeds noiseab with tiles (the kernels read it from
    noiseab at run time), else None."""
    src = module.connector("noiseab").source
    up = src[0] if src else None
    if getattr(up, "name", None) == "cnngenin" and int(up.param("tiles")):
        return int(up.param("tile"))
    return None


def modify_roi_out(graph, module):
    width, scales = shape(module)
    cfa = reads(module)
    inp = module.connector("input").roi
    m = multiple(scales)
    what = {RGGB: "an RGGB mosaic (cfa 1)", MOSAIC: "a mosaic (cfa 2)"}.get(
        cfa, "a network on cells (cells 1)")
    if cfa and (inp.wd % 2 or inp.ht % 2):
        raise GraphError(f"{module}: the input is {inp.wd}x{inp.ht}; {what} needs an even "
                         "width and height (whole cells of 2 x 2 pixels)")
    if cfa and (inp.wd // 2 % m or inp.ht // 2 % m):
        raise GraphError(f"{module}: the input is {inp.wd}x{inp.ht}, {inp.wd // 2}x"
                         f"{inp.ht // 2} cells of 2 x 2 pixels; with scales {scales} the "
                         f"cells' width and height must be multiples of {m} (the input's of "
                         f"{2 * m})")
    if not cfa and (inp.wd % m or inp.ht % m):
        raise GraphError(f"{module}: the input is {inp.wd}x{inp.ht}; with scales {scales} its "
                         f"width and height must be multiples of {m}")
    tile = upstream_tile(module)
    if tile is not None and cfa and (tile % 2 or tile // 2 % m):
        raise GraphError(f"{module}: cnngenin's tiles are {tile} pixels; for {what} and scales "
                         f"{scales} they must be even and tile/2 (the tile's cells) a multiple "
                         f"of {m}: a multiple of {2 * m}")
    if tile is not None and not cfa and tile % m:
        raise GraphError(f"{module}: cnngenin's tiles are {tile} pixels; with scales {scales} "
                         f"they must be a multiple of {m}")
    ref = module.connector("ref").roi
    if (ref.wd, ref.ht) != (inp.wd, inp.ht):
        raise GraphError(f"{module}: ref is {ref.wd}x{ref.ht}, input {inp.wd}x{inp.ht}")
    n = layers(width, scales, cfa)[-1].end
    module.connector("output").roi = Roi(inp.wd, inp.ht)
    module.connector("w").roi = Roi(n, 1)
    module.connector("graph").roi = Roi(*GRAPH_SIZE)
    graph.meta(module, "w")["text"] = lut_text(width, scales, cfa)


def weights(graph, module) -> Weights:
    """The optimiser's params: every layer's weights and bias (net.py's order), from the
    checkpoint on wcp (f32) where one is connected, else adam.comp's init (the layer table
    as defines)."""
    ls = layers(*shape(module), reads(module))
    n = ls[-1].end
    wcp = module.connector("wcp")
    if wcp.source is not None and wcp.roi.wd * wcp.roi.ht != n:
        raise GraphError(f"{module}: input 'wcp' holds {wcp.roi.wd * wcp.roi.ht} values; this "
                         f"network (width {module.param('width')}, scales "
                         f"{module.param('scales')}, cfa {module.param('cfa')}, cells "
                         f"{module.param('cells')}) has {n}",
                         hint="train it with the same width, scales, cfa and cells")
    defines = {"UNET_NP": n, "UNET_LAYERS": len(ls),
               "UNET_WEND": ",".join(f"{L.offset + L.weights}u" for L in ls),
               "UNET_END": ",".join(f"{L.end}u" for L in ls),
               "UNET_FAN": ",".join(f"{L.cin * L.k * L.k}.0" for L in ls)}
    return Weights(n, "w", best=("f32", Roi(n, 1)), start=wcp.source is not None, wcp="f32",
                   roi=Roi(n, 1), defines=defines)


def wgrad_chunks(pixels: int) -> int:
    """Runs of pixels convw sums apart (wsum adds them): enough workgroups to fill a GPU
    on the full-resolution layers, whose channels are few."""
    return max(1, min(256, pixels // 1024))


WGRAD_ENV = "VKGRAPH_UNET_WGRAD"  # auto (window), gather or window: 3x3 weight gradients' kernel


def wgrad_windows() -> bool:
    """Whether the 3x3 layers' weight gradients run convw3_cm (from staged windows, where the
    blocks lie in tiles; the default) or, with $VKGRAPH_UNET_WGRAD=gather, convw_cm. On an
    H100 train-unet.cfg's frame took 6.27 ms with it against 8.08 (bench/unet_train.py)."""
    return env_choice(WGRAD_ENV, ("auto", "gather", "window")) != "gather"


DGRAD_ENV = "VKGRAPH_UNET_DGRAD"  # auto (window), gather or window: 3x3 input gradients' kernel


def dgrad_windows() -> bool:
    """Whether the 3x3 layers' input gradients run convb3_cm (from staged windows of dY, where
    the blocks lie in tiles; the default) or, with $VKGRAPH_UNET_DGRAD=gather, convb_cm. On an
    H100 train-unet.cfg's frame took 6.01 ms with it against 6.29 (bench/unet_train.py)."""
    return env_choice(DGRAD_ENV, ("auto", "gather", "window")) != "gather"


CONVW3_WARPS = 9  # convw3_cm: a warp a tap


def cm_convw3(graph, defines: dict, L, wd: int, ht: int) -> dict:
    """convw3_cm's node for the 3x3 layer L at wd x ht: output channels over x (blocks of
    cm_rows), 16 input channels over y, chunks of the blocks of 32 x BH pixels over z (BH 8,
    4 past 32 channels: 256 or 128 pixels of dY a block in shared memory)."""
    tm = cm_rows(L.cout)
    bh = 8 if tm <= 32 else 4
    blocks = tiles(wd, 32) * tiles(ht, bh)
    chunks = max(1, min(wgrad_chunks(wd * ht), blocks))
    threads = 32 * CONVW3_WARPS
    return {"kernel": "convw3_cm", "local": (threads, 1, 1),
            "groups": (threads * tiles(L.cout, tm), tiles(L.cin, 16), chunks),
            "defines": cm_defines(graph, **defines, CM_TM=tm, CM_WARPS=CONVW3_WARPS,
                                  CM_EMU_WARPS=f"{CONVW3_WARPS}u", BH=bh, CHUNKS=chunks)}


def network(graph, module, scaffold) -> Network:
    """prep, the layers' forward, the loss against ref, and the backward down to dE/dW."""
    width, scales = shape(module)
    cfa = reads(module)
    ls = layers(width, scales, cfa)
    precise = int(module.param("precise")) != 0
    words = 2 if precise else 1  # f32 words a value
    defs = {"PRECISE": 1} if precise else {}
    W, H = module.connector("input").roi.wd, module.connector("input").roi.ht
    adam = scaffold.adam
    gs = gscale(W * H)  # the loss's pixels: the full-resolution image's with cfa too

    tile = upstream_tile(module)  # (the window kernels' blocks must lie in tiles)
    windows, dwindows = wgrad_windows(), dgrad_windows()
    fwd = forward_nodes(graph, module, (width, scales), (adam, "w"), (W, H), noise="noiseab",
                        precise=precise, ref=True, cfa=cfa,
                        l2=int(module.param("loss")) == 1, tile=tile)
    cm = fwd["kernels"] == "coopmat"  # the backward: coopmat as the forward, else portable
    made, conv, loss, size = fwd["made"], fwd["conv"], fwd["loss"], fwd["sizes"]
    scaffold.loss_sum(loss, fwd["groups"])

    # dE/dY of every layer's output: what its readers give back (a skip has two readers)
    grads: dict[str, list] = {"out": [(loss, "dN")]}
    wgrad = {}
    for L in reversed(ls):
        (wi, hi), (wo, ho) = size[L.scale_in], size[L.scale_out]
        g = grads[L.name]
        ldefs = {**layer_defines(L, precise), **({"DOUT2": 1} if len(g) > 1 else {})}
        push = layer_push(L, size, cfa)
        if L.a != "F":
            if cm and dwindows and windowed(L, tile, L.scale_in, L.cin, cfa):
                k = cm_conv3(graph, {**ldefs, "GSCALE": gs}, L.cin, wi, hi, "convb3_cm")
            elif cm:
                k = cm_layer(graph, "convb", {**ldefs, "GSCALE": gs}, L.cin, wi * hi)
            else:
                blk = block_of(L.cin)
                k = {"kernel": "convb", "groups": blk.groups(L.cin, wi * hi),
                     "local": (blk.threads, 1, 1), "defines": {**ldefs, **blk.defines()}}
            node = graph.add_node(module, k["kernel"], k["groups"], [
                ssbo("w", "read"), ssbo("gA", "read"), ssbo("gB", "read"), ssbo("outp", "read"),
                ssbo("dA", "write", words * L.cina * wi * hi),
                ssbo("dB", "write", words * max(L.cin - L.cina, 1) * wi * hi),
                ssbo("noiseab", "read")], shader=SHADER, local=k["local"], push=push,
                defines=k["defines"])
            graph.node_connect(adam, "w", node, "w")
            _grads(graph, module, node, g, conv[L.name])
            grads.setdefault(L.a, []).append((node, "dA"))
            if L.b:
                grads.setdefault(L.b, []).append((node, "dB"))
        lw = L.end - L.offset
        if cm and windows and windowed(L, tile, L.scale_out, L.cout, cfa):
            k = cm_convw3(graph, {**ldefs, "GSCALE": gs}, L, wo, ho)
            chunks = k["defines"]["CHUNKS"]  # runs of its blocks, not of pixels
        elif cm:  # output channels over x, fragments of 16 input channels at a tap over y
            chunks = wgrad_chunks(wo * ho)
            tm, frags = cm_rows(L.cout), L.k * L.k * tiles(L.cin, 16)
            k = {"kernel": "convw_cm", "local": (32 * CM_WARPS, 1, 1),
                 "groups": (32 * CM_WARPS * tiles(L.cout, tm),
                            tiles(frags, CM_FW * CM_WARPS), chunks),
                 "defines": cm_defines(graph, **ldefs, CM_TM=tm, CM_WARPS=CM_WARPS,
                                       CM_FW=CM_FW, CM_KP=CM_KP, CHUNKS=chunks, GSCALE=gs)}
        else:  # output channels over x, the columns (inputs and taps, the bias) over y
            chunks = wgrad_chunks(wo * ho)
            blk = block_of(L.cout)
            k = {"kernel": "convw", "local": (blk.threads, 1, 1),
                 "groups": (blk.threads * tiles(L.cout, blk.tm),
                            tiles(L.cin * L.k * L.k + 1, blk.tn), chunks),
                 "defines": {**ldefs, "CHUNKS": chunks, **blk.defines()}}
        node = graph.add_node(module, k["kernel"], k["groups"], [
            ssbo("inA", "read"), ssbo("inB", "read"), ssbo("gA", "read"), ssbo("gB", "read"),
            ssbo("outp", "read"), ssbo("part", "write", words * chunks * lw),
            ssbo("noiseab", "read")], shader=SHADER, local=k["local"], push=push,
            defines=k["defines"])
        connect_inputs(graph, node, L, made)
        _grads(graph, module, node, g, conv[L.name])
        wsum = graph.add_node(module, "wsum", (L.end, 1), [
            ssbo("part", "read"), ssbo("prev", "read"), ssbo("dw", "write", L.end)],
            shader=SHADER, local=(256, 1, 1),
            defines={"WOFF": L.offset, "LW": lw, "CHUNKS": chunks, **defs})
        graph.node_connect(node, "part", wsum, "part")
        wgrad[L.name] = wsum
    for before, L in zip([None] + ls[:-1], ls, strict=True):
        node = wgrad[L.name]
        if before is None:
            node.connector("prev").flags |= OPTIONAL
        else:
            graph.node_connect(wgrad[before.name], "dw", node, "prev")
    return Network(dw=wgrad[ls[-1].name], used=np.ones(ls[-1].end, bool),
                   layout=(len(ls), 1), groups=[(f"layer {L.name}", L.offset, L.end) for L in ls],
                   kernels="cooperative-matrix kernels" if cm else "portable kernels")


def _grads(graph, module, node, g: list, conv) -> None:
    """node's gA (and gB: a skip's second reader) and the layer's output Y (relu')."""
    graph.node_connect(*g[0], node, "gA")
    if len(g) > 1:
        graph.node_connect(*g[1], node, "gB")
    else:
        node.connector("gB").flags |= OPTIONAL
    graph.node_connect(conv, "outp", node, "outp")
    graph.bind(module, "noiseab", node, "noiseab")


def views(graph, module):
    """graph: the loss plot (the scaffold's loss_plot), when something reads it."""
    if graph.readers(module, "graph"):
        loss_plot(graph, module)


TRAINABLE = Trains(weights, network, views, precise="precise", rates=("alpha",),
                   clip="gradclip")
