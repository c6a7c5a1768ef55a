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
"""

from __future__ import annotations

import difflib
import io
import logging
from pathlib import Path

import numpy as np

from .cfg import write_cfg
from .errors import GraphError
from .formats import atomic_write
from .trainer import trainable

log = logging.getLogger("vkgraph")

VERSION = 1
MAGIC = "vkgraph_checkpoint"


def _feedback_buffers(build, module):
    """(key, buffers) for every double-buffered output of the module's scheduled nodes."""
    for i, node in enumerate(module.nodes):
        for c in node.connectors:
            bufs = build.buffers.get((id(node), c.name)) if c.is_output else None
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
    build.finish()  # the feedback buffers are read directly: no frame may still run
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


class Checkpoint:
    """A checkpoint file read back: `frame` (frames done), `cfg`, `device`, `arrays`."""

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
        try:
            with np.load(self.path, allow_pickle=False) as z:  # (a .npy array: TypeError)
                data = {k: z[k] for k in z.files}
        except Exception as e:  # noqa: BLE001 - any failure to parse this file is bad input
            raise GraphError(f"not a vkgraph checkpoint (.npz): {type(e).__name__}",
                             where=where) from None
        if MAGIC not in data:
            raise GraphError("not a vkgraph checkpoint (no version entry)", where=where)
        try:
            version = int(data.pop(MAGIC))
            self.frame = int(data.pop("frame"))
            self.frames = int(data.pop("frames"))
            self.cfg = str(data.pop("cfg"))
            self.device = str(data.pop("device"))
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise GraphError(f"damaged checkpoint: {type(e).__name__} {e}", where=where) from None
        if version != VERSION:
            raise GraphError(f"checkpoint format {version}; this vkgraph reads format "
                             f"{VERSION}", where=where)
        if self.frame < 1:
            raise GraphError(f"damaged checkpoint: frame {self.frame}", where=where)
        self.arrays = data

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
        used = set()
        build.finish()  # (a fresh build runs nothing yet; restored buffers are written directly)
        build.frame = self.frame - 1
        for m in build.active:
            prefix = f"{m}/"
            mine = {k[len(prefix):]: v for k, v in self.arrays.items() if k.startswith(prefix)}
            used.update(prefix + k for k in mine)
            for key, _node, c, bufs in _feedback_buffers(build, m):
                for p, buf in enumerate(bufs):
                    arr = mine.get(f"{key}.{p}")
                    if arr is None or arr.dtype != np.uint8 or arr.size != c.nbytes():
                        raise GraphError(f"no matching state for {m} ({key}.{p})", where=where)
                    buf.upload(arr)
            hook = m.cls.hook("load_state")
            if hook:
                hook(build.context, m, {k: v for k, v in mine.items() if not k.startswith("@")})
        extra = sorted(set(self.arrays) - used)
        if extra:
            raise GraphError(f"state of '{extra[0]}' has no place in this graph", where=where)
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


def trainer_state(build, module, entries) -> dict:
    """For `state` hooks of trainers: the (node of the module's Trainable, connector) buffers
    the engine cannot know about, e.g. weights, optimiser moments and the loss history."""
    t = trainable(module)
    return {f"{n}.{c}": build.read(getattr(t, n), c) for n, c in entries}


def load_trainer_state(build, module, arrays: dict, entries,
                       history: str = "lsum.hist") -> None:
    """For `load_state` hooks: the inverse of trainer_state. A loss history saved with another
    length (another frame count) is moved to its new ring-buffer slots."""
    t = trainable(module)
    arrays = dict(arrays)
    old = arrays.get(history)
    n_new = t.hist_len
    if old is not None and n_new and old.ndim == 1 and old.size and old.size != n_new:
        new = np.zeros(n_new, old.dtype)
        done = build.frame + 1
        f = np.arange(max(0, done - min(old.size, new.size)), done)
        new[f % new.size] = old[f % old.size]
        arrays[history] = new
    for n, c in entries:
        upload(build, getattr(t, n), c, arrays, f"{n}.{c}", module)
