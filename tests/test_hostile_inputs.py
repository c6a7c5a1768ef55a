"""The defects a hostile-input trial found (each test fails without its fix): data of the
wrong size or type where it meets a connector, unbounded reads, closed pipes, decoder errors
that hide their cause, and messages that echo too much."""

from __future__ import annotations

import numpy as np
import pytest
from test_kpn_infer import run_output, trained  # noqa: F401 (a fixture)

from pipeline.errors import GraphError
from pipeline.formats import read_lut, write_lut

# ------------------------------------------------------------------------------------------
# data meets a connector: kpn's `w`, kpn-t's `wcp`


def test_kpn_converts_f32_weights_to_its_f16(device, trained, tmp_path):  # noqa: F811
    """A float32 .lut of the right count gives the same image as the f16 one (it was read
    as f16 bytes: a wrong image with exit 0)."""
    d, _, lut, _, _ = trained
    w16 = read_lut(lut)[0]
    f32 = tmp_path / "w32.lut"
    write_lut(f32, w16.astype(np.float32), 1, "f32", 64, 448, ssbo=True)
    want, _, _ = run_output(device, "kpn", lut, d / "x.pfm")
    got, build, m = run_output(device, "kpn", f32, d / "x.pfm")
    np.testing.assert_array_equal(got, want)
    src = next(n for n in build.schedule if n.kernel is None and n.module.name == "i-lut")
    assert src.connectors[0].format == "f16"


def test_kpn_t_starts_from_f32_weights(device, trained, tmp_path):  # noqa: F811
    d, _, lut, _, _ = trained
    w = read_lut(lut)[0].astype(np.float32) + np.float32(1e-4)  # not all f16 values
    f32 = tmp_path / "w32.lut"
    write_lut(f32, w, 1, "f32", 64, 448, ssbo=True)
    _, b, m = run_output(device, "kpn-t", f32, d / "x.pfm")
    w0 = b.read(m.data["adam"], "w").reshape(7, 64, 64)
    want = w.astype(np.float16).astype(np.float32).reshape(7, 64, 64)
    want[6, 16:] = 0  # rows kpn-t does not use start at 0
    np.testing.assert_array_equal(w0, want)


def test_f32_weights_beyond_f16_are_refused(device, trained, tmp_path):  # noqa: F811
    d = trained[0]
    w = np.zeros(64 * 448, np.float32)
    w[77] = 1e6
    f32 = tmp_path / "big.lut"
    write_lut(f32, w, 1, "f32", 64, 448, ssbo=True)
    with pytest.raises(GraphError, match="element 77 of 'output' is 1e\\+06, beyond what f16"):
        run_output(device, "kpn", f32, d / "x.pfm")


@pytest.mark.parametrize("count", [64 * 64, 64 * 449])
def test_kpn_t_refuses_wcp_of_another_size(device, trained, tmp_path, count):  # noqa: F811
    """It was zero-padded (or cut) silently, exit 0."""
    d = trained[0]
    bad = tmp_path / "small.lut"
    write_lut(bad, np.zeros(count, np.float16), 1, "f16", 64, count // 64, ssbo=True)
    with pytest.raises(GraphError, match=f"input 'wcp' holds 64x{count // 64} = {count} "
                                         "elements; kpn-t starts from its own weights, 64x448"):
        run_output(device, "kpn-t", bad, d / "x.pfm")


def test_ssbo_of_another_format_from_a_kernel_is_refused(device, tmp_path):
    """Only a source's host data is converted: a kernel output that turns out f32 (a `*`
    declaration resolved by its module) for a reader that reads f16 is an error."""
    from conftest import graph_from_lines

    from pipeline.registry import DEFAULT_DIR, Registry
    from pipeline.runner import Build

    mods = tmp_path / "mods"
    for name, conns in (("gen", "x:read:rgba:*\nout:write:ssbo:*\n"),
                        ("eat16", "w:read:ssbo:f16\noutput:write:rgba:f32\n")):
        (mods / name).mkdir(parents=True)
        (mods / name / "connectors").write_text(conns)
    (mods / "gen" / "module.py").write_text(
        "from pipeline.module import Roi\n\n\n"
        "def modify_roi_out(graph, module):\n"
        "    out = module.connector('out')\n"
        "    out.format, out.roi = 'f32', Roi(4, 1)\n")
    (mods / "eat16" / "module.py").write_text(
        "from pipeline.module import Roi\n\n\n"
        "def modify_roi_out(graph, module):\n"
        "    module.connector('output').roi = Roi(4, 4)\n")
    (tmp_path / "x.pfm").write_bytes(b"PF\n1 1\n-1\n" + bytes(12))
    g = graph_from_lines(f"""
        module:i-pfm:main
        module:gen:01
        module:eat16:01
        module:o-pfm:main
        param:i-pfm:main:filename:{tmp_path / "x.pfm"}
        connect:i-pfm:main:output:gen:01:x
        connect:gen:01:out:eat16:01:w
        connect:eat16:01:output:o-pfm:main:input""", registry=Registry([mods, DEFAULT_DIR]))
    with pytest.raises(GraphError, match="input 'w' of eat16:01 reads f16 values, but "
                                         "gen:01:out delivers f32"):
        Build(g, device)
