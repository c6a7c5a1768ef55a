"""Module classes (one folder in modules/) and module instances (one `module:` line in a cfg).

A module class is declared in vkdt's line syntax:

* `connectors`: one `name:type:chan:format` per line; line order is the connector index and
  the shader binding (set 1, binding i).
* `params`: one `name:type:count:default[:default...]` per line (float, int or string).
* `optional` (optional): input connector names, one per line, that may stay unconnected.
* `module.py` (optional): hooks `modify_roi_out`, `modify_roi_in`, `create_nodes`,
  `read_source`, `write_sink`, `commit_params`, `init`.
"""

from __future__ import annotations

import importlib.util
import struct
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np

from .errors import GraphError, closest

MAX_NAME = 8
CONNECTOR_TYPES = ("read", "write", "source", "sink", "modify")
CHANS = ("rgba", "rgb", "rg", "r", "y", "ssbo", "*")
FORMATS = ("f16", "f32", "ui8", "u8", "ui16", "u16", "ui32", "u32", "atom", "*")
FORMAT_BYTES = {"f16": 2, "f32": 4, "ui8": 1, "u8": 1, "ui16": 2, "u16": 2, "ui32": 4,
                "u32": 4, "atom": 4}
FORMAT_DTYPE = {"f16": np.float16, "f32": np.float32, "ui8": np.uint8, "u8": np.uint8,
                "ui16": np.uint16, "u16": np.uint16, "ui32": np.uint32, "u32": np.uint32,
                "atom": np.float32}

# connector flags (vkdt's names)
CLEAR = 2
FEEDBACK = 4
PROTECTED = 16
OPTIONAL = 1024  # a node input that may stay unconnected: it reads a zero buffer


def check_name(token: str, what: str, where: str | None = None) -> str:
    """vkdt names are tokens of at most 8 bytes; we reject longer ones instead of truncating."""
    if not token:
        raise GraphError(f"empty {what} name", where=where)
    if len(token.encode()) > MAX_NAME:
        raise GraphError(f"{what} name '{token}' is longer than {MAX_NAME} characters",
                         where=where)
    return token


def channels(chan: str) -> int:
    """vkdt's channel count: ssbo 1, one letter 1, two letters 2, three or more 4."""
    if chan == "ssbo" or len(chan) == 1:
        return 1
    if len(chan) == 2:
        return 2
    return 4


@dataclass
class Roi:
    """Size of the data on a wire: an image's width and height, or an ssbo's two factors."""

    wd: int = 0
    ht: int = 0

    def __bool__(self) -> bool:
        return self.wd > 0 and self.ht > 0


@dataclass
class Connector:
    name: str
    type: str
    chan: str
    format: str
    roi: Roi = field(default_factory=Roi)
    flags: int = 0
    # filled when connected (readers only): (module or node, connector name)
    source: tuple | None = None
    feedback: bool = False

    @property
    def is_input(self) -> bool:
        return self.type in ("read", "sink", "modify")

    @property
    def is_output(self) -> bool:
        return self.type in ("write", "source")

    @property
    def is_ssbo(self) -> bool:
        return self.chan == "ssbo"

    @property
    def nchan(self) -> int:
        return channels(self.chan)

    def nbytes(self) -> int:
        """Bytes on the device. Images are stored as f32 in storage buffers whatever their
        declared format (see pipeline/README.md); ssbos keep their declared format."""
        per = FORMAT_BYTES.get(self.format, 4) if self.is_ssbo else 4
        return max(16, self.roi.wd * self.roi.ht * self.nchan * per)

    def copy(self) -> Connector:
        return Connector(self.name, self.type, self.chan, self.format, Roi(self.roi.wd,
                         self.roi.ht), self.flags)


