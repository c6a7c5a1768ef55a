"""A build's host I/O: sources' data checked and uploaded (once, or to their staging every
frame for the streaming ones), sinks' data downloaded and handed to their write_sink hooks.
"""

from __future__ import annotations

import numpy as np

from .buffers import Buffers, shape
from .errors import GraphError, RuntimeFailure
from .module import FORMAT_DTYPE, Connector
from .nodes import Node
from .recording import Program


class Transfers:
    """Host I/O stage of Build (pipeline/runner.py): between frames, the sources of the plan's
    `schedule` uploaded and its sinks downloaded through the host staging buffers of `memory`,
    calling the modules' read_source and write_sink hooks with `context`. `program` says
    which sources stream (copied by the frame lists themselves), records the sinks' copies
    and waits for the frames in flight."""

    def __init__(self, schedule: list[Node], memory: Buffers, program: Program, device,
                 context):
        self.schedule = schedule
        self.memory = memory
        self.program = program
        self.device = device
        self.context = context

    def upload_sources(self, only_streaming: bool) -> None:
        """Every source's data (only_streaming: those the frames copy themselves) from its
        read_source hook into its staging buffer, and where the frames do not copy it, into
        its buffers (no frame may be running)."""
        for node in self.schedule:
            if node.kernel is not None or not node.is_source:
                continue
            streaming = node in self.program.streaming
            if only_streaming and not streaming:
                continue
            c0 = node.connectors[0]
            hook = node.module.cls.hook("read_source")
            if hook is None:
                raise RuntimeFailure(f"source module {node.module.name} has no read_source")
            data = hook(self.context, node.module, c0)
            data = self._check_source(node, c0, data)
            staging = self.memory.staging[id(node)]
            staging.view()[: data.nbytes] = data.view(np.uint8).reshape(-1)
            if not streaming:
                for buf in self.memory.buffers[(id(node), c0.name)]:
                    self.device.oneshot().copy_now(staging, buf, data.nbytes)

    @staticmethod
    def _as_format(node: Node, c: Connector, data: np.ndarray) -> np.ndarray:
        """A source's storage-buffer data in the connector's format; a float conversion
        that would turn a finite value into inf (f32 weights beyond f16's 65504) is refused
        rather than uploaded."""
        dtype = np.dtype(FORMAT_DTYPE.get(c.format, np.float32))
        if data.dtype == dtype:
            return np.ascontiguousarray(data).ravel()
        with np.errstate(over="ignore", invalid="ignore"):
            out = np.ascontiguousarray(data, dtype).ravel()
        if dtype.kind == "f" and data.dtype.kind == "f":
            lost = np.isfinite(data.ravel()) & ~np.isfinite(out)
            if lost.any():
                i = int(np.flatnonzero(lost)[0])
                raise GraphError(f"{node.module}: element {i} of '{c.name}' is "
                                 f"{data.ravel()[i]:g}, beyond what {c.format} holds "
                                 f"(the reader wants {c.format})")
        return out

    def _check_source(self, node: Node, c: Connector, data: np.ndarray) -> np.ndarray:
        if c.is_ssbo:
            data = self._as_format(node, c, np.asarray(data))
            want = c.roi.wd * c.roi.ht
            if data.size != want:
                raise GraphError(f"{node.module}: source gave {data.size} elements, "
                                 f"expected {want}")
            return data
        data = np.asarray(data, np.float32)
        if data.ndim == 2:
            data = data[:, :, None]
        h, w, ch = data.shape
        if (w, h) != (c.roi.wd, c.roi.ht):
            raise GraphError(f"{node.module}: image is {w}x{h}, but the graph was built for "
                             f"{c.roi.wd}x{c.roi.ht} (all frames of a sequence must have "
                             "the same size)")
        if ch != c.nchan:  # pad rgb to rgba (alpha 1) or cut
            out = np.ones((h, w, c.nchan), np.float32)
            k = min(ch, c.nchan)
            out[:, :, :k] = data[:, :, :k]
            if ch == 1 and c.nchan >= 3:
                out[:, :, :3] = data[:, :, :1]
            data = out
        return np.ascontiguousarray(data)

    def download_sinks(self, frame: int) -> None:
        """The sink data of `frame` (the last one run) copied to the host and handed to the
        write_sink hooks."""
        self.program.finish()
        copies = self.program.sink_list(frame)
        if copies is not None:
            copies.run()
        for node in self.schedule:
            if node.kernel is not None or not node.is_sink:
                continue
            hook = node.module.cls.hook("write_sink")
            if hook is None:
                continue  # display in the cli: replaced by writers beforehand
            c0 = node.connectors[0]
            raw = self.memory.staging[id(node)].view(np.uint8)
            hook(self.context, node.module, c0, shape(c0, raw))
