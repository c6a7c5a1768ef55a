"""Kernels: where a node's `.comp` file is, compiling it with its module's params block, and
the checks of its SPIR-V against the node (bindings, params block); push constants packed.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from .errors import GraphError
from .nodes import Node
from .paramblock import GENERATED, glsl_name, params_glsl
from .paramblock import check_params as check_param_scalars
from .vk import (
    compile_glsl,
    spirv_bindings,
    spirv_block_scalars,
    spirv_buffer_elements,
    spirv_image_bindings,
    spirv_writable,
)

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


def user_kernel_roots(dirs) -> list[Path]:
    """The folders of user module directories `dirs` that hold kernel folders `<shader>/`:
    each directory itself and its `shaders/` (the shipped modules/ folder is skipped: its
    kernels are in SHADERS)."""
    shipped = (SHADERS.parent / "modules").resolve()
    return [root for d in map(Path, dirs) if d.resolve() != shipped
            for root in (d, d / "shaders")]


def kernel_file(shader: str, kernel: str, dirs=()) -> Path:
    """`<kernel>.comp` of shader folder `shader`: in the user module directories `dirs`
    (user_kernel_roots), then in the shipped `shaders/`."""
    name = f"{kernel}.comp"
    searched = [root / shader for root in user_kernel_roots(dirs)] + [SHADERS / shader]
    for folder in searched:
        if (folder / name).is_file():
            return folder / name
    raise GraphError(f"kernel {shader}/{name} not found; searched "
                     + ", ".join(str(f) for f in searched))


def shader_headers(registry, shader: str) -> dict[str, str]:
    """The generated headers of kernel folder `shader`: those its module of the same name
    declares (`HEADERS` in its module.py), found through the graph's registry, so a user
    module's own folder gets its own; none where no module has that name."""
    return registry.get(shader).headers if registry is not None and shader in registry else {}


def compile_kernel(path: Path, defines: dict | None = None, params=(),
                   where: str = "params", headers: dict[str, str] | None = None) -> bytes:
    """SPIR-V of a kernel file; `#include "..."` finds the generated `params.gen` (the block
    of `params`, the module's declared params: pipeline/paramblock.py) and `headers` (the
    folder's generated headers: shader_headers), the shared shaders/include/ and the
    kernel's own folder. `where` names the params file in errors."""
    params = list(params)
    for p in params:
        if glsl_name(p.name) in (defines or {}):
            raise GraphError(f"param '{p.name}' has the name of a define of kernel "
                             f"{path.parent.name}/{path.name}", where=where)
    return compile_glsl(path, [SHADERS / "include", path.parent], defines,
                        {**(headers or {}), GENERATED: params_glsl(params, where)})


def kernel_spirv(shader: str, kernel: str, defines: dict | None = None, dirs=(), params=(),
                 where: str = "params", headers: dict[str, str] | None = None) -> bytes:
    return compile_kernel(kernel_file(shader, kernel, dirs), defines, params, where, headers)


SET0_BINDINGS = 3  # global uniform, the module's params, node info (shaders/include)


def check_bindings(node: Node, spirv: bytes) -> None:
    """Every buffer a kernel declares must be one the engine binds: set 0 bindings 0..2, set 1
    one per node connector. A binding past them would read as zeros and write nowhere (no
    error from the driver), so it is a GraphError naming the kernel and the binding."""
    n = len(node.connectors)
    for (dset, binding), kind in spirv_image_bindings(spirv).items():
        if kind != "texel" or dset != 1:
            what = "an image or sampler" if kind != "texel" else "a texel buffer"
            raise GraphError(f"kernel {node.shader}/{node.kernel}.comp declares {what} at set "
                             f"{dset} binding {binding}; the engine binds storage buffers and, "
                             f"in set 1, uniform texel buffers (samplerBuffer, TEX_IN)")
    for dset, binding in spirv_bindings(spirv):
        limit = SET0_BINDINGS if dset == 0 else n if dset == 1 else 0
        if binding >= limit:
            what = (f"node {node.label} has {n} connectors (bindings 0..{n - 1})"
                    if dset == 1 else "the engine binds set 0 bindings 0..2 and set 1 only"
                    if dset == 0 else "the engine binds sets 0 and 1 only")
            raise GraphError(f"kernel {node.shader}/{node.kernel}.comp declares set {dset} "
                             f"binding {binding}, but {what}")
    check_elements(node, spirv)


