"""One run of a graph on a device: `Build`, the frame loop over four stages.

`Build(graph, device)` makes its stages in order, each from what the ones before it made:

    plan     NodeGraph (nodes.py): the module graph -> active modules, ROI passes, nodes,
             wiring, `schedule`; the module hooks run here (with `context`)
    memory   Buffers (buffers.py): the schedule on the device -> the memory check, `buffers`,
             staging, params, global uniforms
    program  Program (recording.py): the schedule and the memory -> kernels compiled and
             checked, command lists recorded once per buffer parity, profiling
    io       Transfers (transfers.py): the schedule, memory and program -> sources uploaded,
             sinks downloaded to their write_sink hooks

This file holds what ties them: the frame counters, the hooks' view of the run (`context`,
pipeline/context.py) and the frame loop. No stage knows the frame
counter; the loop passes the frame (and `frames`) to them. Programs make a Build through
`vkgraph.Session` (vkgraph/api.py), its one owner. `run_frame(f)` costs a few small host
writes, one submit and one fence wait.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from .buffers import Buffers
from .context import HookContext
from .errors import GraphError
from .nodes import Node, NodeGraph
from .recording import BATCH, Program
from .transfers import Transfers
from .vk import Device

log = logging.getLogger("vkgraph")


class Build:
    """Everything one run of a graph needs on the device: its stages `plan`, `memory`,
    `program` and `io`, and the frame loop."""

    def __init__(self, graph, device: Device, profile: bool = False, transient: bool = False):
        self.graph = graph
        self.device = device
        self.frame = 0
        self.frames = max(1, int(graph.frames))
        self.first_frame = 0  # where this run started (> 0 when resumed from a checkpoint)
        self.interrupted = False  # run_frames stopped early (stop() said so)
        self.seconds = 0.0  # wall time of the frames run so far (summaries: frames/s)
        self._sources_uploaded = False
        self._owned: list = []  # buffers and command lists the stages made (close())
        self.closed = False
        self.context = HookContext(self)  # what hooks get as `graph`, from the plan on
        self.plan = NodeGraph(graph, self.context)
        self.plan.build_nodes()
        schedule = self.plan.schedule
        self.memory = Buffers(schedule, device, self._owned, transient)
        self.program = Program(schedule, self.memory, device, getattr(graph, "registry", None),
                               self.context, profile, self._owned)
        self.io = Transfers(schedule, self.memory, self.program, device, self.context)

    @property
    def active(self) -> list:
        """The plan's active modules, writers before readers."""
        return self.plan.active

    def close(self) -> None:
        """Free this build's buffers and command lists now, not when the device closes (a
        Denoiser meeting many image sizes would otherwise hold them all); the device and its
        kernels, which other builds share, stay. The build cannot run afterwards."""
        if self.closed:
            return
        self.program.finish()
        self.device.release(list(self._owned))
        self._owned.clear()
        self.closed = True

    def sources_changed(self) -> None:
        """A source's host data changed (same sizes): upload the sources at the next frame."""
        self._sources_uploaded = False

    # -- a node's data in the current frame (tools, tests, state hooks)
    def buffer(self, node: Node, conn: str, parity: int | None = None):
        """The buffer a node connector reads or writes (parity: frame % 2 by default)."""
        return self.memory.buffer(node, conn, self.frame % 2 if parity is None else parity)

    def read(self, node: Node, conn: str) -> np.ndarray:
        """Download a node connector's current data (after the frame ran)."""
        self.program.finish()
        return self.memory.read(node, conn, self.frame % 2)

    def upload(self, node: Node, conn: str, array: np.ndarray) -> None:
        """Put `array` into the buffer a node connector writes (this frame's parity)."""
        self.program.finish()
        self.memory.upload(node, conn, array, self.frame % 2)

    def download_sinks(self) -> None:
        """The current frame's sinks handed to their write_sink hooks."""
        self.io.download_sinks(self.frame)

    def run_upto(self, target: Node, stop: Node | None = None) -> None:
        """Run `target` and what it reads from again for the current frame (Program.run_upto)."""
        self.program.run_upto(self.frame, target, stop)

    def timings(self) -> list[tuple[str, float]]:
        """(node label, GPU milliseconds) of the current frame's dispatches (profile=True)."""
        return self.program.timings(self.frame)

    def gpu_span(self) -> float:
        """GPU milliseconds of the current frame, first dispatch start to last end."""
        return self.program.gpu_span(self.frame)

    # -- frames
    def _frame_lists(self) -> None:
        """Per-frame work lists, looked up once (host time per frame matters: bench/overhead.py)."""
        self._param_mods = [m for m in self.plan.active if id(m) in self.memory.params]
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
        program = self.program
        for m in self._param_mods:  # params may change between frames (keyframes, gui, tools)
            blob = m.param_blob()  # the same object until a value changes (store)
            if blob is not self.memory.params[id(m)][1]:
                program.finish()  # the frames in flight read the params as they were
                self.memory.set_params(m, blob)
        if frame == 0 or not self._sources_uploaded:  # a resumed run starts at frame k > 0
            program.finish()
            self.io.upload_sources(only_streaming=False)
            self._sources_uploaded = True
        elif program.streaming:
            program.finish()
            self.io.upload_sources(only_streaming=True)
        program.submit(frame, self.frames)
        if wait:
            program.finish()
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
        self.program.finish()
        self.seconds += time.perf_counter() - t0

    def _batch_fits(self, f: int, end: int, last_frame_only: bool, sync) -> bool:
        if f % 2 or f + BATCH > end - 1 or not last_frame_only or not self._sources_uploaded:
            return False
        if not hasattr(self, "_param_mods"):
            self._frame_lists()
        if self._keyframes or any(sync(g) for g in range(f, f + BATCH - 1)):
            return False
        if self.program.any_due(range(f, f + BATCH), self.frames):
            return False
        if any(m.param_blob() is not self.memory.params[id(m)][1] for m in self._param_mods):
            return False  # run_frame uploads the changed params first
        return self.program.batch_list(0) is not None

    def _run_batch(self, f: int, k: int) -> None:
        """Frames f .. f + BATCH - 1 in batch list k (f even)."""
        self.program.submit_batch(f, k, self.frames)
        self.frame = f + BATCH - 1

