"""`vkgraph gradcheck`: the module's analytic dE/dw against central differences.

The differences are taken of the module's PRECISE forward variant (kpn-t param `precise`):
the same kernels with float64 activations and sums, because the fp32 forward's rounding
noise in E (measured 2.5e-8 at E = 2.4 on a 64x64 tile) would swamp E(w+h) - E(w-h) at
steps small enough to keep leaky-ReLU kinks out (h = 1e-5). The analytic gradient is the
module's fp32 backward, the one that trains. `--plain` differences the fp32 forward.

The graph must have a static input (cnngenin generate 0) and no gradient clipping. The
module's learning rate is set to 0, so its optimiser leaves the weights alone; the tool then
writes weights straight into the optimiser's fp32 weight buffer and runs frames of the same
forward shaders to get E(w ± eps e_j).

For each checked weight j: n(h) = (E(w + h e_j) - E(w - h e_j)) / 2h on the steps
h = eps, eps/4, ... eps/4^5; the first step at which the function is smooth within +-h gives
the numeric derivative. Smooth: the one-sided quotients (E(w+h) - E(w))/h and
(E(w) - E(w-h))/h agree (a kink inside the step, at any distance, makes them differ), and
n(h) agrees with n(4h) (many kinks bias n in proportion to h), both to 1e-3 beyond the loss
noise. A step ladder, because how close kinks lie depends on the weight: a table entry of
mlp-t's hashgrid/permuto encodings starts at 1e-4, so the first layer's pre-activations are
~1e-5 and a step of 1e-5 crosses leaky-ReLU kinks (measured on fit-image-hash: the median
|z| 1.6e-5; the float64 reference's own differences at h = 1e-5 and 5e-6 miss as the check
did, at 1e-7 they agree with the analytic gradient), while a network weight is smooth at
1e-5. Weights that are smooth at no step (a kink closer than 1e-8: leaky ReLU at z = 0, the
tap clamp at |K| = 10, the floor of S) are counted and reported, not compared.

rel = |a - n| / max(|a|, |n|, 1e-3 max|a|); pass: median rel <= 1e-3 and >= 99% <= 1e-2.
"""

from __future__ import annotations

import logging
import sys
import time

import numpy as np

from vkgraph.pipeline.errors import GraphError, RuntimeFailure
from vkgraph.pipeline.trainer import UNCLIPPED, trainable, trainable_modules

log = logging.getLogger("vkgraph")

MEDIAN_BOUND = 1e-3
TAIL_BOUND = 1e-2
TAIL_FRACTION = 0.99
# the step ladder of `derivative`: each step a quarter of the one before, down to eps / 4^5
# (1e-8 at the default eps), and the relative agreement that counts as smooth
LADDER = 4
DEPTH = 5
AGREE = 1e-3
# gradients below FLOOR times the largest checked one are compared absolutely
FLOOR = 1e-3


def rel_error(a: np.ndarray, n: np.ndarray, floor: float) -> np.ndarray:
    return np.abs(a - n) / np.maximum(np.maximum(np.abs(a), np.abs(n)), floor)


def pick_module(graph, name: str | None):
    trainable = trainable_modules(graph.modules.values())
    if name:
        mname, _, inst = name.partition(":")
        m = graph.modules.get((mname, inst))
        if m is None:
            raise GraphError(f"--module {name}: no such module in the graph (trainable: "
                             f"{', '.join(str(t) for t in trainable) or 'none'})")
        return m
    if not trainable:
        raise GraphError("the graph has no trainable module (kpn-t, mlp-t)")
    return trainable[0]


def layer_groups(used: np.ndarray, layers: int) -> list[tuple[str, int, int]]:
    """(label, first, end) of each of `layers` equal weight matrices."""
    size = used.size // layers
    return [(f"matrix {m}", m * size, (m + 1) * size) for m in range(layers)]


