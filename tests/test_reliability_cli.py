"""Reliability of the command line against a hostile environment and hostile input: a full
disk under the shader cache, no Vulkan loader, bad values for `denoise`, `sweep` spaces
and signals, broken user modules, long and non-UTF-8 names, and small usage mistakes. Each
case ends in one line on stderr and the documented exit status (0 ok, 1 runtime failure,
2 usage or graph error), never an internal error."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import VKGRAPH, vkgraph_env

ROOT = Path(__file__).resolve().parent.parent


def run_vkgraph(*args: str, cwd: Path | None = None, env: dict | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess:
    """`vkgraph ARGS` as a subprocess (for what must not touch this process: imports,
    signals, the environment)."""
    return subprocess.run([*VKGRAPH, *args], capture_output=True, text=True, cwd=cwd,
                          env=vkgraph_env(env), timeout=timeout)


def one_line(res, rc: int) -> str:
    """The single stderr line of a failed command with exit status `rc`."""
    lines = res.stderr.strip().splitlines()
    assert res.returncode == rc, f"exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    assert len(lines) == 1 and "internal error" not in lines[0], res.stderr
    return lines[0]


# -- no Vulkan loader ---------------------------------------------------------------------

@pytest.fixture
def no_loader(tmp_path):
    """An environment whose `import vulkan` raises OSError, as the package does on a machine
    without libvulkan."""
    fake = tmp_path / "fakevk" / "vulkan"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise OSError("Cannot find Vulkan SDK version")\n')

    env = dict(os.environ)  # (ahead of the path's own folders, where packages may come from)
    env["PYTHONPATH"] = os.pathsep.join([str(fake.parent)] + [
        p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


@pytest.mark.parametrize("args", [("devices",), ("cli", "-g", "fit-image.cfg")])
def test_no_vulkan_loader_is_one_line(no_loader, tmp_path, args):
    line = one_line(run_vkgraph(*args, cwd=tmp_path, env=no_loader), 1)
    assert "no Vulkan loader: install libvulkan1" in line
    assert "mesa-vulkan-drivers" in line


def test_shaders_check_needs_no_loader(no_loader, tmp_path):
    res = run_vkgraph("shaders", "--check", cwd=tmp_path, env=no_loader, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "kernel variants compile" in res.stdout


# -- the shader cache ---------------------------------------------------------------------

KERNEL = """#version 460
layout(local_size_x = 64) in;
layout(std430, set = 1, binding = 0) buffer O { float o[]; };
void main() { o[gl_GlobalInvocationID.x] = 2.0 * float(gl_GlobalInvocationID.x); }
"""


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    """A small kernel file and an empty shader cache ($VKGRAPH_CACHE) for it."""
    monkeypatch.setenv("VKGRAPH_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "k" / "main.comp"
    path.parent.mkdir()
    path.write_text(KERNEL)
    return path


def fake_compiler(tmp_path, monkeypatch, keep_bytes: int) -> None:
    """glslangValidator as it behaves on a full disk: exit 0 with the output file holding
    only its first `keep_bytes` bytes."""
    from vkgraph.pipeline.vk import compile as C

    exe, env = C.glslang()
    script = tmp_path / "glslang-full-disk"
    script.write_text(f"""#!/bin/sh
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
"{exe}" "$@" || exit $?
[ -n "$out" ] && head -c {keep_bytes} "$out" > "$out.cut" && mv "$out.cut" "$out"
exit 0
""")
    script.chmod(0o755)
    monkeypatch.setattr(C, "glslang", lambda: (str(script), env))


@pytest.mark.parametrize("keep_bytes", [0, 20, 101])
def test_full_disk_never_enters_the_shader_cache(kernel, tmp_path, monkeypatch, keep_bytes):
    from vkgraph.pipeline.vk import ShaderCompileError, compile_glsl
    from vkgraph.pipeline.vk.compile import cache_dir, spirv_complete

    fake_compiler(tmp_path, monkeypatch, keep_bytes)
    with pytest.raises(ShaderCompileError, match="is damaged.*disk full"):
        compile_glsl(kernel)
    assert list(cache_dir().iterdir()) == []  # nothing committed, no temp file left
    monkeypatch.undo()  # space freed: the real compiler, the same cache
    monkeypatch.setenv("VKGRAPH_CACHE", str(tmp_path / "cache"))
    assert spirv_complete(compile_glsl(kernel))


@pytest.mark.parametrize("cut", [0, 4, 37, -4])
def test_damaged_cached_binary_is_compiled_again(kernel, caplog, cut):
    from vkgraph.pipeline.vk import compile_glsl
    from vkgraph.pipeline.vk.compile import cache_dir

    good = compile_glsl(kernel)
    (cached,) = cache_dir().glob("*.spv")
    cached.write_bytes(good[:cut])
    assert compile_glsl(kernel) == good
    assert cached.read_bytes() == good
    assert "damaged" in caplog.text and str(cached) in caplog.text


@pytest.mark.parametrize("how", ["file", "read-only"])
def test_unwritable_shader_cache_is_a_warning(kernel, tmp_path, monkeypatch, caplog, how):

    from vkgraph.pipeline.vk import compile_glsl
    from vkgraph.pipeline.vk.compile import cache_dir, spirv_complete

    if how == "file":  # $VKGRAPH_CACHE below a plain file: it cannot be made
        (tmp_path / "plain").write_text("x")
        root = tmp_path / "plain" / "cache"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only folders")
        root = tmp_path / "ro"
        root.mkdir(mode=0o500)
    monkeypatch.setenv("VKGRAPH_CACHE", str(root))
    assert spirv_complete(compile_glsl(kernel))
    assert str(root) not in str(cache_dir())
    warnings = [r for r in caplog.records if "shader cache" in r.getMessage()]
    assert len(warnings) == 1 and "VKGRAPH_CACHE" in warnings[0].getMessage()


# -- long and non-UTF-8 names -------------------------------------------------------------

def copy_graph(folder: Path, out: str) -> Path:
    """A graph reading x.pfm and writing `out`.pfm, in `folder`."""
    import numpy as np

    from vkgraph.pipeline.formats import write_pfm

    write_pfm(folder / "x.pfm", np.full((4, 4, 3), 0.25, np.float32))
    cfg = folder / "copy.cfg"
    cfg.write_bytes(b"module:i-pfm:main\nmodule:o-pfm:out\n"
                    b"connect:i-pfm:main:output:o-pfm:out:input\n"
                    b"param:i-pfm:main:filename:x.pfm\nparam:o-pfm:out:filename:"
                    + os.fsencode(out) + b"\n")
    return cfg


@pytest.mark.parametrize("length", [233, 251])
def test_output_name_up_to_name_max_is_written(tmp_path, length):
    from conftest import vkgraph

    name = "n" * length  # + ".pfm": up to 255 bytes, the longest a file name may be
    copy_graph(tmp_path, name)
    rc, out, err = vkgraph(tmp_path, "-g", "copy.cfg", quiet=True)
    assert rc == 0, err
    assert (tmp_path / f"{name}.pfm").stat().st_size > 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_non_utf8_name_with_an_ascii_terminal(tmp_path):
    copy_graph(tmp_path, "out")
    env = dict(os.environ, PYTHONIOENCODING="ascii", LC_ALL="C")
    res = run_vkgraph("-q", "cli", "-g", "copy.cfg", "--config",
                      "param:o-pfm:out:filename:" + os.fsdecode(b"bad\xff"), cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / b"bad\xff.pfm".decode(errors="surrogateescape")).is_file()
    missing = os.fsdecode(b"gone\xff.cfg")
    line = one_line(run_vkgraph("cli", "-g", missing, cwd=tmp_path, env=env), 2)
    assert "gone\\udcff.cfg: no such graph file" in line


@pytest.mark.parametrize("name", ["a/" * 3000 + "x.cfg", "a" * 300 + ".cfg"])
def test_graph_name_past_path_max_is_a_usage_error(tmp_path, name):
    line = one_line(run_vkgraph("cli", "-g", name, cwd=tmp_path), 2)
    assert "File name too long" in line and len(line) < 400


def test_clip_keeps_the_end_of_a_long_name():
    from vkgraph.pipeline.errors import GraphError

    name = "d" * 500 + "/tail.pfm"
    line = GraphError(f"'{name}': cannot write file: Permission denied").line()
    assert line.endswith("tail.pfm': cannot write file: Permission denied")
    assert "more characters" in line and len(line) < 300


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    """`vkgraph ARGS` in this process: (exit status, stdout, stderr)."""
    from vkgraph.cli.main import main

    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def single(rc_out_err, rc: int) -> str:
    got, out, err = rc_out_err
    lines = err.strip().splitlines()
    assert got == rc, f"exit {got}\n{out}\n{err}"
    assert len(lines) == 1 and "internal error" not in lines[0], err
    return lines[0]


# -- denoise: weights, --levels and --noise checked once, up front ------------------------

@pytest.fixture
def photos(tmp_path):
    """Three small inputs and variants of the shipped weights."""
    import numpy as np

    from vkgraph.pipeline.formats import read_lut, write_lut, write_pfm

    for i in range(3):
        write_pfm(tmp_path / f"in{i}.pfm", np.full((8, 8, 3), 0.3, np.float32))
    data, _, text = read_lut(ROOT / "graphs" / "weights" / "kpn-photo.lut")
    assert "4 pyramid levels" in text
    write_lut(tmp_path / "small.lut", np.zeros((4, 4, 1), np.float16), 1, "f16", 4, 4)
    write_lut(tmp_path / "lev99.lut", data, 1, "f16", 64, 448,
              text=text.replace("4 pyramid levels", "99 pyramid levels"))
    write_lut(tmp_path / "lev6.lut", data, 1, "f16", 64, 448,
              text=text.replace("4 pyramid levels", "6 pyramid levels"))
    write_lut(tmp_path / "inf.lut", data, 1, "f16", 64, 448, text=text)
    with open(tmp_path / "inf.lut", "r+b") as f:  # writers refuse Inf: poke it into the file
        f.seek(16 + 2 * (3 * 64 + 5))
        f.write(np.array([np.inf], "<f2").tobytes())
    (tmp_path / "folder.lut").mkdir()
    os.mkfifo(tmp_path / "fifo.lut")
    return tmp_path


@pytest.mark.parametrize("extra,needle", [
    (("--weights", "small.lut"), "small.lut: holds 4x4x1 elements; kpn needs kpn-t's"),
    (("--weights", "lev99.lut"), "the .lut's text says 99 pyramid levels"),
    (("--weights", "lev6.lut", "--levels", "3"), "trained with 6 pyramid levels"),
    (("--weights", "inf.lut"), "expected finite values, found inf at x=5 y=3"),
    (("--weights", "folder.lut"), "it is a folder, not a regular file"),
    (("--weights", "fifo.lut"), "it is a device, pipe or socket"),
    (("--weights", "none.lut"), "weights 'none.lut' do not exist"),
    (("--noise", "1", "1e300"), "--noise: param 'noise b' of kpn is 1e+300, beyond"),
])
def test_denoise_refuses_bad_weights_once(photos, capsys, monkeypatch, extra, needle):
    from vkgraph.cli import denoise

    monkeypatch.chdir(photos)
    opened = []
    monkeypatch.setattr(denoise, "run_here", lambda *a: opened.append(a) or (0, 3))
    line = single(run_main(capsys, "denoise", "in0.pfm", "in1.pfm", "in2.pfm", "--outdir",
                           "out", *extra), 2)
    assert needle in line
    assert opened == [] and not (photos / "out").exists()  # no device, no input decoded


# -- user modules -------------------------------------------------------------------------

@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A user module folder `mods/` with the working module `bright` of test_wheel, its
    graph g.cfg and input; the test breaks the module as it likes."""
    from test_wheel import USER_GRAPH, image, write_user_module

    from vkgraph.pipeline.formats import write_pfm

    write_user_module(tmp_path / "mods")
    write_pfm(tmp_path / "in.pfm", image()[..., :3])
    (tmp_path / "g.cfg").write_text(USER_GRAPH)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "mods"


