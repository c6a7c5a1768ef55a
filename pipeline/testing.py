"""One kernel in one call, numpy in and numpy out, for tests and for trying a kernel out:

    out = dispatch("kpn-t", "sub", inputs={"fine": img}, outputs={"coarse": (h2, w2, 4)},
                   size=(w2, h2))
    out["coarse"]  # (h2, w2, 4) float32

The kernel runs as the engine would run it in a graph (pipeline/README.md, "Conventions"):
compiled with the module's generated params block, its bindings and params block checked, set 0
= global uniform (`frame`, `frames`), the module's params, node info; set 1 binding i = the
i-th connector of `bindings`. It needs no graph and no create_nodes: what create_nodes would
give the node (connectors, dispatch size, push constants, defines) is given here.

Arrays: an image is (h, w, c) float32 (roi `(w, h, c)`); an ssbo is 1-D of its own dtype
(roi `(n, 1, 1)`) or 2-D (ht, wd) (roi `(wd, ht, 1)`, as kpn-t's `Roi(16, n)` weights).

`session_device()` is the one device of a process (a test session), opened on first use and
closed at exit; `CAPTURE` is the folder of the `capture` sink (`pipeline/hostmods/capture`),
which keeps what reaches it per instance and frame in `vkgraph.modules.capture.module.CAPTURED`.
"""

from __future__ import annotations

import atexit
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from .errors import GraphError
from .kernels import check_bindings, check_params, kernel_spirv, pack_push, shader_headers
from .module import Connector, ModuleInstance, Roi
from .nodes import Node
from .registry import HOST_MODULES, Registry, default_dirs

CAPTURE = HOST_MODULES  # the folder that holds `capture` (and i-array, o-array)

_device = None


def session_device():
    """The process's device, opened on first use and closed at exit (one per test session)."""
    global _device
    if _device is None or _device.closed:
        from .vk import Device

        _device = Device.open()
        atexit.register(_device.close)
    return _device


def captured() -> dict:
    """What `capture` sinks received: (instance, frame) -> array (copied at each frame)."""
    return Registry([CAPTURE]).get("capture").hooks.CAPTURED


def _connector(name: str, ctype: str, array: np.ndarray) -> Connector:
    if array.ndim == 3:
        ht, wd, c = array.shape
        chan = {1: "r", 2: "rg", 4: "rgba"}.get(c)
        if chan is None:
            raise GraphError(f"dispatch: image '{name}' has {c} channels (1, 2 or 4)")
        return Connector(name, ctype, chan, "f32", Roi(wd, ht))
    if array.ndim in (1, 2):
        wd, ht = (array.size, 1) if array.ndim == 1 else (array.shape[1], array.shape[0])
        fmt = {"float16": "f16", "float32": "f32", "uint32": "u32", "int32": "u32"}.get(
            array.dtype.name)
        if fmt is None:
            raise GraphError(f"dispatch: ssbo '{name}' has dtype {array.dtype} (float16, "
                             "float32, uint32 or int32)")
        return Connector(name, ctype, "ssbo", fmt, Roi(wd, ht))
    raise GraphError(f"dispatch: '{name}' has shape {array.shape}: an image (h, w, c) or a "
                     "1-D / 2-D ssbo")


def _output(spec) -> np.ndarray:
    """`(h, w, c)` (an f32 image), `(n,)` / `(ht, wd)` (an f32 ssbo) or `(shape, dtype)`."""
    if len(spec) == 2 and not isinstance(spec[1], (int, np.integer)):
        shape, dtype = spec
    else:
        shape, dtype = spec, np.float32
    return np.zeros(tuple(shape), dtype)


