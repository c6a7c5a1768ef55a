"""The floors of the code (pipeline/README.md "Floors"): cli -> apps -> package (Session)
-> module folders -> engine -> vk -> ground (pipeline/errors.py and formats.py: the errors
and the files every floor writes, which import nothing else of vkgraph). Each file imports
only from its own floor and the floors below it, so the packages form no import circle;
read from the source with `ast` (imports inside functions count too), nothing is
imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# floor of each part of the `vkgraph` import name, lowest first (longest prefix first); the
# package's own files (vkgraph/__init__.py, api.py) are "package", `python -m vkgraph` is the
# command's
FLOORS = ["ground", "vk", "engine", "modules", "package", "apps", "cli"]
PARTS = {"vkgraph.pipeline.errors": "ground", "vkgraph.pipeline.formats": "ground",
         "vkgraph.__main__": "cli", "vkgraph.pipeline.vk": "vk", "vkgraph.pipeline": "engine",
         "vkgraph.modules": "modules", "vkgraph.apps": "apps", "vkgraph.cli": "cli",
         "vkgraph": "package"}


def import_name(path: Path) -> str:
    """The module name a source file has under `vkgraph` (the wheel's mapping)."""
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] != "vkgraph":
        parts.insert(0, "vkgraph")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(p.replace("-", "_") for p in parts)


def floor_of(name: str) -> str | None:
    """The floor of a module name under `vkgraph` (None: another distribution's)."""
    for prefix, floor in PARTS.items():  # longest prefixes first
        if name == prefix or name.startswith(prefix + "."):
            return floor
    return None


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in a file, relative ones resolved."""
    here = import_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            # `from vkgraph import apps` names a package, not a value of vkgraph/__init__
            subs = [f"{base}.{a.name}" for a in node.names]
            found += [(node.lineno, s if floor_of(s) != floor_of(base) else base)
                      for s in subs]
    return found


def sources() -> list[Path]:
    """The files of every floor (tests and bench are outside the floors)."""
    folders = ["pipeline", "modules", "vkgraph", "cli"]
    return sorted(p for d in folders for p in (ROOT / d).rglob("*.py")
                  if ".venv" not in p.parts and "egg-info" not in str(p))


def test_sources_are_found():
    names = {import_name(p) for p in sources()}
    assert {"vkgraph.pipeline.runner", "vkgraph.pipeline.vk.device", "vkgraph.apps.denoise",
            "vkgraph.api", "vkgraph.cli.main", "vkgraph.modules.kpn_t.module"} <= names


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_stay_on_their_floor_or_below(path):
    own = floor_of(import_name(path))
    above = []
    for line, name in imports(path):
        floor = floor_of(name)
        if floor is not None and FLOORS.index(floor) > FLOORS.index(own):
            above.append(f"{path.relative_to(ROOT)}:{line} imports {name} ({floor} floor, "
                         f"above {own})")
    assert not above, "\n".join(above)


def test_the_package_layer_imports_no_application():
    """vkgraph/__init__.py and api.py (the package floor) sit below the apps: the Session
    knows nothing of the Denoiser or the sweep."""
    for path in (ROOT / "vkgraph" / "__init__.py", ROOT / "vkgraph" / "api.py"):
        assert not [n for _, n in imports(path) if floor_of(n) in ("apps", "cli")]


def test_one_build_is_constructed_outside_tests():
    """`Build(` is constructed in one place: Session (vkgraph/api.py), its one owner."""
    calls = []
    for path in [*sources(), *(ROOT / "bench").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "Build"):
                calls.append(str(path.relative_to(ROOT)))
    assert calls == ["vkgraph/api.py"]
