"""`vkgraph gui`: run a graph frame after frame and show its display modules in a window.

The window (glfw, no client API) shows `display:main` large and the other displays beside it,
each panel labelled, or, for a graph with a trainable module, its images side by side with its
loss plot below (vkgraph/apps/compose.py: `view_of`), and a status line with frame, frames/s and
what the modules' `stats` hooks report (also in the window title). The graph runs its
frames, then the last picture stays until the window is closed.

Keys: space pauses/resumes, `s` writes the file sinks now, `q`/Esc quits. Quitting (also by
closing the window, or by `--exit-after N`: after N graph frames, counting redraws once the
graph is paused or done) writes the file sinks. Ctrl-C and SIGTERM quit the same way after
the current frame (sinks, summary) and exit 130; a second signal stops at once.
`--screenshot FILE.png` saves the last picture shown, read back from the swapchain image.

While the graph is paused or done, the window sleeps in glfw's event wait and redraws only
for a key, a resize or an expose; a signal wakes it through `SignalWake`. (With
`--exit-after`, which counts redraws, it redraws every IDLE_WAIT seconds instead.)
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections import deque
from pathlib import Path

import numpy as np

from vkgraph.pipeline.errors import GraphError, RuntimeFailure

from .common import StopSignals, load_session, open_device
from .progress import summaries

log = logging.getLogger("vkgraph")

WINDOW = (1280, 800)  # default window size, shrunk to fit the screen
STATS_EVERY = 0.25  # seconds between calls of the modules' stats hooks (they download)
IDLE_WAIT = 0.05  # seconds between redraws while paused or done, with --exit-after
FRAME_BUDGET = 1 / 30  # seconds of graph frames between two pictures


class Window:
    """A glfw window without a client API, and the keys the frame loop acts on."""

    def __init__(self, title: str, size=WINDOW):
        try:
            import glfw
        except ImportError as e:  # pyGLFW loads its shared library (and X11/Wayland's) here
            raise RuntimeFailure(f"no display available (glfw cannot be loaded: {e}); use "
                                 "`vkgraph cli` to run the graph without a window") from None
        self.glfw = glfw
        errors: list[str] = []
        glfw.set_error_callback(lambda code, text: errors.append(
            text.decode(errors="replace") if isinstance(text, bytes) else str(text)))
        if not glfw.init():
            why = errors[-1] if errors else "glfw cannot connect to a window system"
            raise RuntimeFailure(f"no display available ({why}); use `vkgraph cli` to run "
                                 "the graph without a window")
        if not glfw.vulkan_supported():
            glfw.terminate()
            raise RuntimeFailure("glfw finds no Vulkan loader for windows; use `vkgraph cli`")
        wd, ht = size
        monitor = glfw.get_primary_monitor()
        if monitor:
            _, _, mw, mh = glfw.get_monitor_workarea(monitor)
            if mw > 0 and mh > 0:
                wd, ht = min(wd, int(mw * 0.9)), min(ht, int(mh * 0.9))
        glfw.window_hint(glfw.CLIENT_API, glfw.NO_API)
        glfw.window_hint(glfw.RESIZABLE, glfw.TRUE)
        self.handle = glfw.create_window(wd, ht, title, None, None)
        if not self.handle:
            why = errors[-1] if errors else "unknown reason"
            glfw.terminate()
            raise RuntimeFailure(f"no display available (cannot open a window: {why}); use "
                                 "`vkgraph cli` to run the graph without a window")
        self.title = title
        self.shown_title = title
        self.paused = False
        self.write_now = False
        self.resized = False
        self.dirty = False  # something to show: a key, a resize, an expose
        glfw.set_key_callback(self.handle, self._key)
        glfw.set_framebuffer_size_callback(self.handle, self._resize)
        glfw.set_window_refresh_callback(self.handle, self._refresh)

    def _key(self, window, key, scancode, action, mods) -> None:
        glfw = self.glfw
        if action != glfw.PRESS:
            return
        self.dirty = True
        if key == glfw.KEY_SPACE:
            self.paused = not self.paused
        elif key == glfw.KEY_S:
            self.write_now = True
        elif key in (glfw.KEY_Q, glfw.KEY_ESCAPE):
            glfw.set_window_should_close(window, True)

    def _resize(self, window, wd, ht) -> None:
        self.resized = self.dirty = True

    def _refresh(self, window) -> None:
        self.dirty = True

    @property
    def closing(self) -> bool:
        return bool(self.glfw.window_should_close(self.handle))

    def framebuffer_size(self) -> tuple[int, int]:
        return tuple(self.glfw.get_framebuffer_size(self.handle))

    def events(self, wait: float | None = 0.0) -> None:
        """Handle pending events; wait > 0: wait up to that long for one; None: sleep until
        one comes (glfw.post_empty_event from another thread counts)."""
        if wait is None:
            self.glfw.wait_events()
        elif wait > 0:
            self.glfw.wait_events_timeout(wait)
        else:
            self.glfw.poll_events()

    def set_title(self, text: str) -> None:
        title = f"{self.title} - {text}"
        if title != self.shown_title:
            self.shown_title = title
            self.glfw.set_window_title(self.handle, title)

    def close(self) -> None:
        self.glfw.destroy_window(self.handle)
        self.glfw.terminate()


class SignalWake:
    """Wakes the window's event wait when a signal arrives: Python runs a signal handler
    only once the main thread is back from C, and glfw's wait returns only for an event.
    The interpreter writes each signal's number to a pipe (signal.set_wakeup_fd) the moment
    it arrives; a thread reading that pipe posts glfw's empty event. Needs Python handlers
    for the signals (StopSignals) and the main thread."""

    def __init__(self, window: Window):
        self.glfw = window.glfw
        self.rfd, self.wfd = os.pipe()
        os.set_blocking(self.wfd, False)
        self.old = signal.set_wakeup_fd(self.wfd, warn_on_full_buffer=False)
        self.thread = threading.Thread(target=self._run, name="vkgraph-signal-wake",
                                       daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while os.read(self.rfd, 64):  # b"" once close() has closed the write end
            self.glfw.post_empty_event()

    def close(self) -> None:
        signal.set_wakeup_fd(self.old)
        os.close(self.wfd)
        self.thread.join(timeout=5)
        os.close(self.rfd)


class Status:
    """frame, frames/s and the modules' stats, refreshed a few times a second."""

    def __init__(self, build):
        self.build = build
        self.samples: deque[tuple[float, int]] = deque()  # (time, frames done)
        self.stats = ""
        self.t_stats = 0.0

    def fps(self, done: int) -> float:
        """Graph frames per second over about the last second."""
        now = time.perf_counter()
        self.samples.append((now, done))
        while len(self.samples) > 2 and now - self.samples[1][0] > 1.0:
            self.samples.popleft()
        t0, d0 = self.samples[0]
        return (done - d0) / (now - t0) if now > t0 else 0.0

    def line(self, done: int, paused: bool) -> str:
        build = self.build
        now = time.perf_counter()
        if done and now - self.t_stats > STATS_EVERY:
            self.t_stats = now
            parts = []
            for m in build.active:
                hook = m.cls.hook("stats")
                if hook:
                    for k, v in hook(build.context, m).items():
                        parts.append(f"{k} {v:.5g}" if isinstance(v, float) else f"{k} {v}")
            self.stats = "  ".join(parts)
        text = f"frame {done}/{build.frames}  {self.fps(done):.1f} frames/s"
        if self.stats:
            text += "  " + self.stats
        if paused:
            text += "  paused"
        elif done >= build.frames:
            text += "  done"
        return text


