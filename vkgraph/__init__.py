"""vkgraph: node-graph image processing on Vulkan compute shaders.

One import name holds everything: `vkgraph.pipeline` (the engine), `vkgraph.cli` (the
command), and the data the engine reads, `modules/`, `shaders/` and `graphs/`. In the
repository these are folders at the top level; the wheel maps them under this package
(pyproject.toml), so the installed distribution claims no other top-level name. In a
checkout (editable install, or the repository on PYTHONPATH) the package's path also covers
the repository root, so `vkgraph.pipeline` is `pipeline/` there.
"""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"

_HERE = Path(__file__).resolve().parent
if not (_HERE / "pipeline").is_dir() and (_HERE.parent / "pipeline" / "__init__.py").is_file():
    __path__.append(str(_HERE.parent))  # noqa: F821 - a checkout: pipeline/, cli/ are siblings

# where modules/, shaders/ and graphs/ are: inside the package when installed, the repository
# root in a checkout
DATA = _HERE if (_HERE / "modules").is_dir() else _HERE.parent

# module code is importable as vkgraph.modules.<name> (dashes as underscores), shipped and
# user module folders alike, from the first `import vkgraph` on (pipeline/loader.py)
from .pipeline import loader as _loader  # noqa: E402, F401


def __getattr__(name: str):
    """The Python API (vkgraph/api.py; `dispatch`: one kernel on numpy arrays,
    pipeline/testing.py), imported on first use so that `import vkgraph` stays light for the
    command line."""
    if name in ("Session", "load", "shipped_graphs"):
        from . import api

        return api.Session.load if name == "load" else getattr(api, name)
    if name == "dispatch":
        from .pipeline.testing import dispatch

        return dispatch
    raise AttributeError(f"module 'vkgraph' has no attribute '{name}'")
