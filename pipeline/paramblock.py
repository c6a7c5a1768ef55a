"""The GLSL params block, generated from a module's `params` declaration, and the check of a
kernel's own block against it.

A kernel that reads params writes `#include "params.gen"`; the compiler is handed that file's
text for the module whose node it compiles (`params_glsl`): one member per `params` line, in
file order, `float`/`int` for count 1, `float name[count]`/`int name[count]` otherwise and
`uint name[(count + 3) / 4]` for a string (its bytes). The layout is std430, which is exactly
`ModuleInstance.param_blob`: 4 bytes per number, strings padded to 4 bytes.

Member names are the param names made valid GLSL (`glsl_name`): every character other than a
letter, digit or `_` becomes `_` (`noise a` -> `noise_a`), runs of `_` collapse to one, a name
that starts with a digit or `gl_` gets a `p_` prefix, and a GLSL keyword or reserved word
gets a `_` suffix (`precise` -> `precise_`).

A kernel that writes its own block at set 0 binding 1 instead is checked when its pipeline is
created (`check_params`): every scalar it declares must lie inside the params and have the
declared type (a float read as int gives a wrong image, never an error from the driver).
"""

from __future__ import annotations

import re

from .errors import GraphError
from .module import Param

GENERATED = "params.gen"  # the include name a kernel uses

# GLSL 4.60 keywords and reserved words (section 3.6), plus the Vulkan and the
# explicit-arithmetic-type names that glslang reserves once an extension is enabled
GLSL_WORDS = frozenset("""
attribute const uniform varying buffer shared coherent volatile restrict readonly writeonly
atomic_uint layout centroid flat smooth noperspective patch sample invariant precise break
continue do for while switch case default if else subroutine in out inout int void bool true
false float double discard return vec2 vec3 vec4 ivec2 ivec3 ivec4 bvec2 bvec3 bvec4 uint
uvec2 uvec3 uvec4 dvec2 dvec3 dvec4 mat2 mat3 mat4 mat2x2 mat2x3 mat2x4 mat3x2 mat3x3 mat3x4
mat4x2 mat4x3 mat4x4 dmat2 dmat3 dmat4 dmat2x2 dmat2x3 dmat2x4 dmat3x2 dmat3x3 dmat3x4 dmat4x2
dmat4x3 dmat4x4 lowp mediump highp precision sampler1D sampler1DShadow sampler1DArray
sampler1DArrayShadow isampler1D isampler1DArray usampler1D usampler1DArray sampler2D
sampler2DShadow sampler2DArray sampler2DArrayShadow isampler2D isampler2DArray usampler2D
usampler2DArray sampler2DRect sampler2DRectShadow isampler2DRect usampler2DRect sampler2DMS
isampler2DMS usampler2DMS sampler2DMSArray isampler2DMSArray usampler2DMSArray sampler3D
isampler3D usampler3D samplerCube samplerCubeShadow isamplerCube usamplerCube
samplerCubeArray samplerCubeArrayShadow isamplerCubeArray usamplerCubeArray samplerBuffer
isamplerBuffer usamplerBuffer image1D iimage1D uimage1D image1DArray iimage1DArray
uimage1DArray image2D iimage2D uimage2D image2DArray iimage2DArray uimage2DArray image2DRect
iimage2DRect uimage2DRect image2DMS iimage2DMS uimage2DMS image2DMSArray iimage2DMSArray
uimage2DMSArray image3D iimage3D uimage3D imageCube iimageCube uimageCube imageCubeArray
iimageCubeArray uimageCubeArray imageBuffer iimageBuffer uimageBuffer struct
texture1D texture1DArray itexture1D itexture1DArray utexture1D utexture1DArray texture2D
texture2DArray itexture2D itexture2DArray utexture2D utexture2DArray texture2DRect
itexture2DRect utexture2DRect texture2DMS itexture2DMS utexture2DMS texture2DMSArray
itexture2DMSArray utexture2DMSArray texture3D itexture3D utexture3D textureCube itextureCube
utextureCube textureCubeArray itextureCubeArray utextureCubeArray textureBuffer itextureBuffer
utextureBuffer sampler samplerShadow subpassInput isubpassInput usubpassInput subpassInputMS
isubpassInputMS usubpassInputMS
common partition active asm class union enum typedef template this resource goto inline
noinline public static extern external interface long short half fixed unsigned superp input
output hvec2 hvec3 hvec4 fvec2 fvec3 fvec4 filter sizeof cast namespace using sampler3DRect
demote terminateInvocation terminateRayEXT ignoreIntersectionEXT rayPayloadEXT
int8_t uint8_t int16_t uint16_t int32_t uint32_t int64_t uint64_t float16_t float32_t
float64_t i8vec2 i8vec3 i8vec4 u8vec2 u8vec3 u8vec4 i16vec2 i16vec3 i16vec4 u16vec2 u16vec3
u16vec4 i32vec2 i32vec3 i32vec4 u32vec2 u32vec3 u32vec4 i64vec2 i64vec3 i64vec4 u64vec2
u64vec3 u64vec4 f16vec2 f16vec3 f16vec4 f32vec2 f32vec3 f32vec4 f64vec2 f64vec3 f64vec4
f16mat2 f16mat3 f16mat4 f32mat2 f32mat3 f32mat4 f64mat2 f64mat3 f64mat4
coopmat tensorLayoutNV tensorViewNV accelerationStructureEXT rayQueryEXT
""".split())

