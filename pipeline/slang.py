"""Slang -> SPIR-V with the Slang compiler that the `slangpy` wheel ships, through ctypes.

glslang 13 (what compiles vkgraph's GLSL kernels) predates the NVIDIA tensor extensions
SPV_NV_cooperative_vector and SPV_NV_cooperative_matrix2. Slang compiles both (`CoopVec`,
`coopVecMatMulAdd`; `CoopMat` with `MemoryScope.Workgroup`, `convertUse`, `ReduceRow`,
`TensorLayout` loads), and the PyPI wheel `slangpy` carries it as a shared library,
`libslang-compiler.so.<version>`, exporting Slang's C API. This module loads that library
without importing slangpy (no GPU, no slangpy device), compiles a compute shader from a
file or a string with defines and include folders, and returns the SPIR-V bytes.

    from vkgraph.pipeline.slang import compile_slang
    spirv = compile_slang("kernel.slang", defines={"N": 64}, include_dirs=["shaders/include"])
    spirv = compile_slang(text=source, name="probe.slang")

The library is optional: `pip install 'vkgraph[slang]'`. $VKGRAPH_SLANG_LIB names the
library file directly (a Slang release's `lib/libslang-compiler.so`, say); keep
`libslang-glslang-<version>.so` beside it (on the library path): Slang loads its SPIR-V
optimizer from there, and some kernels fail without it ("failed to load downstream compiler
'spirv-opt'", seen on the H100 for the probe's row-major cooperative-vector kernel).

Kernels for vkgraph's Vulkan layer (`Device.kernel`) bind their buffers as the engine does:
set 0 bindings 0..2 (global uniform, params, node info), set 1 binding i = connector i,
written `[[vk::binding(i, 1)]]` in Slang. The workgroup size is the kernel's own
`[numthreads(...)]`: pass the same `local` to `Device.kernel` so that its group count is
right (the specialization constants it sets are unused by such a kernel).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
import threading
from functools import cache
from pathlib import Path

from .errors import RuntimeFailure
from .vk.compile import ShaderCompileError

INSTALL = "pip install 'vkgraph[slang]'"
SLANG_SOURCE_LANGUAGE_SLANG = 1  # SlangSourceLanguage
SLANG_SPIRV = 6  # SlangCompileTarget
STAGES = {"compute": 6}  # SlangStage
LIB_GLOBS = {"win32": "slang-compiler*.dll", "darwin": "libslang-compiler*.dylib"}

_lock = threading.Lock()  # a Slang session is not safe to share between threads


class SlangMissing(RuntimeFailure):
    """No Slang compiler library: slangpy is not installed (or has none)."""


class SlangCompileError(ShaderCompileError):
    """A failed compile; `diagnostics` holds the compiler's whole output."""

    def __init__(self, message: str, diagnostics: str = ""):
        self.diagnostics = diagnostics
        super().__init__(message)


def library_path() -> Path:
    """The Slang compiler library: $VKGRAPH_SLANG_LIB, else the one inside the installed
    `slangpy` package (found without importing it)."""
    env = os.environ.get("VKGRAPH_SLANG_LIB")
    if env:
        path = Path(env)
        if not path.is_file():
            raise SlangMissing(f"VKGRAPH_SLANG_LIB={env} is not a file")
        return path
    try:
        spec = importlib.util.find_spec("slangpy")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise SlangMissing(f"the Slang compiler is not installed: {INSTALL} (it comes with "
                           "the slangpy wheel)")
    pattern = LIB_GLOBS.get(sys.platform, "libslang-compiler.so*")
    for folder in map(Path, spec.submodule_search_locations or []):
        hits = sorted(folder.glob(pattern))
        if hits:
            return hits[-1]
    raise SlangMissing(f"slangpy is installed but has no {pattern} in "
                       f"{list(spec.submodule_search_locations or [])}: {INSTALL} "
                       "(slangpy>=0.40)")


