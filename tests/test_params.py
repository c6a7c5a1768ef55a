"""Declared param ranges (modules/<name>/ranges): every int and float param of every shipped
module declares what it accepts, and a value outside is refused wherever it is set (cfg
line, --config, paramsub/paraminc, keyframes, the Python setter) with exit status 2 and a
message naming the instance, the param, the value and the range; nothing is clamped.

The cli runs here stop at the param line, before a device is opened, so they are fast."""

from __future__ import annotations

import math

import pytest
from conftest import vkgraph
from hypothesis import given, settings
from hypothesis import strategies as st

from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.graph import Graph
from vkgraph.pipeline.module import FLT_MAX, INT32, ModuleClass, Param
from vkgraph.pipeline.registry import Registry

REGISTRY = Registry()
NUMERIC = [(name, p) for name in REGISTRY.names() for p in REGISTRY.get(name).params
           if p.type != "string"]


def test_every_numeric_param_of_every_module_declares_a_range():
    missing = [f"{name}:{p.name}" for name, p in NUMERIC if not p.declared]
    assert not missing, f"no line in modules/<name>/ranges for {missing}"


def outside(p: Param):
    """A strategy of values param `p` must refuse."""
    bad = []
    if p.choices is not None:
        top = max(p.choices)
        bad += [top + 1, min(p.choices) - 1, top + 17]
    if math.isfinite(p.lo):
        bad += [p.lo - 1, p.lo - 1e6] if p.type == "int" else [p.lo - 1e-3, p.lo - 1e6]
    if math.isfinite(p.hi):
        bad += [p.hi + 1, p.hi * 10 + 1000]
    if p.type == "int":
        bad += [INT32[1] + 1, INT32[0] - 1, 10**20]
    else:
        bad += [math.nan, math.inf, -math.inf, FLT_MAX * 2]
    bad = [v for v in bad if not p._allowed(v)]
    return st.sampled_from(bad)


def value_text(p: Param, bad, element: int) -> str:
    """All elements at their defaults but one."""
    values = [str(v) for v in p.default]
    values[element] = str(int(bad)) if p.type == "int" else repr(float(bad))
    return ":".join(values)


@st.composite
def bad_setting(draw):
    name, p = draw(st.sampled_from(NUMERIC))
    return name, p, draw(outside(p)), draw(st.integers(0, p.count - 1))


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(case=bad_setting(), how=st.sampled_from(["config", "cfg"]))
def test_every_param_outside_its_range_is_exit_2_naming_it(tmp_path_factory, case, how):
    name, p, bad, element = case
    d = tmp_path_factory.mktemp("range")
    line = f"param:{name}:01:{p.name}:{value_text(p, bad, element)}"
    body = f"module:{name}:01\n"
    if how == "cfg":
        body += line + "\n"
    (d / "g.cfg").write_text(body)
    args = ["-g", "g.cfg"] + (["--config", line] if how == "config" else [])
    rc, out, err = vkgraph(d, *args)
    assert rc == 2, f"{line}: exit {rc}\n{out}{err}"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vkgraph: error: "), err
    assert f"param '{p.name}' of {name}:01 is " in lines[0], lines[0]
    assert ("outside its range" in lines[0] or "not one of" in lines[0]
            or "not a finite number" in lines[0] or "32-bit float" in lines[0]), lines[0]
    assert ("g.cfg:2" if how == "cfg" else "--config 1") in lines[0]


@pytest.mark.parametrize("line,needle", [
    ("param:kpn-t:01:levels:0", "is 0, outside its range 1..12"),
    ("param:kpn-t:01:levels:99", "is 99, outside its range 1..12"),
    ("param:kpn-t:01:levels:99999999999999999999", "outside its range 1..12"),
    ("param:kpn-t:01:loss:7", "is 7, not one of 0, 1, 2"),
    ("param:kpn-t:01:apply:5", "is 5, not one of 0, 1"),
    ("param:kpn-t:01:gradclip:-1", "is -1, outside its range"),
    ("param:kpn-t:01:alpha:nan", "is nan, not a finite number (range 0..inf)"),
    ("param:kpn-t:01:alpha:inf", "is inf, not a finite number"),
    ("param:kpn-t:01:alpha:1e39", "is 1e+39, beyond what a 32-bit float holds"),
    ("param:cnngenin:01:generate:99", "is 99, not one of 0, 1, 2, 3, 4"),
    ("param:mlp-t:01:batch:0", "is 0, outside its range 1..2147483647"),
    ("param:mlp-t:01:batch:-5", "is -5, outside its range"),
    ("param:mlp-t:01:tiles:1:0", "param 'tiles' of mlp-t:01 is 0"),
    ("param:mlp-t:01:seed:3000000000", "is 3000000000, outside its range "
                                       "-2147483648..2147483647"),
])
def test_reported_out_of_range_values(tmp_path, line, needle):
    """The values of the hostile-input trial: each was clamped, ignored or crashed."""
    name = line.split(":")[1]
    (tmp_path / "g.cfg").write_text(f"module:{name}:01\n")
    rc, _, err = vkgraph(tmp_path, "-g", "g.cfg", "--config", line)
    assert rc == 2 and needle in err and "internal error" not in err, err