_BAD = re.compile(r"[^A-Za-z0-9_]")


def glsl_name(name: str) -> str:
    """A param name as a valid GLSL identifier (the module docstring gives the rule)."""
    safe = re.sub(r"_+", "_", _BAD.sub("_", name)) or "p"
    if safe[0].isdigit() or safe.startswith("gl_"):
        safe = "p_" + safe
    if safe in GLSL_WORDS:
        safe += "_"
    return safe


def params_glsl(params: list[Param], where: str = "params") -> str:
    """The text of `params.gen` for a module's params (an empty block is not GLSL: without
    params the file declares nothing, and a kernel reading `params.x` does not compile)."""
    head = "// generated from the module's params file (pipeline/paramblock.py)\n"
    if not params:
        return head + "// (this module has no params)\n"
    seen: dict[str, str] = {}
    lines = []
    for p in params:
        name = glsl_name(p.name)
        if name in seen:
            raise GraphError(f"params '{seen[name]}' and '{p.name}' have the same GLSL name "
                             f"'{name}'", where=where)
        seen[name] = p.name
        if p.type == "string":
            lines.append(f"  uint {name}[{p.nbytes() // 4}];  // string '{p.name}'")
        else:
            arr = f"[{p.count}]" if p.count > 1 else ""
            note = f"  // '{p.name}'" if name != p.name else ""
            lines.append(f"  {p.type} {name}{arr};{note}")
    return (head + "layout(std430, set = 0, binding = 1) readonly buffer Params {\n"
            + "\n".join(lines) + "\n} params;\n")


def layout(params: list[Param]) -> dict[int, tuple[Param, str]]:
    """Byte offset of every 4-byte word of the params blob -> (param, its type)."""
    words: dict[int, tuple[Param, str]] = {}
    off = 0
    for p in params:
        for _ in range(p.nbytes() // 4):
            words[off] = (p, p.type)
            off += 4
    return words


# what a kernel may read a declared type as: (kind, bits) of its scalars
ACCEPT = {"float": {("float", 32)}, "int": {("int", 32), ("uint", 32)},
          "string": {("int", 32), ("uint", 32)}}


def check_params(kernel: str, scalars, params: list[Param]) -> None:
    """`scalars`: (member name, byte offset, kind, bits) of every scalar of the kernel's
    set 0 binding 1 block (`vk.spirv_block_scalars`). Each must sit on a declared param word
    of an accepted type; otherwise a GraphError names the kernel, the member and the param."""
    words = layout(params)
    for member, off, kind, bits in scalars:
        shown = kind if bits == 32 else f"{kind}{bits}"
        found = words.get(off)
        if found is None:
            size = 4 * len(words)
            raise GraphError(f"kernel {kernel} reads params member '{member}' at byte {off} "
                             f"as {shown}, but the module's params are {size} bytes"
                             + ("" if off % 4 == 0 else " (and 4-byte aligned)")
                             + f'; #include "{GENERATED}" declares them')
        p, ptype = found
        if (kind, bits) not in ACCEPT[ptype]:
            raise GraphError(f"kernel {kernel} reads params member '{member}' (byte {off}) as "
                             f"{shown}, but param '{p.name}' is declared {ptype}; "
                             f'#include "{GENERATED}" declares it as {ptype}')
