"""Checkpoints: the state of a run after frame k, saved to one `.npz` and loaded to continue.

What a checkpoint holds (all plain numpy arrays, read back with allow_pickle=False):

* `vkgraph_checkpoint` = VERSION; `frame` = the number of frames done (the next frame to
  run); `frames` = the run's frame count then; `cfg` = the graph as cfg text (write_cfg, after
  display replacement and --config), checked on resume; `device` = the device's name;
* per module `NAME:INST/KEY`: the arrays of the module's `state(graph, module)` hook, the
  buffers that persist from one frame to the next and that only the module knows about (kpn-t:
  fp32 weights, Adam moments, the skipped-update counter, the loss history);
* per module `NAME:INST/@I.KERNEL.CONN.P`: every output buffer the engine double-buffers for a
  feedback edge (both parities), found generically: that is the previous frame's data a
  feedback reader sees next frame (kpn-t: the gradient that the next Adam step applies).

Everything else is recomputed every frame (activations, partial sums, views). Random numbers in
kernels are seeded from the frame index, so the frame counter is the whole RNG state. A run
resumed from a checkpoint with `frame` = k runs frames k, k+1, ... (each with its own buffer
parity) and gives bit-identical results to an uninterrupted run on the same device and
driver. The cfg saved is the graph as the run started (keyframes change params during it).

A checkpoint read back is checked before its state is used (`load`): each entry's `.npy`
header (shape, dtype) is read first and its data only when it fits the buffer it goes to
(a small file cannot make us decompress gigabytes); a key under a module's prefix that the
module does not save is refused, as is a trainer's state holding NaN/Inf
(pipeline/trainer.py: `load_trainer_state`).
The same `load` carries a Session's trained state over to a rebuilt graph (vkgraph/api.py).
"""

from __future__ import annotations

import difflib
import io
import logging
import math
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from .cfg import write_cfg
from .errors import GraphError
from .formats import READ_MAX, atomic_write

log = logging.getLogger("vkgraph")

VERSION = 1
MAGIC = "vkgraph_checkpoint"
META = (MAGIC, "frame", "frames", "cfg", "device")
META_MAX = 1 << 24  # bytes of one metadata entry (the cfg text, 4 bytes a character)
_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0,
            (2, 0): np.lib.format.read_array_header_2_0}


def _feedback_buffers(build, module):
    """(key, buffers) for every double-buffered output of the module's scheduled nodes."""
    for i, node in enumerate(module.nodes):
        for c in node.connectors:
            bufs = build.memory.buffers.get((id(node), c.name)) if c.is_output else None
            if bufs is not None and len(bufs) == 2:
                yield f"@{i}.{node.kernel}.{c.name}", node, c, bufs


def has_state(build) -> bool:
    """Does any active module carry state across frames (a `state` hook or feedback)?"""
    return any(m.cls.hook("state") or next(_feedback_buffers(build, m), None)
               for m in build.active)


def check_supported(build) -> None:
    """A module that trains (it has a loss history: a `losses` hook) keeps weights the engine
    cannot see; without `state`/`load_state` hooks a checkpoint would silently lose them."""
    for m in build.active:
        if m.cls.hook("losses") and not (m.cls.hook("state") and m.cls.hook("load_state")):
            raise GraphError(f"module {m} cannot be checkpointed yet (its module.py has no "
                             "state/load_state hooks)")


def collect(build) -> dict[str, np.ndarray]:
    """The state of every active module after frame `build.frame`, keyed NAME:INST/KEY."""
    build.program.finish()  # the feedback buffers are read directly: no frame may still run
    out: dict[str, np.ndarray] = {}
    for m in build.active:
        hook = m.cls.hook("state")
        if hook:
            for key, arr in hook(build.context, m).items():
                if "/" in key or key.startswith("@"):
                    raise ValueError(f"{m}: state key '{key}' (no '/', no leading '@')")
                out[f"{m}/{key}"] = np.ascontiguousarray(arr)
        for key, _node, c, bufs in _feedback_buffers(build, m):
            for p, buf in enumerate(bufs):
                out[f"{m}/{key}.{p}"] = buf.download(np.uint8, count=c.nbytes())
    return out


def graph_lines(graph) -> list[str]:
    """The cfg lines a checkpoint must agree on: all but frames/fps and the sinks' lines (a
    resumed run may write other files or run longer)."""
    sinks = {f":{m.name}:{m.inst}:" for m in graph.modules.values() if m.cls.is_sink}
    return [line for line in write_cfg(graph).splitlines()
            if line and not line.startswith(("frames:", "fps:"))
            and not any(s in line + ":" for s in sinks)]


def prepare(build, resume: Checkpoint | None = None, saving: bool = False) -> int:
    """run_graph's `restore`, before the first frame: remember the graph as cfg text (the
    params as the file set them: keyframes change them while the run goes), check that the
    modules can be saved, load `resume`. Returns the frame to start at."""
    build.checkpoint_cfg = write_cfg(build.graph)
    if saving:
        check_supported(build)
    return resume.restore(build) if resume is not None else 0


