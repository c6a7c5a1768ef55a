"""The defects a hostile-input trial found (each test fails without its fix): data of the
wrong size or type where it meets a connector, unbounded reads, closed pipes, decoder errors
that hide their cause, and messages that echo too much."""

from __future__ import annotations

import numpy as np
import pytest
from test_kpn_infer import run_output, trained  # noqa: F401 (a fixture)

from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.formats import read_lut, write_lut
from vkgraph.pipeline.graph import Graph

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
    src = next(n for n in build.plan.schedule if n.kernel is None and n.module.name == "i-lut")
    assert src.connectors[0].format == "f16"


def test_kpn_t_starts_from_f32_weights(device, trained, tmp_path):  # noqa: F811
    d, _, lut, _, _ = trained
    w = read_lut(lut)[0].astype(np.float32) + np.float32(1e-4)  # not all f16 values
    f32 = tmp_path / "w32.lut"
    write_lut(f32, w, 1, "f32", 64, 448, ssbo=True)
    _, b, m = run_output(device, "kpn-t", f32, d / "x.pfm")
    w0 = b.read(m.trainable.adam, "w").reshape(7, 64, 64)
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

    from vkgraph.pipeline.registry import DEFAULT_DIR, Registry
    from vkgraph.pipeline.runner import Build

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


# ------------------------------------------------------------------------------------------
# bounded reads: regular files only, sizes from the header checked before reading

IO_GRAPH = """module:{src}:main
module:o-pfm:main
connect:{src}:main:output:o-pfm:main:input
param:{src}:main:filename:{name}
param:o-pfm:main:filename:out
"""


def one_error(res) -> str:
    rc, out, err = res
    assert rc == 2, f"exit {rc}\n{out}\n{err}"
    lines = err.strip().splitlines()
    assert lines[-1].startswith("vkgraph: error: ") and "Traceback" not in err, err
    assert len(lines[-1]) < 600, lines[-1]
    return lines[-1]


@pytest.mark.parametrize("src", ["i-lut", "i-img", "i-pfm"])
def test_dev_zero_as_input_file_fails_fast(tmp_path, src):
    """It was read without bound (6 GB in 6 s), deaf to Ctrl-C."""
    from conftest import vkgraph

    (tmp_path / "g.cfg").write_text(IO_GRAPH.format(src=src, name="/dev/zero"))
    line = one_error(vkgraph(tmp_path, "-g", "g.cfg", limit_s=30))
    assert "/dev/zero: cannot read file: it is a device, pipe or socket" in line


def test_dev_zero_fifo_and_folder_as_cfg(tmp_path):
    import os

    from conftest import vkgraph

    assert "cannot read graph file: it is a device" in one_error(
        vkgraph(tmp_path, "-g", "/dev/zero", limit_s=30))
    os.mkfifo(tmp_path / "pipe.cfg")  # no writer: opening it for reading would block
    assert "it is a device, pipe" in one_error(vkgraph(tmp_path, "-g", "pipe.cfg", limit_s=30))
    (tmp_path / "dir.cfg").mkdir()
    assert "it is a folder" in one_error(vkgraph(tmp_path, "-g", "dir.cfg", limit_s=30))


def test_resume_from_a_folder_says_so(tmp_path):
    from conftest import vkgraph

    (tmp_path / "g.cfg").write_text("module:exposure:01\n")
    line = one_error(vkgraph(tmp_path, "-g", "g.cfg", "--resume", str(tmp_path)))
    assert "is a folder, not a checkpoint file" in line


def png_declaring(wd: int, ht: int) -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", wd, ht, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b""))


def test_png_bombs_name_their_cause(tmp_path):
    """A PNG declaring 10^10 pixels said 'An unknown error occurred while initializing
    plugin pillow'."""
    from vkgraph.pipeline.formats import read_image

    (tmp_path / "huge.png").write_bytes(png_declaring(100000, 100000))
    with pytest.raises(GraphError, match="the header declares 100000x100000 pixels "
                                         r"\(160000000000 bytes of data\), more than vkgraph"):
        read_image(tmp_path / "huge.png")
    # under vkgraph's cap, over Pillow's: its guard is named
    (tmp_path / "big.png").write_bytes(png_declaring(15000, 15000))
    with pytest.raises(GraphError, match="exceeds limit .* decompression bombs"):
        read_image(tmp_path / "big.png")


def test_huge_declared_lut_and_pfm_are_refused_before_reading(tmp_path, monkeypatch):
    from vkgraph.pipeline import formats as F

    monkeypatch.setattr(F, "READ_MAX", 1000)
    F.write_lut(tmp_path / "w.lut", np.zeros(64 * 8, np.float32), 1, "f32", 64, 8, ssbo=True)
    with pytest.raises(GraphError, match="declares 64x8x1 elements .2048 bytes of data"):
        F.read_lut(tmp_path / "w.lut")
    F.write_pfm(tmp_path / "x.pfm", np.zeros((10, 10, 3), np.float32))
    with pytest.raises(GraphError, match="declares 10x10 pixels .1200 bytes"):
        F.read_pfm(tmp_path / "x.pfm")


def test_lut_text_is_bounded(tmp_path):
    from vkgraph.pipeline import formats as F

    F.write_lut(tmp_path / "w.lut", np.zeros(4, np.float16), 1, "f16", 4, 1,
                text="x" * (F.LUT_TEXT_MAX + 10))
    with pytest.raises(GraphError, match="byte 24: expected at most 1048576 bytes of text"):
        F.read_lut(tmp_path / "w.lut")


