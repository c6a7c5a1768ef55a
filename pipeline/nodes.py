"""From the module graph to a schedule of nodes.

The passes, in order (each one way, no back-and-forth):
1. active modules: those a connected sink reaches through inputs (feedback inputs included);
   every required input of an active module must be connected;
2. ROI forward pass (`modify_roi_out`, default: outputs take the size of `input`); a module's
   outputs start it with empty metadata, which the hook may fill for readers downstream;
3. node creation (`create_nodes`, default: one node running `main.comp`; sources and sinks
   get a transfer node without a kernel);
4. wiring: node inputs bound to module inputs are pointed at the node backing the upstream
   module output;
5. scheduling: post-order depth-first search from the sink nodes; feedback inputs are not
   dependencies, their writers are visited in a later round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import GraphError
from .module import OPTIONAL, Connector, ModuleInstance, Roi, check_name

FLOAT_FORMATS = ("f16", "f32")


def _declared(module: ModuleInstance, name: str) -> Connector:
    return module.cls.connectors[module.connector_index(name)]


@dataclass(eq=False)
class Node:
    module: ModuleInstance
    shader: str
    kernel: str | None  # None: transfer node of a source or sink (no pipeline)
    dispatch: tuple[int, int, int]
    local: tuple[int, int, int] = (8, 8, 1)
    push: list = field(default_factory=list)
    defines: dict = field(default_factory=dict)
    connectors: list[Connector] = field(default_factory=list)
    keep: bool = False  # run even when no sink reaches it (e.g. a loss history for the summary)
    # due(frame, frames) -> bool: the frames the node must run on (None: every frame). On the
    # others the frame may leave it out (its outputs keep what they held), so its kernel must
    # also be right when it runs on a frame that is not due (another node was due then).
    due: Callable[[int, int], bool] | None = None

    @property
    def label(self) -> str:
        return f"{self.module}/{self.kernel or self.connectors[0].type}"

    def __repr__(self) -> str:
        return f"Node({self.label})"

    def connector(self, name: str) -> Connector:
        for c in self.connectors:
            if c.name == name:
                return c
        raise GraphError(f"node {self.label} has no connector '{name}' (a bug in module "
                         f"{self.module.name})")

    def index(self, name: str) -> int:
        return self.connectors.index(self.connector(name))

    @property
    def is_source(self) -> bool:
        return self.connectors[0].type == "source"

    @property
    def is_sink(self) -> bool:
        return self.connectors[0].type == "sink"


def topo_modules(graph) -> list[ModuleInstance]:
    """Modules in dependency order (writers before readers); feedback edges ignored."""
    order: list[ModuleInstance] = []
    done: set[int] = set()

    def visit(m: ModuleInstance) -> None:
        if id(m) in done:
            return
        done.add(id(m))
        for c in m.connectors:
            if c.is_input and c.source is not None and not c.feedback:
                visit(c.source[0])
        order.append(m)

    for m in graph.modules.values():
        visit(m)
    return order


def wavefronts(order: list[Node]) -> list[Node]:
    """A dependency order (writers before readers) regrouped by depth: the nodes that read
    only from earlier depths come together, in their order within `order` otherwise. The
    recording puts barriers only where a node reads or writes what one since the last
    barrier wrote (recording.Hazards), so nodes of one depth run side by side: kpn-t's four
    pyramid levels in one barrier interval per kernel instead of one each. Feedback inputs
    read the previous frame's copy and do not order nodes within a frame."""
    depth: dict[int, int] = {}
    for n in order:
        depth[id(n)] = max((depth[id(c.source[0])] + 1 for c in n.connectors
                            if c.is_input and c.source is not None and not c.feedback),
                           default=0)
    return sorted(order, key=lambda n: depth[id(n)])


