"""The trainer scaffold: what every trainable module (kpn-t, mlp-t) shares.

A module is trainable when its module.py declares `TRAINABLE = Trains(...)`: how tools freeze
it (the gradient check's params) and its two builders, `weights` (what its optimiser holds:
a `Weights`) and `network` (its forward and backward subgraph and its loss: a `Network`).
The engine's `create_nodes` (below, the hook of every module that declares Trains and does
not define create_nodes itself) builds the rest from them: the optimiser node `adam`, the
module's weight output (and, where the weights say the optimiser is Muon, node `muon`:
Newton-Schulz on the 2-D matrices of `Weights.matrices`), the loss sum `lsum`, the
gradient norm `norm` where the network gives none, the feedback edges that hand the
optimiser the gradient, its norm and the loss of the last frame, and the record
`module.trainable = Trainable(...)` of the built nodes; then the module's `views`, if it
declares them. `trainable is not None` is the one test of
trainability: `module.cls.trainable` (the declaration, before a build) and
`module.trainable` (the record, after create_nodes).

The engine gives such a module the trainer hooks below (`HOOKS`) unless its module.py
defines its own: `create_nodes`, `losses`, `current_loss`, `stats`, `summary`, `state`,
`load_state`. They, checkpoints (pipeline/checkpoint.py) and `vkgraph gradcheck` read a
trainable module through its record only: its loss history is the output `hist` of node
`lsum` (one float a frame, ring buffer of `hist_len`), the frame's loss a (hi, lo) float pair
in its output `cur`; the optimiser node `adam` holds the weights `w`, moments `m`, `v` and in
`stats[0]` the count of skipped (non-finite) updates; node `dw` writes dE/dW of the frame to
its output `dw`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .checkpoint import upload
from .errors import GraphError
from .formats import non_finite
from .module import OPTIONAL, Roi, img, ssbo


@dataclass(frozen=True)
class Weights:
    """What a trainable module's optimiser holds (its `Trains.weights` returns it): `n`
    params; `output`, adam's connector bound to the module's weight output `w` ("w": the
    fp32 weights, "w16": their f16 copy); `best`, the (format, roi) of that output, which
    the best weights take; `w16`, the roi of an f16 copy (None: none); `start`, whether the
    weights start from the checkpoint on the module input `wcp` (else from the kernel's
    init), whose format, as the kernel declares it, is `wcp`; `roi`, the roi of adam's `w`
    (None: n x 1); `defines` of the module's adam.comp (shaders/include/adam.glsl).
    `matrices`: the 2-D weight matrices among the params (pipeline/optim.py `Matrix`: block,
    shape, net; at most 64 x 64, one row stride), which Muon orthogonalises; `muon`, whether
    the module's optimiser is Muon (the scaffold then adds node `muon`: optimizer);
    `coupled`, the GLSL factor of w in the module's gradient (its coupled L2 term, as its
    adam_grad adds it; "" for none), which muon.comp adds the same way."""

    n: int
    output: str
    best: tuple
    w16: Roi | None = None
    start: bool = False
    wcp: str = "f32"
    roi: Roi | None = None
    defines: dict = field(default_factory=dict)
    matrices: tuple = ()
    muon: bool = False
    coupled: str = ""


@dataclass(frozen=True)
class Network:
    """A trainable module's forward and backward subgraph, as its `Trains.network` built
    it: `dw`, the node writing dE/dW of the frame (output `dw`); `lsum`, a node of the network
    that sums the frame's loss itself (outputs `hist`, `cur`; None: it asked for the
    engine's, Scaffold.loss_sum); `gn`, a node writing the gradient's norm and finiteness per
    net (output `gn`: (norm, 1 or 0) pairs) or None, for the engine's `norm` node over dw.
    Then what the record (Trainable) says of the weights: `used`, `layout`, `groups`,
    `kernels`, `scale`."""

    dw: object
    used: np.ndarray
    layout: tuple[int, int]
    lsum: object = None
    gn: object = None
    groups: list | None = None
    kernels: str = ""
    scale: str = ""


@dataclass(frozen=True)
class Trains:
    """A module's declaration that it trains (module.py: `TRAINABLE = Trains(...)`).
    `weights(graph, module) -> Weights` and `network(graph, module, scaffold) -> Network`
    build it (create_nodes, below); `views(graph, module)`, if given, adds nodes
    that read the built record (kpn-t's loss plot and weight view). How the gradient check
    freezes it: `precise`, the param that selects the float64 forward (set to 1 unless
    --plain); `rates`, the learning-rate params set to 0 after the warm-up frames, so that
    a frame's update leaves the weights alone; `clip`, the gradient-clipping param, set to
    `UNCLIPPED` so the analytic gradient is the raw dE/dW."""

    weights: Callable
    network: Callable
    views: Callable | None = None
    precise: str | None = "precise"
    rates: tuple[str, ...] = ("alpha",)
    clip: str | None = "gradclip"

    @property
    def hooks(self) -> dict:
        """The trainer hooks (the engine's, for those the module.py does not define)."""
        return HOOKS


UNCLIPPED = 1e9


@dataclass
class Trainable:
    """The nodes and facts of a built trainable module that tools outside it use."""

    adam: object  # Node: outputs w (fp32 master weights), m, v, stats (STATS), wg, wbest
    dw: object  # Node: output dw, dE/dW of this frame
    lsum: object  # Node: outputs hist (loss per frame, ring buffer), cur (loss as hi, lo)
    hist_len: int  # length of the loss history ring buffer
    used: np.ndarray  # bool mask of the weights the network uses (others stay 0)
    layout: tuple[int, int]  # (matrices, width): the weights are width x width matrices
    groups: list | None = None  # gradcheck's sampling groups: (name, start, end); None: layers
    kernels: str = ""  # the summary's note on the kernels it runs ("" says nothing)
    # what adam's stats[2] holds, reported: a dynamic "loss scale" (mlp-t's cooperative-matrix
    # kernels), an "activation scale" (kpn-t's fused kernels), or nothing ("")
    scale: str = ""


def trainable(module) -> Trainable:
    """The module's Trainable record (set by its create_nodes), or a GraphError."""
    record = getattr(module, "trainable", None)
    if record is None:
        raise GraphError(f"{module} is not a trainable module (its create_nodes sets no "
                         "Trainable)")
    return record


def trainable_modules(modules) -> list:
    """The modules among `modules` whose class declares that they train."""
    return [m for m in modules if m.cls.trainable is not None]


# -- building: the nodes every trainer has


def optimizer(graph, module, spec: Weights):
    """The optimiser node `adam` over spec.n params (kernel adam of the module's folder,
    shaders/include/adam.glsl): inputs dw and gn (fed back by feed_optimizer), wcp (the
    starting weights, optional: bound when spec.start);
    outputs w (fp32), m, v, stats and, with spec.w16 (its roi), an f16 copy of the weights;
    then the divergence guard's input cur (the loss the weights gave) and outputs wg, mg, vg
    (the last good w, m, v) and wbest (the best weights, of spec.best = (format, roi) of the
    module's weight output). Bindings in that order (the guard's from define GUARD_B); push
    constant: whether wcp is bound. stats: [0] skipped updates, [1] the gradient norm,
    [2..3] the dynamic scale, [4..19] the guard's two slots (shaders/include/guard.glsl)."""
    n = spec.n
    conns = [ssbo("dw", "read"), ssbo("gn", "read"), ssbo("wcp", "read", fmt=spec.wcp),
             ssbo("w", "write", n), ssbo("m", "write", n), ssbo("v", "write", n),
             ssbo("stats", "write", STATS)]
    if spec.w16 is not None:
        conns.append(("w16", "write", "ssbo", "f16", spec.w16))
    defines = {**spec.defines, "ROLLBACK": 1, "GUARD_B": len(conns),
               **({"WBEST16": 1} if spec.best[0] == "f16" else {})}
    conns += [ssbo("cur", "read"), ssbo("wg", "write", n), ssbo("mg", "write", n),
              ssbo("vg", "write", n), ("wbest", "write", "ssbo", spec.best[0], spec.best[1])]
    table = muon_defines(spec) if spec.muon else {}
    if spec.muon:
        defines.update(table, ADAM_MUON=1, MUON_B=len(conns))
        conns.append(ssbo("o", "read"))
    node = graph.add_node(module, "adam", (n, 1), conns, shader=module.name, local=(256, 1, 1),
                          push=[1 if spec.start else 0], defines=defines)
    node.connector("wcp").flags |= OPTIONAL
    if spec.start:
        graph.bind(module, "wcp", node, "wcp")
    if spec.roi is not None:
        node.connector("w").roi = spec.roi
    if spec.muon:
        graph.node_connect(newton_schulz(graph, module, node, spec, table), "o", node, "o")
    return node


MUON_MAX = 64  # muon.comp holds a matrix (and its smaller side squared) in shared memory


def muon_defines(spec: Weights) -> dict:
    """The matrix table of shaders/include/muon.glsl (MUON_COUNT, MUON_STRIDE, MUON_MATS) for
    spec.matrices; a GraphError where there are none or one does not fit muon.comp."""
    mats = spec.matrices
    if not mats:
        raise GraphError("opt muon: the module declares no 2-D weight matrices (Weights."
                         "matrices)")
    strides = {m.stride for m in mats}
    if len(strides) != 1 or any(not (0 < m.rows <= MUON_MAX and 0 < m.cols <= MUON_MAX)
                                for m in mats):
        raise GraphError(f"opt muon: matrices of 1..{MUON_MAX} rows and columns and one row "
                         f"stride, got {[(m.rows, m.cols, m.stride) for m in mats]}")
    table = ",".join(f"{m.offset},{m.rows},{m.cols},{m.net}" for m in mats)
    return {"MUON_COUNT": len(mats), "MUON_STRIDE": strides.pop(), "MUON_MATS": table}


def newton_schulz(graph, module, adam, spec: Weights, table: dict):
    """Node `muon` (shaders/trainer/muon.comp): one workgroup per matrix of spec.matrices
    (table: their muon_defines, adam's too) forms Muon's update o from the gradient dw and its
    norm gn (fed back as adam's are: feed_optimizer) and adam's last w and m (feedback); adam
    steps the matrices with it."""
    defines = {**table, "MUON_CLIP": "params.gradclip",
               "MUON_MU": "params.momentum"}
    if spec.coupled:
        defines["MUON_L2"] = f"({spec.coupled})"
    node = graph.add_node(module, "muon", (256 * len(spec.matrices), 1), [
        ssbo("dw", "read"), ssbo("gn", "read"), ssbo("w", "read"), ssbo("m", "read"),
        ssbo("o", "write", spec.n)], shader="trainer", local=(256, 1, 1), defines=defines)
    graph.node_feedback(adam, "w", node, "w")
    graph.node_feedback(adam, "m", node, "m")
    return node


def loss_sum(graph, module, src, parts: int, hist_len: int):
    """Node `lsum`: the frame's loss from src's `Epart`, `parts` (hi, lo) float pairs ->
    hist (the loss history) and cur (shaders/include/losssum.glsl). Kept: no sink needs it."""
    node = graph.add_node(module, "lsum", (256, 1), [
        ssbo("Epart", "read"), ssbo("hist", "write", hist_len), ssbo("cur", "write", 4)],
        shader="trainer", local=(256, 1, 1), push=[parts, hist_len], keep=True)
    graph.node_connect(src, "Epart", node, "Epart")
    return node


GRAPH_SIZE = (500, 200)  # a trainable module's loss plot (its output `graph`)
GRAPH_PLOT = (60, 14, 492, 178)  # plot area x0, y0, x1, y1 (exclusive) of the loss plot
GRAPH_COLS = 3 * 512 + 4  # grange: per column min, max (at most 512 columns), 4 values, smoothed


def loss_plot(graph, module, conn: str = "graph") -> None:
    """The loss plot of a built trainable module on its output `conn` (GRAPH_SIZE, rgba):
    node `grange` sums the loss history per plot column (so no pixel scans the history),
    node `graph` draws it (shaders/trainer/graph.comp). For a module's `views`."""
    t = trainable(module)
    x0, y0, x1, y1 = GRAPH_PLOT
    rng = graph.add_node(module, "grange", (256, 1), [
        ssbo("hist", "read"), ssbo("cols", "write", GRAPH_COLS)], shader="trainer",
        local=(256, 1, 1), push=[t.hist_len, x1 - x0])
    graph.node_connect(t.lsum, "hist", rng, "hist")
    node = graph.add_node(module, "graph", GRAPH_SIZE, [
        ssbo("cols", "read"), img("plot", "write", Roi(*GRAPH_SIZE))], shader="trainer",
        push=[t.hist_len, x0, y0, x1, y1])
    graph.node_connect(rng, "cols", node, "cols")
    graph.bind(module, conn, node, "plot")


def gradient_norm(graph, module, dw, lsum, n: int):
    """Node `norm`: the norm of dw's n gradient entries and whether they and the loss of the
    same frame are finite (shaders/trainer/norm.comp), for a network that gives none. It
    reads the last frame's dw and loss, as adam does."""
    node = graph.add_node(module, "norm", (256, 1), [
        ssbo("dw", "read"), ssbo("gn", "write", 4), ssbo("cur", "read")], shader="trainer",
        local=(256, 1, 1), push=[n])
    graph.node_feedback(dw, "dw", node, "dw")
    graph.node_feedback(lsum, "cur", node, "cur")  # a non-finite loss also skips the update
    return node


def feed_optimizer(graph, adam, dw, gn, lsum, muon=None) -> None:
    """The optimiser of frame f applies the gradient of frame f - 1: dw and its norm gn (each
    a (node, connector)) reach it, and Muon's node `muon` if any, through feedback edges, or
    from the same frame's norm node; the loss node's cur (frame f - 1's loss, which the
    current weights gave) reaches adam too."""
    graph.node_feedback(lsum, "cur", adam, "cur")
    for node in (adam,) if muon is None else (adam, muon):
        graph.node_feedback(dw[0], dw[1], node, "dw")
        if gn[0] is dw[0]:
            graph.node_feedback(gn[0], gn[1], node, "gn")
        else:
            graph.node_connect(gn[0], gn[1], node, "gn")


class Scaffold:
    """What a trainable module's network builder gets from the engine: the optimiser node
    `adam` (its outputs w, w16, stats are this frame's weights and scale), the loss
    history's length `hist_len`, and `loss_sum`, which adds the engine's loss sum `lsum`
    over the module's loss partials (called where the loss node is made)."""

    def __init__(self, graph, module, adam, hist_len: int):
        self.graph, self.module, self.adam, self.hist_len = graph, module, adam, hist_len
        self.lsum = None

    def loss_sum(self, src, parts: int):
        """Node `lsum` over src's `parts` loss partials (loss_sum); returns it."""
        self.lsum = loss_sum(self.graph, self.module, src, parts, self.hist_len)
        return self.lsum


def create_nodes(graph, module) -> None:
    """A trainable module's nodes: its optimiser first (every forward reads this frame's
    weights), its network (Trains.network, which asks for the loss sum where it makes its
    loss), the gradient norm where the network gives none, the feedback edges, the record,
    then the module's views."""
    trains = module.cls.trainable
    spec = trains.weights(graph, module)
    adam = optimizer(graph, module, spec)
    bind_weights(graph, module, adam, spec.output)
    scaffold = Scaffold(graph, module, adam, history_length(graph.frames))
    net = trains.network(graph, module, scaffold)
    lsum = net.lsum or scaffold.lsum
    if lsum is None:
        raise GraphError(f"{module}: its network sums no loss (Scaffold.loss_sum)")
    gn = net.gn or gradient_norm(graph, module, net.dw, lsum, spec.n)
    muon = adam.connector("o").source[0] if spec.muon else None
    feed_optimizer(graph, adam, (net.dw, "dw"), (gn, "gn"), lsum, muon)
    module.trainable = Trainable(adam=adam, dw=net.dw, lsum=lsum, hist_len=scaffold.hist_len,
                                 used=net.used, layout=net.layout, groups=net.groups,
                                 kernels=net.kernels, scale=net.scale)
    if trains.views is not None:
        trains.views(graph, module)


def bind_weights(graph, module, adam, conn: str, output: str = "w") -> None:
    """The module's weight output: adam's `conn`, or its best weights (`wbest`) where the
    readers ask for them (a param `best` 1: o-lut). Readers that disagree are an error."""
    wants = {int(r.param("best")) for r, _ in graph.readers(module, output)
             if "best" in r.values}
    if len(wants) > 1:
        raise GraphError(f"{module}: the readers of '{output}' differ in param best (the best "
                         "or the last weights): give them the same")
    graph.bind(module, output, adam, "wbest" if 1 in wants else conn)


def history_length(frames: int) -> int:
    """The loss history's ring buffer: the whole run, at least 500, at most 2^20 frames."""
    return min(max(500, int(frames)), 1 << 20)


# -- hooks


def losses(graph, module) -> np.ndarray:
    """The per-frame loss history of this run, in frame order: frames 0 .. graph.frame, or
    the last hist_len of them where more have run (lsum writes frame f's loss at
    hist[f % hist_len]: the oldest kept is at (graph.frame + 1) % hist_len)."""
    t = trainable(module)
    hist = graph.read(t.lsum, "hist")[: t.hist_len].astype(np.float64)
    n = graph.frame + 1
    if n <= t.hist_len:
        return hist[:max(n, 0)]
    return np.roll(hist, -(n % t.hist_len))


def current_loss(graph, module) -> float:
    """This frame's loss E (what dw is the gradient of), from its (hi, lo) float pair."""
    cur = graph.read(trainable(module).lsum, "cur").astype(np.float64)
    return float(cur[0] + cur[1])


# adam's stats: 4 floats (stats[0] the skipped updates, stats[2] the loss scale), then the
# guard's two slots of 8 (shaders/include/guard.glsl)
STATS_HEAD, GUARD_SLOT = 4, 8
STATS = STATS_HEAD + 2 * GUARD_SLOT
GUARD = {"consec": 0, "rate": 1, "rollbacks": 2, "ema": 3, "best": 4, "stopped": 5}


def _stats(graph, module) -> dict:
    """adam's stats after this frame, read once: skipped updates, the loss scale and the
    guard's state (this frame's slot: frame f's thread 0 writes slot f & 1)."""
    st = graph.read(trainable(module).adam, "stats").astype(np.float64)
    base = STATS_HEAD + GUARD_SLOT * (graph.frame & 1)
    return {"skipped": int(st[0]), "scale": float(st[2]),
            "guard": {k: float(st[base + i]) for k, i in GUARD.items()}}


def guard(graph, module) -> dict:
    """The divergence guard's state after this frame: consecutive bad updates, the learning
    rate's factor, rollbacks, the smoothed loss, the best smoothed loss, stopped (0/1)."""
    return _stats(graph, module)["guard"]


def diverged(graph, module) -> str | None:
    """Why the run must stop (the guard ran out of rollbacks), or None."""
    g = guard(graph, module)
    if not g["stopped"]:
        return None
    return (f"{module}: training diverged: {int(g['rollbacks'])} rollbacks to the last good "
            f"weights (learning rate x{g['rate']:g}) did not help; the weights are the last "
            "good ones. Lower alpha, or raise retries")


def diverging(build, every: float = 2.0):
    """A stop() for the frame loop: True once a trainable module's guard stopped (asked at
    most every `every` seconds: it waits for the frames in flight)."""
    import time

    mods = [m for m in build.active if m.trainable is not None]
    last = [time.perf_counter()]

    def stop() -> bool:
        now = time.perf_counter()
        if not mods or now - last[0] < every:
            return False
        last[0] = now
        return any(diverged(build.context, m) for m in mods)

    return stop


def stats(graph, module) -> dict:
    """The progress bar's: this frame's loss, the skipped updates, the loss or activation
    scale."""
    out = {"loss": current_loss(graph, module)}
    st = _stats(graph, module)
    if st["skipped"]:
        out["skipped"] = st["skipped"]
    scale = trainable(module).scale
    if scale:
        out["lscale" if scale == "loss scale" else "ascale"] = st["scale"]
    rollbacks = int(st["guard"]["rollbacks"])
    if rollbacks:
        out["rollbacks"] = rollbacks
    return out


def summary(graph, module) -> str:
    """The end-of-run line: frames, first, last and best loss, the speed of the frames this
    run ran (a resumed run ran only its part), skipped updates, the kernels."""
    t = trainable(module)
    hist = losses(graph, module)
    frames = graph.frame + 1
    ran = frames - graph.first_frame
    fps = ran / graph.seconds if graph.seconds else float("nan")
    best = np.nanmin(hist) if np.isfinite(hist).any() else float("nan")
    line = (f"{module}: {frames} frames, first loss {hist[0]:.4g}, loss {hist[-1]:.4g}, "
            f"best {best:.4g}, {fps:.1f} frames/s")
    st = _stats(graph, module)
    if st["skipped"]:
        line += f", {st['skipped']} updates skipped (non-finite loss or gradient)"
    if t.kernels:
        line += f", {t.kernels}"
    if t.scale:
        line += f" ({t.scale} {st['scale']:g})"
    g = st["guard"]
    if g["rollbacks"]:
        line += (f", {int(g['rollbacks'])} rollbacks to the last good weights (learning rate "
                 f"x{g['rate']:g})")
    if g["stopped"]:
        line += ", stopped: diverged"
    return line


# persistent buffers the engine cannot know about: read before they are written each frame
# (the pending gradient and loss are feedback buffers, which the engine saves itself); the
# guard's copies too, so a resumed run rolls back to what the uninterrupted one would
STATE = (("adam", "w"), ("adam", "m"), ("adam", "v"), ("adam", "stats"), ("lsum", "hist"),
         ("adam", "wg"), ("adam", "mg"), ("adam", "vg"), ("adam", "wbest"))


def state(graph, module) -> dict:
    """Checkpoint: fp32 weights, optimiser moments, stats and the loss history."""
    return trainer_state(graph, module, STATE)


def load_state(graph, module, arrays) -> None:
    load_trainer_state(graph, module, arrays, STATE)


# -- the trainer's state in checkpoints (pipeline/checkpoint.py saves and loads it)


def trainer_state(build, module, entries) -> dict:
    """For `state` hooks of trainers: the (node of the module's Trainable, connector) buffers
    the engine cannot know about, e.g. weights, optimiser moments and the loss history."""
    t = trainable(module)
    return {f"{n}.{c}": build.read(getattr(t, n), c) for n, c in entries}


F16_MAX = 65504.0


def check_trainer_values(module, arrays: dict, history: str = "lsum.hist") -> None:
    """A trainer's saved state as training leaves it: every value finite (the optimiser skips
    an update that would not be; only the loss history records a non-finite loss), the fp32
    weights `adam.w` within what the module's published weights `w` hold (f16: 65504), and
    Adam's second moment `adam.v` not negative. GraphError naming the first bad value."""
    for key in sorted(arrays):
        arr = np.asarray(arrays[key])
        found = None if key == history else non_finite(arr, "element")
        if found is not None:
            raise GraphError(f"state '{key}' of {module} holds {found[1]}: training never "
                             "leaves a non-finite value there")
    w = np.asarray(arrays.get("adam.w", np.zeros(0)))
    published = next((c.format for c in module.connectors if c.name == "w"), "f32")
    if published == "f16" and w.size and np.abs(w).max() > F16_MAX:
        i = int(np.argmax(np.abs(w).reshape(-1)))
        raise GraphError(f"state 'adam.w' of {module} holds {w.reshape(-1)[i]:g} at element "
                         f"{i}, beyond the f16 weights it outputs (at most {F16_MAX:g})")
    v = np.asarray(arrays.get("adam.v", np.zeros(0)))
    if v.size and v.min() < 0:
        i = int(np.argmin(v.reshape(-1)))
        raise GraphError(f"state 'adam.v' of {module} holds {v.reshape(-1)[i]:g} at element "
                         f"{i}: Adam's second moment is never negative")


def load_trainer_state(build, module, arrays: dict, entries,
                       history: str = "lsum.hist") -> None:
    """For `load_state` hooks: the inverse of trainer_state, after check_trainer_values. A
    loss history saved with another length (another frame count) is moved to its new
    ring-buffer slots."""
    t = trainable(module)
    arrays = dict(arrays)
    check_trainer_values(module, arrays, history)
    old = arrays.get(history)
    n_new = t.hist_len
    if old is not None and n_new and old.ndim == 1 and old.size and old.size != n_new:
        new = np.zeros(n_new, old.dtype)
        done = build.frame + 1
        f = np.arange(max(0, done - min(old.size, new.size)), done)
        new[f % new.size] = old[f % old.size]
        arrays[history] = new
    for n, c in entries:
        upload(build, getattr(t, n), c, arrays, f"{n}.{c}", module)


# what a trainable module gets unless its module.py defines the hook itself
HOOKS = {f.__name__: f for f in (create_nodes, losses, current_loss, stats, summary, state,
                                 load_state)}

