"""A build's memory: the memory check before allocation, one buffer per node output (two
for one read through a feedback edge), the global uniform, node info and params buffers, the
host staging buffers of sources and sinks, and which buffer a node connector means for a
buffer parity.

A transient build (`Session(..., transient=True)`: one image in, its result out, as
`vkgraph denoise` runs a network) lets node outputs share memory where their lifetimes in
the frame do not overlap: an output lives from its node to its last reader in the
schedule. Kept apart: the outputs of sources (uploaded once, read every frame), of nodes
not due every frame, of CLEAR outputs (cleared at the frame's start), of outputs read
through a feedback edge or by a sink (downloaded after the frame). Two outputs that share
memory are one buffer, so the recording's barriers (recording.Hazards) order the second
writer after the first one's readers. Only sinks' data is defined after a frame; a kernel
of such a build must write its outputs whole every frame (none may rely on zeros or on
its own last frame), which is the caller's promise.
"""

from __future__ import annotations

import numpy as np

from .errors import GraphError
from .formats import copied
from .module import CLEAR, FORMAT_DTYPE, Connector
from .nodes import Node

FRAME_LISTS = 2  # command lists of the frames, used in turn: frames in flight at most


class Buffers:
    """Memory stage of Build (pipeline/runner.py), made from the plan's `schedule` on
    `device`: checks that the buffers fit, then allocates `buffers`, `staging`, `params`,
    `global_slots` / `global_bufs`, `zeros` and `node_info`. Everything it allocates goes
    into `owned` (the build frees that list when it closes; the caller's list). It knows no
    frame: `buffer()` takes the parity (frame % 2), and nothing here waits for the device
    (the program's `finish` comes first where a frame may still run)."""

    def __init__(self, schedule: list[Node], device, owned: list, transient: bool = False):
        self.schedule = schedule
        self.device = device
        self.owned = owned
        self.buffers: dict[tuple[int, str], list] = {}  # (id(node), conn) -> [buf] or [b0, b1]
        self.staging: dict[int, object] = {}  # id(node) -> host buffer of a source or sink
        self.params: dict[int, tuple] = {}  # id(module) -> (buffer, last blob)
        self.node_info: dict[int, object] = {}  # id(node) -> (wd, ht, nchan, 0) per connector
        # transient: (id(node), conn) -> index into self.shared_sizes (the module docstring)
        self.shared, self.shared_sizes = self._share() if transient else ({}, [])
        self._check_memory()
        self._allocate()

    def buffer(self, node: Node, conn: str, parity: int):
        """The buffer a node connector reads or writes in a frame of this parity."""
        c = node.connector(conn)
        if c.is_input:
            if c.source is None:  # an optional input left open
                return self.zeros
            src, sconn = c.source
            bufs = self.buffers[(id(src), sconn)]
            p = (parity + 1) % 2 if c.feedback else parity
            return bufs[p % len(bufs)]
        bufs = self.buffers[(id(node), conn)]
        return bufs[parity % len(bufs)]

    def read(self, node: Node, conn: str, parity: int) -> np.ndarray:
        """A node connector's data (no frame may be running)."""
        return shape(node.connector(conn), self.buffer(node, conn, parity).download(np.uint8))

    def upload(self, node: Node, conn: str, array: np.ndarray, parity: int) -> None:
        """Put `array` into the buffer a node connector writes (no frame may be running)."""
        self.buffer(node, conn, parity).upload(array)

    def set_params(self, module, blob: bytes) -> None:
        """A module's params block changed: write it (no frame may be reading it)."""
        buf, _ = self.params[id(module)]
        buf.view()[: len(blob)] = np.frombuffer(blob, np.uint8)
        self.params[id(module)] = (buf, blob)

    def host_mapped(self) -> bool:
        """Does the host map a buffer the kernels write (CPU drivers)?"""
        return any(b.mapped is not None for bufs in self.buffers.values() for b in bufs)

    def new(self, nbytes: int, host: bool = False, near: bool = False, zero: bool = True,
            cached: bool = False):
        """A buffer of this build (freed with it); zero=False: not zeroed, cached=True:
        in memory the host reads quickly (Buffer's)."""
        buf = self.device.buffer(nbytes, host, near, zero, cached)
        self.owned.append(buf)
        return buf

    # -- allocation
    def _outputs(self):
        for node in self.schedule:
            for c in node.connectors:
                if c.is_output:
                    yield node, c

    def _share(self) -> tuple[dict[tuple[int, str], int], list[int]]:
        """Which outputs of a transient build share memory: (id(node), conn) -> slot, and
        each slot's size (its largest output). Walking the schedule, an output takes the
        smallest free slot that holds it, else the largest free one (grown), else a new
        one; a slot is free again after the last reader of its output ran."""
        n = len(self.schedule)
        # an output's last reader (n: a sink's, kept to the end; an output read through a
        # feedback edge is double-buffered, never shared)
        last: dict[tuple[int, str], int] = {}
        for i, node in enumerate(self.schedule):
            for c in node.connectors:
                if c.is_input and c.source is not None:
                    key = (id(c.source[0]), c.source[1])
                    end = n if node.kernel is None else i
                    last[key] = max(last.get(key, -1), end)
        shared: dict[tuple[int, str], int] = {}
        sizes: list[int] = []
        live: list[tuple[int, int]] = []  # (last reader, slot)
        free: list[int] = []
        for i, node in enumerate(self.schedule):
            free += [slot for end, slot in live if end < i]
            live = [(end, slot) for end, slot in live if end >= i]
            if node.kernel is None or node.due is not None:
                continue
            for c in node.connectors:
                if not c.is_output or c.flags & CLEAR or self._double(node, c.name):
                    continue
                key, need = (id(node), c.name), c.nbytes()
                end = last.get(key, i)
                if end >= n:
                    continue
                fits = [s for s in free if sizes[s] >= need]
                if fits:
                    slot = min(fits, key=lambda s: sizes[s])
                elif free:
                    slot = max(free, key=lambda s: sizes[s])
                else:
                    slot = len(sizes)
                    sizes.append(0)
                if slot in free:
                    free.remove(slot)
                sizes[slot] = max(sizes[slot], need)
                shared[key] = slot
                live.append((end, slot))
        return shared, sizes

    def _check_memory(self) -> None:
        """Before anything is allocated: the buffers must fit the device's memory, and each
        one the largest range a storage buffer may bind (else a driver may fail or compute
        garbage). The error names the largest buffers."""
        sizes = []
        total = sum(self.shared_sizes)  # the shared outputs' memory, then every other's
        for node, c in self._outputs():
            n = 2 if self._double(node, c.name) else 1
            sizes.append((c.nbytes() * n, c.nbytes(),
                          f"{node.label}:{c.name} {c.roi.wd}x{c.roi.ht}"))
            if (id(node), c.name) not in self.shared:
                total += c.nbytes() * n
        sizes.sort(key=lambda s: s[:2], reverse=True)
        top = ", ".join(f"{name} ({s / 2**20:.0f} MiB)" for s, _, name in sizes[:3])
        info = self.device.info
        budget = info.memory_mib << 20
        if budget and total > budget:  # the graph is too big for the device: bad input
            raise GraphError(f"the graph needs {total / 2**30:.2f} GiB of buffers but "
                             f"{info.name} has {budget / 2**30:.2f} GiB; largest: {top}")
        limit = getattr(info, "max_storage_range", 0)
        big = [(one, name) for _, one, name in sizes if limit and one > limit]
        if big:
            one, name = max(big)
            raise GraphError(f"buffer {name} needs {one / 2**20:.0f} MiB but a storage "
                             f"buffer on {info.name} may span at most {limit / 2**20:.0f} MiB "
                             f"(use a smaller input); largest: {top}")

    def _double(self, node: Node, conn: str) -> bool:
        return any(c.feedback and c.source is not None and c.source[0] is node
                   and c.source[1] == conn for n in self.schedule for c in n.connectors)

    def _allocate(self) -> None:
        # the global uniform (frame, frames), one per command list, so a frame can be
        # submitted while the one before still runs: the host writes the list's slot; where
        # the slot is device-local (a GPU's host-visible video memory, or a CPU driver) the
        # list's kernels read it there, else the list first copies it to a device buffer
        self.global_slots = [self.new(16, host=True, near=True) for _ in range(FRAME_LISTS)]
        self.global_direct = all(s.device_local for s in self.global_slots)
        self.global_bufs = (self.global_slots if self.global_direct
                            else [self.new(16) for _ in range(FRAME_LISTS)])
        self.zeros = self.new(16)
        slots = [self.new(size, zero=False) for size in self.shared_sizes]
        for node, c in self._outputs():
            key = (id(node), c.name)
            if key in self.shared:
                self.buffers[key] = [slots[self.shared[key]]]
                continue
            n = 2 if self._double(node, c.name) else 1
            self.buffers[key] = [self.new(c.nbytes(), zero=False) for _ in range(n)]
        # the outputs start zero, all cleared in one submission (a U-Net's dozens of
        # buffers: one wait instead of one each); but a transient build's shared memory,
        # which its kernels write whole before any reads it (the module docstring) and
        # which holds another output's numbers once the frame is under way anyway (on a
        # CPU driver zeroing is a pass over all of it: a 1 MP U-Net tile's 1 GB, 0.9 s)
        shared = {id(b) for b in slots}
        unique = {id(b): b for bufs in self.buffers.values() for b in bufs
                  if id(b) not in shared}
        self.device.zero_all(list(unique.values()))
        for node in self.schedule:
            if node.kernel is None:
                c0 = node.connectors[0]
                # not zeroed: a source's is written whole before it is copied, a sink's
                # copied into whole before the host reads it (a sink's: in memory the
                # host's caches hold, where the driver has such memory: Buffer's cached)
                self.staging[id(node)] = self.new(c0.nbytes(), host=True, zero=False,
                                                  cached=node.is_sink)
        for node in self.schedule:
            if node.kernel is None:
                continue
            info = self.new(16 * max(1, len(node.connectors)), host=True)
            info.view(np.int32)[: 4 * len(node.connectors)] = np.array(
                [[c.roi.wd, c.roi.ht, c.nchan, 0] for c in node.connectors], np.int32).ravel()
            self.node_info[id(node)] = info
            m = node.module
            if id(m) not in self.params:
                blob = m.param_blob()
                buf = self.new(len(blob), host=True)
                buf.view()[: len(blob)] = np.frombuffer(blob, np.uint8)
                self.params[id(m)] = (buf, blob)


def shape(c: Connector, raw: np.ndarray) -> np.ndarray:
    """A connector's bytes as numpy, copied out of `raw` (a staging buffer the next frame
    writes again): a storage buffer's elements (in its format), or an image as (ht, wd,
    nchan) float32. The copy runs a band of rows a thread (copied: a band of the raw
    path's 58 MB, 7 ms on one core of an H100 machine)."""
    if c.is_ssbo:
        src = raw.view(FORMAT_DTYPE.get(c.format, np.float32))[:c.roi.wd * c.roi.ht]
        src = src.reshape(c.roi.ht, c.roi.wd)  # (rows, for the threads)
    else:
        n = c.roi.wd * c.roi.ht * c.nchan
        src = raw.view(np.float32)[:n].reshape(c.roi.ht, c.roi.wd, c.nchan)
    out = copied(src)
    return out.reshape(-1) if c.is_ssbo else out
