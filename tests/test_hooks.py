"""The module hook protocol is declared once (pipeline/module.py: HOOKS) and the documents
agree with it: pipeline/README.md lists every hook with its signature, README.md's "Adding a
module" names every hook; the engine calls no other name, and a module still defining a
removed hook is refused when it loads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.module import HOOKS, REMOVED_HOOKS
from vkgraph.pipeline.registry import Registry

ROOT = Path(__file__).resolve().parent.parent


def section(text: str, title: str) -> str:
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    return text[start: end if end > 0 else len(text)]


def test_pipeline_readme_lists_exactly_the_hooks_with_signatures():
    text = section((ROOT / "pipeline" / "README.md").read_text(), "## Module hooks")
    block = text[text.index("```python"): text.index("```\n", text.index("```python") + 9)]
    listed = {m.group(1): m.group(2).strip() for m in
              re.finditer(r"^def (\w+)(\(.*?)\s+#", block, re.M)}
    assert listed == {name: sig[len(name):] for name, (sig, _) in HOOKS.items()}


def test_readme_adding_a_module_names_every_hook():
    text = section((ROOT / "README.md").read_text(), "## Adding a module")
    bullet = text[text.index("* `module.py`"):]
    bullet = bullet[: bullet.index("\n* ")]
    named = set(re.findall(r"`(\w+)`", bullet))
    assert set(HOOKS) <= named
    assert not named & set(REMOVED_HOOKS)


def test_the_engine_calls_only_declared_hooks():
    called = set()
    for folder in ("pipeline", "cli", "vkgraph", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            called |= set(re.findall(r"\bhook\(\"(\w+)\"\)", path.read_text()))
    assert called <= set(HOOKS), called - set(HOOKS)
    # every declared hook is called somewhere (no dead hooks)
    assert set(HOOKS) - {"init", "modify_roi_out", "create_nodes", "read_source",
                         "source_due", "write_sink"} <= called
    engine = "".join(p.read_text() for p in (ROOT / "pipeline").glob("*.py"))
    for name in ("init", "modify_roi_out", "create_nodes", "read_source", "source_due",
                 "write_sink"):
        assert f'hook("{name}")' in engine, name
    with pytest.raises(KeyError):
        Registry().get("kpn-t").hook("after_frame")


def test_a_removed_hook_is_refused(tmp_path):
    mod = tmp_path / "old"
    mod.mkdir()
    (mod / "connectors").write_text("input:read:rgba:*\noutput:write:rgba:f32\n")
    (mod / "module.py").write_text("def commit_params(graph, module):\n    pass\n")
    with pytest.raises(GraphError) as e:
        Registry([tmp_path]).get("old")
    assert "defines hook 'commit_params', which the engine does not call" in e.value.line()
    assert "module.py" in e.value.line()


def test_hooks_get_a_typed_context(tmp_path, monkeypatch, device):
    """Hooks see a HookContext: the frame, the readers of a connector, the device's
    capabilities; not the Build."""
    from test_wheel import USER_GRAPH, image, write_user_module

    import vkgraph
    from vkgraph.pipeline.formats import write_pfm

    mods = tmp_path / "mods"
    write_user_module(mods)
    (mods / "bright" / "module.py").write_text(
        "SEEN = {}\n\n\n"
        "def modify_roi_out(graph, module):\n"
        "    SEEN['type'] = type(graph).__name__\n"
        "    SEEN['readers'] = [str(m) for m, c in graph.readers(module, 'output')]\n"
        "    SEEN['subgroup'] = graph.capabilities.subgroup_size\n"
        "    module.connector('output').roi = module.connector('input').roi\n")
    write_pfm(tmp_path / "in.pfm", image()[..., :3])
    (tmp_path / "g.cfg").write_text(USER_GRAPH)
    monkeypatch.setenv("VKGRAPH_MODULES", str(mods))
    monkeypatch.chdir(tmp_path)  # the graph's out.pfm lands here
    with vkgraph.Session.load(tmp_path / "g.cfg", device=device) as s:
        s.run(1)
    from vkgraph.modules.bright.module import SEEN

    assert SEEN["type"] == "HookContext"
    assert SEEN["readers"] == ["o-pfm:main"]
    assert SEEN["subgroup"] == device.info.subgroup_size


def test_connector_metadata_flows_downstream(tmp_path, monkeypatch, device):
    """A writer's metadata on an output reaches every reader of it, read only, through the
    HookContext; i-lut publishes its file's text, o-lut writes its input's, so a .lut goes
    through a graph with its text, and an output nobody publishes on carries none."""
    from test_wheel import image, write_user_module

    import vkgraph
    from vkgraph.pipeline.formats import read_lut, write_lut

    mods = tmp_path / "mods"
    write_user_module(mods)
    (mods / "bright" / "module.py").write_text(
        "SEEN = {}\n\n\n"
        "def modify_roi_out(graph, module):\n"
        "    seen = graph.meta(module, 'input')\n"
        "    SEEN['input'] = dict(seen)\n"
        "    try:\n"
        "        seen['text'] = 'upstream'\n"
        "    except TypeError:\n"
        "        SEEN['read only'] = True\n"
        "    graph.meta(module, 'output')['text'] = f\"gain {module.param('gain'):g}\"\n"
        "    module.connector('output').roi = module.connector('input').roi\n")
    img = image(6, 8)
    write_lut(tmp_path / "in.lut", img, 4, "f32", 8, 6, text="from the file")
    lines = ["module:i-lut:main", "module:bright:01", "module:o-lut:copy",
             "module:o-lut:bright", "module:i-pfm:plain", "module:o-lut:plain",
             "connect:i-lut:main:output:bright:01:input",
             "connect:i-lut:main:output:o-lut:copy:input",
             "connect:bright:01:output:o-lut:bright:input",
             "connect:i-pfm:plain:output:o-lut:plain:input",
             "param:i-lut:main:filename:in.lut", "param:bright:01:gain:3",
             "param:i-pfm:plain:filename:in.pfm", "param:o-lut:copy:filename:copy",
             "param:o-lut:bright:filename:bright", "param:o-lut:plain:filename:plain"]
    from vkgraph.pipeline.formats import write_pfm

    write_pfm(tmp_path / "in.pfm", img[..., :3])
    monkeypatch.chdir(tmp_path)
    with vkgraph.Session.load(lines, device=device, modules=[mods]) as s:
        s.run(1)
    from vkgraph.modules.bright.module import SEEN

    assert SEEN == {"input": {"text": "from the file"}, "read only": True}
    assert (tmp_path / "copy.lut").read_bytes() == (tmp_path / "in.lut").read_bytes()
    assert read_lut(tmp_path / "bright.lut")[2] == "gain 3"
    assert read_lut(tmp_path / "plain.lut")[2] is None
