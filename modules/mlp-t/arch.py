"""mlp-t's networks: their shape (`Arch`) from the module's params, checked, with the
hashgrid and permutohedral encodings' tables (`Table`), the weight layout, the used-weight
mask, the gradient check's groups, the kernels' defines and the .lut's text (README.md here
has the maths).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from vkgraph.pipeline.errors import GraphError, closest
from vkgraph.pipeline.optim import OPTIMIZERS, Matrix

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
MAX_WIDTH = 64  # shared memory holds MLP_BATCH x 64 activations and a 64 x 64 matrix


def _choice(module, name: str, table: dict) -> int:
    value = str(module.param(name)).strip().lower()
    value = ALIASES.get(value, value) if value not in table else value
    if value not in table:
        raise GraphError(f"{module}: param '{name}' is '{module.param(name)}', expected one of "
                         f"{', '.join(table)}", hint=closest(value, list(table)))
    return table[value]


SHIFT_ROOTS = (2, 3, 5)  # permuto: level l is shifted by frac((l + 1) sqrt(p_i)) cells


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

    def matrices(self) -> tuple[Matrix, ...]:
        """The 2-D weight matrices Muon orthogonalises: every net's layers, outputs x inputs
        (the bias column, padding and the table are not in them: AdamW steps the bias and
        the table)."""
        ww = self.width * self.width
        return tuple(Matrix(n * self.net_weights + layer * ww, *self.fans(layer)[::-1],
                            self.width, net=n)
                     for n in range(self.nets) for layer in range(self.layers))

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
