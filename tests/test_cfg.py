"""cfg reader and writer: every line processed, file:line errors, lossless round trips."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from vkgraph.pipeline.cfg import apply_line, read_cfg, write_cfg
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.graph import Graph
from vkgraph.pipeline.registry import Registry

FIXTURES = Path(__file__).parent / "fixtures" / "modules"
REGISTRY = Registry([FIXTURES])

PREAMBLE = """\
# a small chain
module:src:01
module:blur:01
module:sink:main
module:accum:01
connect:src:01:output:blur:01:input
"""


def write(tmp_path: Path, text: str, name: str = "g.cfg") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


def read(path: Path, lenient: bool = False) -> Graph:
    return read_cfg(path, registry=REGISTRY, lenient=lenient)


def describe(graph: Graph) -> dict:
    """Everything a cfg carries, for comparing two graphs."""
    modules = {}
    for key, m in graph.modules.items():
        wires = [(c.name, c.chan, c.format, c.feedback,
                  (c.source[0].id, c.source[1]) if c.source else None) for c in m.connectors]
        modules[key] = (m.position, wires, m.values, m.keyframes)
    return {"frames": graph.frames, "fps": graph.fps, "order": list(graph.modules),
            "modules": modules}


def round_trip(graph: Graph, tmp_path: Path) -> Graph:
    text = write_cfg(graph)
    again = read(write(tmp_path, text, "again.cfg"))
    assert describe(again) == describe(graph)
    assert write_cfg(again) == text
    return again


# -- reading -------------------------------------------------------------------------------

def test_reads_chain(tmp_path):
    g = read(write(tmp_path, PREAMBLE + "frames:12\nfps:24\nparam:blur:01:radius:4.5\n"))
    assert (g.frames, g.fps) == (12, 24.0)
    assert list(g.modules) == [("src", "01"), ("blur", "01"), ("sink", "main"), ("accum", "01")]
    assert g.module("blur", "01").connector("input").source[0] is g.module("src", "01")
    assert g.module("blur", "01").values["radius"] == [4.5]
    assert g.cfg_path == tmp_path / "g.cfg"


def test_last_line_without_newline_is_read(tmp_path):
    g = read(write(tmp_path, PREAMBLE + "param:blur:01:iters:7"))
    assert g.module("blur", "01").values["iters"] == [7]


def test_empty_lines_do_not_repeat_the_previous_line(tmp_path):
    g = read(write(tmp_path, PREAMBLE + "paraminc:blur:01:iters:0:1:1\n\n\n"))
    assert g.module("blur", "01").values["iters"] == [4]  # 3 + 1, once


def test_crlf_and_comments(tmp_path):
    g = read(write(tmp_path, "# comment\r\nmodule:blur:01\r\n  # indented comment\r\n"
                             "param:blur:01:iters:5\r\n"))
    assert g.module("blur", "01").values["iters"] == [5]


def test_string_params_keep_colons_and_spaces(tmp_path):
    g = read(write(tmp_path, PREAMBLE + "param:src:01:filename:dir/a b:c%04d.pfm\n"))
    assert g.module("src", "01").values["filename"] == "dir/a b:c%04d.pfm"


def test_paramsub_paraminc_paramdec(tmp_path):
    g = read(write(tmp_path, PREAMBLE + "paramsub:blur:01:weights:1:3:2:3\n"
                                        "paraminc:blur:01:weights:0:0:1:1:1\n"
                                        "paramdec:blur:01:iters:0:1:2\n"))
    blur = g.module("blur", "01")
    assert blur.values["weights"] == [1.25, 3.0, 4.0] and blur.values["iters"] == [1]


def test_disconnect_line(tmp_path):
    g = read(write(tmp_path, PREAMBLE + "connect:-1:-1:-1:blur:01:input\n"))
    assert g.module("blur", "01").connector("input").source is None


def test_feedback_line(tmp_path):
    g = read(write(tmp_path, "module:accum:01\nfeedback:accum:01:output:accum:01:back\n"))
    assert g.module("accum", "01").connector("back").feedback is True


def test_keyframe_spellings(tmp_path):
    lines = "".join(f"{cmd}:{f}:blur:01:radius:0:1:{f}\n" for f, cmd in
                    enumerate(["keyframe", "keyframE", "Keyframe", "KeyframE", "keyFRAME"]))
    g = read(write(tmp_path, "module:blur:01\n" + lines))
    assert [k[5] for k in g.module("blur", "01").keyframes] == [
        "linear", "ease-out", "ease-in", "smooth", "step"]


def test_apply_line_for_config_arguments():
    g = Graph(REGISTRY)
    apply_line(g, "module:blur:01", "--config")
    apply_line(g, "param:blur:01:iters:9", "--config")
    assert g.module("blur", "01").values["iters"] == [9]
    with pytest.raises(GraphError, match=r"^--config: unknown command 'parm'"):
        apply_line(g, "parm:blur:01:iters:9", "--config")


def test_missing_file(tmp_path):
    with pytest.raises(GraphError, match="nope.cfg: cannot read graph file"):
        read(tmp_path / "nope.cfg")


# -- errors: each names file:line, the token, and a hint where one helps --------------------

BAD_LINES = {
    "unknown command": ("conect:src:01:output:blur:01:input",
                        r"unknown command 'conect' \(did you mean 'connect'"),
    "unknown module class": ("module:blurr:02", r"unknown module 'blurr' \(did you mean 'blur'"),
    "unknown instance": ("param:blur:02:radius:1",
                         r"unknown module instance 'blur:02' \(did you mean 'blur:01'"),
    "unknown connector": ("connect:src:01:outptu:sink:main:input",
                          r"no connector 'outptu' \(did you mean 'output'"),
    "unknown param": ("param:blur:01:radus:1", r"no param 'radus' \(did you mean 'radius'"),
    "wrong value type": ("param:blur:01:iters:2.5", r"'iters' expects int values, got '2.5'"),
    "not a float": ("param:blur:01:radius:wide", r"'radius' expects float values, got 'wide'"),
    "too many values": ("param:blur:01:weights:1:2:3:4", r"'weights' takes 3 values, got 4"),
    "too few values": ("param:blur:01:weights:1:2", r"'weights' takes 3 values, got 2"),
    "too many fields": ("connect:src:01:output:blur:01:input:x",
                        r"too many fields for 'connect': 'x' is extra"),
    "too few fields": ("connect:src:01:output:blur:01", r"too few fields for 'connect'"),
    "module position half given": ("module:blur:02:10", r"too few fields for 'module'"),
    "bad module position": ("module:blur:02:10:up", r"bad module position value 'up'"),
    "long module name": ("module:verylongname:01", r"module name 'verylongname' is longer"),
    "long instance name": ("module:blur:instance9", r"instance name 'instance9' is longer"),
    "long param name": ("param:blur:01:radiusradius:1", r"param name 'radiusradius' is longer"),
    "long connector name": ("connect:src:01:outputoutput:blur:01:input",
                            r"connector name 'outputoutput' is longer"),
    "bad frames value": ("frames:ten", r"bad frames value 'ten'"),
    "negative frames": ("frames:-1", r"bad frames value '-1'"),
    "bad fps value": ("fps:fast", r"bad fps value 'fast'"),
    "wire into an output": ("connect:blur:01:output:src:01:output",
                            r"connector 'output' of src:01 is a source connector"),
    "wire from an input": ("connect:blur:01:input:sink:main:input",
                           r"connector 'input' of blur:01 is a read connector"),
    "incompatible connection": ("connect:blur:01:output:accum:01:input",
                                r"writer blur:01:output is rgba:f16, reader accum:01:input "
                                r"wants rgba:f32"),
    "cycle": ("connect:blur:01:output:blur:01:input", r"cycle blur:01 -> blur:01"),
    "range outside param": ("paramsub:blur:01:weights:2:4:1:1",
                            r"element range 2:4 is outside param 'weights'"),
    "bad range token": ("paramsub:blur:01:weights:one:2:1",
                        r"element range begin 'one' is not an integer"),
    "string too long": ("param:sink:main:filename:" + "x" * 40,
                        r"string for param 'filename' is longer than 31"),
    "keyframe frame": ("keyframe:soon:blur:01:radius:0:1:1",
                       r"keyframe frame 'soon' is not an integer"),
    "range on a string": ("paramsub:src:01:filename:0:1:a", r"param 'filename' is a string"),
}


@pytest.mark.parametrize("bad, message", BAD_LINES.values(), ids=BAD_LINES.keys())
def test_bad_line_names_file_line_and_token(tmp_path, bad, message):
    path = write(tmp_path, PREAMBLE + bad + "\nframes:2\n")
    line = PREAMBLE.count("\n") + 1
    with pytest.raises(GraphError, match=rf"^{path}:{line}: .*{message}") as e:
        read(path)
    assert e.value.where == f"{path}:{line}"
    assert e.value.exit_code == 2


def test_incompatible_connection_is_reported_with_both_ends(tmp_path):
    path = write(tmp_path, "module:buf:01\nmodule:sink:main\nconnect:buf:01:output:sink:main:input")
    with pytest.raises(GraphError) as e:
        read(path)
    assert str(e.value) == (f"{path}:3: incompatible connection: writer buf:01:output is "
                            "ssbo:f16, reader sink:main:input wants rgba:*")


def test_lenient_skips_gui_lines_with_warnings(tmp_path, caplog):
    text = (PREAMBLE + "widget:blur:01:radius:slider\n"  # unknown command
            "module:colour:01:120:40\n"  # unknown module class ...
            "connect:blur:01:output:colour:01:input\n"  # ... and lines naming it
            "param:colour:01:sat:1\n"
            "param:blur:01:oldparam:1\n"  # unknown param
            "param:blur:01:iters:4\n")
    path = write(tmp_path, text)
    with caplog.at_level(logging.WARNING):
        g = read(path, lenient=True)
    assert g.module("blur", "01").values["iters"] == [4]
    assert ("colour", "01") not in g.modules
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 5
    assert warned[0].startswith(f"{path}:7: unknown command 'widget'")
    assert f"{path}:8: unknown module 'colour'" in warned[1]
    # lenient still refuses real mistakes
    with pytest.raises(GraphError, match=":2: bad frames value"):
        read(write(tmp_path, "module:blur:01\nframes:x\n", "b.cfg"), lenient=True)


# -- writing and round trips ---------------------------------------------------------------

def test_writer_output(tmp_path):
    g = read(write(tmp_path, PREAMBLE + "connect:blur:01:output:sink:main:input\n"
                                        "param:blur:01:radius:0.1\nkeyframe:4:blur:01:radius:0:0:1\n"))
    assert write_cfg(g) == """\