def write_screenshot(path: str, rgba: np.ndarray) -> None:
    import imageio.v3 as iio

    from vkgraph.pipeline.formats import atomic_write

    atomic_write(path, iio.imwrite("<bytes>", np.ascontiguousarray(rgba[:, :, :3]),
                                   extension=".png"))


def cmd_gui(args) -> int:
    from vkgraph.apps.compose import Composer, view_of
    from vkgraph.pipeline.vk.display import OutOfDate, Surface, Swapchain

    session, apply_config = load_session(args)
    graph = session.graph
    apply_config()
    if args.frames is not None:
        graph.frames = args.frames
    if not any(m.name == "display" for m in graph.modules.values()):
        raise GraphError(f"{args.graph}: the graph has no display module to show (use "
                         "`vkgraph cli` for graphs that only write files)")
    window = Window(f"vkgraph: {Path(args.graph).name}")
    surface = device = wake = None
    try:
        with StopSignals() as stop:
            if threading.current_thread() is threading.main_thread():
                wake = SignalWake(window)
            surface = Surface(window.handle)
            device = open_device(args, surface)
            session.device, session.profile = device, args.profile
            build = session.prepare()
            view = view_of(build)
            if not view.panels:
                raise GraphError("no display of the graph shows an image")
            swapchain = Swapchain(device, surface, *window.framebuffer_size())
            composer = Composer(build, view)
            shown = [f"{p.name} {p.wd}x{p.ht}" for p in view.panels]
            if view.loss is not None:
                shown.append(f"{view.loss.name} loss")
            log.info("gui: %s", ", ".join(shown))
            done = _loop(args, window, session, swapchain, composer, OutOfDate, stop)
            if args.profile and done:
                from .progress import print_profile
                print_profile(build)
    finally:
        if wake is not None:
            wake.close()
        if device is not None:
            device.close()
        if surface is not None:
            surface.destroy()
        window.close()
    if stop():
        print(f"vkgraph: interrupted after frame {max(done - 1, 0)} of {build.frames}",
              file=sys.stderr)
        return 130
    return 0