def test_a_user_hook_that_raises_names_module_hook_and_line(user_module, capsys):
    (user_module / "bright" / "module.py").write_text(
        "def helper(x):\n    return 1 / x\n\n\ndef modify_roi_out(graph, module):\n"
        "    helper(0)\n")
    line = single(run_main(capsys, "-q", "--modules", "mods", "cli", "-g", "g.cfg"), 1)
    assert "module 'bright' hook 'modify_roi_out' failed: ZeroDivisionError" in line
    assert f"{user_module.resolve()}/bright/module.py:2:" in line


@pytest.mark.parametrize("where", ["import", "hook"])
def test_sys_exit_in_a_user_module_is_an_error(user_module, capsys, where):
    code = ("import sys\nsys.exit(0)\n" if where == "import" else
            "import sys\n\n\ndef create_nodes(graph, module):\n    sys.exit(0)\n")
    (user_module / "bright" / "module.py").write_text(code)
    line = single(run_main(capsys, "-q", "--modules", "mods", "cli", "-g", "g.cfg"),
                  2 if where == "import" else 1)
    assert "module 'bright'" in line and "it called sys.exit(0)" in line
    assert not (user_module.parent / "out.pfm").exists()


def test_a_missing_user_kernel_names_every_folder_searched(user_module, capsys):
    (user_module / "shaders" / "bright" / "main.comp").unlink()
    line = single(run_main(capsys, "-q", "--modules", "mods", "cli", "-g", "g.cfg"), 2)
    assert "kernel bright/main.comp not found" in line
    for folder in ("mods/bright", "mods/shaders/bright", str(ROOT / "shaders" / "bright")):
        assert folder in line


