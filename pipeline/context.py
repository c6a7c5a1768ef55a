"""What a module hook may use of a run: the `graph` argument of every hook (HOOKS in
pipeline/module.py) is a HookContext, not the whole Build.

    the run        frame, frames, first_frame (> 0 when resumed), seconds (after the run)
    files          resolve(filename) -> Path
    the graph      modules (name, inst) -> ModuleInstance; readers(module, connector)
    metadata       meta(module, connector): an output's dict (the writer fills it), or for an
                   input the dict of the output wired to it (read only)
    the device     capabilities: vk.DeviceInfo (subgroup_size, fp16, storage16, coopmat,
                   shared_memory, int64_atomics, name, ...), None without a device
    buffers        read(node, connector) -> np.ndarray, upload(node, connector, array)
                   (state hooks, after a frame)
    nodes          add_node, node_connect, node_feedback, bind (create_nodes; signatures in
                   pipeline/README.md, "Node API")

It is a view of the run (`Build`, pipeline/runner.py: the graph, the frame counters, the
device, the buffers of the current frame) and of its plan (`Build.plan`, pipeline/nodes.py:
the node API), made before the plan so that the plan's hooks get it.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

from .datasets import resolve_name

_NONE = MappingProxyType({})


def connector_meta(module, connector: str):
    """The metadata of a module connector. An output's is its own dict, which the module's
    hooks fill (modify_roi_out, so that readers' modify_roi_out sees it; the engine empties
    it before). An input's is the metadata of the output wired to it, read only (empty when
    the input is open): the writer's word travels to every reader, never back."""
    c = module.connector(connector)
    if c.is_output:
        return c.meta
    if c.source is None:
        return _NONE
    writer, name = c.source
    return MappingProxyType(writer.connector(name).meta)


class HookContext:
    __slots__ = ("_build",)

    def __init__(self, build):
        self._build = build

    def __repr__(self) -> str:
        return f"HookContext(frame={self.frame}, frames={self.frames})"

    # -- the run
    @property
    def frame(self) -> int:
        return self._build.frame

    @property
    def frames(self) -> int:
        return self._build.frames

    @property
    def first_frame(self) -> int:
        """The first frame this run executes (> 0 when resumed from a checkpoint)."""
        return self._build.first_frame

    @property
    def seconds(self) -> float:
        """Wall time of the run's frames, once it has ended (0 before)."""
        return self._build.seconds

    def resolve(self, filename: str) -> Path:
        """A file named in a cfg: `pkg:<package>/<path>` (inside an installed Python package),
        absolute, next to the cfg, or in the working directory."""
        return resolve_name(filename, self._near_cfg)

    def _near_cfg(self, filename: str) -> Path:
        path = Path(filename).expanduser()
        if path.is_absolute():
            return path
        cfg = getattr(self._build.graph, "cfg_path", None)
        if cfg is not None:
            near = Path(cfg).resolve().parent / path
            if near.exists():
                return near
        return Path.cwd() / path

    # -- the graph
    @property
    def modules(self) -> dict:
        return self._build.graph.modules

    def readers(self, module, connector: str) -> list:
        """(reader module, its connector) for every wire from `module`'s `connector`."""
        readers = getattr(self._build.graph, "readers", None)
        return readers(module, connector) if readers is not None else []

    def meta(self, module, connector: str):
        """Metadata of the data on a connector: see connector_meta."""
        return connector_meta(module, connector)

    # -- the device
    @property
    def capabilities(self):
        """The device's vk.DeviceInfo, or None when the nodes are built without a device."""
        return getattr(getattr(self._build, "device", None), "info", None)

    # -- buffers (after a frame)
    def read(self, node, connector: str):
        return self._build.read(node, connector)

    def upload(self, node, connector: str, array) -> None:
        self._build.upload(node, connector, array)

    # -- nodes (create_nodes)
    def add_node(self, module, kernel, dispatch, connectors, **kw):
        return self._build.plan.add_node(module, kernel, dispatch, connectors, **kw)

    def node_connect(self, src, src_conn: str, dst, dst_conn: str) -> None:
        self._build.plan.node_connect(src, src_conn, dst, dst_conn)

    def node_feedback(self, src, src_conn: str, dst, dst_conn: str) -> None:
        self._build.plan.node_feedback(src, src_conn, dst, dst_conn)

    def bind(self, module, mconn: str, node, nconn: str) -> None:
        self._build.plan.bind(module, mconn, node, nconn)
