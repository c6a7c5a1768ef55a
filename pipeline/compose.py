"""The picture of `vkgraph gui`: every display module of a build in one window.

`layout` places the panels: `display:main` (or the first display) large on the left, the
others stacked in a column on the right (vkdt's `hist` on top), a status strip along the
bottom. `fit` puts an image into a panel (aspect kept, centred). `Composer` records, once per
buffer parity and window size, compute dispatches that read the displays' input buffers where
the graph left them (no host round trip) and write the window's packed 8-bit texels into a
storage buffer for `pipeline.vk.display.Swapchain.present`. Kernels: `shaders/display/`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .kernels import kernel_spirv, pack_push
from .nodes import Node

SIDE = 0.25  # width of the side column, as a fraction of the window
GAP = 2  # pixels between panels
FONT_SCALE = 2  # window pixels per font pixel
STATUS_HT = 8 * FONT_SCALE + 8  # the status strip: one line of text
MAX_TEXT = 252
LOCAL = (16, 16, 1)

Rect = tuple[int, int, int, int]  # x, y, wd, ht in window pixels, y down


def layout(wd: int, ht: int, npanels: int) -> tuple[list[Rect], Rect]:
    """Rectangles of `npanels` panels (the first the large one) and of the status strip."""
    body = max(0, ht - STATUS_HT)
    status = (0, body, wd, ht - body)
    if npanels <= 1:
        return [(0, 0, wd, body)], status
    side = max(1, round(wd * SIDE))
    main = (0, 0, max(1, wd - side - GAP), body)
    n = npanels - 1
    x = main[2] + GAP
    rects = [main]
    for i in range(n):
        y0 = i * (body + GAP) // n
        y1 = (i + 1) * (body + GAP) // n - GAP
        rects.append((x, y0, wd - x, max(1, y1 - y0)))
    return rects, status


def fit(rect: Rect, wd: int, ht: int) -> Rect:
    """An image of wd x ht scaled into `rect` keeping its aspect, centred."""
    x, y, pw, ph = rect
    s = min(pw / wd, ph / ht)
    fw = min(pw, max(1, round(wd * s)))
    fh = min(ph, max(1, round(ht * s)))
    return (x + (pw - fw) // 2, y + (ph - fh) // 2, fw, fh)


@dataclass
class Panel:
    name: str  # display instance
    node: Node  # the display's sink node; its input is what the panel shows
    wd: int
    ht: int
    nchan: int


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
        out.append(Panel(m.inst, node, c.roi.wd, c.roi.ht, c.nchan))
    order = {"main": 0, "hist": 1}
    return sorted(out, key=lambda p: order.get(p.name, 2))


class Composer:
    """Composes the window's picture on the device after each frame of a build."""

    def __init__(self, build, panels: list[Panel], bgra: bool = True):
        self.build = build
        self.device = build.device
        self.panels = panels
        self.bgra = int(bgra)
        dev = self.device
        self.k_panel = dev.kernel(kernel_spirv("display", "panel"), 2, 64, LOCAL)
        self.k_status = dev.kernel(kernel_spirv("display", "status"), 2, 32, LOCAL)
        self.text = dev.buffer(4 * (MAX_TEXT + 1), host=True)
        self.info = dev.buffer(16, host=True)  # node info of the convention; unused
        self.texels = None
        self.size = (0, 0)
        self.commands: list = []
        self.status = ""

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
        rects, strip = layout(wd, ht, len(self.panels))
        self.rects = rects
        nparity = len(self.build.commands) or 1
        old, self.commands = self.commands, []
        for cl in old:
            cl.destroy()
        for parity in range(nparity):
            cl = self.device.commands().begin()
            cl.barrier(first=True)  # after the frame's writes
            cl.fill(self.texels)  # the gaps between panels stay black
            cl.barrier()
            set0 = [self.build.global_bufs[parity % len(self.build.global_bufs)], self.text,
                    self.info]
            for panel, rect in zip(self.panels, rects, strict=True):
                src = self.build.buffer(panel.node, "input", parity)
                push = pack_push([*rect, *fit(rect, panel.wd, panel.ht), panel.wd, panel.ht,
                                  panel.nchan, self.bgra, wd, ht, 0, 0])
                cl.dispatch(self.k_panel, set0, [src, self.texels], push,
                            self.k_panel.groups(rect[2:] + (1,)))
            if strip[3] > 0:
                push = pack_push([*strip, wd, ht, self.bgra, FONT_SCALE])
                cl.dispatch(self.k_status, set0, [self.texels, self.texels], push,
                            self.k_status.groups(strip[2:] + (1,)))
            self.commands.append(cl.end())

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