def test_a_user_module_s_generated_headers_reach_its_own_kernels(user_module, capsys):
    """HEADERS in a user module's module.py are included by the kernels of its own folder (as
    kpn-t's layout.gen is by its kernels); they were looked up for shipped folders only."""
    from test_wheel import image

    from vkgraph.pipeline.formats import read_pfm

    (user_module / "bright" / "module.py").write_text(
        'HEADERS = {"extra.gen": "#define EXTRA 0.5\\n"}\n')
    main_comp = user_module / "shaders" / "bright" / "main.comp"
    main_comp.write_text(main_comp.read_text().replace(
        '#include "params.gen"', '#include "params.gen"\n#include "extra.gen"').replace(
        "params.gain", "params.gain * EXTRA"))
    rc, _, err = run_main(capsys, "-q", "--modules", "mods", "cli", "-g", "g.cfg")
    assert rc == 0, err
    out = read_pfm(user_module.parent / "out.pfm")
    assert np.allclose(out[..., :3], image()[..., :3] * 3 * 0.5)


def test_a_broken_user_module_leaves_the_others_listed(user_module, capsys):
    (user_module / "bright" / "params").write_text("gain:floot:1:2\n")
    rc, out, err = run_main(capsys, "--modules", "mods", "modules")
    assert rc == 2
    listed = [ln.split()[0] for ln in out.splitlines()]
    assert "kpn-t" in listed and "i-pfm" in listed and "bright" not in listed
    assert err.count("\n") == 1 and "bright/params:1: param type 'floot'" in err


