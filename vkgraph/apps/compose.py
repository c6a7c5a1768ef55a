"""The picture of `vkgraph gui`: every display module of a build in one window.

`view_of` decides what the window shows (a `View`), `place` where (window rectangles):

* the plain view: `display:main` (or the first display) large on the left, the others
  stacked in a column on the right (vkdt's `hist` on top);
* the training view, for a graph with a trainable module (`module.trainable`, see
  pipeline/trainer.py) that has at least two images to show: a row of its images side by
  side, in its declared connector order with its result after the first input (kpn-t:
  input | output | ref, mlp-t: target | output), its loss plot below them, drawn by the
  composer at the panel's size (`plot.comp`), and the other displays in a column on the
  right. Displays that show one of the row's images again, and displays of a loss plot
  (an image computed from the module's loss history, like kpn-t's `graph`) are left out.

Each image panel has a label strip along its top (`LABEL_HT`: the connector or display it
shows); `image_area` is what remains of the panel for the image, and `fit` puts an image
into it (aspect kept, centred). A status strip runs along the bottom. `Composer` records,
once per buffer parity and window size, compute dispatches that read the buffers where the
graph left them (no host round trip) and write the window's packed 8-bit texels into a
storage buffer for `pipeline.vk.display.Swapchain.present`. Kernels: `shaders/display/`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..pipeline.kernels import kernel_spirv, pack_push
from ..pipeline.nodes import Node

SIDE = 0.25  # width of the side column, as a fraction of the window
ROW = 0.55  # height of the training view's image row, as a fraction of the window's body
GAP = 2  # pixels between panels
FONT_SCALE = 2  # window pixels per font pixel
STATUS_HT = 8 * FONT_SCALE + 8  # the status strip: one line of text
LABEL_HT = 8 * FONT_SCALE + 4  # a panel's label strip
MAX_TEXT = 252
LOCAL = (16, 16, 1)
PLOT_COLS = 512  # columns of the loss history summary (grange.comp's NCOLS)
PLOT_VALUES = 3 * PLOT_COLS + 4  # grange.comp's output: per column min, max, smoothed; 4 more
# the loss plot's margins around its plot area, in font pixels (shaders/include/lossplot.glsl)
PLOT_MARGIN = (56, 14, 8, 22)  # left, top, right, bottom

Rect = tuple[int, int, int, int]  # x, y, wd, ht in window pixels, y down


def layout(wd: int, ht: int, npanels: int) -> tuple[list[Rect], Rect]:
    """The plain view: rectangles of `npanels` panels (the first the large one) and of the
    status strip."""
    body = max(0, ht - STATUS_HT)
    status = (0, body, wd, ht - body)
    if npanels <= 1:
        return [(0, 0, wd, body)], status
    side = max(1, round(wd * SIDE))
    main = (0, 0, max(1, wd - side - GAP), body)
    return [main, *column(main[2] + GAP, wd, body, npanels - 1)], status


def column(x: int, wd: int, ht: int, n: int) -> list[Rect]:
    """n rectangles stacked from the top in x .. wd - 1 over ht rows, GAP apart."""
    rects = []
    for i in range(n):
        y0 = i * (ht + GAP) // n
        y1 = (i + 1) * (ht + GAP) // n - GAP
        rects.append((x, y0, wd - x, max(1, y1 - y0)))
    return rects


def row(x: int, y: int, wd: int, ht: int, n: int) -> list[Rect]:
    """n rectangles side by side in x .. x + wd - 1, GAP apart."""
    rects = []
    for i in range(n):
        x0 = i * (wd + GAP) // n
        x1 = (i + 1) * (wd + GAP) // n - GAP
        rects.append((x + x0, y, max(1, x1 - x0), ht))
    return rects


def training_layout(wd: int, ht: int, nrow: int, nside: int) -> tuple[list[Rect], Rect, Rect]:
    """The training view: rectangles of the `nrow` images side by side on top, then of the
    `nside` displays of the right-hand column; the loss plot's rectangle below the images;
    the status strip."""
    body = max(0, ht - STATUS_HT)
    status = (0, body, wd, ht - body)
    left = max(1, wd - round(wd * SIDE) - GAP) if nside else wd
    top = max(1, round(body * ROW))
    rects = row(0, 0, left, top, nrow)
    if nside:
        rects += column(left + GAP, wd, body, nside)
    loss = (0, top + GAP, left, max(1, body - top - GAP))
    return rects, loss, status


def image_area(rect: Rect) -> Rect:
    """The part of a panel below its label strip, where its image goes."""
    x, y, pw, ph = rect
    label = min(LABEL_HT, ph // 2)
    return (x, y + label, pw, max(1, ph - label))


def plot_area(rect: Rect, scale: int = FONT_SCALE) -> tuple[int, int, int, int]:
    """The loss plot's area x0, y0, x1, y1 (exclusive) in the pixels of its panel `rect`:
    the panel less the margins its labels need at font scale `scale`."""
    left, top, right, bottom = (m * scale for m in PLOT_MARGIN)
    _, _, pw, ph = rect
    return (left, top, max(left + 1, pw - right), max(top + 1, ph - bottom))


def fit(rect: Rect, wd: int, ht: int) -> Rect:
    """An image of wd x ht scaled into `rect` keeping its aspect, centred."""
    x, y, pw, ph = rect
    s = min(pw / wd, ph / ht)
    fw = min(pw, max(1, round(wd * s)))
    fh = min(ph, max(1, round(ht * s)))
    return (x + (pw - fw) // 2, y + (ph - fh) // 2, fw, fh)


@dataclass
class Panel:
    name: str  # its label: the display instance, or the trainable module's connector
    node: Node  # the node whose connector `conn` holds the image
    wd: int
    ht: int
    nchan: int
    conn: str = "input"
    display: str = ""  # the display instance it shows, "" for a trainable module's image


@dataclass
class Loss:
    """A trainable module's loss plot: the loss history is `lsum`'s output `hist`."""

    name: str
    lsum: Node
    hist_len: int


@dataclass
class View:
    """What the window shows: `panels` in layout order; with `loss`, the training view (the
    first `nrow` panels side by side, the loss plot below them, the rest in a column)."""

    panels: list[Panel] = field(default_factory=list)
    loss: Loss | None = None
    nrow: int = 0

    def place(self, wd: int, ht: int) -> tuple[list[Rect], Rect | None, Rect]:
        """Rectangles of the panels, of the loss plot (None in the plain view) and of the
        status strip in a window of wd x ht."""
        if self.loss is None:
            rects, status = layout(wd, ht, len(self.panels))
            return rects, None, status
        return training_layout(wd, ht, self.nrow, len(self.panels) - self.nrow)


def panels_of(build) -> list[Panel]:
    """The build's displays in window order: main first, then hist, then the rest in graph
    order. Displays of non-image data are left out."""
    out = []
    for m in build.active:
        if m.name != "display" or not m.nodes:
            continue
        node = m.nodes[0]
        c = node.connector("input")
        if c.source is None or c.is_ssbo:
            continue
        writer, wconn = m.connector("input").source
        out.append(Panel(f"{m.inst}: {writer.name} {wconn}", node, c.roi.wd, c.roi.ht,
                         c.nchan, display=m.inst))
    order = {"main": 0, "hist": 1}
    return sorted(out, key=lambda p: order.get(p.display, 2))


def view_of(build) -> View:
    """The training view of the build's first trainable module with at least two images to
    show, else the plain view of its displays."""
    displays = panels_of(build)
    for m in build.active:
        record = getattr(m, "trainable", None)
        images = training_panels(build, m) if record is not None else []
        if len(images) < 2:
            continue
        shown = {(id(p.node), p.conn) for p in images}
        side = [p for p in displays if source_of(p) not in shown
                and not reads(p.node, record.lsum, "hist")]
        return View(images + side, Loss(f"{m.name}:{m.inst}", record.lsum, record.hist_len),
                    len(images))
    return View(displays)


def training_panels(build, module) -> list[Panel]:
    """A trainable module's images: its connected image inputs in declared order with its
    result (the output `output`, the engine's name for a module's main output, where the
    build computes it) after the first."""
    inputs = []
    for c in module.connectors:
        if c.is_input and not c.is_ssbo and c.source is not None and not c.feedback:
            writer, wconn = c.source
            if wconn in writer.backing:
                inputs.append(image_panel(build, c.name, *writer.backing[wconn]))
    result = []
    names = [c.name for c in module.connectors]
    if "output" in names and "output" in module.backing:
        c = module.connector("output")
        if c.is_output and not c.is_ssbo:
            result.append(image_panel(build, "output", *module.backing["output"]))
    return [p for p in inputs[:1] + result + inputs[1:] if p is not None]


def image_panel(build, name: str, node: Node, conn: str) -> Panel | None:
    """A panel of node output `conn`, or None where the build holds no buffer for it (its
    node does not run)."""
    if (id(node), conn) not in build.memory.buffers:
        return None
    c = node.connector(conn)
    return Panel(name, node, c.roi.wd, c.roi.ht, c.nchan, conn)


def source_of(panel: Panel) -> tuple[int, str]:
    """The node output a display panel shows, as (id(node), connector)."""
    src, conn = panel.node.connector(panel.conn).source
    return id(src), conn


def reads(node: Node, target: Node, conn: str) -> bool:
    """Whether `node` computes from `target`'s output `conn`, directly or through other
    nodes (feedback edges, the previous frame's values, not followed)."""
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        for c in n.connectors:
            if c.is_input and c.source is not None and not c.feedback:
                if c.source[0] is target and c.source[1] == conn:
                    return True
                stack.append(c.source[0])
    return False


class Composer:
    """Composes the window's picture on the device after each frame of a build."""

    def __init__(self, build, view: View, bgra: bool = True):
        self.build = build
        self.device = build.device
        self.view = view
        self.panels = view.panels
        self.bgra = int(bgra)
        dev = self.device
        self.k_panel = dev.kernel(kernel_spirv("display", "panel"), 2, 64, LOCAL)
        self.k_status = dev.kernel(kernel_spirv("display", "status"), 2, 32, LOCAL)
        self.k_label = dev.kernel(kernel_spirv("display", "label"), 2, 48, LOCAL)
        self.text = dev.buffer(4 * (MAX_TEXT + 1), host=True)
        self.info = dev.buffer(16, host=True)  # node info of the convention; unused
        self.labels, self.spans = self._labels([p.name for p in self.panels])
        if view.loss is not None:
            self.k_range = dev.kernel(kernel_spirv("trainer", "grange"), 2, 8, (256, 1, 1))
            self.k_plot = dev.kernel(kernel_spirv("display", "plot"), 2, 64, LOCAL)
            self.cols = dev.buffer(4 * PLOT_VALUES)
        self.texels = None
        self.size = (0, 0)
        self.commands: list = []
        self.status = ""

    def _labels(self, names: list[str]):
        """The panels' labels (upper case: the font has no lower case) in one host buffer,
        and each one's (first code, length) in it."""
        codes = [np.frombuffer(n.upper().encode("ascii", "replace")[:MAX_TEXT], np.uint8)
                 for n in names]
        buf = self.device.buffer(4 * max(1, sum(c.size for c in codes)), host=True)
        view, spans, at = buf.view(np.int32), [], 0
        for c in codes:
            view[at:at + c.size] = c
            spans.append((at, c.size))
            at += c.size
        return buf, spans

    def resize(self, wd: int, ht: int, bgra: bool | None = None) -> None:
        """Allocate the window's texels and record the composition for wd x ht (texels in
        BGRA byte order, else RGBA)."""
        bgra = self.bgra if bgra is None else int(bgra)
        if (wd, ht) == self.size and bgra == self.bgra and self.commands:
            return
        self.bgra = bgra
        self.device.wait_idle()
        if self.texels is not None:
            self.texels.destroy()
        self.texels = self.device.buffer(4 * wd * ht)
        self.size = (wd, ht)
        self.rects, self.loss_rect, strip = self.view.place(wd, ht)
        nparity = len(self.build.program.commands) or 1
        old, self.commands = self.commands, []
        for cl in old:
            cl.destroy()
        for parity in range(nparity):
            cl = self.device.commands().begin()
            cl.barrier(first=True)  # after the frame's writes
            cl.fill(self.texels)  # the gaps between panels stay black
            glob = self.build.memory.global_bufs
            set0 = [glob[parity % len(glob)], self.text, self.info]
            if self.loss_rect is not None:
                self._record_range(cl, set0, parity)
            cl.barrier()
            for panel, rect, span in zip(self.panels, self.rects, self.spans, strict=True):
                self._record_panel(cl, set0, parity, panel, rect, span)
            if self.loss_rect is not None:
                self._record_plot(cl, set0)
            if strip[3] > 0:
                push = pack_push([*strip, wd, ht, self.bgra, FONT_SCALE])
                cl.dispatch(self.k_status, set0, [self.texels, self.texels], push,
                            self.k_status.groups(strip[2:] + (1,)))
            self.commands.append(cl.end())

    def _record_panel(self, cl, set0, parity: int, panel: Panel, rect: Rect, span) -> None:
        """An image panel: its label strip, then its image fitted below it."""
        wd, ht = self.size
        x, y, pw, _ = rect
        area = image_area(rect)
        strip = (x, y, pw, area[1] - y)
        if strip[3] > 0:
            push = pack_push([*strip, wd, ht, self.bgra, FONT_SCALE, 0, 0, *span])
            cl.dispatch(self.k_label, set0, [self.labels, self.texels], push,
                        self.k_label.groups(strip[2:] + (1,)))
        src = self.build.buffer(panel.node, panel.conn, parity)
        push = pack_push([*area, *fit(area, panel.wd, panel.ht), panel.wd, panel.ht,
                          panel.nchan, self.bgra, wd, ht, 0, 0])
        cl.dispatch(self.k_panel, set0, [src, self.texels], push,
                    self.k_panel.groups(area[2:] + (1,)))

    def _record_range(self, cl, set0, parity: int) -> None:
        """The loss history summarised per column of the plot (grange.comp)."""
        loss = self.view.loss
        hist = self.build.buffer(loss.lsum, "hist", parity)
        push = pack_push([loss.hist_len, self.plot_columns()])
        cl.dispatch(self.k_range, set0, [hist, self.cols], push, (1, 1, 1))

    def plot_columns(self) -> int:
        """Columns of the loss history summary: one per pixel of the plot area, at most
        PLOT_COLS."""
        x0, _, x1, _ = plot_area(self.loss_rect)
        return max(1, min(PLOT_COLS, x1 - x0))

    def _record_plot(self, cl, set0) -> None:
        wd, ht = self.size
        rect = self.loss_rect
        push = pack_push([*rect, *plot_area(rect), wd, ht, self.bgra, FONT_SCALE,
                          self.plot_columns(), 0, 0, 0])
        cl.dispatch(self.k_plot, set0, [self.cols, self.texels], push,
                    self.k_plot.groups(rect[2:] + (1,)))

    def set_status(self, line: str) -> None:
        """The status line's text (upper case: the font has no lower case)."""
        if line == self.status:
            return
        self.status = line
        codes = np.frombuffer(line.upper().encode("ascii", "replace")[:MAX_TEXT], np.uint8)
        view = self.text.view(np.int32)
        view[0] = codes.size
        view[1: 1 + codes.size] = codes

    def run(self, frame: int):
        """Compose the picture after frame `frame` ran; returns the texel buffer."""
        self.commands[frame % len(self.commands)].run()
        return self.texels
