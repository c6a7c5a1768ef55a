"""`vkgraph` end to end: vkdt's batch semantics, the subcommands, and bad input (one line on
stderr, exit status 2, no traceback, no output file)."""

from __future__ import annotations

import numpy as np
import pytest

from vkgraph.cli.main import main
from vkgraph.pipeline.formats import read_pfm, write_lut, write_pfm


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def image(tmp_path):
    rng = np.random.default_rng(7)
    img = rng.random((23, 37, 3)).astype(np.float32)
    write_pfm(tmp_path / "in.pfm", img)
    return img


def graph(tmp_path, body: str, name="g.cfg"):
    path = tmp_path / name
    path.write_text(body)
    return str(path)


PASS = """module:i-pfm:main
module:display:main
param:i-pfm:main:filename:in.pfm
connect:i-pfm:main:output:display:main:input
"""


def test_pfm_through_display_is_unchanged(tmp_path, capsys, image, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "cli", "-g", graph(tmp_path, PASS), "--format", "o-pfm",
                       "--filename", "out", "--last-frame-only")
    assert code == 0, err
    assert (tmp_path / "out.pfm").read_bytes()[16:] == (tmp_path / "in.pfm").read_bytes()[16:]
    assert np.array_equal(read_pfm(tmp_path / "out.pfm"), image)


