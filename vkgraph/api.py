"""The Python API: a graph on a device, driven from Python (README "Python API").

    with vkgraph.Session.load("train-kpn") as s:  # a shipped graph, or a cfg file's path
        s.feed("i-pfm:main", noisy)       # a numpy image instead of the file
        s.set("kpn-t:01", "alpha", 0.002)
        s.run(50, progress=lambda frame, frames, stats: ...)
        out = s.read("kpn-t:01", "output")  # any connector, as numpy
        s.losses()["kpn-t:01"]            # the loss of every frame run
        s.save_weights("w.lut")

A module is named "name:inst" (as in cfg lines). The first `run` builds the graph on the
device (nodes, buffers, kernels, recorded commands); later runs continue from the frame
reached, with the same buffers, so training goes on. Params set between runs take effect at
the next frame; feeding a source an image of another size, or `apply`, rebuilds at the next
run, and the rebuilt graph starts with the state the old one reached (what a checkpoint
holds: trained weights, optimiser moments, feedback buffers; pipeline/checkpoint.py: load).
One session may be used from several threads: its calls that touch the device take turns.
"""

from __future__ import annotations

import logging
import numbers
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from .pipeline import checkpoint
from .pipeline.cfg import apply_line, read_cfg
from .pipeline.errors import GraphError, closest
from .pipeline.formats import atomic_write, decode_unorm, non_finite, write_lut
from .pipeline.graph import Graph
from .pipeline.module import ModuleInstance, Roi
from .pipeline.registry import HOST_MODULES, Registry, default_dirs
from .pipeline.runner import Build

Progress = Callable[[int, int, dict], None]
log = logging.getLogger("vkgraph")


def registry(modules: Iterable[str | Path] = (), host: bool = True) -> Registry:
    """The module folders a session sees: `modules` first, then the user's (--modules,
    $VKGRAPH_MODULES), the shipped ones and (host) the host modules i-array / o-array."""
    return Registry([*map(Path, modules), *default_dirs(), *([HOST_MODULES] if host else [])])


def shipped_graphs() -> list[str]:
    """The names of the graphs that come with vkgraph (graphs/*.cfg), without `.cfg`."""
    from . import DATA

    return sorted(p.stem for p in (DATA / "graphs").glob("*.cfg"))


def graph_path(name: str | Path) -> Path:
    """A graph file: the path as given where it is a file, else (a bare name) the shipped
    graph of that name, with or without `.cfg`: `train-kpn` and `train-kpn.cfg` are
    graphs/train-kpn.cfg from any folder (`vkgraph cli -g` and Session.load alike). A name
    that is neither is a GraphError with the closest shipped name."""
    path = Path(name)
    try:
        found = path.exists()
    except OSError as e:  # a name past NAME_MAX or PATH_MAX
        raise GraphError(f"cannot read graph file: {e.strerror}", where=str(path)) from None
    if found and not path.is_dir():
        return path
    bare = path.parent == Path(".") and bool(path.name)
    if bare:
        from . import DATA

        stem = path.name.removesuffix(".cfg")
        if (DATA / "graphs" / f"{stem}.cfg").is_file():
            return DATA / "graphs" / f"{stem}.cfg"
    if found:  # a folder: read_cfg says so
        return path
    raise GraphError(f"{path}: no such graph file, nor a shipped graph of that name",
                     hint=closest(path.name.removesuffix(".cfg"), shipped_graphs())
                     if bare else None)


