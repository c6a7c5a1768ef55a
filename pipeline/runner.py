"""One run of a graph on a device: `Build`, its stages, and the frame loop.

`Build(graph, device)` goes through the stages in order, each in its own file:
the passes from modules to scheduled nodes (nodes.py: NodeGraph), the buffers (buffers.py:
memory check, allocation), the kernels compiled, checked and recorded once per buffer parity
(recording.py, kernels.py), and host I/O of sources and sinks (transfers.py). This file holds
what ties them: the construction, the hooks' file helper and the frame loop. Programs make a Build
through `vkgraph.Session` (vkgraph/api.py), its one owner. `run_frame(f)`
costs a few small host writes, one submit and one fence wait.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from .buffers import Buffers
from .datasets import resolve_name
from .errors import GraphError
from .nodes import Node, NodeGraph
from .recording import BATCH, Recording
from .transfers import Transfers
from .vk import Device

log = logging.getLogger("vkgraph")


class Build(Buffers, Recording, Transfers, NodeGraph):
    """Everything one run of a graph needs on the device."""

    def __init__(self, graph, device: Device, profile: bool = False):
        super().__init__(graph)
        self.device = device
        self.profile = profile
        self.frame = 0
        self.frames = max(1, int(graph.frames))
        self.buffers: dict[tuple[int, str], list] = {}  # (id(node), conn) -> [buf] or [b0, b1]
        self.staging: dict[int, object] = {}  # id(node) -> host buffer of a source or sink
        self.params: dict[int, tuple] = {}  # id(module) -> (buffer, last blob)
        self.commands: list = []
        self._partial: dict = {}  # run_upto's command lists
        self.streaming: list[Node] = []
        self.wait_seconds = 0.0  # time spent waiting for the device (bench/overhead.py)
        self.first_frame = 0  # where this run started (> 0 when resumed from a checkpoint)
        self.interrupted = False  # run_frames stopped early (stop() said so)
        self.seconds = 0.0  # wall time of the frames run so far (summaries: frames/s)
        self._sources_uploaded = False
        self._owned: list = []  # buffers and command lists made for this build (close())
        self.closed = False
        self.build_nodes()
        self._check_memory()
        self._allocate()
        self._record()

    def close(self) -> None:
        """Free this build's buffers and command lists now, not when the device closes (a
        Denoiser meeting many image sizes would otherwise hold them all); the device and its
        kernels, which other builds share, stay. The build cannot run afterwards."""
        if self.closed:
            return
        self.finish()
        self.device.release(self._owned)
        self._owned = []
        self.closed = True

    def sources_changed(self) -> None:
        """A source's host data changed (same sizes): upload the sources at the next frame."""
        self._sources_uploaded = False

    # -- hooks' helpers
    def resolve(self, filename: str) -> Path:
        """A file named in a cfg: `pkg:<package>/<path>` (inside an installed Python package),
        absolute, next to the cfg, or in the working directory."""
        return resolve_name(filename, self._near_cfg)

    def _near_cfg(self, filename: str) -> Path:
        path = Path(filename).expanduser()
        if path.is_absolute():
            return path
        cfg = getattr(self.graph, "cfg_path", None)
        if cfg is not None:
            near = Path(cfg).resolve().parent / path
            if near.exists():
                return near
        return Path.cwd() / path

    # -- frames
    def _frame_lists(self) -> None:
        """Per-frame work lists, looked up once (host time per frame matters: bench/overhead.py)."""
        self._param_mods = [m for m in self.active if id(m) in self.params]
        self._keyframes = bool(getattr(self.graph, "has_keyframes", None)
                               and self.graph.has_keyframes())

    def run_frame(self, frame: int, download: bool = True, wait: bool = True) -> None:
        """Run one frame. wait=False returns once it is submitted (without download): the
        next frame's host work overlaps it, at most FRAME_LISTS frames are in flight, and
        anything that reads or writes device data waits for them first (finish())."""
        if self.closed:
            raise GraphError("this build was closed; build the graph again to run it")
        self.frame = frame
        if not hasattr(self, "_param_mods"):
            self._frame_lists()
        if self._keyframes:
            self.graph.apply_keyframes(frame)
        for m in self._param_mods:  # params may change between frames (keyframes, gui, tools)
            buf, last = self.params[id(m)]
            blob = m.param_blob()  # the same object until a value changes (store)
            if blob is not last:
                self.finish()  # the frames in flight read the params as they were
                buf.view()[: len(blob)] = np.frombuffer(blob, np.uint8)
                self.params[id(m)] = (buf, blob)
        if frame == 0 or not self._sources_uploaded:  # a resumed run starts at frame k > 0
            self.finish()
            self.upload_sources(only_streaming=False)
            self._sources_uploaded = True
        elif self.streaming:
            self.finish()
            self.upload_sources(only_streaming=True)
        k = frame % len(self.commands)
        cl = self.frame_list(frame)
        self.wait_for(self._last[k])  # the frame FRAME_LISTS back (it used slot k) is done
        self._last[k] = cl
        slot = self.global_slots[k].view(np.int32)
        slot[0] = frame
        slot[1] = self.frames
        cl.submit()
        if wait:
            self.finish()
        if download:
            self.download_sinks()  # (it waits for the frame itself)

    def run_frames(self, start: int, end: int, last_frame_only: bool = False,
                   each_frame=(), stop=None, sync=None, write_sinks: bool = True) -> None:
        """Frames start..end-1; the sinks are written after each (only after the last one
        with last_frame_only; never with write_sinks False). each_frame: callbacks (build, f)
        after each frame. stop() -> bool is asked after each but the last: True ends the run
        there (a signal arrived), with the sinks written and `interrupted` set.

        Where nothing needs the host between frames, BATCH frames go in one submission
        (batch_list): sinks only after the last frame, no keyframes, no nodes of `due` due,
        and sync(f) -> bool false for all but the batch's last frame f. sync names the frames
        after which a callback needs that frame's own state (a checkpoint); None: every frame
        when there are callbacks, else none. The callbacks of a batch's frames run after it
        is submitted, and stop() is asked after each batch."""
        t0 = time.perf_counter()
        if sync is None:
            sync = (lambda f: True) if each_frame else (lambda f: False)
        batches = 0
        f = start
        while f < end:
            if self._batch_fits(f, end, last_frame_only, sync):
                self._run_batch(f, batches % 2)
                batches += 1
                last = f + BATCH - 1
                frames = range(f, f + BATCH)
            else:
                last = f
                frames = (f,)
                self.run_frame(f, download=write_sinks and (f == end - 1 or not last_frame_only),
                               wait=False)
            for g in frames:
                for callback in each_frame:
                    callback(self, g)
            f = last + 1
            if f < end and stop is not None and stop():
                self.interrupted = True
                if last_frame_only and write_sinks:
                    self.download_sinks()
                break
        self.finish()
        self.seconds += time.perf_counter() - t0

    def _batch_fits(self, f: int, end: int, last_frame_only: bool, sync) -> bool:
        if f % 2 or f + BATCH > end - 1 or not last_frame_only or not self._sources_uploaded:
            return False
        if not hasattr(self, "_param_mods"):
            self._frame_lists()
        if self._keyframes or any(sync(g) for g in range(f, f + BATCH - 1)):
            return False
        if any(n.due(g, self.frames) for n in self._due for g in range(f, f + BATCH)):
            return False
        if any(m.param_blob() is not self.params[id(m)][1] for m in self._param_mods):
            return False  # run_frame uploads the changed params first
        return self.batch_list(0) is not None

    def _run_batch(self, f: int, k: int) -> None:
        """Frames f .. f + BATCH - 1 in batch list k (f even)."""
        cl, slots = self.batch_list(k)
        self.wait_for(cl)
        for j, slot in enumerate(slots):
            view = slot.view(np.int32)
            view[0] = f + j
            view[1] = self.frames
        cl.submit()
        self.frame = f + BATCH - 1

