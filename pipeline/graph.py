"""The module graph: module instances, the wires between their connectors, params, keyframes.

Only the reader side of a wire stores it (`connector.source = (writer, connector name)`), as in
vkdt; a writer's readers are found by scanning. Nodes, buffers and sizes are not here: they
are built from this graph for one run (pipeline/nodes.py, pipeline/runner.py).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from .errors import GraphError, clip, closest
from .module import Connector, ModuleInstance, Param, check_name
from .registry import Registry

EASINGS = ("linear", "ease-in", "ease-out", "smooth", "step")
Key = tuple[str, str]


def warp(t: float, mode: str) -> float:
    """Easing of a keyframe segment; the mode is that of the segment's later keyframe."""
    if mode == "ease-in":
        return t ** 3
    if mode == "ease-out":
        return 1.0 - (1.0 - t) ** 3
    if mode == "smooth":
        return t * t * (3.0 - 2.0 * t)
    if mode == "step":
        return 1.0 if t > 0.5 else 0.0
    return t


def _meet(writer: str, reader: str, fallback: str) -> tuple[str, str]:
    """vkdt's wildcard order: a '*' reader takes the writer's value, a '*' writer takes the
    reader's, and what is still '*' becomes the fallback (rgba for chan, f16 for format)."""
    if reader == "*":
        reader = writer
    if writer == "*":
        writer = reader
    if reader == "*":
        reader = writer = fallback
    return writer, reader


def _declared(module: ModuleInstance, name: str) -> Connector:
    """The connector as the class declares it (before any wildcard was resolved)."""
    return module.cls.connectors[module.connector_index(name)]


def _integer(token: int | str, what: str, where: str | None) -> int:
    try:
        return int(token)
    except (TypeError, ValueError):
        raise GraphError(f"{what} '{clip(token, 40)}' is not an integer", where=where) from None