# -- small ones ---------------------------------------------------------------------------

def png16(rgb) -> bytes:
    """A 16-bit rgb PNG of a (h, w, 3) big-endian uint16 array."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    ht, wd = rgb.shape[:2]
    rows = b"".join(b"\0" + row.tobytes() for row in rgb)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", wd, ht, 16, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def test_pillow_bomb_warning_is_not_printed(tmp_path, monkeypatch):
    """An image over Pillow's warning size (but under vkgraph's own READ_MAX) decodes
    without a Python warning on stderr."""
    import warnings

    import numpy as np
    from PIL import Image

    from vkgraph.pipeline.formats import read_image, write_png

    img = np.linspace(0, 1, 12 * 12 * 3, dtype=np.float32).reshape(12, 12, 3)
    write_png(tmp_path / "a.png", img)
    (tmp_path / "c16.png").write_bytes(png16((img * 65535).astype(">u2")))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # 144 pixels: warned, not refused
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_image(tmp_path / "a.png").shape == (12, 12, 4)
        assert read_image(tmp_path / "c16.png").shape == (12, 12, 4)


def test_noise_of_huge_values_warns_nothing():
    import warnings

    import numpy as np

    from vkgraph.apps.noise import estimate_noise

    img = np.full((40, 40, 3), 3e38, np.float32)
    img[::3] = -3e38
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a, b = estimate_noise(img)
    assert np.isfinite(a) and np.isfinite(b)


def test_module_folder_that_is_not_a_folder_says_what_it_is(tmp_path, capsys):
    (tmp_path / "plain").write_text("x")
    os.mkfifo(tmp_path / "pipe")
    for name, kind in (("plain", "is a regular file, not a folder"),
                       ("pipe", "is a device, pipe or socket, not a folder"),
                       ("none", "does not exist")):
        line = single(run_main(capsys, "--modules", str(tmp_path / name), "modules"), 2)
        assert f"module folder '{tmp_path / name}' {kind}" in line


@pytest.mark.parametrize("args,needle", [
    (("--eps", "1e-300"), "argument --eps: expected a number 1e-07..1, got '1e-300'"),
    (("--eps", "nan"), "argument --eps: expected a number"),
    (("--seed", "-5"), "argument --seed: expected an integer 0.."),
])
def test_gradcheck_bad_eps_and_seed_are_usage_errors(capsys, args, needle):
    line = single(run_main(capsys, "gradcheck", "-g", "fit-poly.cfg", *args), 2)
    assert needle in line


def test_gradcheck_step_that_moves_no_weight_is_refused(monkeypatch):
    """A step that a large weight does not feel in fp32 is an error, not a division by 0."""
    import numpy as np

    from vkgraph.cli.gradcheck import run_differences
    from vkgraph.pipeline.errors import GraphError

    class Probe:
        def set(self, j, value):
            pass

        def forward_loss(self):
            return 1.0

    with pytest.raises(GraphError, match="does not change weight 0"):
        run_differences(Probe(), np.array([1000.0], np.float32), np.array([0]), 1e-5, 0.0)


def test_flags_after_config_are_taken(tmp_path, monkeypatch, capsys):
    from vkgraph.cli.main import build_parser, output_slots

    argv = ["cli", "-g", "x.cfg", "--config", "frames:2", "param:a:b:c:1",
            "--last-frame-only", "--format", "o-pfm", "--config", "frames:3"]
    args = build_parser().parse_args(argv)
    assert args.config == ["frames:2", "param:a:b:c:1", "frames:3"]
    assert args.last_frame_only
    assert output_slots(argv) == [{"format": "o-pfm", "inst": "main"}]
    copy_graph(tmp_path, "unused")
    monkeypatch.chdir(tmp_path)
    rc, out, err = run_main(capsys, "-q", "cli", "-g", "copy.cfg", "--config", "frames:2",
                            "param:o-pfm:out:filename:late", "--last-frame-only")
    assert rc == 0, err
    assert (tmp_path / "late.pfm").is_file()


# -- sweep --------------------------------------------------------------------------------

def test_sweep_frames_beyond_a_glsl_int_are_refused_up_front():
    from vkgraph.apps.sweep import Space
    from vkgraph.pipeline.errors import GraphError

    cfg = ROOT / "graphs" / "train-kpn.cfg"
    Space.parse({"frames": 2147483647}).check(cfg)
    for frames in (1e12, {"grid": [10, 2147483648]}, {"choice": [0, 5]}):
        with pytest.raises(GraphError, match=r"frames must be 1\.\.2147483647"):
            Space.parse({"frames": frames}).check(cfg)


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_sweep_space_nested_too_deeply_is_one_error(tmp_path, suffix):
    from vkgraph.apps.sweep import Space
    from vkgraph.pipeline.errors import GraphError

    if suffix == ".yaml":
        pytest.importorskip("yaml")
    path = tmp_path / f"deep{suffix}"
    path.write_text('{"frames": ' + "[" * 100000 + "]" * 100000 + "}")
    with pytest.raises(GraphError, match="nested too deeply"):
        Space.load(path)


def test_sweep_on_an_unreachable_cluster_is_one_line_soon(tmp_path, capsys, monkeypatch):
    import socket
    import time

    pytest.importorskip("ray")
    from vkgraph.apps import distributed

    space = tmp_path / "s.json"
    space.write_text('{"param:kpn-t:01:alpha": 0.001}')
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ("sweep", "-g", "train-kpn.cfg", "--space", str(space), "--out", str(tmp_path / "o"))
    t0 = time.monotonic()
    line = single(run_main(capsys, *args, "--ray", f"127.0.0.1:{port}"), 1)
    assert f"cannot connect to the Ray cluster at '127.0.0.1:{port}'" in line
    assert time.monotonic() - t0 < 30

    def silent(*a, **k):  # a host that never answers
        raise TimeoutError

    monkeypatch.setattr(socket, "create_connection", silent)
    line = single(run_main(capsys, *args, "--ray", "ray://198.51.100.7:10001"), 1)
    assert "no answer within 10 s" in line
    assert not distributed.import_ray().is_initialized()


def test_joining_ray_keeps_the_callers_sigterm_handler(monkeypatch):
    """ray.init puts sys.exit() on SIGTERM; sweep and denoise --ray stop gracefully on it."""
    import signal
    import sys

    ray = pytest.importorskip("ray")
    from vkgraph.apps import distributed

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: signal.signal(
        signal.SIGTERM, lambda *a: sys.exit(15)))

    def mine(signum, frame):
        pass

    old = signal.signal(signal.SIGTERM, mine)
    try:
        assert distributed.connect(num_cpus=1) is True
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, old)


def test_sweep_stops_on_sigterm_with_its_table_and_quietly(tmp_path):
    """A failed trial and then SIGTERM during the next one: exit 130, the table of both
    written, and on stderr only vkgraph's own lines (no traceback, no Ray notices)."""
    import csv
    import json
    import time

    import numpy as np
    from conftest import TINY_KPN_LINES, sigterm_when_ready

    from vkgraph.pipeline.formats import write_pfm

    pytest.importorskip("ray")
    write_pfm(tmp_path / "x.pfm", np.random.default_rng(9).random((32, 32, 3)).astype(np.float32))
    (tmp_path / "t.cfg").write_text("frames:6\n" + TINY_KPN_LINES + "\n")
    (tmp_path / "s.json").write_text(json.dumps({
        "frames": 100000,
        "param:i-pfm:main:filename": {"grid": ["nothere.pfm", str(tmp_path / "x.pfm")]}}))
    proc = subprocess.Popen([*VKGRAPH, "sweep", "-g", "t.cfg", "--space", "s.json",
                             "--num-cpus", "1", "--out", "o"], cwd=tmp_path, text=True,
                            env=vkgraph_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = []

    def second_trial_trains():
        for ln in proc.stderr:
            lines.append(ln)
            if "[1/2] t00000 failed" in ln:
                break
        time.sleep(3)

    out, err = sigterm_when_ready(proc, second_trial_trains)
    err = "".join(lines) + err
    assert proc.returncode == 130, err
    assert all(ln.startswith(("sweep: ", "vkgraph: ")) for ln in err.splitlines()), err
    assert "trial t00000 failed: GraphError:" in err and "nothere.pfm" in err
    with open(tmp_path / "o" / "sweep.csv", newline="") as f:
        status = {r["trial"]: r["status"] for r in csv.DictReader(f)}
    assert status["t00000"] == "error" and status["t00001"] in ("not run", "stopped")


def test_names_an_ascii_terminal_cannot_show_are_escaped(tmp_path):
    from test_wheel import write_user_module

    write_user_module(tmp_path / "mods")
    (tmp_path / "mods" / "bright" / "README.md").write_text("# bright\n\nGain × 2, naïve.\n")
    env = dict(os.environ, PYTHONIOENCODING="ascii", LC_ALL="C")
    res = run_vkgraph("--modules", "mods", "modules", cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    assert "Gain \\xd7 2, na\\xefve." in res.stdout
