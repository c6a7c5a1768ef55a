"""mlp-t: trains a small MLP (or an array of them, one per tile) to fit a target image, one
optimizer step per frame (README.md here has the maths of every kernel).

Nodes, in schedule order:
  adam    -> w (fp32 master weights, also the `w` output), m, v, stats   (adam, sgd, adamw)
  train   target, w -> A (activations), G (output gradients), loss partials  (fused fwd/bck)
  lsum    loss partials -> loss history, current loss        (kept: no sink needs it)
  wgrad   A, G -> per-chunk weight-gradient partials
  reduce  partials -> dw = dE/dW of this frame, per-net gradient norm and finiteness gn
  eval    w -> `output`: the networks over the target's grid
adam reads dw and gn through feedback edges: frame f applies the gradient of frame f-1. eval
(it reads only adam's w) runs beside train, lsum beside wgrad (no barrier between them:
pipeline/recording.py, Hazards).
The coopmat variant (mlp_variant, README.md "Kernel variants") runs `train_cm` instead of
train and wgrad: sampling, forward, loss, backward and per-workgroup weight-gradient
partials in one dispatch on cooperative matrices, with adam also writing the f16 weights
`w16` and the dynamic loss scale (stats[2], stats[3]); its reduce also does lsum's work
(LOSS_SUM: one dispatch less per frame), so there `lsum` below is the reduce node.
mlp-t supplies `weights` (its optimiser's params) and `network` (train, wgrad, reduce,
eval); the engine's trainer scaffold (pipeline/trainer.py) adds adam, lsum, the feedback
edges and the trainer hooks. The networks' shape is arch.py's `Arch`.

For tools (vkgraph gradcheck, checkpoints, tests): module.trainable (pipeline/trainer.py:
Trainable) names the node `adam` whose output "w" holds the fp32 master weights (with alpha 0
a step leaves them unchanged), `dw` whose output "dw" holds dE/dW of the frame, `lsum` whose
output "cur"[0] holds the frame's loss E, `used` a bool mask of the weights the network uses
and `layout`
= (matrices, width): the weights are that many width x width matrices (row = output neuron),
net n's layer l being matrix n * (depth + 1) + l. The samples of a frame depend only on the
frame index and `seed` (with `resample` 0 not even on the frame: the gradient check's static
input), so E is a deterministic function of the weights for a given frame. `precise` 1 (set
by vkgraph gradcheck) runs the forward and the loss in float64 on the same samples every
frame, so central differences of E resolve steps small enough to stay clear of ReLU kinks.
"""

from __future__ import annotations

import logging
import math

from vkgraph.modules.mlp_t.arch import Arch, arch
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.module import CLEAR, OPTIONAL, Roi, img, ssbo
from vkgraph.pipeline.optim import OPTIMIZERS
from vkgraph.pipeline.trainer import Network, Trains, Weights
from vkgraph.pipeline.variants import (
    cm_available,
    cm_defines,
    emulated,
    env_choice,
    portable_forced,
    tuning,
)

log = logging.getLogger("vkgraph")

MLP_BATCH = 32  # rows per train/eval workgroup (shaders/mlp-t/net.glsl); 16 when precise
# eval's workgroups per net at most (each loops over the tile's rows): enough to fill a GPU
# on preview frames, few to launch on the frames that skip the preview
EVAL_GROUPS = 512


def chunks_of(batch: int) -> tuple[int, int]:
    """(chunks, samples per chunk) of the weight gradient: enough workgroups to fill a GPU,
    few enough partials that summing them costs little."""
    chunks = max(1, min(32, math.ceil(batch / 512)))
    return chunks, math.ceil(batch / chunks)


# The cooperative-matrix training kernel (shaders/mlp-t/train_cm.comp, README.md "Kernel
# variants"): warps per workgroup (16 samples each) and workgroups per net (= weight-gradient
# partials). VKGRAPH_MLP_TUNE=warps=N,groups=N overrides them (benchmarking).
# Measured on the H100 (fit-image, batch 2^18; bench/README.md), weights staged in shared
# memory: train_cm 0.236 ms at 8 warps x 132 groups, 0.242 at 8 x 264, 0.413 at 4 x 264,
# 0.431 at 4 x 528 (each chunk stages every matrix: fewer rows per chunk cost more); more
# groups also make reduce dearer (132: 0.011 ms, 528: 0.075). One workgroup per SM.
CM_TUNING = {"warps": 8, "groups": 132}