def graph_with(name: str) -> tuple[Graph, object]:
    g = Graph()
    return g, g.add_module(name, "01")


def test_paramsub_inc_and_dec_results_are_checked():
    g, m = graph_with("kpn-t")
    g.set_paramsub("kpn-t", "01", "levels", 0, 1, ["8"], op="inc")
    assert m.param("levels") == 12
    with pytest.raises(GraphError, match="is 13, outside its range 1..12"):
        g.set_paramsub("kpn-t", "01", "levels", 0, 1, ["1"], op="inc")
    with pytest.raises(GraphError, match="is 0, outside"):
        g.set_paramsub("kpn-t", "01", "levels", 0, 1, ["12"], op="dec")
    assert m.param("levels") == 12  # a refused value changes nothing


def test_keyframe_values_are_checked_when_set():
    g, m = graph_with("kpn-t")
    g.add_keyframe(0, "kpn-t", "01", "alpha", 0, 1, ["0.1"])
    with pytest.raises(GraphError, match="param 'alpha' of kpn-t:01 is -0.5"):
        g.add_keyframe(10, "kpn-t", "01", "alpha", 0, 1, ["-0.5"], where="k.cfg:3")
    assert len(m.keyframes) == 1


def test_python_setter_is_checked():
    _, m = graph_with("mlp-t")
    m.set_param("batch", 64)
    for bad in (0, -5, 2**31, 1.5, "many", math.nan):
        with pytest.raises(GraphError, match="param 'batch' of mlp-t:01"):
            m.set_param("batch", bad)
    assert m.param("batch") == 64
    with pytest.raises(GraphError, match="longer than 255 bytes"):
        graph_with("o-pfm")[1].set_param("filename", "x" * 300)


def test_modules_lists_the_ranges(capsys):
    from vkgraph.cli.main import main

    assert main(["modules", "kpn-t"]) == 0
    out = capsys.readouterr().out
    assert "levels:int:1:4  (1..12)" in out and "loss:int:1:0  (one of 0, 1, 2)" in out


@pytest.mark.parametrize("text,needle", [
    ("levels:1:12\nlevels:1:4\n", "ranges:3: second range for param 'levels'"),
    ("level:1:12\n", "ranges:2: range for unknown param 'level' (did you mean 'levels'?)"),
    ("levels:one:12\n", "ranges:2: range bound 'one' of param 'levels' is not an integer"),
    ("levels:1.5:12\n", "is not an integer"),
    ("levels:12:1\n", "range of param 'levels' is empty"),
    ("levels:5:12\n", "ranges:2: the default of param 'levels' of its module is 4, outside"),
    ("levels:1|2|x\n", "choices '1|2|x' of param 'levels' are not all int values"),
    ("name:1:2\n", "min:max is for numbers"),
    ("levels\n", "is not name:min:max"),
])
def test_bad_ranges_file_names_file_and_line(tmp_path, text, needle):
    (tmp_path / "connectors").write_text("output:source:rgba:f32\n")
    (tmp_path / "params").write_text("levels:int:1:4\nname:string:16:x\n")
    (tmp_path / "ranges").write_text("# comment\n" + text)
    with pytest.raises(GraphError) as e:
        ModuleClass("m", tmp_path)
    line = e.value.line().replace(str(tmp_path / "ranges"), "ranges")
    assert needle in line, line


def test_ranges_file_forms(tmp_path):
    (tmp_path / "connectors").write_text("output:source:rgba:f32\n")
    (tmp_path / "params").write_text("a:float:2:0:1\nb:int:1:2\nc:string:8:up\nd:string:8:x\n")
    (tmp_path / "ranges").write_text("a:-inf:1\nb:2|4|8\nc:up|down\nd:*\n")
    cls = ModuleClass("m", tmp_path)
    a, b, c, d = cls.params
    assert (a.lo, a.hi, b.choices, c.choices, d.choices) == (-math.inf, 1, (2, 4, 8),
                                                             ("up", "down"), None)
    assert all(p.declared for p in cls.params)
    a.check([-1e30, 1.0], "m:01")
    with pytest.raises(GraphError, match="is 1.5, outside its range -inf..1"):
        a.check([0.0, 1.5], "m:01")
    with pytest.raises(GraphError, match="param 'c' of m:01 is sideways, not one of up, down"):
        c.check("sideways", "m:01")