@dataclass
class Param:
    name: str
    type: str  # float, int, string
    count: int
    default: list | str

    def nbytes(self) -> int:
        if self.type == "string":
            return (self.count + 3) // 4 * 4  # padded so later params stay 4-byte aligned
        return 4 * self.count

    def parse(self, fields: list[str], where: str | None = None) -> list | str:
        """Values from the cfg fields after the param name (vkdt: missing numbers are 0)."""
        if self.type == "string":
            text = ":".join(fields)
            if len(text.encode()) >= self.count:
                raise GraphError(f"string for param '{self.name}' is longer than "
                                 f"{self.count - 1} bytes", where=where)
            return text
        conv = float if self.type == "float" else int
        values = []
        for tok in fields[: self.count]:
            tok = tok.strip()
            try:
                values.append(conv(tok))
            except ValueError:
                raise GraphError(f"param '{self.name}' expects {self.type} values, got "
                                 f"'{tok}'", where=where) from None
        values += [conv(0)] * (self.count - len(values))
        return values


def parse_connector_line(line: str, where: str) -> Connector:
    parts = line.strip().split(":")
    if len(parts) != 4:
        raise GraphError(f"connector '{line.strip()}' is not name:type:chan:format", where=where)
    name, ctype, chan, fmt = parts
    check_name(name, "connector", where)
    if ctype not in CONNECTOR_TYPES:
        raise GraphError(f"connector type '{ctype}' is not one of {', '.join(CONNECTOR_TYPES)}",
                         where=where)
    if chan not in CHANS and not chan.startswith("&"):
        raise GraphError(f"connector chan '{chan}' is not one of {', '.join(CHANS)}", where=where)
    if fmt not in FORMATS:
        raise GraphError(f"connector format '{fmt}' is not one of {', '.join(FORMATS)}",
                         where=where)
    return Connector(name, ctype, chan, fmt)


def parse_param_line(line: str, where: str) -> Param:
    parts = line.rstrip("\n").split(":")
    if len(parts) < 3:
        raise GraphError(f"param '{line.strip()}' is not name:type:count:default...", where=where)
    name, ptype, count = parts[0], parts[1], parts[2]
    check_name(name, "param", where)
    if ptype not in ("float", "int", "string"):
        raise GraphError(f"param type '{ptype}' is not float, int or string", where=where)
    try:
        n = int(count)
    except ValueError:
        raise GraphError(f"param count '{count}' is not an integer", where=where) from None
    if n < 1:
        raise GraphError(f"param count must be at least 1, got {n}", where=where)
    param = Param(name, ptype, n, [])
    param.default = param.parse(parts[3:], where)
    return param


class ModuleClass:
    """What a folder in modules/ declares: connectors, params, hooks, readme."""

    def __init__(self, name: str, folder: Path):
        self.name = check_name(name, "module", str(folder))
        self.folder = folder
        conn_file = folder / "connectors"
        if not conn_file.exists():
            raise GraphError("module has no 'connectors' file", where=str(folder))
        self.connectors = [parse_connector_line(line, f"{conn_file}:{i}")
                           for i, line in enumerate(conn_file.read_text().splitlines(), 1)
                           if line.strip() and not line.startswith("#")]
        param_file = folder / "params"
        self.params: list[Param] = []
        if param_file.exists():
            self.params = [parse_param_line(line, f"{param_file}:{i}")
                           for i, line in enumerate(param_file.read_text().splitlines(), 1)
                           if line.strip() and not line.startswith("#")]
        self.optional = self._read_optional(folder / "optional")
        self.hooks: ModuleType | None = None
        code = folder / "module.py"
        if code.exists():
            spec = importlib.util.spec_from_file_location(f"vkgraph_modules.{name}", code)
            self.hooks = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(self.hooks)

    def _read_optional(self, path: Path) -> frozenset[str]:
        """Inputs listed in `optional` (one name a line) may stay unconnected (kpn-t's wcp)."""
        if not path.exists():
            return frozenset()
        names = set()
        for i, line in enumerate(path.read_text().splitlines(), 1):
            token = line.strip()
            if not token or token.startswith("#"):
                continue
            conn = next((c for c in self.connectors if c.name == token), None)
            if conn is None:
                raise GraphError(f"optional connector '{token}' is not declared in connectors",
                                 where=f"{path}:{i}", hint=closest(token, self.connector_names()))
            if not conn.is_input:
                raise GraphError(f"optional connector '{token}' is not an input",
                                 where=f"{path}:{i}")
            names.add(token)
        return frozenset(names)

    def hook(self, name: str):
        return getattr(self.hooks, name, None) if self.hooks else None

    def readme(self) -> str:
        path = self.folder / "README.md"
        return path.read_text() if path.exists() else ""

    def connector_names(self) -> list[str]:
        return [c.name for c in self.connectors]

    def param_names(self) -> list[str]:
        return [p.name for p in self.params]

    @property
    def is_source(self) -> bool:
        return bool(self.connectors) and self.connectors[0].type == "source"

    @property
    def is_sink(self) -> bool:
        return bool(self.connectors) and self.connectors[0].type == "sink"


