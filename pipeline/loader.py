"""Module code under stable import names.

The Python files of a module folder are the package `vkgraph.modules.<name>`, where <name> is
the folder's name with every character that Python does not allow in a name made `_`
(`kpn-t` -> `vkgraph.modules.kpn_t`, `i-pfm` -> `vkgraph.modules.i_pfm`). Its hooks are
`vkgraph.modules.<name>.module` and the folder's other files are siblings
(`vkgraph.modules.kpn_t.reference`), so modules import each other normally:

    from vkgraph.modules.kpn_t.forward import forward_nodes

Each file runs once per process, with a `sys.modules` entry (so `@dataclass`, pickling and
`typing.get_type_hints` work). The scheme is the same for the shipped modules and for the
user's module folders (`--modules DIR`, `$VKGRAPH_MODULES`) in a checkout and in the
installed wheel: the name maps to the folder the registry chose for that module (a user
folder that shadows a shipped module also shadows its code). A name no registry has chosen
yet is looked up in the default folders (`folders.default_dirs`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import re
import sys
from pathlib import Path
from types import ModuleType

from .folders import default_dirs

PREFIX = "vkgraph.modules."

# python name -> (module name, folder, fingerprint of its .py files)
_FOLDERS: dict[str, tuple[str, Path, tuple]] = {}


def python_name(name: str) -> str:
    """`kpn-t` -> `kpn_t`: the module's part of its import name."""
    py = re.sub(r"\W", "_", name)
    return "_" + py if py[:1].isdigit() else py


def _fingerprint(folder: Path) -> tuple:
    return tuple(sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size)
                        for p in folder.glob("*.py")))


def _forget(py: str) -> None:
    full = PREFIX + py
    for key in [k for k in sys.modules if k == full or k.startswith(full + ".")]:
        del sys.modules[key]


def register(name: str, folder: Path) -> str:
    """Map module `name` to `folder`; returns the import name of its package. Mapping a name
    to another folder than before (another user folder, a test's temporary one) or a folder
    whose .py files changed forgets the code imported from the old one."""
    py = python_name(name)
    folder = Path(folder).resolve()
    known = _FOLDERS.get(py)
    stamp = _fingerprint(folder)
    if known is not None and (known[1], known[2]) != (folder, stamp):
        _forget(py)
    _FOLDERS[py] = (name, folder, stamp)
    return PREFIX + py


def hooks(name: str, folder: Path) -> ModuleType | None:
    """The module's `module.py` imported as `vkgraph.modules.<name>.module`, or None."""
    if not (Path(folder) / "module.py").is_file():
        return None
    package = register(name, folder)
    return importlib.import_module(package + ".module")


def _folder(py: str) -> Path | None:
    known = _FOLDERS.get(py)
    if known is not None:
        return known[1]
    for d in default_dirs():
        if d.is_dir():
            for sub in sorted(d.iterdir()):
                if python_name(sub.name) == py and (sub / "connectors").is_file():
                    register(sub.name, sub)
                    return _FOLDERS[py][1]
    return None


class _Package(importlib.abc.Loader):
    """A module folder as a package: no code of its own, its files are the submodules."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        pass


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.folders = _FOLDERS  # what install() in another copy of this file shares

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(PREFIX) or fullname.count(".") != 2:
            return None
        folder = _folder(fullname[len(PREFIX):])
        if folder is None:
            return None
        spec = importlib.machinery.ModuleSpec(fullname, _Package(), is_package=True)
        spec.submodule_search_locations = [str(folder)]
        return spec


def install() -> None:
    """Put the finder first on sys.meta_path (once): it answers `vkgraph.modules.<name>`
    before the path finder, which would not find folders with dashes. A second copy of this
    file (a module.py that imports the tree as the top-level `pipeline` beside
    `vkgraph.pipeline`) adds no finder of its own: it shares the installed finder's folder
    map, so a name registered through either copy imports from the same folder (two maps
    let the first finder import a name from the folder it knew, after the second copy had
    mapped it to another)."""
    global _FOLDERS
    for finder in sys.meta_path:
        shared = getattr(finder, "folders", None)
        if type(finder).__name__ == "_Finder" and isinstance(shared, dict):
            _FOLDERS = shared
            return
    sys.meta_path.insert(0, _Finder())


install()