class Session:
    """One graph on one device."""

    def __init__(self, graph: Graph, device=None, profile: bool = False,
                 transient: bool = False):
        self.graph = graph
        self._device = device
        self._own_device = device is None
        self.profile = profile  # time every node (Build.timings), set before the first run
        # node outputs share memory where their lifetimes in a frame do not overlap; only
        # the sinks' data is kept (pipeline/buffers.py); for graphs whose kernels write their
        # outputs whole every frame, run one frame an input (vkgraph denoise's networks)
        self.transient = transient
        self.build: Build | None = None
        self.frame = 0  # the next frame to run
        self.closed = False
        # the state (checkpoint.collect) of a build the graph changed under, for the next one
        self._carried: dict[str, np.ndarray] | None = None
        # run, read, feed ... from two threads at once would submit the same command lists
        # twice and wait on each other's fences: they take turns instead
        self._lock = threading.RLock()

    # -- loading
    @classmethod
    def load(cls, source: str | Path | Iterable[str], device=None,
             modules: Iterable[str | Path] = (), lenient: bool = False,
             host: bool = True) -> Session:
        """A graph from a cfg file (a path, or the name of a shipped graph: "train-kpn", as
        `vkgraph cli -g` finds it, graph_path), or from cfg lines (a string of several lines
        or an iterable of lines; files they name are found in the working directory). host:
        the numpy modules i-array and o-array may be named (the command line leaves them
        out: cfg files do not see them)."""
        reg = registry(modules, host)
        if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source):
            return cls(read_cfg(graph_path(source), registry=reg, lenient=lenient), device)
        session = cls(Graph(reg), device)
        session.apply(source.splitlines() if isinstance(source, str) else source,
                      "line", lenient)
        return session

    @property
    def device(self):
        self._check_open("device")
        if self._device is None:
            from .pipeline.vk import Device

            self._device = Device.open()
        return self._device

    @device.setter
    def device(self, device) -> None:
        """Run on `device`, which the caller opened and closes (before the first run)."""
        if self.build is not None:
            raise GraphError("Session.device: the graph is already built on a device")
        self._device, self._own_device = device, False

    def close(self) -> None:
        """Release the device (when the session opened it). The session cannot run again."""
        with self._lock:
            if self.build is not None:
                self.build.close()  # its buffers leave the device now (a caller's device)
            self.build = self._carried = None
            self.closed = True
            if self._own_device and self._device is not None:
                self._device.close()
                self._device = None

    def _check_open(self, what: str) -> None:
        if self.closed:
            raise GraphError(f"Session.{what}: the session is closed (its device and "
                             "trained state are released; load a new Session)")

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the graph
    def module(self, name: str) -> ModuleInstance:
        """The instance "name:inst"."""
        mod, _, inst = name.partition(":")
        return self.graph.module(mod, inst, "Session")

    def apply(self, lines: Iterable[str], where: str = "line", lenient: bool = False) -> None:
        """Apply cfg lines to the graph (`module:`, `connect:`, `param:`, `frames:` ...), as
        a cfg file's; errors name `where` and the line's number (from 1)."""
        with self._lock:
            self._check_open("apply")
            self._graph_changed()
            for i, line in enumerate(lines, 1):
                apply_line(self.graph, line, f"{where} {i}", lenient)

    def _graph_changed(self) -> None:
        """The next run builds the graph again; the state the current build reached goes
        with it (prepare)."""
        if self.build is not None:
            if self.frame > 0:
                self._carried = checkpoint.collect(self.build)
            self.build.close()  # its buffers and command lists; the kernels stay shared
        self.build = None

    def set(self, module: str, param: str, value) -> None:
        """Set a param (a number, a list, a string), checked against its range."""
        self.module(module).set_param(param, value, "Session.set")

    def get(self, module: str, param: str):
        """A param's value (a number, a list, a string)."""
        return self.module(module).param(param, "Session.get")

    def feed(self, source: str, image) -> None:
        """Give a source module a numpy image (h, w) or (h, w, channels) in place of its
        file: a source that is not `i-array` is replaced by one (same instance name, same
        wires). Float data is linear; unsigned integers (uint8, uint16: what image decoders
        give) are taken as the file readers take 8- and 16-bit files: divided by the dtype's
        largest value, colour sRGB-decoded to linear, alpha (channel 2 of 2, 4 of 4) kept
        linear. Signed integers, complex numbers and NaN/Inf values are refused.

        A source with a host port of its own (its module.py's `give(module, value)`: i-raw
        takes a `RawImage` already read) is handed any other value as it is, and i-bytes
        its 8-bit pixels (an array) too."""
        with self._lock:
            self._check_open("feed")
            m = self.module(source)
            own = m.name == "i-bytes" or not isinstance(image, np.ndarray)
            if own and m.name != "i-array" and host_port(m, "give"):
                self._give(m, image)
                return
            image = feed_image(source, image)
            if m.name != "i-array":
                m = self._as_array_source(source, m)
            self._give(m, image)

    def _as_array_source(self, source: str, m: ModuleInstance) -> ModuleInstance:
        """Replace the source m by an i-array of the same instance name, with its wires."""
        if not m.cls.is_source:
            raise GraphError(f"feed {source}: {m} is not a source module")
        self._graph_changed()
        readers = self.graph.readers(m, m.connectors[0].name)
        wires = [(r.name, r.inst, rc.name, rc.feedback) for r, rc in readers]
        self.graph.remove_module(m.name, m.inst)
        m = self.graph.add_module("i-array", m.inst)
        for name, inst, conn, fb in wires:
            self.graph.connect("i-array", m.inst, "output", name, inst, conn, fb)
        return m

    def _give(self, m: ModuleInstance, value) -> None:
        """Hand a host port its value; the build uploads it at the next frame, or the graph
        is built again where the value changes its sizes."""
        resized = host_port(m, "give")(m, value)
        if self.build is not None:
            if resized:
                self._graph_changed()  # other sizes everywhere downstream
            else:
                self.build.sources_changed()

    def take(self, sink: str) -> np.ndarray | None:
        """What a host sink (o-array) received at the last frame that downloaded its sinks,
        handed over once: an image (h, w, 4) float32; None where nothing arrived since."""
        with self._lock:
            self._check_open("take")
            m = self.module(sink)
            port = host_port(m, "take")
            if port is None:
                raise GraphError(f"take {sink}: {m} is not a host sink (o-array)")
            return port(m)

    # -- running
    def prepare(self, restore: Callable[[Build], int] | None = None) -> Build:
        """Build the graph on the device now (`run` does it when it has to): nodes, buffers,
        kernels, recorded commands, for the graph's `frames`. restore(build) -> frame loads
        saved state into the fresh build and says where to go on (pipeline/checkpoint.py:
        prepare); the next `run` starts there. Without `restore`, a graph built again
        (after `apply`, or `feed` of another size) starts with the state the previous build
        reached and goes on from its frame; where that state does not fit the changed graph
        (another network size, a module gone), a warning says so and the graph runs again
        from frame 0, its first-frame initialisation included."""
        with self._lock:
            self._check_open("prepare")
            if self.build is None:
                carried, self._carried = self._carried, None
                self.build = self._new_build()
                if carried is not None and restore is None:
                    restore = lambda build: self._carry(build, carried)  # noqa: E731
            if restore is not None:
                self.frame = restore(self.build)
                self.build.first_frame = self.build.frame = self.frame
            return self.build

    def _new_build(self) -> Build:
        for m in self.graph.modules.values():  # sizes come from this build's ROI passes
            for c in m.connectors:
                if c.is_output:
                    c.roi = Roi()
        return Build(self.graph, self.device, profile=self.profile, transient=self.transient)

    def _carry(self, build: Build, arrays: dict[str, np.ndarray]) -> int:
        """Load the state of the build before into `build`; the frame to go on from."""
        build.frame = self.frame - 1
        try:
            checkpoint.load(build, arrays, "Session")
            return self.frame
        except GraphError as e:
            log.warning("Session: the state reached at frame %d does not fit the changed "
                        "graph (%s): it runs again from frame 0", self.frame, e.message)
        self.build = self._new_build()  # nothing half-loaded
        return 0

    def run(self, frames: int = 1, progress: Progress | None = None, *,
            every_frame_sinks: bool = False, on_frame: Callable[[Build, int], None] | None = None,
            stop: Callable[[], bool] | None = None,
            sync: Callable[[int], bool] | None = None) -> Session:
        """Run `frames` frames (from the frame reached); progress(frame, last, stats) is
        called after each, stats being the modules' progress values ({"kpn-t:01": {"loss":
        ...}}). The graph's sinks write after the last frame (after every frame with
        every_frame_sinks). on_frame(build, frame) is called after each frame, for tools
        that look at the build (the command's progress bar and checkpoints); stop() -> bool
        is asked after each frame but the last: True ends the run there, `interrupted` says
        so. Frames may run several to a submission (Build.run_frames): with `progress` or
        an on_frame without `sync`, every frame is its own; sync(frame) -> bool names the
        frames whose own state on_frame needs (a checkpoint), the others may be batched."""
        if isinstance(frames, bool) or not isinstance(frames, numbers.Integral):
            raise GraphError(f"run: frames must be a whole number, got {frames!r}")
        if frames < 1:
            raise GraphError(f"run: frames must be at least 1, got {frames}")
        with self._lock:
            self._check_open("run")
            if self.build is None:
                self.graph.frames = self.frame + frames
            return self._run(int(frames), progress, every_frame_sinks, on_frame, stop, sync)

    def _run(self, frames, progress, every_frame_sinks, on_frame, stop, sync) -> Session:
        build = self.prepare()
        end = self.frame + frames  # (after prepare: a graph that starts again starts at 0)
        build.frames = max(build.frames, end)
        callbacks = [self._reached]
        if progress is not None:
            stats = [(m, m.cls.hook("stats")) for m in build.active if m.cls.hook("stats")]
            callbacks.append(lambda b, f: progress(
                f, end - 1, {str(m): hook(b.context, m) for m, hook in stats}))
        if on_frame is not None:
            callbacks.append(on_frame)
        # sync None: run_frames gives every frame its own state where there are callbacks
        build.run_frames(self.frame, end, not every_frame_sinks, callbacks, stop,
                         sync=None if progress is not None else sync)
        return self

    def _reached(self, build: Build, frame: int) -> None:
        self.frame = frame + 1

    def step(self, frame: int | None = None, download: bool = True, wait: bool = True
             ) -> Session:
        """Run one frame: the next one, or `frame` (frame 0 again, after `feed`: the sources
        upload at frame 0). download: write the sinks after it (host sinks: `take`); wait
        False: return once it is submitted (Build.run_frame), for loops that show frames as
        they come (the gui)."""
        with self._lock:
            self._check_open("step")
            build = self.prepare()
            frame = self.frame if frame is None else int(frame)
            if wait:
                build.run_frame(frame, download=download)
            else:
                build.run_frame(frame, download=download, wait=False)
            self.frame = frame + 1
            return self

    def write_sinks(self) -> None:
        """Write the graph's sinks now, with the last frame's data (the gui's `s`)."""
        with self._lock:
            self._built().download_sinks()

    def timings(self) -> list:
        """Each node's GPU time in the last frame (Build.timings; `profile` must be on)."""
        with self._lock:
            return self._built().timings()

    def gpu_span(self) -> float:
        """The last frame's GPU time, first dispatch's start to last one's end (profile)."""
        with self._lock:
            return self._built().gpu_span()

    @property
    def interrupted(self) -> bool:
        """The last run ended early: its stop() said so."""
        return self.build is not None and self.build.interrupted

    def _built(self) -> Build:
        self._check_open("read")
        if self.build is None:
            raise GraphError("the graph has not run yet (Session.run)")
        return self.build

    def read(self, module: str, connector: str) -> np.ndarray:
        """A module connector's data after the last frame: an image (h, w, channels)
        float32, or an ssbo as a 1-D array of its format."""
        with self._lock:
            build = self._built()
            m = self.module(module)
            m.connector(connector, "Session.read")
            backing = m.backing.get(connector)
            if backing is None:
                raise GraphError(f"{m}: connector '{connector}' has no buffer in this graph "
                                 "(an unconnected input, or a module that did not run)")
            node, conn = backing
            return build.read(node, conn)

    def losses(self) -> dict[str, np.ndarray]:
        """The loss of every frame run so far, per trainable module: {"kpn-t:01": array},
        float64, in frame order; a frame whose update was skipped holds its non-finite loss.
        The history keeps the last `hist_len` frames (at least 500, and every frame of the
        run the graph was built for: pipeline/trainer.py history_length): where more have
        run, the array holds the last ones, so entry i is always frame
        `frame - len(array) + i`."""
        with self._lock:
            build = self._built()
            return {str(m): np.asarray(hook(build.context, m), np.float64)
                    for m in build.active for hook in [m.cls.hook("losses")] if hook}

    def save_losses(self, path: str | Path) -> Path:
        """Write `losses()` as CSV (written whole or not at all: atomic_write): a header
        `frame,<module>,...` and one row a frame, `nan` for a skipped update and an empty
        cell where a module's history does not reach back that far. A graph without a
        trainable module is a GraphError."""
        with self._lock:
            losses = self.losses()
            if not losses:
                raise GraphError("save_losses: the graph has no trainable module (no loss "
                                 "history)", where=str(path))
            path = Path(path)
            atomic_write(path, losses_csv(losses, self.frame).encode())
            return path

    def save_weights(self, path: str | Path, module: str | None = None,
                     connector: str = "w") -> Path:
        """Write a trainable module's weights (connector `w`) as a vkdt .lut, as o-lut would,
        with the text the module published on it (its metadata "text"). Default module: the
        one trainable module. Non-finite weights are refused (RuntimeFailure, nothing
        written)."""
        with self._lock:
            return self._save_weights(Path(path), module, connector)

    def _save_weights(self, path: Path, module: str | None, connector: str) -> Path:
        if module is None:
            found = [str(m) for m in self._built().active
                     if m.trainable is not None and connector in m.cls.connector_names()]
            if len(found) != 1:
                raise GraphError(f"save_weights: name the module ({', '.join(found) or 'no'} "
                                 "trainable modules)")
            module = found[0]
        m = self.module(module)
        data = self.read(module, connector)
        c = m.connector(connector)
        fmt = c.format if c.format in ("f16", "f32", "ui8") else "f32"
        if c.is_ssbo:
            wd, ht = c.roi.wd, c.roi.ht
            if wd * ht != data.size:
                wd, ht = data.size, 1
            write_lut(path, data, 1, fmt, wd, ht, ssbo=True, text=c.meta.get("text"))
        else:
            ht, wd, ch = data.shape
            write_lut(path, data, ch, fmt, wd, ht, ssbo=False, text=c.meta.get("text"))
        return path


