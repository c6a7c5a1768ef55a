"""vkdt's `.cfg` graph files: one `command:field:field...` per line.

Reading differs from vkdt on purpose: every line is processed, including a
last line without a newline, empty lines are skipped instead of repeating the line before,
and a bad line is an error naming `file:line` instead of a log message. `lenient` turns the
lines vkdt itself would skip (unknown commands, modules and params) into warnings.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

from .errors import GraphError, clip, closest
from .formats import read_bounded
from .graph import Graph
from .module import INT32, ModuleInstance, Param, check_name
from .registry import Registry

# vkdt spells the easing of a keyframe with the capitalisation of the command
KEYFRAME_COMMANDS = {"keyframe": "linear", "keyframE": "ease-out", "Keyframe": "ease-in",
                     "KeyframE": "smooth", "keyFRAME": "step"}
EASING_COMMANDS = {mode: cmd for cmd, mode in KEYFRAME_COMMANDS.items()}

log = logging.getLogger(__name__)

MAX_FRAMES = INT32[1]
CFG_MAX = 16 << 20  # bytes: a graph file is a few hundred lines


class _Skippable(GraphError):
    """A line vkdt would skip with a warning: fatal unless reading leniently."""


def read_cfg(path: str | Path, graph: Graph | None = None, registry: Registry | None = None,
             lenient: bool = False) -> Graph:
    path = Path(path)
    try:
        text = read_bounded(path, CFG_MAX, "graph file").decode()
    except UnicodeDecodeError:
        raise GraphError("graph file is not UTF-8 text", where=str(path)) from None
    if graph is None:
        graph = Graph(registry)
    graph.cfg_path = path
    for n, line in enumerate(text.split("\n"), 1):
        apply_line(graph, line, f"{path}:{n}", lenient)
    return graph


def apply_line(graph: Graph, text: str, where: str | None, lenient: bool = False) -> None:
    """Apply one cfg line (a file's, or a `--config` argument)."""
    line = text.rstrip("\r\n")
    if not line.strip() or line.lstrip().startswith("#"):
        return
    cmd, colon, rest = line.partition(":")
    fields = rest.split(":") if colon else []
    try:
        handler = _HANDLERS.get(cmd)
        if handler is None:
            raise _Skippable(f"unknown command '{cmd}'", where=where,
                             hint=closest(cmd, _HANDLERS))
        handler(graph, cmd, fields, where)
    except _Skippable as e:
        if not lenient:
            raise
        log.warning("%s (line skipped)", e.line())


# -- field helpers -------------------------------------------------------------------------

def _arity(cmd: str, fields: list[str], lo: int, hi: int | None, syntax: str,
           where: str | None) -> None:
    if len(fields) < lo:
        raise GraphError(f"too few fields for '{cmd}': expected {cmd}:{syntax}", where=where)
    if hi is not None and len(fields) > hi:
        raise GraphError(f"too many fields for '{cmd}': '{fields[hi]}' is extra, expected "
                         f"{cmd}:{syntax}", where=where)


def _instance(graph: Graph, m: str, i: str, where: str | None) -> ModuleInstance:
    check_name(m, "module", where)
    check_name(i, "instance", where)
    try:
        return graph.module(m, i, where)
    except GraphError as e:
        if m not in graph.registry:  # its module line was skipped (or is missing)
            raise _Skippable(e.message, where=where, hint=e.hint) from None
        raise


def _param(graph: Graph, m: str, i: str, p: str, where: str | None) -> Param:
    module = _instance(graph, m, i, where)
    check_name(p, "param", where)
    if p not in module.cls.param_names():
        raise _Skippable(f"module {module} has no param '{p}'", where=where,
                         hint=closest(p, module.cls.param_names()))
    return module.param_decl(p)


def _number(token: str, what: str, where: str | None) -> float:
    try:
        value = float(token)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise GraphError(f"bad {what} value '{clip(token, 40)}' (a number)", where=where)
    return value


# -- commands ------------------------------------------------------------------------------

def _frames(graph: Graph, cmd: str, fields: list[str], where: str | None) -> None:
    """The frame index reaches the kernels as a GLSL int, so frames stay below 2^31."""
    _arity(cmd, fields, 1, 1, "N", where)
    try:
        frames = int(fields[0])
    except ValueError:
        frames = -1
    if not 0 <= frames <= MAX_FRAMES:
        raise GraphError(f"bad frames value '{clip(fields[0], 40)}' (an integer 0.."
                         f"{MAX_FRAMES})", where=where)
    graph.frames = frames


def _fps(graph: Graph, cmd: str, fields: list[str], where: str | None) -> None:
    _arity(cmd, fields, 1, 1, "F", where)
    fps = _number(fields[0], "fps", where)
    if fps < 0:
        raise GraphError(f"bad fps value '{fields[0]}' (a number >= 0)", where=where)
    graph.fps = fps


def _module(graph: Graph, cmd: str, fields: list[str], where: str | None) -> None:
    syntax = "name:inst[:x:y]"
    _arity(cmd, fields, 2, 4, syntax, where)
    if len(fields) == 3:
        raise GraphError(f"too few fields for '{cmd}': a position needs x and y, expected "
                         f"{cmd}:{syntax}", where=where)
    name, inst = fields[0], fields[1]
    check_name(name, "module", where)
    check_name(inst, "instance", where)
    if name not in graph.registry:
        raise _Skippable(f"unknown module '{name}'", where=where,
                         hint=closest(name, graph.registry.names()))
    position = None
    if len(fields) == 4:
        position = (_number(fields[2], "module position", where),
                    _number(fields[3], "module position", where))
    graph.add_module(name, inst, where, position)


def _connect(graph: Graph, cmd: str, fields: list[str], where: str | None) -> None:
    _arity(cmd, fields, 6, 6, "m0:i0:c0:m1:i1:c1", where)
    m0, i0, c0, m1, i1, c1 = fields
    if m0 != "-1":  # -1:-1:-1 is vkdt's explicit disconnect
        _instance(graph, m0, i0, where)
        check_name(c0, "connector", where)
    _instance(graph, m1, i1, where)
    check_name(c1, "connector", where)
    graph.connect(m0, i0, c0, m1, i1, c1, feedback=cmd == "feedback", where=where)


def _set_param(graph: Graph, cmd: str, fields: list[str], where: str | None) -> None:
    _arity(cmd, fields, 4, None, "m:i:p:v0[:v1...]", where)
    _param(graph, *fields[:3], where)
    graph.set_param(*fields[:3], fields[3:], where)


def _set_paramsub(graph: Graph, cmd: str, fields: list[str], where: str | None) -> None:
    _arity(cmd, fields, 6, None, "m:i:p:beg:end:v0[:v1...]", where)
    _param(graph, *fields[:3], where)
    op = {"paramsub": "set", "paraminc": "inc", "paramdec": "dec"}[cmd]
    graph.set_paramsub(*fields[:5], fields[5:], where, op=op)


def _keyframe(graph: Graph, cmd: str, fields: list[str], where: str | None) -> None:
    _arity(cmd, fields, 7, None, "frame:m:i:p:beg:end:v0[:v1...]", where)
    _param(graph, *fields[1:4], where)
    graph.add_keyframe(*fields[:6], fields[6:], KEYFRAME_COMMANDS[cmd], where)


_HANDLERS = {"frames": _frames, "fps": _fps, "module": _module, "connect": _connect,
             "feedback": _connect, "param": _set_param, "paramsub": _set_paramsub,
             "paraminc": _set_paramsub, "paramdec": _set_paramsub,
             **{cmd: _keyframe for cmd in KEYFRAME_COMMANDS}}


# -- writer --------------------------------------------------------------------------------

def _num(x: float) -> str:
    """Shortest text that reads back to the same double (repr), without a useless '.0'."""
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text


def _values(decl: Param, values: list | str, owner: str) -> str:
    if decl.type == "string":
        if "\n" in values:
            raise GraphError(f"param '{decl.name}' of {owner} holds a newline, which a cfg "
                             "line cannot")
        return values
    if decl.type == "int":
        return ":".join(f"{v:d}" for v in values)
    return ":".join(_num(v) for v in values)


def write_cfg(graph: Graph) -> str:
    """The graph as cfg text; read_cfg of it gives the same graph. Wires are written in the
    order they were made so wildcards resolve the same way on reading."""
    out = [f"frames:{graph.frames:d}", f"fps:{_num(graph.fps)}"]
    for m in graph.modules.values():
        pos = f":{_num(m.position[0])}:{_num(m.position[1])}" if m.position else ""
        out.append(f"module:{m.name}:{m.inst}{pos}")
    for writer, wname, reader, rc in graph.connections():
        cmd = "feedback" if rc.feedback else "connect"
        out.append(f"{cmd}:{writer.name}:{writer.inst}:{wname}:{reader.name}:{reader.inst}:"
                   f"{rc.name}")
    for m in graph.modules.values():
        for decl in m.cls.params:
            out.append(f"param:{m.name}:{m.inst}:{decl.name}:"
                       f"{_values(decl, m.values[decl.name], str(m))}")
    for m in graph.modules.values():
        for frame, p, beg, end, values, mode in m.keyframes:
            decl = m.param_decl(p)
            out.append(f"{EASING_COMMANDS[mode]}:{frame}:{m.name}:{m.inst}:{p}:{beg}:{end}:"
                       f"{_values(decl, values, str(m))}")
    return "\n".join(out) + "\n"
