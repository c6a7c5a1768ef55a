"""Where module folders are: the user's (`vkgraph --modules DIR`, then the folders of
$VKGRAPH_MODULES, a path list), then the shipped `modules/`; and the host modules
(`hostmods/`). The registry (which folders are modules) and the loader (module code under
stable import names, for a name no registry has chosen yet) both read these, so neither
imports the other."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_DIR = Path(__file__).resolve().parent.parent / "modules"
# i-array, o-array, capture: modules for programs that run a graph on numpy arrays (hostmods/)
HOST_MODULES = Path(__file__).resolve().parent / "hostmods"
ENV = "VKGRAPH_MODULES"

# folders given on the command line (`vkgraph --modules DIR`, repeatable); before $VKGRAPH_MODULES
USER_DIRS: list[Path] = []


def user_dirs() -> list[Path]:
    """The user's module folders: --modules ones, then $VKGRAPH_MODULES' (os.pathsep list)."""
    env = [Path(p).expanduser() for p in os.environ.get(ENV, "").split(os.pathsep) if p]
    return [*USER_DIRS, *env]


def default_dirs() -> list[Path]:
    return [*user_dirs(), DEFAULT_DIR]
