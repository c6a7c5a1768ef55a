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
from typing import NamedTuple

import numpy as np

from vkgraph.pipeline.errors import GraphError, closest
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

ENCODINGS = {"none": 0, "frequency": 1, "triangle": 2, "hashgrid": 3, "permuto": 4}
TABLE_ENCODINGS = (3, 4)  # encodings with a trainable table after the weights
ACTIVATIONS = {"none": 0, "relu": 1, "leaky": 2, "sigmoid": 3, "tanh": 4, "exp": 5,
               "softplus": 6}
LOSSES = {"l2": 0, "l1": 1, "rel-l2": 2, "smape": 3}
XFORMS = {"identity": 0, "flip": 1, "zoom": 2}
FILTERS = {"nearest": 0, "bilinear": 1}
ALIASES = {"identity": "none", "freq": "frequency", "tri": "triangle", "linear": "none",
           "leaky-relu": "leaky", "leakyrelu": "leaky", "lrelu": "leaky",
           "relative-l2": "rel-l2", "rl2": "rel-l2", "mse": "l2", "hash": "hashgrid",
           "hashgrid": "hashgrid", "permutohedral": "permuto"}

MLP_BATCH = 32  # rows per train/eval workgroup (shaders/mlp-t/net.glsl); 16 when precise
MAX_WIDTH = 64  # shared memory holds MLP_BATCH x 64 activations and a 64 x 64 matrix
# eval's workgroups per net at most (each loops over the tile's rows): enough to fill a GPU
# on preview frames, few to launch on the frames that skip the preview
EVAL_GROUPS = 512


def _choice(module, name: str, table: dict) -> int:
    value = str(module.param(name)).strip().lower()
    value = ALIASES.get(value, value) if value not in table else value
    if value not in table:
        raise GraphError(f"{module}: param '{name}' is '{module.param(name)}', expected one of "
                         f"{', '.join(table)}", hint=closest(value, list(table)))
    return table[value]


PRIMES = (1, 2654435761, 805459861)  # instant-NGP's spatial hash, one prime per dimension
SHIFT_ROOTS = (2, 3, 5)  # permuto: level l is shifted by frac((l + 1) sqrt(p_i)) cells
TABLE_INIT = 1e-4  # table entries start uniform in +-TABLE_INIT (instant-NGP's init)


class Table(NamedTuple):
    """The trainable table of a hashgrid or permuto encoding: `sizes[l]` entries of `features`
    floats at level l, level l's first entry at `offsets[l]`; hashgrid level l has `res[l]`
    cells per unit (dense when sizes[l] == (res[l] + 1)^dims), permuto level l scales the
    positions by `scale[l]` and shifts them by `shift[l]` (dims floats)."""

    kind: int  # 3 hashgrid, 4 permuto
    dims: int
    levels: int
    features: int
    log2size: int
    sizes: tuple[int, ...]
    offsets: tuple[int, ...]
    res: tuple[int, ...]
    scale: tuple[float, ...]
    shift: tuple[float, ...]

    @property
    def used(self) -> int:
        """Floats the table uses (the stored table is padded to the weight width)."""
        return sum(self.sizes) * self.features

    def dense(self, level: int) -> bool:
        return self.kind == 3 and self.sizes[level] == (self.res[level] + 1) ** self.dims


def table_of(kind: int, dims: int, levels: int, features: int, log2size: int, baseres: int,
             perlevel: float) -> Table:
    """Level sizes, offsets, resolutions (hashgrid) or scales and shifts (permuto)."""
    size = 1 << log2size
    res, scale, shift, sizes = [], [], [], []
    for level in range(levels):
        if kind == 3:
            n = int(math.floor(baseres * perlevel ** level))
            res.append(n)
            sizes.append(min(size, (n + 1) ** dims))
        else:
            scale.append(float(np.float32(baseres * perlevel ** level)))
            shift += [float(np.float32((level + 1) * math.sqrt(p) % 1.0))
                      for p in SHIFT_ROOTS[:dims]]
            sizes.append(size)
    offsets = tuple(int(x) for x in np.cumsum([0, *sizes[:-1]]))
    return Table(kind, dims, levels, features, log2size, tuple(sizes), offsets, tuple(res),
                 tuple(scale), tuple(shift))


