"""Module classes (one folder in modules/) and module instances (one `module:` line in a cfg).

A module class is declared in vkdt's line syntax:

* `connectors`: one `name:type:chan:format` per line; line order is the connector index and
  the shader binding (set 1, binding i).
* `params`: one `name:type:count:default[:default...]` per line (float, int or string).
* `ranges` (optional; every shipped module has one): the values each param accepts, one
  `name:min:max` (inclusive, `-inf`/`inf` for no bound; for every element of a multi-count
  param) or `name:a|b|c` (the only values allowed) per line. A string param needs no line
  (`name:*` says so explicitly). Values are checked whenever they are set (`Param.check`).
* `optional` (optional): input connector names, one per line, that may stay unconnected.
* `module.py` (optional): the hooks of `HOOKS` below, imported as
  `vkgraph.modules.<name>.module` (pipeline/loader.py).
"""

from __future__ import annotations

import functools
import math
import struct
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np

from . import loader
from .constants import FLT_MAX, INT32  # noqa: F401 (cfg.py and params take them from here)
from .errors import GraphError, RuntimeFailure, clip, closest

MAX_NAME = 8
CONNECTOR_TYPES = ("read", "write", "source", "sink", "modify")
CHANS = ("rgba", "rgb", "rg", "r", "y", "ssbo", "*")
FORMATS = ("f16", "f32", "ui8", "u8", "ui16", "u16", "ui32", "u32", "atom", "*")
FORMAT_BYTES = {"f16": 2, "f32": 4, "ui8": 1, "u8": 1, "ui16": 2, "u16": 2, "ui32": 4,
                "u32": 4, "atom": 4}
FORMAT_DTYPE = {"f16": np.float16, "f32": np.float32, "ui8": np.uint8, "u8": np.uint8,
                "ui16": np.uint16, "u16": np.uint16, "ui32": np.uint32, "u32": np.uint32,
                "atom": np.float32}

# vkdt's name for the param that names a module's file: never empty (Path("") is ".")
FILE_PARAM = "filename"

# The module hook protocol: every function the engine calls in a module's module.py, with its
# signature and when it runs. pipeline/README.md ("Module hooks") lists the same, and
# README.md's "Adding a module" names them; a test keeps the three equal. `graph` is the
# run as hooks see it (pipeline/context.py: HookContext), `module` the ModuleInstance.
HOOKS = {
    "init": ("init(module)", "once, after the instance is created"),
    "modify_roi_out": ("modify_roi_out(graph, module)",
                       "output sizes (default: `input`'s)"),
    "create_nodes": ("create_nodes(graph, module)",
                     "add nodes (default: one running main.comp)"),
    "read_source": ("read_source(graph, module, connector) -> np.ndarray",
                    "image (ht, wd, nchan) f32 / ssbo 1-D"),
    "source_due": ("source_due(graph, module) -> bool",
                   "upload every frame? (asked once)"),
    "write_sink": ("write_sink(graph, module, connector, data)",
                   "same shapes, after the download"),
    "stats": ("stats(graph, module) -> dict", "progress bar, e.g. {'loss': 0.1}"),
    "summary": ("summary(graph, module) -> str",
                "end-of-run line"),
    "losses": ("losses(graph, module) -> np.ndarray",
               "trainable: loss of every frame so far"),
    "current_loss": ("current_loss(graph, module) -> float",
                     "trainable: this frame's loss"),
    "state": ("state(graph, module) -> dict[str, np.ndarray]",
              "checkpoint: what persists"),
    "load_state": ("load_state(graph, module, arrays)", "resume: put state() back"),
}
# hooks that earlier versions documented and nothing implemented; a module.py that still
# defines one is refused instead of being silently never called
REMOVED_HOOKS = ("modify_roi_in", "commit_params", "after_frame")

# connector flags (vkdt's names)
CLEAR = 2
FEEDBACK = 4
PROTECTED = 16
OPTIONAL = 1024  # a node input that may stay unconnected: it reads a zero buffer