def _loop(args, window: Window, session, swapchain, composer, out_of_date, stop) -> int:
    """The frame loop; returns the number of graph frames that ran.

    Each turn runs graph frames for up to FRAME_BUDGET seconds (one at least), then shows
    the picture, so fast graphs are not slowed down to the display's rate. `--exit-after N`
    counts graph frames and, once the graph is paused or done, redraws. stop() -> True (a
    signal arrived) quits like `q`."""
    build = session.build
    status = Status(build)
    limit = args.exit_after if args.exit_after is not None else float("inf")
    done = 0  # graph frames run
    ticks = 0  # what --exit-after counts
    t_run = 0.0
    shot = None
    while True:
        window.events()
        quitting = window.closing or stop()
        if not quitting and not window.paused and done < build.frames and ticks < limit:
            t0 = time.perf_counter()
            while True:
                session.step(done, download=False)
                done += 1
                ticks += 1
                if (done >= build.frames or ticks >= limit or stop()
                        or time.perf_counter() - t0 > FRAME_BUDGET):
                    break
            t_run += time.perf_counter() - t0
        elif not quitting:
            ticks += 1  # a redraw
        if window.write_now:
            window.write_now = False
            _write_sinks(session, done)
        last = quitting or ticks >= limit
        line = status.line(done, window.paused)
        composer.set_status(line)
        window.set_title(line)
        if window.resized or not swapchain.usable:
            window.resized = False
            swapchain.recreate(*window.framebuffer_size())
        if swapchain.usable:
            composer.resize(*swapchain.extent, bgra=swapchain.texel_order == "bgra")
            texels = composer.run(max(done - 1, 0))
            try:
                pixels = swapchain.present(texels, capture=last and bool(args.screenshot))
                if pixels is not None:
                    shot = pixels
            except out_of_date:
                window.resized = True
                continue
        if last:
            break
        if window.paused or done >= build.frames or not swapchain.usable:
            _idle(window, stop, IDLE_WAIT if limit < float("inf") else None)
    build.seconds = t_run
    if args.screenshot:
        if shot is None:
            raise RuntimeFailure("no picture was shown (window minimised?), so no screenshot")
        write_screenshot(args.screenshot, shot)
        log.info("gui: wrote %s (%dx%d)", args.screenshot, shot.shape[1], shot.shape[0])
    _write_sinks(session, done)
    if done:
        for line in summaries(build):
            print(line)
    return done


def _idle(window: Window, stop, wait: float | None) -> None:
    """Paused or done: wait `wait` seconds, or (None) until there is something to show or to
    do, without redrawing for events that change nothing (the mouse moving over the
    window)."""
    if wait is not None:
        window.events(wait)
        return
    window.dirty = False
    while not (window.dirty or window.closing or stop()):
        window.events(None)


def _write_sinks(session, done: int) -> None:
    if not done:
        log.info("gui: no frame has run yet, nothing to write")
        return
    session.write_sinks()