frames:1
fps:0
module:src:01
module:blur:01
module:sink:main
module:accum:01
connect:src:01:output:blur:01:input
connect:blur:01:output:sink:main:input
param:src:01:filename:in.pfm
param:src:01:scale:1
param:blur:01:radius:0.1
param:blur:01:iters:3
param:blur:01:weights:0.25:0.5:0.25
param:sink:main:filename:out
param:accum:01:decay:0.9
keyframe:4:blur:01:radius:0:1:1
"""


def test_round_trip_full_graph(tmp_path):
    g = Graph(REGISTRY)
    g.frames, g.fps = 250001, 29.97
    for m, i, pos in [("src", "main", (10.5, -3.0)), ("wild", "w", None), ("pass", "p", None),
                      ("accum", "01", (1e-7, 123456789.125)), ("opt", "01", None),
                      ("sink", "main", None), ("buf", "01", None)]:
        g.add_module(m, i, position=pos)
    g.connect("pass", "p", "output", "sink", "main", "input")  # resolved only later
    g.connect("wild", "w", "output", "pass", "p", "input")
    g.connect("src", "main", "output", "accum", "01", "input")
    g.connect("accum", "01", "output", "accum", "01", "back", feedback=True)
    g.connect("buf", "01", "output", "opt", "01", "wcp")
    g.connect("accum", "01", "output", "opt", "01", "input")
    g.set_param("src", "main", "filename", ["img_%04d.pfm"])
    g.set_param("src", "main", "scale", ["0.1"])
    g.module("accum", "01").set_param("decay", 1 / 3)
    g.add_keyframe(0, "accum", "01", "decay", 0, 0, ["0.5"], "smooth")
    g.add_keyframe(100, "accum", "01", "decay", 0, 0, ["1e-30"], "ease-in")
    g.add_keyframe(0, "src", "main", "filename", 0, 0, ["a.pfm"], "step")
    again = round_trip(g, tmp_path)
    assert again.module("accum", "01").values["decay"] == [1 / 3]
    assert again.module("sink", "main").connector("input").chan == "rgba"


def test_round_trip_multi_valued_params_and_keyframes(tmp_path):
    g = read(write(tmp_path, PREAMBLE + """\