class ModuleInstance:
    """One module of a graph: a class, an instance name, its connectors and param values."""

    def __init__(self, cls: ModuleClass, inst: str, where: str | None = None):
        self.cls = cls
        self.name = cls.name
        self.inst = check_name(inst, "instance", where)
        self.connectors = [c.copy() for c in cls.connectors]
        self.values: dict[str, list | str] = {
            p.name: (p.default if p.type == "string" else list(p.default)) for p in cls.params}
        self.keyframes: list[tuple[int, str, int, int, list, str]] = []
        self.position: tuple[float, float] | None = None
        self.data: dict = {}  # module-private state (hooks keep what they need here)
        self.nodes: list = []
        # module connector name -> (node, node connector name) that backs it
        self.backing: dict[str, tuple] = {}
        self.source_dirty = True  # sources: upload requested

    def __repr__(self) -> str:
        return f"{self.name}:{self.inst}"

    @property
    def id(self) -> tuple[str, str]:
        return (self.name, self.inst)

    def connector(self, name: str, where: str | None = None) -> Connector:
        for c in self.connectors:
            if c.name == name:
                return c
        raise GraphError(f"module {self} has no connector '{name}'", where=where,
                         hint=closest(name, self.cls.connector_names()))

    def connector_index(self, name: str) -> int:
        return [c.name for c in self.connectors].index(name)

    def param_decl(self, name: str, where: str | None = None) -> Param:
        for p in self.cls.params:
            if p.name == name:
                return p
        raise GraphError(f"module {self} has no param '{name}'", where=where,
                         hint=closest(name, self.cls.param_names()))

    def param(self, name: str):
        """A param's value: a scalar for count 1, a list otherwise, str for strings."""
        value = self.values[name]
        if isinstance(value, str):
            return value
        return value[0] if len(value) == 1 else list(value)

    def set_param(self, name: str, value) -> None:
        decl = self.param_decl(name)
        if decl.type == "string":
            self.values[name] = str(value)
        else:
            vals = list(value) if isinstance(value, (list, tuple)) else [value]
            conv = float if decl.type == "float" else int
            self.values[name] = [conv(v) for v in vals] + [conv(0)] * (decl.count - len(vals))

    def param_blob(self) -> bytes:
        """Params packed in file order, 4 bytes per number, strings padded to 4 bytes; this is
        the module's param buffer (set 0, binding 1)."""
        out = bytearray()
        for p in self.cls.params:
            v = self.values[p.name]
            if p.type == "string":
                raw = v.encode()[: p.count - 1]
                out += raw + b"\0" * (p.nbytes() - len(raw))
            elif p.type == "float":
                out += struct.pack(f"<{p.count}f", *v)
            else:
                out += struct.pack(f"<{p.count}i", *v)
        return bytes(out) or b"\0" * 16
