"""A build's program: kernels compiled and checked once, one command list per buffer parity
(the streaming sources' copies, then every scheduled node) recorded once and submitted each
frame, the batches, the sinks' copies, run_upto's partial lists, and profiling.
"""

from __future__ import annotations

import os
import time

import numpy as np

from .buffers import FRAME_LISTS, Buffers
from .kernels import (
    check_bindings,
    check_params,
    check_readonly,
    kernel_spirv,
    pack_push,
    shader_headers,
)
from .module import CLEAR
from .nodes import Node

BATCH = 8  # frames per submission in run_frames' batches (even: parities 0, 1, 0, ...)


def all_barriers() -> bool:
    """VKGRAPH_BARRIERS=all: the barrier layout before Hazards (a barrier after every node,
    frame lists ending with a barrier to the host), for comparisons."""
    return os.environ.get("VKGRAPH_BARRIERS", "") == "all"


class Hazards:
    """The buffers a command list has written and read since its last barrier. An operation
    gets a barrier before it only where it reads or writes a buffer written since then, or
    writes one read since then; independent nodes in a row (mlp-t's preview beside its
    training kernel, its loss sum beside its weight-gradient products) then run side by side.
    Every buffer is its own memory (no aliasing), so a buffer's identity is its memory.
    VKGRAPH_BARRIERS=all puts a barrier after every node (as before this tracking; for
    comparisons)."""

    def __init__(self, cl):
        self.cl = cl
        self.every = all_barriers()
        self.written: set[int] = set()
        self.read: set[int] = set()

    def access(self, reads=(), writes=()) -> None:
        r, w = {id(b) for b in reads}, {id(b) for b in writes}
        if self.every or (r | w) & self.written or w & self.read:
            self.cl.barrier()
            self.written.clear()
            self.read.clear()
        self.read |= r
        self.written |= w