param:blur:01:weights:0.1:0.2:0.30000000000000004
keyframE:0:blur:01:weights:0:3:1:2:3
Keyframe:10:blur:01:weights:1:3:-4.5:1e-08
KeyframE:20:blur:01:weights:0:3:1:2:3
keyFRAME:30:blur:01:iters:0:1:8
"""))
    assert g.module("blur", "01").values["weights"] == [0.1, 0.2, 0.30000000000000004]
    again = round_trip(g, tmp_path)
    again.apply_keyframes(15)
    assert again.module("blur", "01").values["weights"][0] == 1.0


def test_round_trip_vkdt_file_with_gui_coordinates(tmp_path):
    # as vkdt writes it: GUI positions on module lines, many values, no final newline
    colours = ":".join(str(0.125 * k) for k in range(3))
    text = (f"frames:0\nfps:0\nmodule:src:01:-1520.5:412\nmodule:blur:01:-1200:400\n"
            f"module:sink:main:-900:400\nconnect:src:01:output:blur:01:input\n"
            f"connect:blur:01:output:sink:main:input\nparam:blur:01:weights:{colours}\n"
            f"param:src:01:filename:img.pfm")
    g = read(write(tmp_path, text))
    assert g.module("src", "01").position == (-1520.5, 412.0)
    assert g.frames == 0
    round_trip(g, tmp_path)


def test_round_trip_after_disconnect_and_remove(tmp_path):
    g = read(write(tmp_path, PREAMBLE + "connect:blur:01:output:sink:main:input\n"))
    g.remove_module("blur", "01")
    g.add_module("blur", "02")
    g.connect("src", "01", "output", "blur", "02", "input")
    round_trip(g, tmp_path)
