"""One run of a graph on a device: buffers, kernels, the recorded frame, the frame loop.

`Build(graph, device)` turns the module graph into nodes (pipeline/nodes.py), allocates one
buffer per node output (two for outputs read through a feedback edge), compiles the kernels
and records the frame once per buffer parity. `run_frame(f)` then costs a few small host
writes, one submit and one fence wait.
"""

from __future__ import annotations

import logging
import struct
import time
from pathlib import Path

import numpy as np

from .datasets import resolve_name
from .errors import GraphError, RuntimeFailure
from .module import CLEAR, FORMAT_DTYPE, Connector
from .nodes import Node, NodeGraph
from .paramblock import GENERATED, glsl_name, params_glsl
from .paramblock import check_params as check_param_scalars
from .vk import Device, compile_glsl, spirv_bindings, spirv_block_scalars

log = logging.getLogger("vkgraph")

ROOT = Path(__file__).resolve().parent.parent
SHADERS = ROOT / "shaders"


def pack_push(values) -> bytes:
    out = bytearray()
    for v in values:
        if isinstance(v, (bytes, bytearray)):
            out += v
        elif isinstance(v, (float, np.floating)):
            out += struct.pack("<f", float(v))
        else:
            out += struct.pack("<i", int(v))
    return bytes(out)


def kernel_file(shader: str, kernel: str, dirs=()) -> Path:
    """`<kernel>.comp` of shader folder `shader`: in each module directory of `dirs` (a user
    folder: `<dir>/<shader>/` or `<dir>/shaders/<shader>/`), then in the shipped `shaders/`."""
    name = f"{kernel}.comp"
    for d in dirs:
        d = Path(d)
        if d.resolve() == (SHADERS.parent / "modules").resolve():
            continue  # the shipped modules: their kernels are in shaders/
        for path in (d / shader / name, d / "shaders" / shader / name):
            if path.is_file():
                return path
    path = SHADERS / shader / name
    if not path.exists():
        raise RuntimeFailure(f"kernel {path} does not exist")
    return path


def compile_kernel(path: Path, defines: dict | None = None, params=(),
                   where: str = "params") -> bytes:
    """SPIR-V of a kernel file; `#include "..."` finds the generated `params.gen` (the block
    of `params`, the module's declared params: pipeline/paramblock.py), the shared
    shaders/include/ and the kernel's own folder. `where` names the params file in errors."""
    params = list(params)
    for p in params:
        if glsl_name(p.name) in (defines or {}):
            raise GraphError(f"param '{p.name}' has the name of a define of kernel "
                             f"{path.parent.name}/{path.name}", where=where)
    return compile_glsl(path, [SHADERS / "include", path.parent], defines,
                        {GENERATED: params_glsl(params, where)})


def kernel_spirv(shader: str, kernel: str, defines: dict | None = None, dirs=(), params=(),
                 where: str = "params") -> bytes:
    return compile_kernel(kernel_file(shader, kernel, dirs), defines, params, where)


SET0_BINDINGS = 3  # global uniform, the module's params, node info (shaders/include)


def check_bindings(node: Node, spirv: bytes) -> None:
    """Every buffer a kernel declares must be one the engine binds: set 0 bindings 0..2, set 1
    one per node connector. A binding past them would read as zeros and write nowhere (no
    error from the driver), so it is a GraphError naming the kernel and the binding."""
    n = len(node.connectors)
    for dset, binding in spirv_bindings(spirv):
        limit = SET0_BINDINGS if dset == 0 else n if dset == 1 else 0
        if binding >= limit:
            what = (f"node {node.label} has {n} connectors (bindings 0..{n - 1})"
                    if dset == 1 else "the engine binds set 0 bindings 0..2 and set 1 only"
                    if dset == 0 else "the engine binds sets 0 and 1 only")
            raise GraphError(f"kernel {node.shader}/{node.kernel}.comp declares set {dset} "
                             f"binding {binding}, but {what}")


def check_params(kernel: str, params, spirv: bytes) -> None:
    """The kernel's set 0 binding 1 block against the module's declared params: a member
    outside them or of another type (float read as int) is a GraphError naming both."""
    blob = sum(p.nbytes() for p in params)
    scalars = spirv_block_scalars(spirv, 0, 1, limit=blob)
    if scalars:
        check_param_scalars(kernel, scalars, list(params))