def save(path, build) -> None:
    """Write the checkpoint of `build` after its current frame, atomically."""
    arrays = collect(build)
    cfg = getattr(build, "checkpoint_cfg", None) or write_cfg(build.graph)
    meta = {MAGIC: np.array(VERSION), "frame": np.array(build.frame + 1),
            "frames": np.array(build.frames), "cfg": np.array(cfg),
            "device": np.array(build.device.info.name)}
    buf = io.BytesIO()
    np.savez(buf, **meta, **arrays)
    atomic_write(path, buf.getbuffer())


class Entries(Mapping):
    """The arrays of a checkpoint (.npz) by name, each read from the zip only when asked for:
    `headers` holds every entry's (shape, dtype) from its .npy header, read without the data,
    so a size is checked before anything is decompressed. Reading an entry larger than
    READ_MAX, or one that does not decode, is a GraphError naming the file."""

    def __init__(self, path: Path):
        self.path = path
        self.headers: dict[str, tuple[tuple, np.dtype]] = {}
        try:
            with zipfile.ZipFile(path) as zf:
                for info in zf.infolist():
                    if not info.filename.endswith(".npy"):  # an .npz holds only .npy members
                        raise ValueError(f"member '{info.filename[:80]}' is not an array")
                    with zf.open(info) as f:
                        version = np.lib.format.read_magic(f)
                        if version not in _HEADERS:
                            raise ValueError(f".npy format {version}")
                        shape, _, dtype = _HEADERS[version](f)
                    if dtype.hasobject:
                        raise ValueError(f"'{info.filename[:80]}' holds Python objects")
                    self.headers[info.filename[:-4]] = (shape, dtype)
        except (zipfile.BadZipFile, zlib.error, ValueError, EOFError, OSError,
                NotImplementedError) as e:
            raise GraphError(f"not a vkgraph checkpoint (.npz): {type(e).__name__} "
                             f"{str(e)[:120]}", where=str(path)) from None

    def nbytes(self, key: str) -> int:
        shape, dtype = self.headers[key]
        return math.prod(shape) * dtype.itemsize

    def read(self, key: str, limit: int = READ_MAX) -> np.ndarray:
        """The entry's array, after checking that it holds at most `limit` bytes."""
        if self.nbytes(key) > limit:
            raise GraphError(f"checkpoint entry '{key}' holds {self.nbytes(key)} bytes, more "
                             f"than it can ({limit} at most)", where=str(self.path))
        try:
            with zipfile.ZipFile(self.path) as zf, zf.open(key + ".npy") as f:
                return np.lib.format.read_array(f, allow_pickle=False)
        except (zipfile.BadZipFile, zlib.error, ValueError, EOFError, OSError) as e:
            raise GraphError(f"damaged checkpoint: entry '{key}': {type(e).__name__} "
                             f"{str(e)[:120]}", where=str(self.path)) from None

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self.headers:
            raise KeyError(key)
        return self.read(key)

    def __iter__(self):
        return iter(self.headers)

    def __len__(self) -> int:
        return len(self.headers)


def _header(arrays: Mapping, key: str) -> tuple[tuple, np.dtype, int]:
    """(shape, dtype, bytes) of an entry, from a checkpoint's headers without reading it."""
    if isinstance(arrays, Entries):
        shape, dtype = arrays.headers[key]
        return shape, dtype, arrays.nbytes(key)
    arr = np.asarray(arrays[key])
    return arr.shape, arr.dtype, arr.nbytes


def _module_bytes(build, module) -> int:
    """All device memory of a module's outputs: no state of it can be larger."""
    return sum(c.nbytes() * len(build.memory.buffers.get((id(node), c.name), ()))
               for node in module.nodes for c in node.connectors if c.is_output)


def load(build, arrays: Mapping, where: str) -> None:
    """Put saved state (`NAME:INST/KEY` arrays: a checkpoint's Entries, or what collect()
    took from another build) into a fresh build whose `frame` is the last frame done. Every
    key must have a place: a feedback buffer of the same byte count, or a key the module's
    `state` hook gives for this build, of its dtype and at most as large as all the module's
    buffers (its `load_state` hook checks the exact shape); an entry is read only after
    that. GraphError naming `where` otherwise."""
    used = set()
    # a fresh build runs nothing yet; restored buffers are written directly
    build.program.finish()
    for m in build.active:
        prefix = f"{m}/"
        mine = {k[len(prefix):] for k in arrays if k.startswith(prefix)}
        used.update(prefix + k for k in mine)
        feedback = {}
        for key, _node, c, bufs in _feedback_buffers(build, m):
            for p, buf in enumerate(bufs):
                name = f"{key}.{p}"
                if name not in mine or _header(arrays, prefix + name)[1:] != (
                        np.dtype(np.uint8), c.nbytes()):
                    raise GraphError(f"no matching state for {m} ({name})", where=where)
                feedback[name] = buf
        state, load_state = m.cls.hook("state"), m.cls.hook("load_state")
        expected = state(build.context, m) if state and load_state else {}
        limit = _module_bytes(build, m)
        for key in sorted(mine - set(feedback)):
            if key not in expected:
                raise GraphError(f"state '{prefix}{key}' has no place in this graph ({m} "
                                 f"saves {', '.join(sorted(expected)) or 'nothing'} there)",
                                 where=where)
            _, dtype, nbytes = _header(arrays, prefix + key)
            want = np.asarray(expected[key])
            if dtype != want.dtype or nbytes > max(want.nbytes, limit):
                raise GraphError(f"state '{prefix}{key}' is {nbytes} bytes of {dtype}; {m} "
                                 f"holds {want.dtype} there, at most {max(want.nbytes, limit)} "
                                 "bytes", where=where)
        for name, buf in feedback.items():
            buf.upload(arrays[prefix + name])
        if load_state:
            try:
                load_state(build.context, m, {k: arrays[prefix + k] for k in expected
                                              if k in mine})
            except GraphError as e:
                if e.where is not None:
                    raise
                raise GraphError(e.message, where=where, hint=e.hint) from None
    extra = sorted(set(arrays) - used)
    if extra:
        raise GraphError(f"state of '{extra[0]}' has no place in this graph", where=where)