class Program:
    """Program stage of Build (pipeline/runner.py), made from the plan's `schedule`, the
    allocated buffers (`memory`, a Buffers) and `device`: `kernels` (pipeline and push
    constants per node), `streaming` (the sources uploaded every frame: their `source_due`
    hook, asked through `context`), and `commands` (one list per parity; `lean` without the
    nodes that are not due every frame). `registry` gives the user's kernel folders and
    shader headers; `profile` puts GPU timestamps after each dispatch. Its command lists go
    into `owned` (the build frees that list when it closes). It knows no frame counter: the
    runner passes the frame (and the run's frame count) to what depends on it."""

    def __init__(self, schedule: list[Node], memory: Buffers, device, registry, context,
                 profile: bool, owned: list):
        self.schedule = schedule
        self.memory = memory
        self.device = device
        self.registry = registry
        self.profile = profile
        self.owned = owned
        self.wait_seconds = 0.0  # time spent waiting for the device (bench/overhead.py)
        self._partial: dict = {}  # run_upto's command lists
        self.kernels = self._compile()
        parities = 2 if any(len(b) == 2 for b in memory.buffers.values()) else 1
        assert FRAME_LISTS % parities == 0  # list k runs the frames of parity k % parities
        self.streaming: list[Node] = []
        for node in schedule:
            if node.kernel is None and node.is_source:
                hook = node.module.cls.hook("source_due")
                if hook and hook(context, node.module):
                    self.streaming.append(node)
        self._record_frames()

    def _compile(self) -> dict:
        """(kernel, packed push constants) per node with a kernel, checked against its
        connectors and params."""
        dirs = list(getattr(self.registry, "dirs", ()))
        kernels = {}
        for node in self.schedule:
            if node.kernel is None:
                continue
            cls = node.module.cls
            spirv = kernel_spirv(node.shader, node.kernel, node.defines, dirs,
                                 cls.params, str(cls.folder / "params"),
                                 shader_headers(self.registry, node.shader))
            check_bindings(node, spirv)
            check_readonly(node, spirv)
            check_params(f"{node.shader}/{node.kernel}.comp", cls.params, spirv)
            push = pack_push(node.push)
            kernels[id(node)] = (self.device.kernel(spirv, len(node.connectors), len(push),
                                                    node.local), push)
        return kernels

    def _commands(self, timestamps: int = 0):
        """A command list of this build (freed with it)."""
        cl = self.device.commands(timestamps)
        self.owned.append(cl)
        return cl

    # -- waiting
    def finish(self) -> None:
        """Wait for the frames in flight (before the host reads or writes device data)."""
        for cl in self.commands + self.lean:
            self.wait_for(cl)
        for cl, _ in getattr(self, "_batches", ()):
            self.wait_for(cl)

    def wait_for(self, cl) -> None:
        """Wait for a frame's command list if it is in flight, counted in wait_seconds."""
        if cl.pending:
            t = time.perf_counter()
            cl.wait()
            self.wait_seconds += time.perf_counter() - t

    # -- the frame lists
    def _record_frames(self) -> None:
        """The frame lists: `commands` with every node, and where some nodes run only on the
        frames they are due (Node.due), `lean` without those (frame_list picks per frame)."""
        stamps = len(self.schedule) if self.profile else 0
        self.commands = self._command_lists(FRAME_LISTS, self.schedule, self.streaming,
                                            stamps, frame=True)
        self._due = [n for n in self.schedule if n.due is not None]
        self._always = [n for n in self.schedule if n.due is None]
        self.lean = (self._command_lists(FRAME_LISTS, self._always, self.streaming, stamps,
                                         frame=True) if self._due else [])
        self._last = list(self.commands)  # the list each parity last ran

    def any_due(self, frames, count: int) -> bool:
        """Is a node that runs only on some frames (Node.due) due on one of `frames`, in a run
        of `count` frames?"""
        return any(n.due(f, count) for n in self._due for f in frames)

    def frame_list(self, frame: int, count: int):
        """The command list for a frame of a run of `count` frames: the lean one when no node
        of `due` is due."""
        k = frame % len(self.commands)
        if self.lean and not self.any_due((frame,), count):
            return self.lean[k]
        return self.commands[k]

    def submit(self, frame: int, count: int) -> None:
        """Submit a frame (of a run of `count`): its list waits for the frame FRAME_LISTS back
        (which used the same list slot and global uniform), then the slot says (frame, count)."""
        k = frame % len(self.commands)
        cl = self.frame_list(frame, count)
        self.wait_for(self._last[k])
        self._last[k] = cl
        slot = self.memory.global_slots[k].view(np.int32)
        slot[0] = frame
        slot[1] = count
        cl.submit()

    def submit_batch(self, first: int, k: int, count: int) -> None:
        """Frames first .. first + BATCH - 1 in batch list k (first even)."""
        cl, slots = self.batch_list(k)
        self.wait_for(cl)
        for j, slot in enumerate(slots):
            view = slot.view(np.int32)
            view[0] = first + j
            view[1] = count
        cl.submit()

    def batch_list(self, k: int):
        """(command list, host slots) k of the two that run BATCH frames in one submission,
        the first one even (buffer parities 0, 1, 0, ...), each with its own global uniform
        read in place: recorded on first use; None where batches cannot run (the global
        uniform is not device-local, streaming sources, timestamps). Lean: without the nodes
        of `due` (the runner uses a batch only where none is due)."""
        if not hasattr(self, "_batches"):
            self._batches = []
            if self.memory.global_direct and not self.streaming and not self.profile:
                for _ in range(2):
                    slots = [self.memory.new(16, host=True, near=True) for _ in range(BATCH)]
                    cl = self._commands().begin()
                    for j in range(BATCH):
                        self._record_frame(cl, self._always, (), j % 2, slots[j])
                    self._batches.append((cl.end(host=self._host_reads_frames()), slots))
        return self._batches[k] if self._batches else None

    def _command_lists(self, n: int, nodes, streaming=(), timestamps: int = 0,
                       frame: bool = False) -> list:
        """n command lists, list k for the frames f with f % n == k: (frame=True: the list's
        global slot copied to its global uniform unless the kernels read the slot itself,
        global_direct) one frame of `nodes` (_record_frame: the frame before may still run
        when the list is submitted), with a barrier only where one is needed (Hazards).
        Sinks copy in download_sinks' own list."""
        lists = []
        for parity in range(n):
            cl = self._commands(timestamps=timestamps).begin()
            if frame and not self.memory.global_direct:
                cl.copy(self.memory.global_slots[parity], self.memory.global_bufs[parity], 16)
            self._record_frame(cl, nodes, streaming, parity, self.memory.global_bufs[parity])
            lists.append(cl.end(host=not frame or self._host_reads_frames()))
        return lists

    def _record_frame(self, cl, nodes, streaming, parity: int, glob) -> None:
        """One frame into `cl`: a barrier against what ran before (earlier submissions, or
        the frame before in a batch; run_upto's lists: frame lists may end without a barrier
        to the host), the streaming sources' copies and the CLEAR outputs' clears, a barrier,
        the nodes (global uniform `glob`)."""
        cl.barrier(first=True)
        for node in streaming:
            c0 = node.connectors[0]
            cl.copy(self.memory.staging[id(node)], self.memory.buffer(node, c0.name, parity),
                    c0.nbytes())
        for node in nodes:
            for c in node.connectors:
                if node.kernel is not None and c.is_output and c.flags & CLEAR:
                    cl.fill(self.memory.buffer(node, c.name, parity))
        cl.barrier()
        hazards = Hazards(cl)
        for node in nodes:
            if node.kernel is not None:
                self._record_node(cl, node, parity, hazards, glob)

    def _host_reads_frames(self) -> bool:
        """Does a frame list need its closing barrier to the host: where the host maps a
        buffer the kernels write (CPU drivers), or with VKGRAPH_BARRIERS=all. Else the host
        reads device data only through lists that open with a barrier (downloads, sinks)."""
        return all_barriers() or self.memory.host_mapped()

    def _record_node(self, cl, node: Node, parity: int, hazards: Hazards, glob) -> None:
        kernel, push = self.kernels[id(node)]
        set0 = [glob, self.memory.params[id(node.module)][0], self.memory.node_info[id(node)]]
        set1 = [self.memory.buffer(node, c.name, parity) for c in node.connectors]
        pairs = list(zip(set1, node.connectors, strict=True))
        hazards.access(reads=[b for b, c in pairs if c.is_input],
                       writes=[b for b, c in pairs if c.is_output or c.type == "modify"])
        cl.dispatch(kernel, set0, set1, push, kernel.groups(node.dispatch),
                    label=node.label if self.profile else None)

    def sink_list(self, parity: int):
        """The copies of the sinks that have a write_sink hook into their host staging
        buffers after a frame of this parity (recorded on first use), or None if there are
        none. Frames do not copy: only a frame whose sinks are written pays for it."""
        if not hasattr(self, "_sink_lists"):
            sinks = [node for node in self.schedule if node.kernel is None and node.is_sink
                     and node.module.cls.hook("write_sink") is not None]
            self._sink_lists = []
            for p in range(len(self.commands) if sinks else 0):
                cl = self._commands().begin()
                cl.barrier(first=True)  # after the frame's writes
                for node in sinks:
                    c0 = node.connectors[0]
                    staging = self.memory.staging[id(node)]
                    cl.copy(self.memory.buffer(node, c0.name, p), staging,
                            min(c0.nbytes(), staging.nbytes))
                self._sink_lists.append(cl.end())
        if not self._sink_lists:
            return None
        return self._sink_lists[parity % len(self._sink_lists)]

    def run_upto(self, frame: int, target: Node, stop: Node | None = None) -> None:
        """Run only `target` and the nodes it reads from, again for `frame`'s parity: not
        through feedback inputs, not `stop` nor what only `stop` reads. Sources keep what
        they last uploaded. For tools that probe one output many times with a changed
        buffer (the gradient check runs the forward up to the loss, without the backward
        and the optimiser). The command lists are recorded once per (target, stop)."""
        key = (id(target), id(stop))
        lists = self._partial.get(key)
        if lists is None:
            need, stack = set(), [target]
            while stack:
                n = stack.pop()
                if id(n) in need or n is stop:
                    continue
                need.add(id(n))
                stack += [c.source[0] for c in n.connectors
                          if c.is_input and c.source is not None and not c.feedback]
            nodes = [n for n in self.schedule if id(n) in need and n.kernel is not None]
            lists = self._partial[key] = self._command_lists(len(self.commands), nodes)
        self.finish()
        cl = lists[frame % len(lists)]
        cl.submit()
        cl.wait()

    def set_profile(self, on: bool) -> None:
        """Record the frame's lists again with (on) or without GPU timestamps. The state stays;
        the frames in flight finish first. (The timestamps after each dispatch keep nodes
        from running side by side on some GPUs: time frames without them, profile apart.)"""
        if bool(on) == self.profile:
            return
        self.finish()
        for cl in self.commands + self.lean:
            cl.destroy()
        self.profile = bool(on)
        self._record_frames()
        if hasattr(self, "_batches"):  # recorded again on use (none while profiling)
            for cl, slots in self._batches:
                cl.destroy()
                for slot in slots:
                    slot.destroy()
            del self._batches

    def timings(self, frame: int) -> list[tuple[str, float]]:
        """(node label, GPU milliseconds) of the dispatches of `frame`, the last one run
        (profile=True)."""
        self.finish()
        return self._last[frame % len(self._last)].timings()

    def gpu_span(self, frame: int) -> float:
        """GPU milliseconds from `frame`'s (the last one run) first dispatch start to its last end
        (profile=True; 0 without dispatches): less than the sum of timings() where nodes
        ran side by side."""
        self.finish()
        stamps = self._last[frame % len(self._last)].stamps()
        return max((end for _, _, end in stamps), default=0.0)