def dispatch(module: str, kernel: str = "main", inputs: Mapping[str, np.ndarray] | None = None,
             params: Mapping | None = None, size: Sequence[int] | None = None,
             defines: Mapping | None = None, *, outputs: Mapping | None = None,
             bindings: Sequence[str] | None = None, push: Sequence = (),
             local: Sequence[int] = (8, 8, 1), frame: int = 0, frames: int = 1,
             shader: str | None = None, modules: Sequence[str | Path] = (),
             device=None) -> dict[str, np.ndarray]:
    """Run kernel `<shader or module>/<kernel>.comp` once with module `module`'s params block.

    inputs: the connectors it reads, {name: array}. outputs: the ones it writes, {name: shape
    or (shape, dtype)} (they start zeroed; a name in both is read and written, starting
    from the input); for the module's declared outputs the default is
    an image of `size` with the declared channels. bindings: connector names in binding order
    (default: the module's declared connectors when it declares every name given, else
    inputs then outputs). params: {name: value}, checked against their ranges; the others
    keep their defaults. size: threads (wd, ht[, dp]); default the first image's (w, h).
    Returns {name: array} for the outputs (images (h, w, c) float32, ssbos of their dtype)."""
    registry = Registry([*map(Path, modules), *default_dirs(), HOST_MODULES])
    cls = registry.get(module)
    inst = ModuleInstance(cls, "dispatch")
    for name, value in (params or {}).items():
        inst.set_param(name, value, "dispatch")
    arrays = {name: np.asarray(a) for name, a in (inputs or {}).items()}
    for name, a in arrays.items():
        if a.ndim == 3:
            arrays[name] = np.ascontiguousarray(a, np.float32)
    declared = cls.connector_names()
    if size is None:
        image = next((a for a in arrays.values() if a.ndim == 3), None)
        if image is None:
            raise GraphError("dispatch: give `size` (no input image to take it from)")
        size = (image.shape[1], image.shape[0])
    size = (*tuple(int(s) for s in size), 1, 1)[:3]
    outs = {name: _output(spec) for name, spec in (outputs or {}).items()}
    if bindings is None:
        names = [*arrays, *outs]
        if all(n in declared for n in names):
            bindings = declared
            for c in cls.connectors:  # a declared output nobody described: an image of size
                if c.is_output and c.name not in outs:
                    nchan = c.nchan if c.chan != "*" else 4
                    outs[c.name] = np.zeros((size[1], size[0], nchan), np.float32)
        else:
            bindings = names
    missing = [n for n in bindings if n not in arrays and n not in outs]
    if missing:
        raise GraphError(f"dispatch {module}/{kernel}: no array for connector(s) "
                         f"{', '.join(missing)} (give them in inputs or outputs)")
    for name in set(arrays) & set(outs):  # read and written (SSBO_RW): starts as given
        if outs[name].shape != arrays[name].shape:
            raise GraphError(f"dispatch: '{name}' is in inputs {arrays[name].shape} and "
                             f"outputs {outs[name].shape}")
        outs[name] = arrays.pop(name)
    conns = [_connector(n, "read" if n in arrays else "write",
                        arrays[n] if n in arrays else outs[n]) for n in bindings]
    node = Node(inst, shader or module, kernel, size, tuple(local), list(push),
                dict(defines or {}), conns)
    spirv = kernel_spirv(node.shader, kernel, node.defines, registry.dirs, cls.params,
                         str(cls.folder / "params"), shader_headers(registry, node.shader))
    check_bindings(node, spirv)
    check_params(f"{node.shader}/{kernel}.comp", cls.params, spirv)
    return _run(device or session_device(), node, spirv, {**arrays, **outs}, frame, frames)


def _run(dev, node: Node, spirv: bytes, arrays: dict, frame: int, frames: int) -> dict:
    owned = []

    def buffer(nbytes: int, host: bool = False):
        owned.append(dev.buffer(nbytes, host))
        return owned[-1]

    try:
        glob = buffer(16, host=True)
        glob.view(np.int32)[:2] = (frame, frames)
        blob = node.module.param_blob()
        par = buffer(len(blob), host=True)
        par.view()[: len(blob)] = np.frombuffer(blob, np.uint8)
        info = buffer(16 * max(1, len(node.connectors)), host=True)
        info.view(np.int32)[: 4 * len(node.connectors)] = np.array(
            [[c.roi.wd, c.roi.ht, c.nchan, 0] for c in node.connectors], np.int32).ravel()
        set1 = []
        for c in node.connectors:
            a = arrays[c.name]
            buf = buffer(a.nbytes)
            if a.any():
                buf.upload(a)
            set1.append(buf)
        push = pack_push(node.push)
        kernel = dev.kernel(spirv, len(node.connectors), len(push), node.local)
        cl = dev.commands()
        owned.append(cl)
        cl.begin()
        cl.dispatch(kernel, [glob, par, info], set1, push, kernel.groups(node.dispatch))
        cl.end().run()
        out = {}
        for c, buf in zip(node.connectors, set1, strict=True):
            if c.is_output:
                a = arrays[c.name]
                out[c.name] = buf.download(a.dtype, a.size).reshape(a.shape)
        return out
    finally:
        dev.release(owned)  # the device owns them too