def mlp_variant(graph, a: Arch, precise: bool) -> tuple[str, str]:
    """(variant, why) of the training kernels: "coopmat" (train_cm) or "portable" (train,
    wgrad). VKGRAPH_MLP = auto (default: coopmat where the device is cm_capable, see kpn-t),
    coopmat or portable; VKGRAPH_PORTABLE=1 and `precise` (the gradient check) are always
    portable; VKGRAPH_COOPMAT_EMULATE=1 runs the coopmat kernel in plain GLSL on any device.
    A launch shape whose shared memory the device lacks runs portable; `why` says so."""
    want = env_choice("VKGRAPH_MLP", ("auto", "coopmat", "portable"))
    if precise:
        return "portable", "precise (float64 forward)"
    if portable_forced() or want == "portable":
        return "portable", "asked for"
    if not cm_available(graph):
        return "portable", "no cooperative matrices on this device"
    need, have = cm_shared_bytes(a.width, cm_tuning()["warps"]), graph.capabilities
    if have is not None and have.shared_memory < need:
        return "portable", (f"train_cm needs {need} bytes of shared memory, the device has "
                            f"{have.shared_memory}")
    return "coopmat", ""


def cm_shared_bytes(width: int, warps: int) -> int:
    """train_cm's shared memory: h and g tiles of T = 16 warps rows and one layer's weights
    (row stride max(width, 32) + 8 halves), the loss sums (32 warps floats); emulated, the
    products' tiles too."""
    t, hs = 16 * warps, max(width, 32) + 8
    emu = 1024 * warps if emulated() else 0
    return (2 * t + width) * hs * 2 + 4 * 32 * warps + emu


def cm_tuning() -> dict:
    """CM_TUNING with VKGRAPH_MLP_TUNE's overrides. The emulation (the CPU driver: 32 KiB of
    shared memory) runs 2 warps unless told otherwise, at most 4."""
    t, given = tuning("VKGRAPH_MLP_TUNE", CM_TUNING)
    emu = emulated()
    if emu and "warps" not in given:
        t["warps"] = 2
    if t["warps"] not in ((2, 4) if emu else (2, 4, 8)):
        raise GraphError(f"VKGRAPH_MLP_TUNE: warps must be 2, 4{'' if emu else ' or 8'} "
                         f"(shared memory: 46 KiB at 8{', 32 KiB emulated' if emu else ''})")
    if t["groups"] < 1:
        raise GraphError("VKGRAPH_MLP_TUNE: groups must be positive")
    return t


