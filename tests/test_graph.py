"""The module graph and the registry, without Vulkan: fixture modules in tests/fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.graph import Graph, warp
from vkgraph.pipeline.registry import Registry

FIXTURES = Path(__file__).parent / "fixtures" / "modules"


@pytest.fixture
def graph() -> Graph:
    return Graph(Registry([FIXTURES]))


def chan_fmt(graph: Graph, m: str, i: str, c: str) -> str:
    conn = graph.module(m, i).connector(c)
    return f"{conn.chan}:{conn.format}"


# -- registry ------------------------------------------------------------------------------

def test_registry_discovers_folders_with_connectors(tmp_path):
    (tmp_path / "notamod").mkdir()
    reg = Registry([FIXTURES, tmp_path])
    assert {"src", "blur", "sink", "buf", "pass", "opt", "wild", "accum"} == set(reg.names())
    assert reg.get("blur").param_names() == ["radius", "iters", "weights"]
    assert reg.get("blur") is reg.get("blur")  # loaded once


def test_registry_default_dir_is_repo_modules():
    assert Registry().dirs == [Path(__file__).resolve().parent.parent / "modules"]


def test_registry_unknown_module_hint():
    with pytest.raises(GraphError, match=r"x.cfg:3: unknown module 'blurr' \(did you mean 'blur'"):
        Registry([FIXTURES]).get("blurr", where="x.cfg:3")


def module_folder(root: Path, name: str, **files: str) -> Path:
    """A module folder under root with the given files (module_py= names module.py)."""
    folder = root / name
    folder.mkdir()
    for fname, text in files.items():
        (folder / fname.replace("_py", ".py")).write_text(text)
    return folder


def test_registry_broken_declaration_names_file_line(tmp_path):
    module_folder(tmp_path, "bad", connectors="input:read:rgba:f32\noutput:wrte:rgba:f32\n")
    module_folder(tmp_path, "good", connectors="output:write:rgba:f32\n")
    reg = Registry([tmp_path])
    assert reg.get("good").connector_names() == ["output"]  # lazy: bad one not parsed yet
    with pytest.raises(GraphError, match=r"bad/connectors:2: .*'wrte'"):
        reg.get("bad")


def test_registry_broken_hooks_name_file_line(tmp_path):
    module_folder(tmp_path, "hooky", connectors="output:write:rgba:f32\n",
                  module_py="x = 1\ny = undefined_name\n")
    with pytest.raises(GraphError, match=r"hooky/module.py:2: .*NameError"):
        Registry([tmp_path]).get("hooky")


def test_registry_hooks_syntax_error(tmp_path):
    module_folder(tmp_path, "syn", connectors="output:write:rgba:f32\n",
                  module_py="def init(module):\n    return (\n")
    with pytest.raises(GraphError, match=r"syn/module.py:\d+: module 'syn' hooks do not parse"):
        Registry([tmp_path]).get("syn")


def test_optional_file_lists_inputs(tmp_path):
    assert Registry([FIXTURES]).get("opt").optional == {"wcp"}
    module_folder(tmp_path, "o", connectors="input:read:rgba:f32\n",
                  optional="# comment\ninptu\n")
    with pytest.raises(GraphError, match=r"o/optional:2: .*'inptu'.*did you mean 'input'"):
        Registry([tmp_path]).get("o")


# -- modules -------------------------------------------------------------------------------

def test_add_module_dedups(graph):
    a = graph.add_module("blur", "01")
    assert graph.add_module("blur", "01", position=(1.0, 2.0)) is a
    assert a.position == (1.0, 2.0)
    assert list(graph.modules) == [("blur", "01")]


def test_module_lookup_hint(graph):
    graph.add_module("blur", "main")
    with pytest.raises(GraphError, match=r"unknown module instance 'blur:mian'.*'blur:main'"):
        graph.module("blur", "mian")


def test_long_names_rejected(graph):
    with pytest.raises(GraphError, match="'instance9' is longer than 8"):
        graph.add_module("blur", "instance9")


def test_remove_module_disconnects_readers(graph):
    graph.add_module("src", "01")
    graph.add_module("blur", "01")
    graph.add_module("sink", "01")
    graph.connect("src", "01", "output", "blur", "01", "input")
    graph.connect("blur", "01", "output", "sink", "01", "input")
    graph.remove_module("blur", "01")
    assert graph.module("sink", "01").connector("input").source is None
    assert chan_fmt(graph, "sink", "01", "input") == "rgba:*"  # back to its declaration
    assert graph.readers(graph.module("src", "01"), "output") == []


# -- wires ---------------------------------------------------------------------------------

def wire(graph: Graph, out: str, into: str, feedback: bool = False) -> None:
    """connect("m:i:c", "m:i:c"), adding the modules first."""
    (m0, i0, c0), (m1, i1, c1) = out.split(":"), into.split(":")
    graph.add_module(m0, i0)
    graph.add_module(m1, i1)
    graph.connect(m0, i0, c0, m1, i1, c1, feedback=feedback)


def test_connect_stores_source_on_reader(graph):
    wire(graph, "src:01:output", "blur:01:input")
    src, blur = graph.module("src", "01"), graph.module("blur", "01")
    conn = blur.connector("input")
    assert conn.source == (src, "output") and conn.feedback is False
    assert graph.readers(src, "output") == [(blur, conn)]


WILDCARDS = {  # writer, reader, what the connectors hold afterwards
    "reader takes writer's": ("src:01:output", "blur:01:input", {"blur:01:input": "rgba:f32"}),
    "writer takes reader's": ("wild:01:output", "accum:01:input",
                              {"wild:01:output": "rgba:f32"}),
    "both fall back": ("wild:01:output", "pass:01:input",
                       {"wild:01:output": "rgba:f16", "pass:01:input": "rgba:f16",
                        "pass:01:output": "rgba:*"}),  # &input copied, format still open
    "ssbo": ("buf:01:output", "pass:01:input",
             {"pass:01:input": "ssbo:f16", "pass:01:output": "ssbo:*"}),
}


@pytest.mark.parametrize("out, into, want", WILDCARDS.values(), ids=WILDCARDS.keys())
def test_wildcard_resolution(graph, out, into, want):
    wire(graph, out, into)
    assert {name: chan_fmt(graph, *name.split(":")) for name in want} == want


def test_chan_reference_resolved_later(graph):
    # pass:2 is wired to pass:1's '&input' output before pass:1 has an input
    for m, i in [("src", "01"), ("pass", "1"), ("pass", "2")]:
        graph.add_module(m, i)
    graph.connect("pass", "1", "output", "pass", "2", "input")
    assert chan_fmt(graph, "pass", "2", "input") == "*:f16"
    graph.connect("src", "01", "output", "pass", "1", "input")
    assert chan_fmt(graph, "pass", "1", "output") == "rgba:f16"
    assert chan_fmt(graph, "pass", "2", "input") == "rgba:f16"
    assert chan_fmt(graph, "pass", "2", "output") == "rgba:*"


def test_chan_reference_late_mismatch(graph):
    for m, i in [("buf", "01"), ("pass", "1"), ("sink", "01")]:
        graph.add_module(m, i)
    graph.connect("pass", "1", "output", "sink", "01", "input")
    with pytest.raises(GraphError, match=r"writer pass:1:output is ssbo:.*sink:01:input wants"):
        graph.connect("buf", "01", "output", "pass", "1", "input")


def test_incompatible_connection_message(graph):
    graph.add_module("buf", "01")
    graph.add_module("sink", "01")
    with pytest.raises(GraphError) as e:
        graph.connect("buf", "01", "output", "sink", "01", "input", where="g.cfg:7")
    assert str(e.value) == ("g.cfg:7: incompatible connection: writer buf:01:output is "
                            "ssbo:f16, reader sink:01:input wants rgba:*")
    assert graph.module("sink", "01").connector("input").source is None


def test_format_mismatch(graph):
    graph.add_module("blur", "01")
    graph.add_module("accum", "01")
    with pytest.raises(GraphError, match="is rgba:f16, reader accum:01:input wants rgba:f32"):
        graph.connect("blur", "01", "output", "accum", "01", "input")


def test_connector_direction_checked(graph):
    graph.add_module("blur", "01")
    graph.add_module("sink", "01")
    with pytest.raises(GraphError, match="connector 'input' of blur:01 is a read connector"):
        graph.connect("blur", "01", "input", "sink", "01", "input")
    with pytest.raises(GraphError, match="connector 'output' of blur:01 is a write connector"):
        graph.connect("blur", "01", "output", "blur", "01", "output")


def test_reconnect_replaces_and_reverts(graph):
    for m, i in [("wild", "a"), ("wild", "b"), ("accum", "01"), ("sink", "01")]:
        graph.add_module(m, i)
    graph.connect("wild", "a", "output", "accum", "01", "input")
    assert chan_fmt(graph, "wild", "a", "output") == "rgba:f32"
    graph.connect("wild", "b", "output", "accum", "01", "input")
    # wild:a lost its only reader and is a wildcard again
    assert chan_fmt(graph, "wild", "a", "output") == "*:*"
    assert graph.module("accum", "01").connector("input").source[0] is graph.module("wild", "b")
    graph.connect("-1", "-1", "-1", "accum", "01", "input")  # vkdt's disconnect
    assert graph.module("accum", "01").connector("input").source is None
    assert chan_fmt(graph, "wild", "b", "output") == "*:*"


def test_reconnect_same_wire_is_noop(graph):
    graph.add_module("wild", "a")
    graph.add_module("sink", "01")
    graph.connect("wild", "a", "output", "sink", "01", "input")
    graph.connect("wild", "a", "output", "sink", "01", "input")
    assert chan_fmt(graph, "sink", "01", "input") == "rgba:f16"


def test_cycle_is_named(graph):
    for i in ("a", "b", "c"):
        graph.add_module("blur", i)
    graph.connect("blur", "a", "output", "blur", "b", "input")
    graph.connect("blur", "b", "output", "blur", "c", "input")
    with pytest.raises(GraphError, match=r"closes the cycle blur:a -> blur:b -> blur:c -> blur:a"):
        graph.connect("blur", "c", "output", "blur", "a", "input", where="g.cfg:4")


def test_self_loop_is_a_cycle_unless_feedback(graph):
    graph.add_module("accum", "01")
    with pytest.raises(GraphError, match="cycle accum:01 -> accum:01"):
        graph.connect("accum", "01", "output", "accum", "01", "back")
    graph.connect("accum", "01", "output", "accum", "01", "back", feedback=True)
    assert graph.module("accum", "01").connector("back").feedback is True


def test_feedback_edges_do_not_count_as_cycles(graph):
    for i in ("a", "b"):
        graph.add_module("accum", i)
    graph.connect("accum", "a", "output", "accum", "b", "input")
    graph.connect("accum", "b", "output", "accum", "a", "back", feedback=True)
    # upstream of a is only the feedback edge from b, so a -> b.back closes no cycle
    graph.connect("accum", "a", "output", "accum", "b", "back")
    with pytest.raises(GraphError, match="cycle accum:a -> accum:b -> accum:a"):
        graph.connect("accum", "b", "output", "accum", "a", "input")


def test_unconnected_required_inputs(graph):
    opt = graph.add_module("opt", "01")
    assert [c.name for c in graph.unconnected_required_inputs(opt)] == ["input"]
    graph.add_module("src", "01")
    graph.connect("src", "01", "output", "opt", "01", "input")
    assert graph.unconnected_required_inputs(opt) == []


# -- params and keyframes ------------------------------------------------------------------

def test_set_param_and_paramsub(graph):
    blur = graph.add_module("blur", "01")
    graph.set_param("blur", "01", "weights", ["1", "2", "3"])
    assert blur.values["weights"] == [1.0, 2.0, 3.0]
    graph.set_paramsub("blur", "01", "weights", "1", "0", ["5", "6"])
    assert blur.values["weights"] == [1.0, 5.0, 6.0]
    graph.set_paramsub("blur", "01", "weights", 0, 2, ["1", "1"], op="inc")
    graph.set_paramsub("blur", "01", "iters", 0, 1, ["1"], op="dec")
    assert blur.values["weights"] == [2.0, 6.0, 6.0] and blur.values["iters"] == [2]
    with pytest.raises(GraphError, match="element range 2:5 is outside param 'weights'"):
        graph.set_paramsub("blur", "01", "weights", 2, 5, ["1", "1", "1"])
    assert graph.module("blur", "01").cls.params[2].default == [0.25, 0.5, 0.25]


def keyed(graph: Graph, mode: str) -> Graph:
    graph.add_module("blur", "01")
    graph.add_keyframe(10, "blur", "01", "radius", 0, 0, ["10"], mode)
    graph.add_keyframe(0, "blur", "01", "radius", 0, 0, ["0"], "linear")
    return graph


@pytest.mark.parametrize("mode, at5, at6", [
    ("linear", 5.0, 6.0), ("ease-in", 1.25, 2.16), ("ease-out", 8.75, 9.36),
    ("smooth", 5.0, 6.48), ("step", 0.0, 10.0)])
def test_keyframe_easing(graph, mode, at5, at6):
    keyed(graph, mode)
    for frame, want in [(5, at5), (6, at6), (0, 0.0), (10, 10.0), (25, 10.0)]:
        graph.apply_keyframes(frame)
        assert graph.module("blur", "01").values["radius"][0] == pytest.approx(want)


def test_warp_endpoints():
    for mode in ("linear", "ease-in", "ease-out", "smooth", "step"):
        assert warp(0.0, mode) == 0.0 and warp(1.0, mode) == 1.0


def test_keyframe_before_first_holds_first(graph):
    graph.add_module("blur", "01")
    graph.add_keyframe(4, "blur", "01", "radius", 0, 1, ["7"])
    graph.add_keyframe(8, "blur", "01", "radius", 0, 1, ["9"])
    graph.apply_keyframes(1)
    assert graph.module("blur", "01").values["radius"] == [7.0]


def test_keyframe_subrange_beg_above_zero(graph):
    # vkdt: values of a keyframe with beg > 0 were read from the wrong offset
    blur = graph.add_module("blur", "01")
    graph.add_keyframe(0, "blur", "01", "weights", 1, 3, ["0", "10"])
    graph.add_keyframe(4, "blur", "01", "weights", 1, 3, ["4", "30"])
    graph.apply_keyframes(1)
    assert blur.values["weights"] == [0.25, 1.0, 15.0]


def test_param_blob_packed_once_per_change(graph):
    """The frame loop asks for every module's blob every frame: the same bytes object comes
    back until a value changes (set_param, paramsub, a keyframe), then the new packing."""
    blur = graph.add_module("blur", "01")
    first = blur.param_blob()
    assert blur.param_blob() is first
    blur.set_param("radius", blur.param("radius"))  # the same value: the same blob
    assert blur.param_blob() is first
    blur.set_param("radius", 4.5)
    second = blur.param_blob()
    assert second is not first and second != first and blur.param_blob() is second
    graph.set_paramsub("blur", "01", "weights", 1, 2, ["9"])
    third = blur.param_blob()
    assert third != second
    graph.add_keyframe(0, "blur", "01", "weights", 1, 3, ["0", "10"])
    graph.add_keyframe(4, "blur", "01", "weights", 1, 3, ["4", "30"])
    graph.apply_keyframes(1)
    fourth = blur.param_blob()
    assert fourth != third
    graph.apply_keyframes(0)
    graph.apply_keyframes(0)  # a held keyframe: no new packing, nothing to upload
    fifth = blur.param_blob()
    graph.apply_keyframes(0)
    assert blur.param_blob() is fifth
    assert blur.param_blob() == blur._pack()  # the cached bytes are the values' packing


def test_int_keyframes_hold_previous(graph):
    blur = graph.add_module("blur", "01")
    graph.add_keyframe(0, "blur", "01", "iters", 0, 0, ["1"])
    graph.add_keyframe(10, "blur", "01", "iters", 0, 0, ["5"])
    graph.apply_keyframes(9)
    assert blur.values["iters"] == [1]
    graph.apply_keyframes(10)
    assert blur.values["iters"] == [5]


def test_keyframe_same_frame_replaces(graph):
    blur = graph.add_module("blur", "01")
    graph.add_keyframe(3, "blur", "01", "radius", 0, 0, ["1"])
    graph.add_keyframe(3, "blur", "01", "radius", 0, 0, ["2"])
    assert len(blur.keyframes) == 1 and blur.keyframes[0][4] == [2.0]
    assert graph.has_keyframes()