def as_bytes(text: str) -> bytes:
    """A name or string value as the bytes it stands for: a file name from a command line that
    is not UTF-8 (`bad\\xff.pfm`) holds the surrogate escapes that plain `encode()` refuses;
    any other lone surrogate becomes '?'."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


def check_name(token: str, what: str, where: str | None = None) -> str:
    """vkdt names are tokens of at most 8 bytes; we reject longer ones instead of truncating."""
    if not token:
        raise GraphError(f"empty {what} name", where=where)
    if len(as_bytes(token)) > MAX_NAME:
        raise GraphError(f"{what} name '{clip(token, 40)}' is longer than {MAX_NAME} characters",
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


# a node connector for graph.add_node: (name, type, chan, format, roi or None)
def ssbo(name: str, ctype: str, n: int | None = None, fmt: str = "f32"):
    return (name, ctype, "ssbo", fmt, Roi(n, 1) if n else None)


def img(name: str, ctype: str, roi: Roi | None = None):
    return (name, ctype, "rgba", "f32", roi)


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
    # outputs of a module: what the writer says about the data (e.g. a .lut's trailing text
    # under "text"); every reader sees it through HookContext.meta (pipeline/context.py)
    meta: dict = field(default_factory=dict)

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
    # the declared range (modules/<name>/ranges): bounds for every element, or the allowed
    # values; without a declaration only what the device type holds is checked
    lo: float = -math.inf
    hi: float = math.inf
    choices: tuple | None = None
    declared: bool = False  # the module's ranges file has a line for it

    def nbytes(self) -> int:
        if self.type == "string":
            return (self.count + 3) // 4 * 4  # padded so later params stay 4-byte aligned
        return 4 * self.count

    def parse(self, fields: list[str], where: str | None = None) -> list | str:
        """Values from the cfg fields after the param name (vkdt: missing numbers are 0)."""
        if self.type == "string":
            text = ":".join(fields)
            if len(as_bytes(text)) >= self.count:
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
                                 f"'{clip(tok, 40)}'", where=where) from None
        values += [conv(0)] * (self.count - len(values))
        return values

    def range_text(self) -> str:
        """The accepted values, as an error message or `vkgraph modules` shows them."""
        if self.choices is not None:
            return "one of " + ", ".join(str(c) for c in self.choices)
        if self.type == "string":
            return f"text of at most {self.count - 1} bytes"
        lo, hi = self._bounds()
        if self.type == "int":
            return f"{int(lo)}..{int(hi)}"
        return f"{_number(lo)}..{_number(hi)}"

    def _bounds(self) -> tuple[float, float]:
        """The declared range, for ints within what a GLSL int holds."""
        if self.type == "int":
            return max(self.lo, INT32[0]), min(self.hi, INT32[1])
        return self.lo, self.hi

    def check(self, values: list | str, owner: str, where: str | None = None) -> None:
        """Raise GraphError unless every value is allowed: inside the declared range or
        choices, and representable on the device (finite float32, int32). Nothing is ever
        clamped: a value outside is a mistake the user has to see."""
        items = [values] if isinstance(values, str) else values
        for value in items:
            if self._allowed(value):
                continue
            shown = clip(value if isinstance(value, str) else _number(value), 40)
            if self.choices is not None:
                why = f"not {self.range_text()}"
            elif self.type == "string" and not value:
                shown, why = "empty", "but it names a file (empty would be the working folder)"
            elif self.type == "string":
                why = f"longer than {self.count - 1} bytes"
            elif self.type == "float" and not math.isfinite(value):
                why = f"not a finite number (range {self.range_text()})"
            elif self.type == "float" and abs(value) > FLT_MAX:
                why = "beyond what a 32-bit float holds"
            else:
                why = f"outside its range {self.range_text()}"
            raise GraphError(f"param '{self.name}' of {owner} is {shown}, {why}", where=where)

    def _allowed(self, value) -> bool:
        if self.type == "string" and len(as_bytes(value)) >= self.count:
            return False
        if self.type == "string" and self.name == FILE_PARAM and not value:
            return False
        if self.choices is not None:
            return value in self.choices
        if self.type == "string":
            return True
        if self.type == "float" and (not math.isfinite(value) or abs(value) > FLT_MAX):
            return False
        lo, hi = self._bounds()
        return lo <= value <= hi


def _number(x: float) -> str:
    """A bound or value as a person writes it: 12, 0.5, inf, 1e+30."""
    if isinstance(x, int) or (math.isfinite(x) and x == int(x) and abs(x) < 1e15):
        return str(int(x))
    return repr(float(x))


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


def _bound(token: str, param: Param, where: str) -> float:
    try:
        value = float(token)
    except ValueError:
        value = math.nan
    if math.isnan(value) or (param.type == "int" and math.isfinite(value)
                             and value != int(value)):
        raise GraphError(f"range bound '{clip(token, 40)}' of param '{param.name}' is not "
                         f"{'an integer' if param.type == 'int' else 'a number'} (or -inf, "
                         "inf)", where=where)
    return value


def parse_range_line(line: str, params: dict[str, Param], where: str) -> None:
    """`name:min:max`, `name:a|b|c` or `name:*` (any value: strings); sets the Param's
    range in place."""
    parts = line.strip().split(":")
    name = parts[0]
    param = params.get(name)
    if param is None:
        raise GraphError(f"range for unknown param '{clip(name, 40)}'", where=where,
                         hint=closest(name, params))
    if param.declared:
        raise GraphError(f"second range for param '{name}'", where=where)
    param.declared = True
    if len(parts) == 2 and parts[1].strip() == "*":
        return
    if len(parts) == 2 and parts[1].strip():
        conv = {"int": int, "float": float, "string": str}[param.type]
        try:
            choices = tuple(conv(c.strip()) for c in parts[1].split("|"))
        except ValueError:
            raise GraphError(f"choices '{clip(parts[1], 40)}' of param '{name}' are not all "
                             f"{param.type} values", where=where) from None
        param.choices = choices
    elif len(parts) == 3 and param.type != "string":
        param.lo, param.hi = _bound(parts[1], param, where), _bound(parts[2], param, where)
        if param.lo > param.hi:
            raise GraphError(f"range of param '{name}' is empty: {parts[1]} > {parts[2]}",
                             where=where)
    else:
        raise GraphError(f"range '{clip(line.strip(), 60)}' is not name:min:max, name:a|b|c "
                         "or name:* (min:max is for numbers)", where=where)
    try:
        param.check(param.default, "its module", where)
    except GraphError as e:
        raise GraphError(f"the default of {e.message}", where=where) from None


PACKAGE = Path(__file__).resolve().parent.parent  # the shipped modules are ours


class ModuleHookError(RuntimeFailure):
    pass


def _guarded(cls: ModuleClass, name: str, fn):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (GraphError, RuntimeFailure):
            raise
        except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's code failed
            raise ModuleHookError(f"module '{cls.name}' hook '{name}' failed: {described(e)}",
                                  where=last_frame_in(cls.folder, e)) from e
    return call


def described(e: BaseException) -> str:
    """An exception of the user's code in a few words."""
    if isinstance(e, SystemExit):
        return f"it called sys.exit({e.code!r})"
    return f"{type(e).__name__}: {e}"