class Checkpoint:
    """A checkpoint file read back: `frame` (frames done), `cfg`, `device`, `arrays` (its
    Entries: module state, read when a build takes it)."""

    def __init__(self, path):
        self.path = Path(path)
        where = str(self.path)
        if self.path.is_dir():
            raise GraphError("is a folder, not a checkpoint file", where=where)
        if not self.path.exists():
            raise GraphError("no such checkpoint file", where=where)
        if not self.path.is_file():
            raise GraphError("not a regular file (a device, pipe or socket), not a checkpoint",
                             where=where)
        entries = Entries(self.path)
        if MAGIC not in entries:
            raise GraphError("not a vkgraph checkpoint (no version entry)", where=where)
        try:
            meta = {k: entries.read(k, META_MAX) for k in META}
            version = int(meta[MAGIC])
            self.frame = int(meta["frame"])
            self.frames = int(meta["frames"])
            self.cfg = str(meta["cfg"])
            self.device = str(meta["device"])
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise GraphError(f"damaged checkpoint: {type(e).__name__} {e}", where=where) from None
        if version != VERSION:
            raise GraphError(f"checkpoint format {version}; this vkgraph reads format "
                             f"{VERSION}", where=where)
        if self.frame < 1:
            raise GraphError(f"damaged checkpoint: frame {self.frame}", where=where)
        entries.headers = {k: v for k, v in entries.headers.items() if k not in META}
        self.arrays = entries

    def check_graph(self, graph) -> None:
        """The graph must be the one the checkpoint was written for (frames and sinks may
        differ)."""
        from .cfg import apply_line
        from .graph import Graph

        try:
            saved_graph = Graph(registry=graph.registry)
            for i, line in enumerate(self.cfg.splitlines(), 1):
                apply_line(saved_graph, line, f"cfg:{i}")
            saved = graph_lines(saved_graph)
        except GraphError as e:
            raise GraphError(f"its graph does not load here: {e.line()}",
                             where=str(self.path)) from None
        here = graph_lines(graph)
        if saved == here:
            return
        diff = [d for d in difflib.ndiff(saved, here) if d[:1] in "+-"]
        gone = next((d[2:] for d in diff if d[0] == "-"), None)
        new = next((d[2:] for d in diff if d[0] == "+"), None)
        detail = "; ".join(x for x in (f"it has '{gone}'" if gone else "",
                                       f"this graph has '{new}'" if new else "") if x)
        raise GraphError(f"the checkpoint was written for a different graph: {detail}",
                         where=str(self.path))

    def restore(self, build) -> int:
        """Load the state into a fresh build; returns the frame to continue at."""
        where = str(self.path)
        check_supported(build)
        if self.frame >= build.frames:
            raise GraphError(f"the checkpoint has {self.frame} frames done and the graph runs "
                             f"{build.frames}: nothing left to run (raise --frames)",
                             where=where)
        if self.device != build.device.info.name:
            log.warning("resuming on %s a checkpoint written on %s: the run continues, but "
                        "not bit-identically", build.device.info.name, self.device)
        build.frame = self.frame - 1
        load(build, self.arrays, where)
        return self.frame


def upload(build, node, conn: str, arrays: dict, key: str, module) -> None:
    """For load_state hooks: put arrays[key] into a node's output buffer, after checking that
    it has the buffer's element type and count (GraphError naming the key otherwise)."""
    if key not in arrays:
        raise GraphError(f"the checkpoint has no '{key}' for {module}")
    want = build.read(node, conn)
    arr = np.asarray(arrays[key])
    if arr.dtype != want.dtype or arr.shape != want.shape:
        raise GraphError(f"checkpoint '{key}' of {module} is {arr.dtype} {arr.shape}, this "
                         f"graph needs {want.dtype} {want.shape}")
    build.upload(node, conn, np.ascontiguousarray(arr))