def test_vkdt_cfg_with_gui_coordinates_and_no_final_newline(tmp_path, capsys, image,
                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    body = ("frames:2\nfps:0\nmodule:i-pfm:main:12.5:80\nmodule:exposure:01:200:80\n"
            "module:display:main:400:80\nparam:i-pfm:main:filename:in.pfm\n"
            "param:exposure:01:exposure:1\nconnect:i-pfm:main:output:exposure:01:input\n"
            "connect:exposure:01:output:display:main:input")  # no newline at the end
    code, _, err = run(capsys, "cli", "-g", graph(tmp_path, body), "--format", "o-pfm",
                       "--filename", "out")
    assert code == 0, err
    for f in (0, 1):  # frames > 1 without --last-frame-only: numbered files, frame 0 included
        assert np.allclose(read_pfm(tmp_path / f"out_{f:04d}.pfm"), 2 * image)


def test_output_slots_and_feedback(tmp_path, capsys, image, monkeypatch):
    monkeypatch.chdir(tmp_path)
    body = PASS + ("module:accum:01\nmodule:display:view0\nframes:3\n"
                   "connect:i-pfm:main:output:accum:01:input\n"
                   "feedback:accum:01:output:accum:01:back\n"
                   "param:accum:01:mode:1\n"
                   "connect:accum:01:output:display:view0:input\n")
    code, _, err = run(capsys, "cli", "-g", graph(tmp_path, body), "--last-frame-only",
                       "--format", "o-pfm", "--filename", "a", "--output", "main",
                       "--format", "o-pfm", "--filename", "b", "--output", "view0")
    assert code == 0, err
    assert np.array_equal(read_pfm(tmp_path / "a.pfm"), image)
    assert np.allclose(read_pfm(tmp_path / "b.pfm"), 3 * image, rtol=1e-6)  # 3 frames summed


def test_config_lines_apply_last(tmp_path, capsys, image, monkeypatch):
    monkeypatch.chdir(tmp_path)
    body = PASS.replace("module:display:main", "module:exposure:01\nmodule:display:main")
    body = body.replace("connect:i-pfm:main:output:display:main:input",
                        "connect:i-pfm:main:output:exposure:01:input\n"
                        "connect:exposure:01:output:display:main:input")
    code, _, err = run(capsys, "cli", "-g", graph(tmp_path, body), "--format", "o-pfm",
                       "--filename", "out", "--config", "param:exposure:01:exposure:-1")
    assert code == 0, err
    assert np.allclose(read_pfm(tmp_path / "out.pfm"), 0.5 * image)


BAD_CFGS = {
    "unknown command": ("framez:3\n", "g.cfg:1", "framez"),
    "unknown module": ("module:i-pfn:main\n", "g.cfg:1", "i-pfm"),
    "unknown instance": ("module:i-pfm:main\nparam:i-pfm:mian:filename:x\n", "g.cfg:2",
                         "mian"),
    "unknown connector": (PASS.replace("display:main:input", "display:main:inptu"), "g.cfg:4",
                          "inptu"),
    "unknown param": ("module:i-pfm:main\nparam:i-pfm:main:filenam:x\n", "g.cfg:2", "filenam"),
    "bad value": ("module:exposure:01\nparam:exposure:01:exposure:bright\n", "g.cfg:2",
                  "bright"),
    "name too long": ("module:i-pfm:mainmainx\n", "g.cfg:1", "mainmainx"),
}


@pytest.mark.parametrize("case", sorted(BAD_CFGS))
def test_bad_cfg_lines(tmp_path, capsys, image, monkeypatch, case):
    monkeypatch.chdir(tmp_path)
    body, where, token = BAD_CFGS[case]
    code, out, err = run(capsys, "cli", "-g", graph(tmp_path, body), "--format", "o-pfm",
                         "--filename", "out")
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert where in err and token in err
    assert "Traceback" not in err + out
    assert not (tmp_path / "out.pfm").exists()


def test_incompatible_connection_cycle_and_unconnected_input(tmp_path, capsys, image,
                                                             monkeypatch):
    monkeypatch.chdir(tmp_path)
    lut = "module:i-pfm:main\nmodule:i-lut:w\nparam:i-lut:w:filename:w.lut\n"
    cases = [
        ("module:exposure:01\nmodule:exposure:02\n"
         "connect:exposure:01:output:exposure:02:input\n"
         "connect:exposure:02:output:exposure:01:input\n", "cycl"),
        ("module:exposure:01\nmodule:display:main\n"
         "connect:exposure:01:output:display:main:input\n", "not connected"),
        (lut + "module:kpn-t:01\nconnect:i-pfm:main:output:kpn-t:01:input\n"
         "connect:kpn-t:01:output:i-pfm:main:output\n", "g.cfg:6"),
        ("module:kpn-t:01\nmodule:exposure:01\n"
         "connect:kpn-t:01:w:exposure:01:input\n", "incompatible"),
    ]
    for body, needle in cases:
        code, out, err = run(capsys, "cli", "-g", graph(tmp_path, body))
        assert code == 2, err
        assert needle in err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err + out


@pytest.mark.parametrize("content,needle", [
    (None, "in.pfm"),                            # missing
    (b"PF\n37 23\n-1.0\n" + b"\0" * 100, "in.pfm"),  # truncated data
    (b"P6\n1 1\n255\n\0\0\0", "in.pfm"),         # not a PFM
    (b"", "in.pfm"),                             # empty
])
def test_bad_pfm(tmp_path, capsys, monkeypatch, content, needle):
    monkeypatch.chdir(tmp_path)
    if content is not None:
        (tmp_path / "in.pfm").write_bytes(content)
    code, out, err = run(capsys, "cli", "-g", graph(tmp_path, PASS), "--format", "o-pfm",
                         "--filename", "out")
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err + out
    assert not (tmp_path / "out.pfm").exists()


def test_bad_png_and_lut(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    body = PASS.replace("i-pfm", "i-img").replace("in.pfm", "in.png")
    code, _, err = run(capsys, "cli", "-g", graph(tmp_path, body), "--format", "o-pfm",
                       "--filename", "out")
    assert code == 2 and "in.png" in err and len(err.strip().splitlines()) == 1
    write_lut(tmp_path / "w.lut", np.zeros((448, 64, 1), np.float16), 1, "f16", 64, 448,
              ssbo=True)
    data = (tmp_path / "w.lut").read_bytes()
    (tmp_path / "w.lut").write_bytes(data[: len(data) // 2])  # truncated
    body = ("module:i-lut:w\nmodule:o-lut:out\nparam:i-lut:w:filename:w.lut\n"
            "param:o-lut:out:filename:copy\nconnect:i-lut:w:output:o-lut:out:input\n")
    code, _, err = run(capsys, "cli", "-g", graph(tmp_path, body))
    assert code == 2 and "w.lut" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "copy.lut").exists()


def test_lut_round_trip_through_the_engine(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w = np.random.default_rng(1).standard_normal((448, 64, 1)).astype(np.float16)
    write_lut(tmp_path / "w.lut", w, 1, "f16", 64, 448, ssbo=True, text="some model")
    body = ("module:i-lut:w\nmodule:o-lut:out\nparam:i-lut:w:filename:w.lut\n"
            "param:o-lut:out:filename:copy\nconnect:i-lut:w:output:o-lut:out:input\n")
    code, _, err = run(capsys, "cli", "-g", graph(tmp_path, body))
    assert code == 0, err
    src, dst = (tmp_path / "w.lut").read_bytes(), (tmp_path / "copy.lut").read_bytes()
    assert dst[: 16 + 64 * 448 * 2] == src[: 16 + 64 * 448 * 2]


def test_usage_errors_and_subcommands(tmp_path, capsys):
    code, _, err = run(capsys, "cli")
    assert code == 2 and "-g" in err
    code, _, err = run(capsys, "cli", "-g", str(tmp_path / "nope.cfg"))
    assert code == 2 and "nope.cfg" in err
    code, out, _ = run(capsys, "devices")
    assert code == 0 and "cooperative matrix" in out and "*" in out
    code, out, _ = run(capsys, "modules")
    assert code == 0 and "kpn-t" in out and "i-pfm" in out
    code, out, _ = run(capsys, "modules", "kpn-t")
    assert code == 0 and "wcp:read:ssbo:f16" in out and "alpha:float:1:0.01" in out
    code, _, err = run(capsys, "modules", "kpn")
    assert code == 0
    code, _, err = run(capsys, "modules", "kpnt")
    assert code == 2 and "kpn-t" in err
    code, out, _ = run(capsys, "devices", "--device-id", "99")
    assert code == 2


def test_progress_bar(tmp_path, capsys, image, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "cli", "-g", graph(tmp_path, PASS), "--progress",
                       "--format", "o-pfm", "--filename", "out", "--frames", "3",
                       "--last-frame-only")
    assert code == 0
    assert "3/3" in err


def test_heartbeat_without_the_bar(tmp_path, capsys, caplog, image, monkeypatch):
    """Without --progress a run longer than HEARTBEAT_S logs a line now and then (here every
    frame: the period set to 0), the last frame aside (the summary follows it); a short run
    logs none."""
    from vkgraph.cli import progress

    monkeypatch.chdir(tmp_path)
    args = ("cli", "-g", graph(tmp_path, PASS), "--format", "o-pfm", "--filename", "out",
            "--frames", "4", "--last-frame-only")
    with caplog.at_level("INFO", logger="vkgraph"):
        code, _, err = run(capsys, *args)
    assert code == 0, err
    assert "frames/s" not in caplog.text
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.0)
    caplog.clear()
    with caplog.at_level("INFO", logger="vkgraph"):
        code, _, err = run(capsys, *args)
    assert code == 0, err
    beats = [r.getMessage() for r in caplog.records if "frames/s" in r.getMessage()]
    assert [b.split(",")[0] for b in beats] == ["frame 1 of 4", "frame 2 of 4", "frame 3 of 4"]


def test_every_shader_variant_compiles(capsys):
    code, out, err = run(capsys, "shaders", "--check")
    assert code == 0, err
    done, total = out.split()[0].split("/")
    assert done == total and int(total) > 40


def test_losses_csv_and_shipped_graph_names(tmp_path, capsys, image, monkeypatch):
    """--losses FILE.csv: frame,<module> rows, one a frame; -g takes a shipped graph's bare
    name; a graph without a trainer or a missing folder is exit 2 before anything runs."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "-q", "cli", "-g", "fit-poly", "--frames", "5",
                         "--last-frame-only", "--format", "o-pfm", "--losses", "l.csv")
    assert code == 0, err
    rows = [r.split(",") for r in (tmp_path / "l.csv").read_text().splitlines()]
    assert rows[0] == ["frame", "mlp-t:01"] and [r[0] for r in rows[1:]] == list("01234")
    losses = [float(r[1]) for r in rows[1:]]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert f"first loss {losses[0]:.4g}, loss {losses[-1]:.4g}" in out  # the summary's
    code, _, err = run(capsys, "-q", "cli", "-g", graph(tmp_path, PASS), "--losses", "p.csv")
    assert code == 2 and "--losses p.csv: the graph has no trainable module" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "p.csv").exists()
    code, _, err = run(capsys, "cli", "-g", "fit-poly", "--losses", "no/l.csv")
    assert code == 2 and "--losses no/l.csv: folder 'no' does not exist" in err
    code, _, err = run(capsys, "cli", "-g", "fit-poli")
    assert code == 2 and "did you mean 'fit-poly'?" in err
