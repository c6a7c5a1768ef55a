"""A build's buffers: the memory check before allocation, one buffer per node output (two
for one read through a feedback edge), the global uniform, node info and params buffers, the
host staging buffers of sources and sinks, and which buffer a node connector means in a frame.
"""

from __future__ import annotations

import time

import numpy as np

from .errors import GraphError
from .module import FORMAT_DTYPE, Connector
from .nodes import Node

FRAME_LISTS = 2  # command lists of the frames, used in turn: frames in flight at most


class Buffers:
    """Allocation stage of Build (pipeline/runner.py). Fills `buffers`, `staging`, `params`,
    `global_bufs`, `zeros` and `node_info` from the scheduled nodes (`schedule`) on `device`;
    `buffer()` picks a connector's buffer for the frame's parity (`frame`)."""

    def buffer(self, node: Node, conn: str, parity: int | None = None):
        """The buffer a node connector reads or writes (parity = frame % 2)."""
        c = node.connector(conn)
        if c.is_input:
            if c.source is None:  # an optional input left open
                return self.zeros
            src, sconn = c.source
            bufs = self.buffers[(id(src), sconn)]
            p = self.frame % 2 if parity is None else parity
            if c.feedback:
                p = (p + 1) % 2
            return bufs[p % len(bufs)]
        bufs = self.buffers[(id(node), conn)]
        p = self.frame % 2 if parity is None else parity
        return bufs[p % len(bufs)]

    def finish(self) -> None:
        """Wait for the frames in flight (before the host reads or writes device data)."""
        for cl in self.commands + getattr(self, "lean", []):
            self.wait_for(cl)
        for cl, _ in getattr(self, "_batches", ()):
            self.wait_for(cl)

    def wait_for(self, cl) -> None:
        """Wait for a frame's command list if it is in flight, counted in wait_seconds."""
        if cl.pending:
            t = time.perf_counter()
            cl.wait()
            self.wait_seconds += time.perf_counter() - t

    def upload(self, node: Node, conn: str, array: np.ndarray) -> None:
        """Put `array` into the buffer a node connector writes (this frame's parity)."""
        self.finish()
        self.buffer(node, conn).upload(array)

    def read(self, node: Node, conn: str) -> np.ndarray:
        """Download a node connector's current data (after the frame ran)."""
        self.finish()
        return self._shape(node.connector(conn), self.buffer(node, conn).download(np.uint8))

    def _shape(self, c: Connector, raw: np.ndarray) -> np.ndarray:
        if c.is_ssbo:
            dtype = FORMAT_DTYPE.get(c.format, np.float32)
            n = c.roi.wd * c.roi.ht
            return raw.view(dtype)[:n].copy()
        n = c.roi.wd * c.roi.ht * c.nchan
        return raw.view(np.float32)[:n].reshape(c.roi.ht, c.roi.wd, c.nchan).copy()

    # -- allocation
    def _outputs(self):
        for node in self.schedule:
            for c in node.connectors:
                if c.is_output:
                    yield node, c

    def _check_memory(self) -> None:
        """Before anything is allocated: the buffers must fit the device's memory, and each
        one the largest range a storage buffer may bind (else a driver may fail or compute
        garbage). The error names the largest buffers."""
        sizes = []
        for node, c in self._outputs():
            n = 2 if self._double(node, c.name) else 1
            sizes.append((c.nbytes() * n, c.nbytes(),
                          f"{node.label}:{c.name} {c.roi.wd}x{c.roi.ht}"))
        sizes.sort(key=lambda s: s[:2], reverse=True)
        top = ", ".join(f"{name} ({s / 2**20:.0f} MiB)" for s, _, name in sizes[:3])
        info = self.device.info
        total = sum(s for s, _, _ in sizes)
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

    # -- what this build owns on the device (close() frees it; shared kernels stay)
    def _buffer(self, nbytes: int, host: bool = False, near: bool = False):
        return self._keep(self.device.buffer(nbytes, host, near))

    def _commands(self, timestamps: int = 0):
        return self._keep(self.device.commands(timestamps))

    def _keep(self, child):
        self._owned.append(child)
        return child

    def _allocate(self) -> None:
        # the global uniform (frame, frames), one per command list, so a frame can be
        # submitted while the one before still runs: the host writes the list's slot; where
        # the slot is device-local (a GPU's host-visible video memory, or a CPU driver) the
        # list's kernels read it there, else the list first copies it to a device buffer
        self.global_slots = [self._buffer(16, host=True, near=True) for _ in range(FRAME_LISTS)]
        self.global_direct = all(s.device_local for s in self.global_slots)
        self.global_bufs = (self.global_slots if self.global_direct
                            else [self._buffer(16) for _ in range(FRAME_LISTS)])
        self.zeros = self._buffer(16)
        for node, c in self._outputs():
            n = 2 if self._double(node, c.name) else 1
            self.buffers[(id(node), c.name)] = [self._buffer(c.nbytes()) for _ in range(n)]
        for node in self.schedule:
            if node.kernel is None:
                c0 = node.connectors[0]
                self.staging[id(node)] = self._buffer(c0.nbytes(), host=True)
        self.node_info = {}
        for node in self.schedule:
            if node.kernel is None:
                continue
            info = self._buffer(16 * max(1, len(node.connectors)), host=True)
            info.view(np.int32)[: 4 * len(node.connectors)] = np.array(
                [[c.roi.wd, c.roi.ht, c.nchan, 0] for c in node.connectors], np.int32).ravel()
            self.node_info[id(node)] = info
            m = node.module
            if id(m) not in self.params:
                blob = m.param_blob()
                buf = self._buffer(len(blob), host=True)
                buf.view()[: len(blob)] = np.frombuffer(blob, np.uint8)
                self.params[id(m)] = (buf, blob)
