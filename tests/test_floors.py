"""The floors of the code (pipeline/README.md "Floors"): cli -> apps -> package (Session)
-> module folders -> engine -> vk -> ground (pipeline/errors.py, formats.py and
constants.py: the errors, the files every floor writes and the constants the command line
needs first, which import nothing else of vkgraph). Each file imports
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
         "vkgraph.pipeline.constants": "ground",
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


def engine_imports() -> dict[str, set[str]]:
    """Within the engine (every file under pipeline/): which of its files each one imports,
    at the top or inside a function. `from . import loader` names the file loader.py, not the
    package; a package's own __init__ (run before any of its files) is not an edge."""
    files = {import_name(p): p for p in (ROOT / "pipeline").rglob("*.py")}
    edges: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base
                           for a in node.names]
            else:
                continue
            edges[name] |= {t for t in targets if t in files and t != name
                            and not files[t].name == "__init__.py"}
    return edges


def import_circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The files of each import circle (a strongly connected group, Tarjan's walk), sorted:
    files each of which imports, through the others, the ones that import it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return groups


def test_import_circles_are_found():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles(edges) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_the_engine_files_import_no_circle():
    """No file of the engine imports, through others, a file that imports it (function-level
    imports count: they only put the circle off to a call). checkpoint.py and trainer.py
    were one (the trainer's state hooks), module.py -> loader.py -> registry.py -> module.py
    another (the default module folders)."""
    edges = engine_imports()
    assert "vkgraph.pipeline.loader" in edges["vkgraph.pipeline.module"]
    circles = import_circles(edges)
    assert not circles, "\n".join(" <-> ".join(c) for c in circles)