def sample(used: np.ndarray, groups, count: int, seed: int,
           analytic: np.ndarray | None = None) -> np.ndarray:
    """A seeded sample of `count` used param indices (all of them when fewer are used),
    stratified by group (matrix or table level): count // groups from each, the remainder one
    each from the first groups, and what a small group cannot give taken from the others. In
    a table level, three quarters come from the entries the batch touches (nonzero analytic
    gradient: most entries of a large table get none), the rest from all of them."""
    rng = np.random.default_rng(seed)
    members = [(label, np.flatnonzero(used[first:end]) + first)
               for label, first, end in groups]
    members = [(label, idx) for label, idx in members if idx.size]
    count = min(count, sum(idx.size for _, idx in members))
    base, extra = divmod(count, len(members))
    want = [min(base + (i < extra), idx.size) for i, (_, idx) in enumerate(members)]
    while sum(want) < count:  # a group smaller than its share: the others give more
        for i, (_, idx) in enumerate(members):
            if sum(want) < count and want[i] < idx.size:
                want[i] += 1
    picks = []
    for (label, idx), k in zip(members, want, strict=True):
        if label.startswith("table") and analytic is not None:
            touched = idx[analytic[idx] != 0]
            n_touched = min(touched.size, k - k // 4)
            picks.append(rng.choice(touched, size=n_touched, replace=False))
            idx = np.setdiff1d(idx, picks[-1])
            k -= n_touched
        picks.append(rng.choice(idx, size=k, replace=False))
    return np.sort(np.concatenate(picks))


class Probe:
    """Runs frames of a built graph with chosen weights and reads the loss. `loss` runs
    whole frames (the backward and the optimiser too); `forward_loss` runs only the
    forward from the weight buffer to the loss (Build.run_upto), again for the last frame
    run: the same kernels, about a third of the work."""

    def __init__(self, build, module, first_frame: int):
        self.build = build
        self.module = module
        self.wbuf = build.buffer(trainable(module).adam, "w")
        self.frame = first_frame
        self.current = module.cls.hook("current_loss")

    def loss(self) -> float:
        self.build.run_frame(self.frame, download=False)
        self.frame += 1
        return self.current(self.build.context, self.module)

    def forward_loss(self) -> float:
        t = trainable(self.module)
        self.build.run_upto(t.lsum, stop=t.adam)
        return self.current(self.build.context, self.module)

    def set(self, j: int, value: float) -> None:
        self.wbuf.upload(np.array([value], np.float32), offset=4 * int(j))


def cmd_gradcheck(args) -> int:
    from vkgraph.pipeline.vk import Device

    from .common import StopSignals, load_session

    session, apply_config = load_session(args)
    graph = session.graph
    apply_config()
    module = pick_module(graph, args.module)
    trains = module.cls.trainable
    if trains is None:
        raise GraphError(f"{module} is not trainable by the gradient check")
    if trains.precise and not args.plain:
        module.set_param(trains.precise, 1)
    if trains.clip and module.param(trains.clip) < 1e6:
        log.info("gradcheck: gradient clipping disabled (%s %g)", trains.clip, UNCLIPPED)
        module.set_param(trains.clip, UNCLIPPED)
    graph.frames = 2  # the probe runs as many frames as it needs
    device = Device.open(args.device, args.device_id)
    try:
        session.device = device
        build = session.prepare()
        t = trainable(module)
        for f in range(1 + max(0, args.warmup)):  # frame 0 initialises the weights
            session.step(f, download=False)
        for rate in trains.rates:  # from now on the optimiser leaves the weights alone
            module.set_param(rate, 0.0)
        probe = Probe(build, module, first_frame=f + 1)
        E0 = probe.loss()
        w0 = build.read(t.adam, "w").astype(np.float32)
        layers, width = t.layout
        used = t.used
        analytic = build.read(t.dw, "dw").astype(np.float64)
        if probe.loss() != E0:
            raise GraphError("the loss changes between frames with the same weights: the "
                             "gradient check needs a static input (cnngenin generate:0)")
        if probe.forward_loss() != E0:
            raise RuntimeFailure("the forward alone gives another loss than the whole frame")
        groups = t.groups or layer_groups(used, layers)
        idx = np.flatnonzero(used) if args.all else sample(used, groups, args.count, args.seed,
                                                           analytic)
        if not args.all and idx.size < args.count:
            log.info("gradcheck: --count %d, but %s uses only %d weights: checking those",
                     args.count, module, idx.size)
        eps = args.eps if args.eps is not None else 1e-5
        # loss noise of the forward that is differenced: float64 (precise; measured 1e-15 E
        # on mlp-t and kpn-t) or fp32
        precise = trains.precise and int(module.param(trains.precise))
        noise = (1e-14 if precise else 3e-8) * max(E0, 1e-3)
        floor = FLOOR * float(np.abs(analytic[idx]).max())
        with StopSignals() as stop:
            numeric, kinks = run_differences(probe, w0, idx, eps, noise, stop, floor)
        done = numeric.size
        if done < idx.size:  # Ctrl-C/SIGTERM: report the weights checked so far
            if done and (~kinks).any():
                report(idx[:done], analytic, numeric, kinks, width, eps, E0, args, groups)
            print(f"vkgraph: interrupted after {done} of {idx.size} weights", file=sys.stderr)
            return 130
        return report(idx, analytic, numeric, kinks, width, eps, E0, args, groups)
    finally:
        device.close()


def run_differences(probe: Probe, w0: np.ndarray, idx: np.ndarray, eps: float, noise: float,
                    stop=None, floor: float = 0.0):
    """Numeric derivatives and kink flags of the weights idx (`derivative` on each, `floor`
    the gradient size below which differences count as absolute); stop() -> True (a signal
    arrived) ends early: the arrays then cover the weights done."""
    numeric = np.zeros(idx.size)
    kinks = np.zeros(idx.size, bool)
    bar = None
    if sys.stderr.isatty():
        from tqdm import tqdm
        bar = tqdm(total=idx.size, unit="weight", file=sys.stderr, desc="gradcheck")
    t0 = time.perf_counter()
    e0 = probe.forward_loss()
    for k, j in enumerate(idx):
        try:
            numeric[k], kinks[k] = derivative(probe, int(j), np.float32(w0[j]), e0, eps, noise,
                                              floor)
        finally:
            probe.set(j, np.float32(w0[j]))
        if bar is not None:
            bar.update(1)
        if stop is not None and stop():
            numeric, kinks = numeric[:k + 1], kinks[:k + 1]
            break
    if bar is not None:
        bar.close()
    log.info("gradcheck: %d weights, %.1f s", numeric.size, time.perf_counter() - t0)
    return numeric, kinks


def derivative(probe: Probe, j: int, w: np.float32, e0: float, eps: float, noise: float,
               floor: float) -> tuple[float, bool]:
    """dE/dw_j by central differences on the steps h = eps, eps/4, ... eps/4^DEPTH: the
    first h that is smooth gives it, (n(h), False); none: (the last n, True), a kink.

    Smooth at h means no kink within +-h: the one-sided quotients (E(w+h) - E)/h and
    (E - E(w-h))/h agree (a kink at distance d < h makes them differ by its slope jump times
    (h - d)/h, however close d is, where the central quotients of two steps can agree on the
    mean of both slopes), and the central quotient agrees with that of the step before (many
    kinks, as leaky ReLUs next to zero, bias it in proportion to h). Both to AGREE relative
    (floor: absolute below it), beyond the loss noise."""
    e0 = float(e0)
    previous = None
    h = eps
    for level in range(DEPTH + 1):
        # the weight buffer is fp32: divide by the steps the weight actually took
        wp, wm = np.float32(w + h), np.float32(w - h)
        if wp == w or wm == w:
            if level == 0:
                raise GraphError(f"--eps {eps:g}: a step of {h:g} does not change weight {j} "
                                 f"({float(w):g}) in fp32; use a larger --eps")
            break  # fp32 resolves no smaller step
        probe.set(j, wp)
        ep = probe.forward_loss()
        probe.set(j, wm)
        em = probe.forward_loss()
        up, down = (ep - e0) / (float(wp) - float(w)), (e0 - em) / (float(w) - float(wm))
        central = (ep - em) / (float(wp) - float(wm))
        slack = 2 * noise / min(float(wp) - float(w), float(w) - float(wm))
        if (previous is not None and agree(up, down, floor, slack)
                and agree(previous, central, floor, slack)):
            return central, False
        previous = central
        h /= LADDER
    return previous, True


def agree(a: float, b: float, floor: float, slack: float) -> bool:
    return abs(a - b) <= AGREE * max(abs(a), abs(b), floor) + slack


def where(j: int, width: int, groups) -> tuple[str, int, str]:
    """(layer, row, column) of param j: a matrix's, a table level's ("t<level>", float
    index inside the level, "-") or a named layer's (group "layer <name>": the name, index
    inside the layer, "-")."""
    for label, first, end in groups:
        if label.startswith("table level") and first <= j < end:
            return f"t{label.split()[-1]}", j - first, "-"
        if label.startswith("layer ") and first <= j < end:
            return label[6:], j - first, "-"
    layer, rem = divmod(int(j), width * width)
    row, col = divmod(rem, width)
    return str(layer), row, str(col)


def report(idx, analytic_all, numeric, kinks, width, eps, E0, args, groups=()) -> int:
    analytic = analytic_all[idx]
    ok = ~kinks
    if not ok.any():
        raise RuntimeFailure("every checked weight sits next to a kink; try a smaller --eps")
    floor = FLOOR * np.abs(analytic[ok]).max()
    rel = rel_error(analytic, numeric, floor)
    print(f"{'index':>7s} {'layer':>5s} {'row':>4s} {'col':>4s} {'analytic':>13s} "
          f"{'numeric':>13s} {'rel error':>10s}")
    for k, j in enumerate(idx):
        layer, row, col = where(int(j), width, groups)
        flag = "  (kink: excluded)" if kinks[k] else ""
        print(f"{j:7d} {layer:>5s} {row:4d} {col:>4s} {analytic[k]:13.6e} {numeric[k]:13.6e} "
              f"{rel[k]:10.2e}{flag}")
    r = rel[ok]
    med, mx = float(np.median(r)), float(r.max())
    frac = float(np.mean(r <= TAIL_BOUND))
    passed = med <= MEDIAN_BOUND and frac >= TAIL_FRACTION
    print(f"checked {idx.size} weights (eps {eps:g}, loss {E0:.6g}): {int(ok.sum())} compared, "
          f"{int(kinks.sum())} excluded next to a kink")
    print(f"max rel error {mx:.3e}, median {med:.3e}, {100 * frac:.2f}% <= {TAIL_BOUND:g}")
    print(f"{'PASS' if passed else 'FAIL'}: median <= {MEDIAN_BOUND:g} and >= "
          f"{100 * TAIL_FRACTION:g}% <= {TAIL_BOUND:g}")
    if args.image:
        n_matrix = sum(1 for g in groups if not g[0].startswith("table")) * width * width
        keep = idx < n_matrix if groups else np.ones(idx.size, bool)  # matrices only
        write_image(args.image, idx[keep], analytic[keep], numeric[keep],
                    n_matrix or analytic_all.size, width)
    return 0 if passed else 1


def write_image(path: str, idx, analytic, numeric, n: int, width: int) -> None:
    """vis-style picture: the layers side by side (x = width l + col, y = row), analytic
    on top, numeric below; positive green, negative red, unchecked black."""
    from vkgraph.pipeline.formats import write_pfm

    layers = n // (width * width)
    img = np.zeros((2 * width, layers * width, 3), np.float32)
    scale = max(np.abs(analytic).max(), 1e-30)
    for values, y0 in ((analytic, 0), (numeric, width)):
        for j, v in zip(idx, values, strict=True):
            layer, rem = divmod(int(j), width * width)
            row, col = divmod(rem, width)
            img[y0 + row, layer * width + col] = (
                (-v / scale, 0, 0) if v < 0 else (0, v / scale, 0))
    write_pfm(path, img)
    log.info("gradcheck: wrote %s", path)