def modify_roi_out(graph, module):
    a = arch(module)
    t = module.connector("target").roi
    if t.wd < a.tiles[0] or t.ht < a.tiles[1]:
        raise GraphError(f"{module}: the target ({t.wd}x{t.ht}) is smaller than the tile "
                         f"grid {a.tiles[0]}x{a.tiles[1]}")
    if a.dims == 3 and t.ht % a.slices:
        raise GraphError(f"{module}: the target's height {t.ht} is not a multiple of slices "
                         f"{a.slices} (dims 3: the slices are stacked vertically)")
    module.connector("output").roi = Roi(t.wd, t.ht)
    module.connector("w").roi = Roi(a.width, a.params // a.width)
    graph.meta(module, "w")["text"] = a.describe()  # o-lut writes it after the weights




def _checkpoint(module, a: Arch) -> str | None:
    """The wcp format when a checkpoint is connected (and used), else None."""
    wcp = module.connector("wcp")
    if wcp.source is None or int(module.param("init")) != 0:
        return None
    n = wcp.roi.wd * wcp.roi.ht
    if not wcp.is_ssbo or n != a.params:
        table = f" and a table of {a.table_floats}" if a.table_floats else ""
        raise GraphError(f"{module}: the checkpoint on 'wcp' holds {n} values, this network "
                         f"stores {a.params} ({a.nets} x {a.layers} matrices of "
                         f"{a.width}x{a.width}{table})", hint="train it with the same params")
    if wcp.format not in ("f32", "f16"):
        raise GraphError(f"{module}: checkpoint format {wcp.format}, expected f32 or f16")
    return wcp.format


def weights(graph, module) -> Weights:
    """The optimiser's params: every net's weights, then the table; started from the
    checkpoint on wcp where one is connected and used; the coopmat variant's adam also
    writes the f16 weights w16 and keeps the dynamic loss scale."""
    a = arch(module)
    n_p = a.params  # weights, then the table
    cm = variant_of(graph, module, a)[0] == "coopmat"
    wcp = _checkpoint(module, a)
    return Weights(n_p, "w", best=("f32", Roi(a.width, n_p // a.width)),
                   w16=Roi(a.width, a.weights // a.width) if cm else None,
                   start=wcp is not None, wcp=wcp or "f32",
                   roi=Roi(a.width, n_p // a.width),
                   defines={**a.defines(), **({"WCP16": 1} if wcp == "f16" else {}),
                            **({"W16OUT": 1, "DYN_SCALE": 1} if cm else {})},
                   matrices=a.matrices(), muon=a.opt == OPTIMIZERS["muon"])


def variant_of(graph, module, a: Arch) -> tuple[str, str]:
    """mlp_variant for this module's params."""
    return mlp_variant(graph, a, int(module.param("precise")) != 0)


def network(graph, module, scaffold) -> Network:
    """Training (train and wgrad, or train_cm), the gradient sum reduce and the preview
    eval."""
    adam, hist_len = scaffold.adam, scaffold.hist_len
    a = arch(module)
    defines = a.defines()
    batch = int(module.param("batch"))
    precise = int(module.param("precise")) != 0
    rows_per_group = MLP_BATCH // 2 if precise else MLP_BATCH
    groups = math.ceil(batch / rows_per_group)
    bpad = groups * rows_per_group
    rows = a.nets * bpad
    nw = a.weights
    n_p = a.params  # weights, then the table
    if a.table is not None and not graph.capabilities.int64_atomics:
        raise GraphError(f"{module}: enc {module.param('enc')} sums its table gradient with "
                         f"64-bit integer atomics, which {graph.capabilities.name} lacks")
    chunks, chunk = chunks_of(batch)
    variant, why = variant_of(graph, module, a)
    log.info("%s: %s training kernel%s", module, variant, f" ({why})" if why else "")
    cm = variant == "coopmat"

    def gradient_sum(src, parts, tacc, loss_parts=0, scaled=False):
        """reduce: dw = the sum of src's `parts` partials (+ tacc's table gradient), and the
        per-net gradient norms gn; adam applies both next frame (feedback). loss_parts > 0:
        it also sums src's loss partials (lsum's work, its outputs hist and cur). scaled:
        the partials are dE/dW already (train_cm divided out its loss scale)."""
        rgroups = math.ceil(n_p / 64)  # 64 params a workgroup (4 threads each)
        loss = [ssbo("Epart", "read"), ssbo("hist", "write", hist_len),
                ssbo("cur", "write", 4)] if loss_parts else []
        node = graph.add_node(module, "reduce", (256 * rgroups, 1), [
            ssbo("part", "read"), ssbo("tacc", "read", fmt="ui32"), ssbo("dw", "write", n_p),
            ssbo("gn", "write", 2 * a.nets), ssbo("gpart", "write", 2 * rgroups),
            ssbo("cnt", "write", 1, fmt="ui32"), *loss], shader="mlp-t", local=(256, 1, 1),
            push=[parts, loss_parts * a.nets, hist_len], keep=bool(loss_parts),
            defines={**defines, **({"PART_SCALED": 1} if scaled else {}),
                     **({"LOSS_SUM": 1} if loss_parts else {})})
        graph.node_connect(src, "part", node, "part")
        if loss_parts:
            graph.node_connect(src, "Epart", node, "Epart")
        if tacc is None:
            node.connector("tacc").flags |= OPTIONAL
        else:
            graph.node_connect(tacc, "tacc", node, "tacc")
        return node

    # the table gradient as 64-bit fixed point (2 words an entry), + a non-finite count
    tacc_conn = ssbo("tacc", "write", 2 * (a.table_floats + 1), fmt="ui32")
    if cm:
        tune = cm_tuning()
        T = 16 * tune["warps"]
        cm_chunks = math.ceil(batch / T)
        groups_cm = min(tune["groups"], cm_chunks)
        cmdefs = cm_defines(graph, **defines, WARPS=f"{tune['warps']}u")
        # a table: the fp32 params (the table after the weights) and its gradient, as train's
        table = [ssbo("w", "read"), tacc_conn] if a.table is not None else []
        train = graph.add_node(module, "train_cm", (groups_cm * 32 * tune["warps"], a.nets), [
            img("target", "read"), ("w16", "read", "ssbo", "f16", None), ssbo("stats", "read"),
            ssbo("part", "write", groups_cm * nw), ssbo("Epart", "write", 2 * groups_cm * a.nets),
            *table], shader="mlp-t", local=(32 * tune["warps"], 1, 1), push=[batch, cm_chunks],
            defines=cmdefs)
        graph.bind(module, "target", train, "target")
        graph.node_connect(adam, "w16", train, "w16")
        graph.node_connect(adam, "stats", train, "stats")
        if table:
            train.connector("tacc").flags |= CLEAR
            graph.node_connect(adam, "w", train, "w")
        reduce = gradient_sum(train, groups_cm, tacc=train if table else None,
                              loss_parts=groups_cm, scaled=True)
    else:
        train = graph.add_node(module, "train", (groups * a.width, a.nets), [
            img("target", "read"), ssbo("w", "read"), ssbo("A", "write", a.layers * rows * a.width),
            ssbo("G", "write", a.layers * rows * a.width),
            ssbo("Epart", "write", 2 * groups * a.nets), tacc_conn], shader="mlp-t",
            local=(a.width, 1, 1), push=[batch, bpad],
            defines={**defines, **({"PRECISE": 1} if precise else {})})
        train.connector("tacc").flags |= CLEAR
        graph.bind(module, "target", train, "target")
        graph.node_connect(adam, "w", train, "w")
        scaffold.loss_sum(train, groups * a.nets)
        wgrad = graph.add_node(module, "wgrad", (16 * chunks, 16 * a.layers, a.nets), [
            ssbo("A", "read"), ssbo("G", "read"), ssbo("part", "write", chunks * nw)],
            shader="mlp-t", local=(16, 16, 1), push=[batch, bpad, chunk], defines=defines)
        graph.node_connect(train, "A", wgrad, "A")
        graph.node_connect(train, "G", wgrad, "G")
        reduce = gradient_sum(wgrad, chunks, tacc=train)

    t = module.connector("target").roi
    tile_px = math.ceil(t.wd / a.tiles[0]) * math.ceil(t.ht / a.tiles[1])
    ev_groups = min(math.ceil(tile_px / MLP_BATCH), EVAL_GROUPS)

    def preview_due(frame: int, frames: int) -> bool:  # as eval.comp's own test
        every = int(module.param("preview"))
        return frame == frames - 1 or (every > 0 and frame % every == 0)

    ev = graph.add_node(module, "eval", (ev_groups * a.width, a.nets), [
        img("target", "read"), ssbo("w", "read"), img("output", "write", Roi(t.wd, t.ht))],
        shader="mlp-t", local=(a.width, 1, 1), defines=defines, due=preview_due)
    graph.bind(module, "target", ev, "target")
    graph.node_connect(adam, "w", ev, "w")
    graph.bind(module, "output", ev, "output")

    kernels = ("coopmat kernel" if cm else
               f"portable kernels{f' ({why})' if why else ''}")
    module.data.update(train=train, eval=ev, arch=a, variant=variant,
                       variant_why=why)
    return Network(dw=reduce, gn=reduce, lsum=reduce if cm else None, used=a.used(),
                   layout=(a.nets * a.layers, a.width), groups=a.groups(), kernels=kernels,
                   scale="loss scale" if cm else "")


TRAINABLE = Trains(weights, network, precise="precise", rates=("alpha", "talpha"),
                   clip="gradclip")