class Arch(NamedTuple):
    """The shape of the networks, as the kernels see it (shaders/mlp-t/config.glsl). (A
    NamedTuple: module files are loaded without a sys.modules entry, which dataclasses need.)"""

    enc: int
    octaves: int
    n_in: int  # encoded inputs
    hidden: int  # neurons per hidden layer
    depth: int  # hidden layers
    nout: int
    bias: bool
    width: int  # stored neurons per layer: a multiple of 16
    tiles: tuple[int, int]
    act: int
    outact: int
    loss: int
    opt: int
    xform: int
    filter: int
    dims: int = 2  # input dimensions: 2 (u, v) or 3 (u, v, w over a stack of slices)
    slices: int = 1  # dims 3: the target is `slices` images stacked vertically
    jitter: bool = False  # samples: one per texel at a random offset (else uniform random)
    table: Table | None = None  # the hashgrid/permuto table

    @property
    def layers(self) -> int:
        return self.depth + 1

    @property
    def nets(self) -> int:
        return self.tiles[0] * self.tiles[1]

    @property
    def net_weights(self) -> int:
        return self.layers * self.width * self.width

    @property
    def weights(self) -> int:
        """Stored network weights of all nets (the table follows them)."""
        return self.nets * self.net_weights

    @property
    def table_floats(self) -> int:
        """Stored table floats: the used ones rounded up to whole rows of `width`."""
        if self.table is None:
            return 0
        return self.width * math.ceil(self.table.used / self.width)

    @property
    def params(self) -> int:
        """Everything trained: the weights, then the table."""
        return self.weights + self.table_floats

    def fans(self, layer: int) -> tuple[int, int]:
        """(inputs, outputs) of matrix `layer`, without the bias."""
        nin = self.n_in if layer == 0 else self.hidden
        nout = self.nout if layer == self.layers - 1 else self.hidden
        return nin, nout

    def used(self) -> np.ndarray:
        """Bool mask over all stored params: True where the network uses the weight (and for
        the table's entries; its padding is unused)."""
        w = self.width
        mask = np.zeros((self.layers, w, w), bool)
        for layer in range(self.layers):
            nin, nout = self.fans(layer)
            mask[layer, :nout, :nin] = True
            if self.bias:
                mask[layer, :nout, w - 1] = True
        table = np.zeros(self.table_floats, bool)
        if self.table is not None:
            table[: self.table.used] = True
        return np.concatenate([np.tile(mask.ravel(), self.nets), table])

    def groups(self) -> list[tuple[str, int, int]]:
        """(label, first, end) of each matrix and table level in the param vector: what
        vkgraph gradcheck samples evenly from."""
        ww = self.width * self.width
        out = [(f"matrix {m}", m * ww, (m + 1) * ww) for m in range(self.nets * self.layers)]
        if self.table is not None:
            f = self.table.features
            out += [(f"table level {lv}", self.weights + f * o, self.weights + f * (o + n))
                    for lv, (o, n) in enumerate(zip(self.table.offsets, self.table.sizes,
                                                    strict=True))]
        return out

    def defines(self) -> dict:
        d = {"MLP_WIDTH": self.width, "MLP_LAYERS": self.layers, "N_IN": self.n_in,
             "HIDDEN": self.hidden, "N_OUT": self.nout, "TILES_X": self.tiles[0],
             "TILES_Y": self.tiles[1], "ENC": self.enc, "OCTAVES": max(1, self.octaves),
             "ACT": self.act, "OUT_ACT": self.outact, "LOSS": self.loss, "OPT": self.opt,
             "XFORM": self.xform, "FILTER": self.filter, "DIMS": self.dims,
             "SLICES": self.slices}
        if self.bias:
            d["MLP_BIAS"] = 1
        if self.jitter:
            d["JITTER"] = 1
        t = self.table
        if t is not None:
            def ints(v):
                return "int[](" + ",".join(str(int(x)) for x in v) + ")"

            def floats(v):
                return "float[](" + ",".join(f"{x:.9g}" for x in v) + ")"

            d.update(T_LEVELS=t.levels, T_FEAT=t.features, T_LOG2=t.log2size,
                     TABLE=self.table_floats, TABLE_USED=t.used, T_OFF=ints(t.offsets))
            if t.kind == 3:
                d.update(T_RES=ints(t.res),
                         T_DENSE=ints(int(t.dense(lv)) for lv in range(t.levels)))
            else:
                d.update(T_SCALE=floats(t.scale), T_SHIFT=floats(t.shift))
        return d

    def describe(self) -> str:
        """The text o-lut appends to the params (and i-lut hands back)."""
        names = {v: k for k, v in ACTIVATIONS.items()}
        enc = {v: k for k, v in ENCODINGS.items()}[self.enc]
        if self.enc in (1, 2):
            enc += f" {self.octaves} octaves"
        elif self.table is not None:
            enc += f" {self.table.levels} levels x {self.table.features} features"
        lines = [
            "lut contains weights for",
            "mlp-t fully connected network (row-major matrices, row = output neuron):",
            f"{self.nets} networks ({self.tiles[0]}x{self.tiles[1]} tiles)",
            f"{self.layers} matrices of {self.width}x{self.width} per network",
            f"{self.n_in} inputs ({enc}), {self.depth} hidden layers of {self.hidden}, "
            f"{self.nout} outputs",
            f"{names[self.act]} hidden activation, {names[self.outact]} output activation",
            "bias in the last column" if self.bias else "no biases",
        ]
        if self.dims != 2:
            lines.append(f"{self.dims}-D inputs over {self.slices} stacked slices")
        t = self.table
        if t is not None:
            kind = "hashgrid" if t.kind == 3 else "permuto"
            lines += [
                f"then the {kind} table from float {self.weights} (row "
                f"{self.weights // self.width}): {t.levels} levels of {t.features} features "
                f"per entry, at most 2^{t.log2size} entries per level, {self.table_floats} "
                f"floats ({t.used} used)",
                "level entries " + " ".join(str(n) for n in t.sizes),
                ("level resolutions " + " ".join(str(n) for n in t.res)) if t.kind == 3 else
                ("level scales " + " ".join(f"{x:.9g}" for x in t.scale)),
            ]
        return "\n".join(lines)