class Graph:
    def __init__(self, registry: Registry | None = None):
        self.registry = registry if registry is not None else Registry()
        self.frames = 1
        self.fps = 0.0
        self.modules: dict[Key, ModuleInstance] = {}
        self.cfg_path: Path | None = None
        self.declared_at: dict[Key, str | None] = {}  # where each module line was, for errors
        # connection order: wildcards resolve differently in another order, so the writer
        # replays this one
        self._seq: dict[tuple[str, str, str], int] = {}
        self._next_seq = 0

    # -- modules ---------------------------------------------------------------------------

    def add_module(self, name: str, inst: str, where: str | None = None,
                   position: tuple[float, float] | None = None) -> ModuleInstance:
        """Add an instance; an existing (name, inst) is returned as is (vkdt's dedup). The
        `init` hook is not called here: a build calls it for the modules it runs."""
        existing = self.modules.get((name, inst))
        if existing is not None:
            if position is not None:
                existing.position = position
            return existing
        check_name(name, "module", where)
        check_name(inst, "instance", where)
        module = ModuleInstance(self.registry.get(name, where), inst, where)
        module.position = position
        self.modules[module.id] = module
        self.declared_at[module.id] = where
        return module

    def module(self, name: str, inst: str, where: str | None = None) -> ModuleInstance:
        found = self.modules.get((name, inst))
        if found is None:
            raise GraphError(f"unknown module instance '{name}:{inst}'", where=where,
                             hint=closest(f"{name}:{inst}", [f"{m}:{i}" for m, i in self.modules]))
        return found

    def remove_module(self, name: str, inst: str, where: str | None = None) -> None:
        module = self.module(name, inst, where)
        for c in module.connectors:
            if c.is_output:
                for reader, rc in self.readers(module, c.name):
                    self._disconnect(reader, rc)
            elif c.source is not None:
                self._disconnect(module, c)
        del self.modules[module.id]
        self.declared_at.pop(module.id, None)

    # -- wires -----------------------------------------------------------------------------

    def readers(self, module: ModuleInstance, conn_name: str) -> list[tuple[ModuleInstance,
                                                                            Connector]]:
        return [(m, c) for m in self.modules.values() for c in m.connectors
                if c.source is not None and c.source[0] is module and c.source[1] == conn_name]

    def connections(self) -> list[tuple[ModuleInstance, str, ModuleInstance, Connector]]:
        """Every wire as (writer, writer connector name, reader, reader connector), in the
        order the wires were made."""
        wires = [(c.source[0], c.source[1], m, c) for m in self.modules.values()
                 for c in m.connectors if c.source is not None]
        wires.sort(key=lambda w: self._seq.get((w[2].name, w[2].inst, w[3].name), math.inf))
        return wires

    def connect(self, m0: str, i0: str, c0: str, m1: str, i1: str, c1: str,
                feedback: bool = False, where: str | None = None) -> None:
        """Wire output c0 of (m0, i0) to input c1 of (m1, i1); m0 == "-1" disconnects c1.
        A feedback wire gives the reader the writer's previous frame and is not a dependency,
        so it may close a loop."""
        if m0 == "-1":
            self.disconnect(m1, i1, c1, where)
            return
        writer = self.module(m0, i0, where)
        reader = self.module(m1, i1, where)
        wc = writer.connector(c0, where)
        rc = reader.connector(c1, where)
        if not wc.is_output:
            raise GraphError(f"connector '{c0}' of {writer} is a {wc.type} connector; a wire "
                             "starts at a write or source connector", where=where)
        if not rc.is_input:
            raise GraphError(f"connector '{c1}' of {reader} is a {rc.type} connector; a wire "
                             "ends at a read, sink or modify connector", where=where)
        if not feedback:
            self._check_cycle(writer, c0, reader, c1, where)
        # the writer as it will be once the reader's old wire is gone (it may be the same one)
        wchan, wfmt = wc.chan, wc.format
        if rc.source == (writer, c0) and len(self.readers(writer, c0)) == 1:
            wchan, wfmt = _declared(writer, c0).chan, _declared(writer, c0).format
        rdecl = _declared(reader, c1)
        wchan, wfmt, rchan, rfmt = self._negotiate(writer, c0, wchan, wfmt, reader, rdecl,
                                                   where)
        self._disconnect(reader, rc)
        wc.chan, wc.format = wchan, wfmt
        rc.chan, rc.format = rchan, rfmt
        rc.source = (writer, c0)
        rc.feedback = feedback
        self._seq[(reader.name, reader.inst, c1)] = self._next_seq
        self._next_seq += 1
        self._propagate_refs(reader, where)

    def disconnect(self, m1: str, i1: str, c1: str, where: str | None = None) -> None:
        reader = self.module(m1, i1, where)
        self._disconnect(reader, reader.connector(c1, where))

    def _disconnect(self, reader: ModuleInstance, rc: Connector) -> None:
        """Undo a wire; both ends that no longer have a wire go back to their declaration
        so a later wire resolves their wildcards afresh (vkdt does the same)."""
        if rc.source is None:
            return
        writer, wname = rc.source
        rc.source, rc.feedback = None, False
        decl = _declared(reader, rc.name)
        rc.chan, rc.format = decl.chan, decl.format
        self._seq.pop((reader.name, reader.inst, rc.name), None)
        if not self.readers(writer, wname):
            wc, wdecl = writer.connector(wname), _declared(writer, wname)
            wc.chan, wc.format = wdecl.chan, wdecl.format

    def _ref_chan(self, module: ModuleInstance, chan: str) -> str | None:
        """Follow `&name` chan references within one module; None while the referenced
        connector is itself still a wildcard."""
        seen = set()
        while chan.startswith("&"):
            ref = chan[1:]
            if ref in seen:
                return None
            seen.add(ref)
            if ref not in module.cls.connector_names():
                raise GraphError(f"chan '&{ref}' of module {module.name} names no connector",
                                 where=str(module.cls.folder / "connectors"),
                                 hint=closest(ref, module.cls.connector_names()))
            chan = module.connector(ref).chan
        return None if chan == "*" else chan

    def _negotiate(self, writer: ModuleInstance, c0: str, wchan: str, wfmt: str,
                   reader: ModuleInstance, rdecl: Connector, where: str | None):
        """Resolve the wildcards of both ends of a new wire; both must then agree."""
        rchan, rfmt = rdecl.chan, rdecl.format
        pending = False  # writer chan is '&x' whose target is not known yet
        if wchan.startswith("&"):
            resolved = self._ref_chan(writer, wchan)
            pending = resolved is None
            wchan = wchan if pending else resolved
        if rchan.startswith("&"):
            rchan = self._ref_chan(reader, rchan) or "*"
        if not pending:  # a pending chan is settled later by _propagate_refs
            wchan, rchan = _meet(wchan, rchan, "rgba")
        wfmt, rfmt = _meet(wfmt, rfmt, "f16")
        if (not pending and rchan != wchan) or rfmt != wfmt:
            wc = writer.connector(c0)
            raise GraphError(f"incompatible connection: writer {writer}:{c0} is "
                             f"{wc.chan}:{wc.format}, reader {reader}:{rdecl.name} wants "
                             f"{rdecl.chan}:{rdecl.format}", where=where)
        return wchan, wfmt, rchan, rfmt

    def _propagate_refs(self, module: ModuleInstance, where: str | None) -> None:
        """An input of `module` changed: outputs declared `&input` now know their chan, and
        so do the wildcard readers downstream of them."""
        for decl, oc in zip(module.cls.connectors, module.connectors, strict=True):
            if not (oc.is_output and decl.chan.startswith("&")):
                continue
            chan = self._ref_chan(module, decl.chan)
            if chan is None or chan == oc.chan:
                continue
            oc.chan = chan
            for reader, rc in self.readers(module, oc.name):
                rdecl = _declared(reader, rc.name)
                if rdecl.chan != "*" and not rdecl.chan.startswith("&") and rdecl.chan != chan:
                    raise GraphError(f"incompatible connection: writer {module}:{oc.name} is "
                                     f"{chan}:{oc.format}, reader {reader}:{rc.name} wants "
                                     f"{rdecl.chan}:{rdecl.format}", where=where)
                if rc.chan != chan:
                    rc.chan = chan
                    self._propagate_refs(reader, where)

    def _check_cycle(self, writer: ModuleInstance, c0: str, reader: ModuleInstance, c1: str,
                     where: str | None) -> None:
        """A new non-feedback wire writer -> reader closes a cycle iff the reader already
        feeds the writer, i.e. the reader is upstream of the writer."""
        stack, parent = [writer], {id(writer): None}
        while stack:
            m = stack.pop()
            if m is reader:
                path = [m]  # upstream walk: reader ... writer, i.e. flow order
                while parent[id(path[-1])] is not None:
                    path.append(parent[id(path[-1])])
                names = " -> ".join(str(x) for x in path + [reader])
                raise GraphError(f"connecting {writer}:{c0} to {reader}:{c1} closes the cycle "
                                 f"{names}", where=where,
                                 hint="use feedback: to read the previous frame")
            for c in m.connectors:
                if c.source is not None and not c.feedback and id(c.source[0]) not in parent:
                    parent[id(c.source[0])] = m
                    stack.append(c.source[0])

    def unconnected_required_inputs(self, module: ModuleInstance) -> list[Connector]:
        return [c for c in module.connectors
                if c.is_input and c.source is None and c.name not in module.cls.optional]

    # -- params and keyframes --------------------------------------------------------------

    def _range(self, decl: Param, beg: int | str, end: int | str,
               where: str | None) -> tuple[int, int]:
        """[beg, end) inside the param; end 0 means up to the last element (vkdt)."""
        b = _integer(beg, "element range begin", where)
        e = _integer(end, "element range end", where) or decl.count
        if not 0 <= b < e <= decl.count:
            raise GraphError(f"element range {b}:{e} is outside param '{decl.name}' "
                             f"({decl.count} elements)", where=where)
        return b, e

    @staticmethod
    def _numbers(decl: Param, fields: list[str], n: int, where: str | None) -> list:
        # vkdt pads missing values with 0 and drops extra ones; both are almost always a typo
        if len(fields) != n:
            raise GraphError(f"param '{decl.name}' takes {n} value{'s' * (n != 1)}, got "
                             f"{len(fields)}", where=where)
        return replace(decl, count=n).parse(fields, where)

    def set_param(self, m: str, i: str, p: str, fields: list[str],
                  where: str | None = None) -> None:
        module = self.module(m, i, where)
        decl = module.param_decl(p, where)
        if decl.type == "string":
            module.assign(decl, decl.parse(fields, where), where)
        else:
            module.assign(decl, self._numbers(decl, fields, decl.count, where), where)

    def set_paramsub(self, m: str, i: str, p: str, beg: int | str, end: int | str,
                     fields: list[str], where: str | None = None, op: str = "set") -> None:
        """Set (op "set"), add to ("inc") or subtract from ("dec") elements [beg, end)."""
        module = self.module(m, i, where)
        decl = module.param_decl(p, where)
        if decl.type == "string":
            raise GraphError(f"param '{p}' is a string; element ranges need float or int",
                             where=where)
        b, e = self._range(decl, beg, end, where)
        new = self._numbers(decl, fields, e - b, where)
        values = list(module.values[p])
        sign = {"set": 0, "inc": 1, "dec": -1}[op]
        values[b:e] = new if sign == 0 else [x + sign * y for x, y in zip(values[b:e], new,
                                                                           strict=True)]
        module.assign(decl, values, where)

    def add_keyframe(self, frame: int | str, m: str, i: str, p: str, beg: int | str,
                     end: int | str, fields: list[str], mode: str = "linear",
                     where: str | None = None) -> None:
        """A keyframe's values are checked here, when it is set; the values between two
        keyframes lie between theirs (every easing maps [0, 1] into [0, 1]), so they are in
        range too."""
        f = _integer(frame, "keyframe frame", where)
        if f < 0:
            raise GraphError(f"keyframe frame '{frame}' is negative", where=where)
        if mode not in EASINGS:
            raise GraphError(f"unknown keyframe easing '{mode}'", where=where,
                             hint=closest(mode, EASINGS))
        module = self.module(m, i, where)
        decl = module.param_decl(p, where)
        if decl.type == "string":
            b, e, values = 0, decl.count, decl.parse(fields, where)
        else:
            b, e = self._range(decl, beg, end, where)
            values = self._numbers(decl, fields, e - b, where)
        decl.check(values, str(module), where)
        key = (f, p, b, e)
        # one keyframe per frame and element range: a later line replaces an earlier one;
        # the list stays sorted by frame so apply_keyframes and the writer need no sort
        kept = [k for k in module.keyframes if k[:4] != key]
        at = next((n for n, k in enumerate(kept) if k[0] > f), len(kept))
        kept.insert(at, (f, p, b, e, values, mode))
        module.keyframes = kept

    def has_keyframes(self) -> bool:
        return any(m.keyframes for m in self.modules.values())

    def apply_keyframes(self, frame: int) -> None:
        """Set every keyframed param to its value at `frame`. Each (param, element range) is
        animated on its own; values are stored for their range (vkdt stores the values of a
        range with beg > 0 from the wrong offset; that is not reproduced)."""
        for module in self.modules.values():
            tracks: dict[tuple[str, int, int], list] = {}
            for k in module.keyframes:
                tracks.setdefault((k[1], k[2], k[3]), []).append(k)
            for (p, b, e), keys in tracks.items():
                k0 = next((k for k in reversed(keys) if k[0] <= frame), keys[0])
                k1 = next((k for k in keys if k[0] > frame), None)
                values = k0[4]
                if (k1 is not None and k1 is not k0
                        and module.param_decl(p).type == "float"):
                    t = warp((frame - k0[0]) / (k1[0] - k0[0]), k1[5])
                    values = [a + t * (c - a) for a, c in zip(k0[4], k1[4], strict=True)]
                if not isinstance(values, str):
                    values = [*module.values[p][:b], *values, *module.values[p][e:]]
                module.store(p, values)
