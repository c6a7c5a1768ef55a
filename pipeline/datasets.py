"""Files named in cfgs and training sets: `pkg:` paths and sets of images.

A file param may name a file inside an installed Python package as `pkg:<package>/<path>`
(e.g. `pkg:skimage/data/astronaut.png`, one of the photographs in scikit-image's wheel), so
graphs can train on images that ship with a dependency without copying them.

A training set is a folder (every image in it, sorted by name), a glob pattern (`*`, `?`,
`[...]`), or a list file (`.txt`: one path or `pkg:` path per line, relative to the list
file's folder; `#` starts a comment). Image files are PFM, PNG, JPG/JPEG and EXR.
"""

from __future__ import annotations

import glob
import importlib.util
from collections.abc import Callable
from pathlib import Path

from .errors import GraphError

PKG = "pkg:"
IMAGE_SUFFIXES = (".pfm", ".png", ".jpg", ".jpeg", ".exr")
MAX_SET = 100_000  # a set larger than this is surely a mistake (a glob of a whole disk)


def package_file(spec: str) -> Path:
    """`pkg:<package>/<path>` -> the file in the installed package; GraphError if the package
    is not installed or has no such file."""
    rest = spec[len(PKG):] if spec.startswith(PKG) else spec
    package, _, inner = rest.partition("/")
    if not package or not inner:
        raise GraphError(f"'{spec[:200]}': expected pkg:<package>/<path inside it>")
    try:
        found = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        found = None
    if found is None or not found.submodule_search_locations:
        raise GraphError(f"'{spec[:200]}': Python package '{package}' is not installed "
                         f"(pip install {package.replace('skimage', 'scikit-image')})")
    for root in found.submodule_search_locations:
        path = Path(root) / inner
        if path.exists():
            return path
    raise GraphError(f"'{spec[:200]}': package '{package}' has no file '{inner}'")


def resolve_name(name: str, near: Callable[[str], Path]) -> Path:
    """A file name from a cfg or list file: `pkg:` paths through package_file, anything else
    through `near` (the caller's rule for relative paths)."""
    if name.startswith(PKG):
        return package_file(name)
    return near(name)


def _is_image(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES


def image_set(source: str, near: Callable[[str], Path]) -> list[Path]:
    """The images of a training set (folder, glob or .txt list; see the module docstring),
    in a fixed order. Raises GraphError when the set is empty or names a missing file."""
    if any(ch in source for ch in "*?[") and not source.startswith(PKG):
        base = near(".")
        pattern = source if Path(source).is_absolute() else str(base / source)
        files = sorted(Path(p) for p in glob.iglob(pattern, recursive=True)
                       if _is_image(Path(p)) and Path(p).is_file())
        what = f"glob '{source[:200]}'"
    else:
        path = resolve_name(source, near)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if _is_image(p) and p.is_file())
            what = f"folder '{path}'"
        elif path.is_file() and path.suffix.lower() == ".txt":
            files = _list_file(path)
            what = f"list file '{path}'"
        elif path.is_file() and _is_image(path):
            files = [path]
            what = f"file '{path}'"
        elif not path.exists():
            raise GraphError(f"training set '{source[:200]}': no such file or folder")
        else:
            raise GraphError(f"training set '{source[:200]}': expected a folder, a glob, a .txt "
                             f"list or an image file ({', '.join(IMAGE_SUFFIXES)})")
    if not files:
        raise GraphError(f"training set: {what} holds no images ({', '.join(IMAGE_SUFFIXES)})")
    if len(files) > MAX_SET:
        raise GraphError(f"training set: {what} holds {len(files)} images, more than "
                         f"{MAX_SET}")
    return files


def _list_file(path: Path) -> list[Path]:
    files = []
    text = path.read_text(encoding="utf-8", errors="replace")
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        f = resolve_name(line, lambda name: path.parent / Path(name).expanduser())
        if not f.is_file():
            raise GraphError(f"{path}:{number}: no such image file '{line[:200]}'")
        if not _is_image(f):
            raise GraphError(f"{path}:{number}: '{line[:200]}' is not an image "
                             f"({', '.join(IMAGE_SUFFIXES)})")
        files.append(f)
    return files