def glsl_element(kind: str, bits: int, count: int = 1) -> str:
    """The GLSL name of a buffer element (spirv_buffer_elements): float, vec4, float16_t,
    uvec4, double, int64_t ..."""
    scalar = {("float", 32): "float", ("float", 16): "float16_t", ("float", 64): "double",
              ("int", 32): "int", ("uint", 32): "uint"}.get((kind, bits),
                                                          f"{kind}{bits}_t")
    if count == 1:
        return scalar
    prefix = {"float": "", "float16_t": "f16", "double": "d", "int": "i", "uint": "u"}.get(
        scalar, f"{kind[0]}{bits}")
    return f"{prefix}vec{count}"


def check_elements(node: Node, spirv: bytes) -> None:
    """The element a kernel declares for each connector's storage buffer against what the
    connector holds (pipeline/README.md, "Storage"). An image holds `nchan` f32 values a
    pixel, row-major: its array must be of 32-bit floats, one element a pixel (float for
    y/r, vec2 for rg, vec4 for rgb/rgba: IMG_IN, IMG_OUT). An rgba image read as float[]
    would index a quarter of the image, silently. An f16 ssbo read as 32-bit floats, or an
    f32 ssbo as halves, reads one format's bits as the other's; other ssbo elements are the
    kernel's choice (vec4 for 16-byte loads, uvec4 for 8 packed halves, double over an f32
    buffer twice as long). A mismatch is a GraphError naming the module, the kernel, the
    binding and both types."""
    elements = spirv_buffer_elements(spirv)
    for i, c in enumerate(node.connectors):
        found = elements.get((1, i))
        if found is None or c.chan == "*" or c.chan.startswith("&"):
            continue
        kind, bits, count, stride = found
        if c.is_ssbo:
            want = {"f16": 16, "f32": 32}.get(c.format)
            if want is None or kind != "float" or bits in (want, 64):
                continue
            declared = f"an {c.format} ssbo ({glsl_element('float', want)}[])"
        else:
            pixel = 4 * c.nchan
            if kind == "float" and bits == 32 and stride == pixel:
                continue
            article = "a" if c.chan == "y" else "an"
            elem = glsl_element("float", 32, c.nchan)
            declared = f"{article} {c.chan} image ({elem}[], {pixel} bytes a pixel)"
        raise GraphError(f"module {node.module}: kernel {node.shader}/{node.kernel}.comp "
                         f"declares set 1 binding {i} (connector '{c.name}') as "
                         f"{glsl_element(kind, bits, count)}[] ({stride} bytes an element), "
                         f"but the connector is {declared}")


def check_readonly(node: Node, spirv: bytes) -> None:
    """A connector the node reads must be bound read-only (GLSL `readonly`: SSBO_IN, IMG_IN):
    the recording puts barriers where nodes write what others read (recording.py: Hazards),
    and a write through an input would go unseen there. A GraphError names the kernel and
    the connector; an input the kernel changes in place is a `modify` connector."""
    writable = spirv_writable(spirv)
    for i, c in enumerate(node.connectors):
        if c.type in ("read", "sink") and (1, i) in writable:
            raise GraphError(f"kernel {node.shader}/{node.kernel}.comp may write binding {i}, "
                             f"the input connector '{c.name}' of node {node.label}: declare "
                             f"it readonly (SSBO_IN, IMG_IN) or make the connector 'modify'")


def check_params(kernel: str, params, spirv: bytes) -> None:
    """The kernel's set 0 binding 1 block against the module's declared params: a member
    outside them or of another type (float read as int) is a GraphError naming both."""
    blob = sum(p.nbytes() for p in params)
    scalars = spirv_block_scalars(spirv, 0, 1, limit=blob)
    if scalars:
        check_param_scalars(kernel, scalars, list(params))