def test_exr_nan_names_the_pixel_not_a_byte_past_the_end(tmp_path):
    from vkgraph.pipeline import formats as F

    img = np.ones((6, 5, 3), np.float32)
    img[4, 3, 1] = np.nan
    (tmp_path / "n.exr").write_bytes(b"".join(bytes(p) for p in F.exr_bytes(img)))
    with pytest.raises(GraphError) as e:
        F.read_exr(tmp_path / "n.exr", finite=True)
    line = e.value.line()
    assert "expected finite values, found nan at x=3 y=4 channel 1" in line
    assert "byte" not in line


# ------------------------------------------------------------------------------------------
# the command line


def test_closed_stdout_ends_quietly():
    """`vkgraph modules | head -1` was an internal error (BrokenPipeError)."""
    import subprocess

    from conftest import VKGRAPH, vkgraph_env

    res = subprocess.run(f"{' '.join(VKGRAPH)} modules | head -c 10; exit ${{PIPESTATUS[0]}}",
                         shell=True, executable="/bin/bash", env=vkgraph_env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert len(res.stdout) == 10


@pytest.mark.parametrize("args,needle", [
    (["cli", "-g", "g.cfg", "--frames", "-5"], "cli: argument --frames: expected an integer "
                                               "1..2147483647, got '-5'"),
    (["cli", "-g", "g.cfg", "--frames", "3000000000"], "argument --frames: expected"),
    (["cli", "-g", "g.cfg", "--config", "frames:3000000000"],
     "--config 1: bad frames value '3000000000' (an integer 0..2147483647)"),
    (["gradcheck", "-g", "g.cfg", "--eps", "-1"], "gradcheck: argument --eps: expected a "
                                                  "number 1e-07..1, got '-1'"),
    (["gradcheck", "-g", "g.cfg", "--eps", "nan"], "expected a number 1e-07..1"),
    (["gradcheck", "-g", "g.cfg", "--count", "0"], "argument --count: expected an integer"),
    (["gui", "-g", "g.cfg", "--exit-after", "0"], "argument --exit-after"),
    (["cli"], "vkgraph: error: cli: the following arguments are required: -g/--graph"),
])
def test_bad_arguments_are_one_clean_line(tmp_path, capsys, args, needle):
    from vkgraph.cli.main import main

    (tmp_path / "g.cfg").write_text("module:exposure:01\n")
    import os
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        rc = main(args)
    finally:
        os.chdir(old)
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "vkgraph: error: vkgraph" not in err, err
    assert len(err.strip().splitlines()) == 1


def test_a_huge_name_is_clipped_in_the_message(tmp_path):
    from conftest import vkgraph

    (tmp_path / "g.cfg").write_text(f"module:exposure:{'x' * 100000}\n")
    line = one_error(vkgraph(tmp_path, "-g", "g.cfg"))
    assert "instance name 'xxxx" in line and "more characters" in line and len(line) < 400


def test_gradcheck_samples_exactly_count():
    """--count 64 on 7 layers checked 63 (64 // 7 from each)."""
    from vkgraph.cli.gradcheck import layer_groups, sample

    used = np.zeros(7 * 4096, bool)
    used[: 6 * 4096] = True
    used[6 * 4096: 6 * 4096 + 16 * 64] = True  # kpn-t: the last matrix has 16 rows
    for count in (7, 14, 64, 100):
        idx = sample(used, layer_groups(used, 7), count, seed=1)
        assert idx.size == count == np.unique(idx).size and used[idx].all()
    tiny = np.zeros(7 * 16, bool)
    tiny[:3] = tiny[16:32] = True  # a layer with fewer used weights than its share
    assert sample(tiny, layer_groups(tiny, 7), 10, seed=1).size == 10
    assert sample(tiny, layer_groups(tiny, 7), 500, seed=1).size == 19  # all of them


def test_gradcheck_stops_at_a_signal():
    from vkgraph.cli.gradcheck import run_differences

    class Probe:
        def __init__(self):
            self.w = np.zeros(8, np.float32)

        def set(self, j, v):
            self.w[j] = v

        def forward_loss(self):
            return float(np.sum(self.w.astype(np.float64) ** 2))

    calls = iter(range(100))
    numeric, kinks = run_differences(Probe(), np.ones(8, np.float32), np.arange(8), 1e-3, 0.0,
                                     stop=lambda: next(calls) >= 2)
    assert numeric.size == kinks.size == 3 and np.allclose(numeric, 2.0, rtol=1e-3)


# ------------------------------------------------------------------------------------------
# the docs


def test_readme_graph_block_is_train_kpn_cfg():
    """The README's annotated graph works when pasted: it is graphs/train-kpn.cfg (its
    trailing '# ...' notes were part of the values, and i-pfm:ref had no file)."""
    from pathlib import Path

    from vkgraph.pipeline.cfg import apply_line, read_cfg, write_cfg

    root = Path(__file__).resolve().parent.parent
    text = (root / "README.md").read_text()
    block = text.split("## A graph, line by line", 1)[1].split("```\n", 2)[1]
    g = Graph()
    for n, line in enumerate(block.splitlines(), 1):
        apply_line(g, line, f"README:{n}")
    assert write_cfg(g) == write_cfg(read_cfg(root / "graphs" / "train-kpn.cfg"))


def test_train_kpn_header_command_writes_a_png():
    """The header's `--output hist --format o-png` gave hist a jpg (the format applies to
    the slot the next --output closes)."""
    from pathlib import Path

    from vkgraph.cli.main import output_slots

    root = Path(__file__).resolve().parent.parent
    lines = [ln for ln in (root / "graphs" / "train-kpn.cfg").read_text().splitlines()
             if ln.startswith("#   vkgraph cli") and "hist" in ln]
    assert lines
    for line in lines:
        slots = output_slots(line.split()[1:])
        hist = next(s for s in slots if s["inst"] == "hist")
        assert hist.get("format") == "o-png", line