def host_port(m: ModuleInstance, name: str):
    """A module's host port `name` (`give`: a source takes a host value; `take`: a sink
    hands one over; pipeline/hostmods), or None. Ports are not engine hooks: only the
    Session calls them."""
    return getattr(m.cls.hooks, name, None) if m.cls.hooks is not None else None


def run_graph(graph: Graph, device, frames: int | None = None, last_frame_only: bool = False,
              progress=None, profile: bool = False, restore=None, stop=None,
              after_frame=None) -> Build:
    """Build and run a graph for its frames on a caller's device, through a Session;
    returns the build (for summaries and reads).

    restore(build) -> int: loads saved state into the fresh build and returns the frame to
    continue at (pipeline/checkpoint.py). after_frame(build, f) runs after each frame (periodic
    checkpoints). stop() -> bool is asked after each frame: True ends the run there (a signal
    arrived), with the sinks written and build.interrupted set."""
    if frames is not None:
        graph.frames = frames
    session = Session(graph, device, profile=profile)
    build = session.prepare(restore)
    build.run_frames(session.frame, build.frames, last_frame_only,
                     [c for c in (progress, after_frame) if c is not None], stop)
    return build


def losses_csv(losses: dict[str, np.ndarray], end: int) -> str:
    """Session.save_losses' text: {module: the losses of the frames before `end`, the last
    ones} as `frame,<module>...` rows, 9 significant digits (a float32 loss exactly)."""
    names = list(losses)
    start = end - max(len(a) for a in losses.values())
    lines = [",".join(["frame", *names])]
    for f in range(start, end):
        cells = [str(f)]
        for name in names:
            a = losses[name]
            i = f - (end - len(a))
            cells.append(f"{a[i]:.9g}".lower() if i >= 0 else "")
        lines.append(",".join(cells))
    return "\n".join(lines) + "\n"


def feed_image(source: str, image) -> np.ndarray:
    """Session.feed's image as float32 (h, w, c) linear: see there."""
    arr = np.asarray(image)
    if arr.ndim not in (2, 3) or 0 in arr.shape:
        raise GraphError(f"feed {source}: expected an image (h, w[, c]), got shape "
                         f"{arr.shape}")
    if arr.ndim == 2:
        arr = arr[:, :, None]
    kind = arr.dtype.kind
    if kind in "ub":
        return decode_unorm(arr)
    if kind != "f":
        what = {"i": "signed integers", "c": "complex numbers"}.get(kind, f"{arr.dtype} data")
        raise GraphError(f"feed {source}: the image holds {what} ({arr.dtype}); give linear "
                         "float data, or unsigned 8/16-bit sRGB data as image files hold")
    with np.errstate(over="ignore"):  # a float64 beyond float32: inf, refused below
        out = np.ascontiguousarray(arr, np.float32)
    found = non_finite(out)
    if found is not None:
        raise GraphError(f"feed {source}: the image holds {found[1]} (as float32); "
                         "every value must be finite")
    return out