class NodeGraph:
    """The plan of one build (Build's first stage, pipeline/runner.py): from the module graph
    `graph`, the active modules, their sizes and metadata (ROI passes), their nodes, the
    wiring and the `schedule`. Module hooks get `context` (a HookContext) as `graph`; its node
    API (add_node, node_connect, node_feedback, bind) is this object's."""

    def __init__(self, graph, context):
        self.graph = graph
        self.context = context  # what hooks get as `graph` (pipeline/context.py)
        self.nodes: list[Node] = []
        self.active: list[ModuleInstance] = []
        self.schedule: list[Node] = []

    # -- API for create_nodes
    def add_node(self, module: ModuleInstance, kernel: str | None, dispatch, connectors,
                 shader: str | None = None, local=(8, 8, 1), push=(), defines=None,
                 keep: bool = False, due=None) -> Node:
        conns = []
        for spec in connectors:
            name, ctype, chan, fmt, roi = spec
            check_name(name, "connector")
            conns.append(Connector(name, ctype, chan, fmt, Roi(roi.wd, roi.ht) if roi else Roi()))
        wd, ht, dp = (tuple(dispatch) + (1, 1))[:3]
        node = Node(module, shader or module.name, kernel, (int(wd), int(ht), int(dp)),
                    tuple(local), list(push), dict(defines or {}), conns, keep, due)
        self.nodes.append(node)
        module.nodes.append(node)
        return node

    def node_connect(self, src: Node, src_conn: str, dst: Node, dst_conn: str,
                     feedback: bool = False) -> None:
        out = src.connector(src_conn)
        inp = dst.connector(dst_conn)
        if not out.is_output or not inp.is_input:
            raise GraphError(f"cannot connect node {src.label}:{src_conn} to "
                             f"{dst.label}:{dst_conn} (a bug in module {dst.module.name})")
        inp.source = (src, src_conn)
        inp.feedback = feedback

    def node_feedback(self, src: Node, src_conn: str, dst: Node, dst_conn: str) -> None:
        self.node_connect(src, src_conn, dst, dst_conn, feedback=True)

    def bind(self, module: ModuleInstance, mconn: str, node: Node, nconn: str) -> None:
        """Tie a module connector to a node connector (vkdt's connector_copy)."""
        mc = module.connector(mconn)
        nc = node.connector(nconn)
        if mc.is_output:
            module.backing[mconn] = (node, nconn)
            if not nc.roi:
                nc.roi = Roi(mc.roi.wd, mc.roi.ht)
            if nc.chan == "*":
                nc.chan = mc.chan
            if nc.format == "*":
                nc.format = mc.format
        else:
            module.data.setdefault("_inputs", []).append((mconn, node, nconn))

    # -- passes
    def find_active(self) -> None:
        sinks = [m for m in self.graph.modules.values()
                 if m.cls.is_sink and m.connectors[0].source is not None]
        if not sinks:
            raise GraphError("the graph has no connected sink (display, o-pfm, o-lut, ...): "
                             "nothing would be computed")
        seen: dict[int, ModuleInstance] = {}
        stack = list(sinks)
        while stack:
            m = stack.pop()
            if id(m) in seen:
                continue
            seen[id(m)] = m
            for c in m.connectors:
                if c.is_input and c.source is not None:
                    stack.append(c.source[0])
        self.active = [m for m in topo_modules(self.graph) if id(m) in seen]
        for m in self.active:
            optional = getattr(m.cls, "optional", frozenset())
            for c in m.connectors:
                if c.is_input and c.source is None and c.name not in optional:
                    raise GraphError(f"input '{c.name}' of module {m} is not connected",
                                     hint=f"add connect:<module>:<inst>:<output>:{m.name}:"
                                          f"{m.inst}:{c.name}")

    def roi_passes(self) -> None:
        for m in self.active:
            for c, decl in zip(m.connectors, m.cls.connectors, strict=True):
                if c.is_input and c.source is not None and not c.feedback:
                    self._copy_from_source(c, decl)
                    self._check_format(m, c, decl)
            for c in m.connectors:
                if c.is_output:
                    c.meta = {}  # what the hooks publish in this build (HookContext.meta)
            hook = m.cls.hook("modify_roi_out")
            if hook:
                hook(self.context, m)
            else:
                self._default_roi_out(m)
            for c in m.connectors:
                if c.is_output and not c.roi:
                    raise GraphError(f"module {m} could not size its output '{c.name}' (is "
                                     "its input empty?)")
            if m.cls.is_source:
                self._convert_for_readers(m)
        for m in self.active:  # feedback readers see the writer's final size
            for c, decl in zip(m.connectors, m.cls.connectors, strict=True):
                if c.is_input and c.source is not None and c.feedback:
                    self._copy_from_source(c, decl)
                    self._check_format(m, c, decl)

    def _convert_for_readers(self, m: ModuleInstance) -> None:
        """A source's storage buffer whose file holds another float format than an active
        reader declares (a `.lut` of f32 weights for kpn's f16 `w`): the upload converts
        the data to the reader's format (Transfers._check_source refuses values that the
        format cannot hold), instead of the reader taking f32 bytes for f16."""
        active = {id(x) for x in self.active}
        for c in m.connectors:
            if not (c.is_output and c.is_ssbo and c.format in FLOAT_FORMATS):
                continue
            wants = {_declared(r, rc.name).format for r, rc in self.graph.readers(m, c.name)
                     if id(r) in active}
            wants &= set(FLOAT_FORMATS)
            if len(wants) == 1 and c.format not in wants:
                c.format = wants.pop()

    @staticmethod
    def _check_format(m: ModuleInstance, c: Connector, declared: Connector) -> None:
        """A storage buffer is read as its reader declares it: its writer must deliver that
        format (images are f32 on the device whatever they declare, so only ssbos count)."""
        writer, wname = c.source
        src = writer.connector(wname)
        want = declared.format
        if not (c.is_ssbo and src.is_ssbo) or want == "*" or src.format in ("*", want):
            return
        raise GraphError(f"input '{c.name}' of {m} reads {want} values, but {writer}:{wname} "
                         f"delivers {src.format}", hint="convert the data, or connect a "
                         f"writer of {want}")

    @staticmethod
    def _copy_from_source(c: Connector, declared: Connector | None = None) -> None:
        """A reader takes its writer's size, and its chan and format where its declaration
        leaves them open (`*`, `&name`); without a declaration (node level) it always
        follows the writer, since that is the buffer its kernel gets."""
        src = c.source[0].connector(c.source[1])
        c.roi = Roi(src.roi.wd, src.roi.ht)
        chan = declared.chan if declared is not None else "*"
        fmt = declared.format if declared is not None else "*"
        if chan == "*" or chan.startswith("&"):
            c.chan = src.chan
        if fmt == "*":
            c.format = src.format

    @staticmethod
    def _default_roi_out(m: ModuleInstance) -> None:
        inputs = [c for c in m.connectors if c.is_input]
        ref = next((c for c in inputs if c.name == "input"), inputs[0] if inputs else None)
        for c in m.connectors:
            if c.is_output and not c.roi:
                c.roi = Roi(ref.roi.wd, ref.roi.ht) if ref is not None else Roi(1024, 1024)
                if c.chan == "*" and ref is not None:
                    c.chan = ref.chan
                if c.format == "*" and ref is not None:
                    c.format = ref.format

    def create_nodes(self) -> None:
        for m in self.active:
            m.nodes = []
            m.backing = {}
            m.data.pop("_inputs", None)
            hook = m.cls.hook("create_nodes")
            if hook:
                hook(self.context, m)
            else:
                self._default_nodes(m)
            for c in m.connectors:
                if c.is_output and c.name not in m.backing and self._has_readers(m, c.name):
                    raise GraphError(f"module {m} created no node for its output '{c.name}'")

    def _has_readers(self, m: ModuleInstance, conn: str) -> bool:
        return any(c.source is not None and c.source[0] is m and c.source[1] == conn
                   for r in self.active for c in r.connectors if c.is_input)

    def _default_nodes(self, m: ModuleInstance) -> None:
        conns = [(c.name, c.type, c.chan, c.format, c.roi) for c in m.connectors]
        if m.cls.is_source or m.cls.is_sink:
            c0 = m.connectors[0]
            node = self.add_node(m, None, (c0.roi.wd, c0.roi.ht, 1), conns)
        else:
            out = next((c for c in m.connectors if c.name == "output"),
                       next((c for c in m.connectors if c.is_output), None))
            size = (out.roi.wd, out.roi.ht, 1) if out is not None else (1, 1, 1)
            node = self.add_node(m, "main", size, conns)
        for c in m.connectors:
            if c.is_output or c.source is not None:
                self.bind(m, c.name, node, c.name)

    def wire(self) -> None:
        for m in self.active:
            for mconn, node, nconn in m.data.get("_inputs", []):
                mc = m.connector(mconn)
                if mc.source is None:
                    continue  # optional input left open: the module handles it
                writer, wconn = mc.source
                if wconn not in writer.backing:
                    raise GraphError(f"module {writer} has no node behind output '{wconn}'")
                src_node, src_conn = writer.backing[wconn]
                inp = node.connector(nconn)
                inp.source = (src_node, src_conn)
                inp.feedback = inp.feedback or mc.feedback
        for node in self.nodes:  # inputs take the size and format of what feeds them
            for c in node.connectors:
                if c.is_input and c.source is not None:
                    self._copy_from_source(c)

    def schedule_nodes(self) -> None:
        order: list[Node] = []
        state: dict[int, int] = {}  # 1 visiting, 2 done
        later: list[Node] = []

        def visit(n: Node) -> None:
            s = state.get(id(n))
            if s == 2:
                return
            if s == 1:
                raise GraphError(f"cycle through node {n.label}: use a feedback connection "
                                 "to read the previous frame")
            state[id(n)] = 1
            for c in n.connectors:
                if not c.is_input:
                    continue
                if c.source is None and c.flags & OPTIONAL:
                    continue
                if c.source is None:
                    if n.kernel is None and n.is_sink:
                        raise GraphError(f"sink {n.module} is not connected")
                    raise GraphError(f"input '{c.name}' of node {n.label} is not connected "
                                     f"(module {n.module})")
                if c.feedback:
                    later.append(c.source[0])
                else:
                    visit(c.source[0])
            state[id(n)] = 2
            order.append(n)

        sinks = [n for n in self.nodes if n.is_sink and n.connectors[0].source is not None]
        sinks.sort(key=lambda n: n.module.inst != "main")
        for n in sinks + [n for n in self.nodes if n.keep]:
            visit(n)
        while later:
            visit(later.pop(0))
        self.schedule = wavefronts(order)

    def build_nodes(self) -> None:
        self.nodes = []
        self.find_active()
        for m in self.active:
            if not m.data.get("_init_done"):
                hook = m.cls.hook("init")
                if hook:
                    hook(m)
                m.data["_init_done"] = True
        self.roi_passes()
        self.create_nodes()
        self.wire()
        self.schedule_nodes()