@cache
def _lib():
    path = library_path()
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        raise SlangMissing(f"cannot load the Slang compiler {path}: {e}") from None
    P, S, I = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int  # noqa: N806
    sigs = {
        "spGetBuildTagString": (S, []),
        "spCreateSession": (P, [S]),
        "spCreateCompileRequest": (P, [P]),
        "spDestroyCompileRequest": (None, [P]),
        "spProcessCommandLineArguments": (ctypes.c_int32, [P, ctypes.POINTER(S), I]),
        "spAddCodeGenTarget": (I, [P, I]),
        "spAddSearchPath": (None, [P, S]),
        "spAddPreprocessorDefine": (None, [P, S, S]),
        "spAddTranslationUnit": (I, [P, I, S]),
        "spAddTranslationUnitSourceFile": (None, [P, I, S]),
        "spAddTranslationUnitSourceString": (None, [P, I, S, S]),
        "spAddEntryPoint": (I, [P, I, S, I]),
        "spCompile": (ctypes.c_int32, [P]),
        "spGetDiagnosticOutput": (S, [P]),
        "spGetEntryPointCode": (P, [P, I, ctypes.POINTER(ctypes.c_size_t)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name, None)
        if fn is None:
            raise SlangMissing(f"{path} lacks {name}: not a Slang compiler library of the "
                               f"C API vkgraph uses ({INSTALL})")
        fn.restype, fn.argtypes = res, args
    return lib


@cache
def _session() -> int:
    session = _lib().spCreateSession(None)
    if not session:
        raise SlangMissing(f"the Slang compiler {library_path()} could not create a session")
    return session


def available() -> bool:
    """Whether a Slang compiler library can be loaded (never raises)."""
    try:
        _lib()
    except RuntimeFailure:
        return False
    return True


def version() -> str:
    """The compiler's build tag, e.g. '2026.12'."""
    return _lib().spGetBuildTagString().decode()


def _first_errors(diagnostics: str, n: int = 4) -> str:
    """The first `n` errors of Slang's output on one line: each error's header, its place
    (`--> file:line:col`) and the text under its caret."""
    out: list[str] = []
    lines = diagnostics.splitlines()
    for i, ln in enumerate(lines):
        if not ln.lstrip().lower().startswith("error"):
            continue
        text, place, note = ln.strip(), "", ""
        for nxt in lines[i + 1: i + 8]:
            s = nxt.strip()
            if s.lower().startswith(("error", "warning", "note")):
                break
            if s.startswith("-->") and not place:
                place = s[3:].strip()
            elif "^" in s and not note:
                note = s[s.rindex("^") + 1:].strip()
        item = text + (f" at {place}" if place else "") + (f": {note}" if note else "")
        if item not in out:
            out.append(item)
        if len(out) == n:
            break
    return "; ".join(out) or diagnostics.strip()[:400] or "no diagnostics"


def compile_slang(path: str | Path | None = None, *, text: str | None = None,
                  name: str = "kernel.slang", defines: dict | None = None,
                  include_dirs=(), entry: str = "main", stage: str = "compute",
                  args=()) -> bytes:
    """SPIR-V of the compute entry point `entry` of a Slang file `path` or of the source
    `text` (`name` is its file name in diagnostics; `#include` and `import` look in the
    folder of `path` and in `include_dirs`). `defines` are preprocessor macros; `args` are
    more slangc arguments (`-O3`, `-g`, `-capability spvCooperativeVectorNV`, ...).
    A failure raises SlangCompileError with the compiler's first errors in its message and
    all of its output in `.diagnostics`."""
    if (path is None) == (text is None):
        raise ValueError("compile_slang takes a file path or text=..., not both")
    if stage not in STAGES:
        raise ValueError(f"stage {stage!r}: only {sorted(STAGES)}")
    if path is not None:
        path = Path(path).resolve()
        if not path.is_file():
            raise SlangCompileError(f"Slang shader {path} does not exist")
        name = str(path)
    incs = [*([path.parent] if path is not None else []), *include_dirs]
    argv = [str(a) for a in args]
    what = name + (f" with {defines}" if defines else "")
    lib = _lib()
    with _lock:
        req = lib.spCreateCompileRequest(_session())
        try:
            # extra arguments first: slangc-style parsing resets what the calls below set.
            # The target is set through the API, not `-target`: with a command-line target
            # the library keeps no per-entry-point code (spGetEntryPointCode returns none)
            if argv:
                c_args = (ctypes.c_char_p * len(argv))(*[a.encode() for a in argv])
                if lib.spProcessCommandLineArguments(req, c_args, len(argv)) < 0:
                    diag = (lib.spGetDiagnosticOutput(req) or b"").decode(errors="replace")
                    raise SlangCompileError(f"Slang rejected the arguments {argv}: "
                                            f"{_first_errors(diag)}", diag)
            lib.spAddCodeGenTarget(req, SLANG_SPIRV)
            for d in incs:
                lib.spAddSearchPath(req, str(Path(d).resolve()).encode())
            for k, v in (defines or {}).items():
                lib.spAddPreprocessorDefine(req, str(k).encode(),
                                            b"" if v is None else str(v).encode())
            tu = lib.spAddTranslationUnit(req, SLANG_SOURCE_LANGUAGE_SLANG, b"kernel")
            if path is not None:
                lib.spAddTranslationUnitSourceFile(req, tu, str(path).encode())
            else:
                lib.spAddTranslationUnitSourceString(req, tu, name.encode(), text.encode())
            lib.spAddEntryPoint(req, tu, entry.encode(), STAGES[stage])
            res = lib.spCompile(req)
            diag = (lib.spGetDiagnosticOutput(req) or b"").decode(errors="replace")
            if res < 0:
                raise SlangCompileError(f"cannot compile {what}: {_first_errors(diag)}", diag)
            size = ctypes.c_size_t()
            code = lib.spGetEntryPointCode(req, 0, ctypes.byref(size))
            if not code or size.value < 20:
                raise SlangCompileError(f"Slang produced no SPIR-V for {what} (entry point "
                                        f"{entry!r}): {_first_errors(diag)}", diag)
            return ctypes.string_at(code, size.value)
        finally:
            lib.spDestroyCompileRequest(req)