class Build(NodeGraph):
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
        self.build_nodes()
        self._check_memory()
        self._allocate()
        self._record()

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

    def upload(self, node: Node, conn: str, array: np.ndarray) -> None:
        """Put `array` into the buffer a node connector writes (this frame's parity)."""
        self.buffer(node, conn).upload(array)

    def read(self, node: Node, conn: str) -> np.ndarray:
        """Download a node connector's current data (after the frame ran)."""
        return self._shape(node.connector(conn), self.buffer(node, conn).download(np.uint8))

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

    def _allocate(self) -> None:
        dev = self.device
        self.global_buf = dev.buffer(16, host=True)
        self._global_view = self.global_buf.view(np.int32)
        self.zeros = dev.buffer(16)
        for node, c in self._outputs():
            n = 2 if self._double(node, c.name) else 1
            self.buffers[(id(node), c.name)] = [dev.buffer(c.nbytes()) for _ in range(n)]
        for node in self.schedule:
            if node.kernel is None:
                c0 = node.connectors[0]
                self.staging[id(node)] = dev.buffer(c0.nbytes(), host=True)
        self.node_info = {}
        for node in self.schedule:
            if node.kernel is None:
                continue
            info = dev.buffer(16 * max(1, len(node.connectors)), host=True)
            info.view(np.int32)[: 4 * len(node.connectors)] = np.array(
                [[c.roi.wd, c.roi.ht, c.nchan, 0] for c in node.connectors], np.int32).ravel()
            self.node_info[id(node)] = info
            m = node.module
            if id(m) not in self.params:
                blob = m.param_blob()
                buf = dev.buffer(len(blob), host=True)
                buf.view()[: len(blob)] = np.frombuffer(blob, np.uint8)
                self.params[id(m)] = (buf, blob)

    def _kernel_dirs(self) -> list[Path]:
        registry = getattr(self.graph, "registry", None)
        return list(getattr(registry, "dirs", ()))

    # -- recording
    def _record(self) -> None:
        dev = self.device
        kernels = {}
        for node in self.schedule:
            if node.kernel is None:
                continue
            cls = node.module.cls
            spirv = kernel_spirv(node.shader, node.kernel, node.defines, self._kernel_dirs(),
                                 cls.params, str(cls.folder / "params"))
            check_bindings(node, spirv)
            check_params(f"{node.shader}/{node.kernel}.comp", cls.params, spirv)
            push = pack_push(node.push)
            kernels[id(node)] = (dev.kernel(spirv, len(node.connectors), len(push), node.local),
                                 push)
        self.kernels = kernels
        parities = 2 if any(len(b) == 2 for b in self.buffers.values()) else 1
        for node in self.schedule:
            if node.kernel is None and node.is_source:
                hook = node.module.cls.hook("source_due")
                if hook and hook(self.context, node.module):
                    self.streaming.append(node)
        self.commands = self._command_lists(parities, self.schedule, self.streaming,
                                            len(self.schedule) if self.profile else 0)

    def _command_lists(self, parities: int, nodes, streaming=(), timestamps: int = 0) -> list:
        """One command list per frame parity: the streaming sources' copies, then `nodes`."""
        lists = []
        for parity in range(parities):
            cl = self.device.commands(timestamps=timestamps).begin()
            for node in streaming:
                c0 = node.connectors[0]
                cl.copy(self.staging[id(node)], self.buffer(node, c0.name, parity),
                        c0.nbytes())
            cl.barrier()
            for node in nodes:
                self._record_node(cl, node, parity)
            lists.append(cl.end())
        return lists

    def _record_node(self, cl, node: Node, parity: int) -> None:
        if node.kernel is None:
            if node.is_sink:
                c0 = node.connectors[0]
                cl.copy(self.buffer(node, c0.name, parity), self.staging[id(node)],
                        min(c0.nbytes(), self.staging[id(node)].nbytes))
            return
        cleared = False
        for c in node.connectors:
            if c.is_output and c.flags & CLEAR:
                cl.fill(self.buffer(node, c.name, parity))
                cleared = True
        if cleared:
            cl.barrier()
        kernel, push = self.kernels[id(node)]
        set0 = [self.global_buf, self.params[id(node.module)][0], self.node_info[id(node)]]
        set1 = [self.buffer(node, c.name, parity) for c in node.connectors]
        cl.dispatch(kernel, set0, set1, push, kernel.groups(node.dispatch),
                    label=node.label if self.profile else None)
        cl.barrier()

    # -- sources and sinks
    def _shape(self, c: Connector, raw: np.ndarray) -> np.ndarray:
        if c.is_ssbo:
            dtype = FORMAT_DTYPE.get(c.format, np.float32)
            n = c.roi.wd * c.roi.ht
            return raw.view(dtype)[:n].copy()
        n = c.roi.wd * c.roi.ht * c.nchan
        return raw.view(np.float32)[:n].reshape(c.roi.ht, c.roi.wd, c.nchan).copy()

    def upload_sources(self, only_streaming: bool) -> None:
        for node in self.schedule:
            if node.kernel is not None or not node.is_source:
                continue
            streaming = node in self.streaming
            if only_streaming and not streaming:
                continue
            c0 = node.connectors[0]
            hook = node.module.cls.hook("read_source")
            if hook is None:
                raise RuntimeFailure(f"source module {node.module.name} has no read_source")
            data = hook(self.context, node.module, c0)
            data = self._check_source(node, c0, data)
            staging = self.staging[id(node)]
            staging.view()[: data.nbytes] = data.view(np.uint8).reshape(-1)
            if not streaming:
                for buf in self.buffers[(id(node), c0.name)]:
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

    def download_sinks(self) -> None:
        for node in self.schedule:
            if node.kernel is not None or not node.is_sink:
                continue
            hook = node.module.cls.hook("write_sink")
            if hook is None:
                continue  # display in the cli: replaced by writers beforehand
            c0 = node.connectors[0]
            raw = self.staging[id(node)].view(np.uint8)
            hook(self.context, node.module, c0, self._shape(c0, raw))

    # -- frames
    def _frame_lists(self) -> None:
        """Per-frame work lists, looked up once (host time per frame matters: bench/overhead.py)."""
        self._param_mods = [m for m in self.active if id(m) in self.params]
        self._keyframes = bool(getattr(self.graph, "has_keyframes", None)
                               and self.graph.has_keyframes())

    def run_frame(self, frame: int, download: bool = True) -> None:
        self.frame = frame
        if not hasattr(self, "_param_mods"):
            self._frame_lists()
        if self._keyframes:
            self.graph.apply_keyframes(frame)
        for m in self._param_mods:  # params may change between frames (keyframes, gui, tools)
            buf, last = self.params[id(m)]
            blob = m.param_blob()
            if blob != last:
                buf.view()[: len(blob)] = np.frombuffer(blob, np.uint8)
                self.params[id(m)] = (buf, blob)
        if frame == 0 or not self._sources_uploaded:  # a resumed run starts at frame k > 0
            self.upload_sources(only_streaming=False)
            self._sources_uploaded = True
        elif self.streaming:
            self.upload_sources(only_streaming=True)
        g = self._global_view
        g[0] = frame
        g[1] = self.frames
        cl = self.commands[frame % len(self.commands)]
        cl.submit()
        t_wait = time.perf_counter()
        cl.wait()
        self.wait_seconds += time.perf_counter() - t_wait
        if download:
            self.download_sinks()

    def run_frames(self, start: int, end: int, last_frame_only: bool = False,
                   each_frame=(), stop=None) -> None:
        """Frames start..end-1; the sinks are written after each (only after the last one
        with last_frame_only). each_frame: callbacks (build, f) after each frame. stop() ->
        bool is asked after each but the last: True ends the run there (a signal arrived),
        with the sinks written and `interrupted` set."""
        t0 = time.perf_counter()
        for f in range(start, end):
            last = f == end - 1
            self.run_frame(f, download=last or not last_frame_only)
            for callback in each_frame:
                callback(self, f)
            if not last and stop is not None and stop():
                self.interrupted = True
                if last_frame_only:
                    self.download_sinks()
                break
        self.seconds += time.perf_counter() - t0

    def run_upto(self, target: Node, stop: Node | None = None) -> None:
        """Run only `target` and the nodes it reads from, again for the current frame: not
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
        cl = lists[self.frame % len(lists)]
        cl.submit()
        cl.wait()

    def timings(self) -> list[tuple[str, float]]:
        return self.commands[self.frame % len(self.commands)].timings()


def run_graph(graph, device: Device, frames: int | None = None, last_frame_only: bool = False,
              progress=None, profile: bool = False, restore=None, stop=None,
              after_frame=None) -> Build:
    """Build and run a graph for its frames; returns the build (for summaries).

    restore(build) -> int: loads saved state into the fresh build and returns the frame to
    continue at (pipeline/checkpoint.py). after_frame(build, f) runs after each frame (periodic
    checkpoints). stop() -> bool is asked after each frame: True ends the run there (a signal
    arrived), with the sinks written and build.interrupted set."""
    if frames is not None:
        graph.frames = frames
    build = Build(graph, device, profile=profile)
    start = restore(build) if restore is not None else 0
    build.first_frame = build.frame = start
    build.run_frames(start, build.frames, last_frame_only,
                     [c for c in (progress, after_frame) if c is not None], stop)
    return build