def last_frame_in(folder: Path, e: BaseException) -> str:
    """`file:line` of the last frame of `e`'s traceback in a file of `folder` (the user's own
    code), else `folder`."""
    folder = folder.resolve()
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if Path(f.filename).resolve().is_relative_to(folder)]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else str(folder)


class ModuleClass:
    """What a folder in modules/ declares: connectors, params, hooks, readme."""

    def __init__(self, name: str, folder: Path):
        self.name = check_name(name, "module", str(folder))
        self.folder = folder
        self.shipped = Path(folder).resolve().is_relative_to(PACKAGE)  # vkgraph's own code
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
        range_file = folder / "ranges"
        if range_file.exists():
            by_name = {p.name: p for p in self.params}
            for i, line in enumerate(range_file.read_text().splitlines(), 1):
                if line.strip() and not line.lstrip().startswith("#"):
                    parse_range_line(line, by_name, f"{range_file}:{i}")
        self.optional = self._read_optional(folder / "optional")
        # module.py, imported once as vkgraph.modules.<name>.module (pipeline/loader.py)
        self.hooks: ModuleType | None = loader.hooks(name, folder)
        # headers generated for its kernels' folder ({include name: text}, e.g. kpn-t's
        # layout.gen: its weight layout, defined once in Python)
        self.headers: dict[str, str] = dict(getattr(self.hooks, "HEADERS", None) or {})
        for old in REMOVED_HOOKS:
            if callable(getattr(self.hooks, old, None)):
                raise GraphError(f"module '{name}' defines hook '{old}', which the engine does "
                                 "not call (removed); the hooks are: " + ", ".join(HOOKS),
                                 where=str(folder / "module.py"))
        # a trainable module's declaration (pipeline/trainer.py: Trains), or None
        self.trainable = getattr(self.hooks, "TRAINABLE", None) if self.hooks else None

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
        """The module's function for hook `name` (one of HOOKS), or None. A user's module
        (not shipped with vkgraph) gets its hook guarded: an exception other than our
        errors, or sys.exit(), is a RuntimeFailure naming the module, the hook and the last
        line of the module's own code it passed, not an internal error of vkgraph."""
        if name not in HOOKS:
            raise KeyError(f"'{name}' is not a module hook (pipeline/module.py: HOOKS)")
        fn = getattr(self.hooks, name, None) if self.hooks else None
        if fn is None and self.trainable is not None:
            return self.trainable.hooks.get(name)  # the trainer's (pipeline/trainer.py)
        if fn is None or self.shipped:
            return fn
        return _guarded(self, name, fn)

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
        # a trainable module's record (pipeline/trainer.py: Trainable), set by create_nodes;
        # the trainer hooks, checkpoints and the gradient check read it
        self.trainable = None
        self.nodes: list = []
        # module connector name -> (node, node connector name) that backs it
        self.backing: dict[str, tuple] = {}
        self.source_dirty = True  # sources: upload requested
        self._blob: bytes | None = None  # param_blob() packed; None after a value changed

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

    def param(self, name: str, where: str | None = None):
        """A param's value: a scalar for count 1, a list otherwise, str for strings. An
        unknown name is a GraphError naming the closest declared one."""
        value = self.values[self.param_decl(name, where).name]
        if isinstance(value, str):
            return value
        return value[0] if len(value) == 1 else list(value)

    def set_param(self, name: str, value, where: str | None = None) -> None:
        """Set a param from Python: a scalar, a list (missing elements are 0) or a string.
        A value outside the param's range is a GraphError, as from a cfg line."""
        decl = self.param_decl(name, where)
        if decl.type == "string":
            self.assign(decl, str(value), where)
            return
        raw = list(value) if isinstance(value, (list, tuple)) else [value]
        conv = float if decl.type == "float" else int
        try:
            vals = [conv(v) for v in raw]
        except (TypeError, ValueError, OverflowError):
            vals = None
        if vals is None or (decl.type == "int" and any(
                isinstance(v, float) and v != int(v) for v in raw)):
            raise GraphError(f"param '{name}' of {self} expects {decl.type} values, got "
                             f"{clip(value, 40)}", where=where)
        self.assign(decl, vals + [conv(0)] * (decl.count - len(vals)), where)

    def assign(self, decl: Param, values: list | str, where: str | None = None) -> None:
        """The one place param values are stored: checked against the declaration first."""
        if not isinstance(values, str) and len(values) != decl.count:
            raise GraphError(f"param '{decl.name}' of {self} takes {decl.count} values, got "
                             f"{len(values)}", where=where)
        decl.check(values, str(self), where)
        self.store(decl.name, values)

    def store(self, name: str, values: list | str) -> None:
        """Store checked values (assign, keyframes): every write of `values` goes through
        here, so that param_blob() packs again only after a change. The same values again
        (a keyframe held, a noise level set anew) keep the blob, so the frame loop neither
        waits nor uploads for them."""
        if self.values.get(name) == values:
            return
        self.values[name] = values
        self._blob = None

    def param_blob(self) -> bytes:
        """Params packed in file order, 4 bytes per number, strings padded to 4 bytes; this is
        the module's param buffer (set 0, binding 1). Packed once per change of the values
        (store): the frame loop asks every frame and re-uploads only a new blob."""
        if self._blob is None:
            self._blob = self._pack()
        return self._blob

    def _pack(self) -> bytes:
        out = bytearray()
        for p in self.cls.params:
            v = self.values[p.name]
            if p.type == "string":
                raw = as_bytes(v)[: p.count - 1]
                out += raw + b"\0" * (p.nbytes() - len(raw))
            elif p.type == "float":
                out += struct.pack(f"<{p.count}f", *v)
            else:
                out += struct.pack(f"<{p.count}i", *v)
        return bytes(out) or b"\0" * 16