def arch(module) -> Arch:
    """The networks' shape from the params, checked."""
    enc = _choice(module, "enc", ENCODINGS)
    octaves = int(module.param("octaves"))
    dims = int(module.param("dims"))
    if dims not in (2, 3):
        raise GraphError(f"{module}: dims must be 2 or 3, got {dims}")
    if enc in (1, 2) and not 1 <= octaves <= 16:
        raise GraphError(f"{module}: octaves must be 1..16, got {octaves}")
    table = None
    if enc in TABLE_ENCODINGS:
        levels, features = int(module.param("levels")), int(module.param("features"))
        log2size, baseres = int(module.param("log2size")), int(module.param("baseres"))
        perlevel = float(module.param("perlevel"))
        if not 1 <= levels <= 32 or not 1 <= features <= 8:
            raise GraphError(f"{module}: levels must be 1..32 and features 1..8, got "
                             f"{levels} and {features}")
        if not 4 <= log2size <= 24:
            raise GraphError(f"{module}: log2size must be 4..24, got {log2size}")
        if baseres < 1 or not 1.0 <= perlevel <= 8.0:
            raise GraphError(f"{module}: baseres must be >= 1 and perlevel 1..8, got "
                             f"{baseres} and {perlevel:g}")
        table = table_of(enc, dims, levels, features, log2size, baseres, perlevel)
        n_in = levels * features
    else:
        n_in = dims if enc == 0 else 2 * dims * octaves
    hidden, depth, nout = (int(module.param(p)) for p in ("width", "depth", "nout"))
    bias = bool(module.param("bias"))
    if not 1 <= depth <= 16:
        raise GraphError(f"{module}: depth (hidden layers) must be 1..16, got {depth}")
    if not 1 <= nout <= 4:
        raise GraphError(f"{module}: nout must be 1..4 (r, g, b, a), got {nout}")
    if hidden < 1:
        raise GraphError(f"{module}: width must be positive, got {hidden}")
    need = max(n_in, hidden, nout) + (1 if bias else 0)
    width = 16 * math.ceil(need / 16)
    if width > MAX_WIDTH:
        raise GraphError(f"{module}: a layer needs {need} neurons (inputs {n_in}, width "
                         f"{hidden}, outputs {nout}{', +1 bias' if bias else ''}), at most "
                         f"{MAX_WIDTH} fit", hint="fewer octaves or levels, a smaller width, "
                         "or bias 0")
    tx, ty = (int(t) for t in module.param("tiles"))
    if tx < 1 or ty < 1:
        raise GraphError(f"{module}: tiles must be positive, got {tx}x{ty}")
    xform, filt = _choice(module, "xform", XFORMS), _choice(module, "filter", FILTERS)
    slices = int(module.param("slices")) if dims == 3 else 1
    if (table is not None or dims == 3) and (tx, ty) != (1, 1):
        raise GraphError(f"{module}: tiles {tx}x{ty} with enc {module.param('enc')} / dims "
                         f"{dims}: table encodings and 3-D inputs train one network")
    if dims == 3 and (xform or filt or slices < 1):
        raise GraphError(f"{module}: dims 3 needs xform identity, filter nearest and slices "
                         f">= 1")
    return Arch(enc=enc, octaves=octaves if enc in (1, 2) else 0, n_in=n_in, hidden=hidden,
                depth=depth, nout=nout, bias=bias, width=width, tiles=(tx, ty),
                act=_choice(module, "act", ACTIVATIONS),
                outact=_choice(module, "outact", ACTIVATIONS),
                loss=_choice(module, "loss", LOSSES), opt=_choice(module, "opt", OPTIMIZERS),
                xform=xform, filter=filt, dims=dims, slices=slices,
                jitter=bool(int(module.param("jitter"))), table=table)


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
                            **({"W16OUT": 1, "DYN_SCALE": 1} if cm else {})})


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

