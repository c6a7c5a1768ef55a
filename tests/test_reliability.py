"""Reliability: checkpoint and resume, interrupts, the divergence guard, atomic
outputs, resource limits.

Most runs go through `vkgraph cli` in this process (vkgraph.cli.main.main, faster than a subprocess)
on a tiny kpn-t graph: a 16x16 image, cnngenin noise on the full image, 2 levels, 6 frames.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    TINY_KPN_LINES,
    VKGRAPH,
    graph_from_lines,
    sigterm_when_ready,
    vkgraph,
    vkgraph_env,
)
from test_kpn_gpu import kpn_graph

from vkgraph.pipeline import formats as F
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.formats import read_lut, read_pfm, write_pfm
from vkgraph.pipeline.module import Roi
from vkgraph.pipeline.registry import DEFAULT_DIR, Registry
from vkgraph.pipeline.runner import Build

ROOT = Path(__file__).resolve().parent.parent

SIZE = 16
TINY = "frames:6\n" + TINY_KPN_LINES + "\n"
OUT = ("--last-frame-only", "--format", "o-pfm")  # main.pfm and w.lut after the last frame


def scene(folder: Path) -> Path:
    """tiny.cfg and its x.pfm in `folder`."""
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    img = np.stack([0.5 + 0.4 * np.sin(xx / 2.0 + c) * np.cos(yy / 3.0) for c in range(3)], -1)
    write_pfm(folder / "x.pfm", img.astype(np.float32))
    (folder / "tiny.cfg").write_text(TINY)
    return folder / "tiny.cfg"


def ok(res):
    rc, out, err = res
    assert rc == 0, f"exit {rc}\n{out}\n{err}"
    return out, err


def arrays(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def assert_same_state(a: dict, b: dict) -> None:
    """Every array bit for bit (the device name and cfg are metadata)."""
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert a[k].tobytes() == b[k].tobytes(), f"{k} differs"


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """The uninterrupted run: 6 frames, checkpoint at the end."""
    d = tmp_path_factory.mktemp("full")
    cfg = scene(d)
    out, _ = ok(vkgraph(d, "-g", str(cfg), *OUT, "--checkpoint", "full.npz"))
    return d, out


def test_checkpoint_holds_weights_moments_gradient_and_frame(full):
    d, out = full
    z = arrays(d / "full.npz")
    assert int(z["vkgraph_checkpoint"]) == 1 and int(z["frame"]) == 6
    assert "module:kpn-t:01" in str(z["cfg"])
    for key in ("adam.w", "adam.m", "adam.v", "adam.stats", "lsum.hist"):
        assert z[f"kpn-t:01/{key}"].dtype == np.float32
    assert z["kpn-t:01/adam.w"].shape == (28672,) and np.any(z["kpn-t:01/adam.v"] != 0)
    # the pending gradient (reduce's dw, both parities) and loss, found as feedback buffers
    fb = [k for k in z if k.startswith("kpn-t:01/@")]
    assert any(".reduce.dw." in k for k in fb) and any(".lsum.cur." in k for k in fb)
    lut, _, _ = read_lut(d / "w.lut")
    assert np.array_equal(lut.ravel(), z["kpn-t:01/adam.w"].astype(np.float16))


def test_resume_is_bit_exact(full, tmp_path):
    cfg = scene(tmp_path)
    ok(vkgraph(tmp_path, "-g", str(cfg), *OUT, "--frames", "3", "--checkpoint", "half.npz"))
    half = arrays(tmp_path / "half.npz")
    assert int(half["frame"]) == 3
    out, _ = ok(vkgraph(tmp_path, "-g", str(cfg), *OUT, "--resume", "half.npz",
                        "--checkpoint", "end.npz"))
    d, full_out = full
    assert_same_state(arrays(d / "full.npz"), arrays(tmp_path / "end.npz"))
    assert (tmp_path / "w.lut").read_bytes() == (d / "w.lut").read_bytes()
    assert (tmp_path / "main.pfm").read_bytes() == (d / "main.pfm").read_bytes()
    # the summary covers all 6 frames (the loss history came back with the checkpoint)
    assert "kpn-t:01: 6 frames" in out
    assert no_speed(out) == no_speed(full_out)


def no_speed(summary: str) -> str:
    return re.sub(r", [0-9.]+ frames/s", "", summary)


def interrupt_after(monkeypatch, at: int):
    """Send this process SIGINT once the progress bar has shown frame `at` (as Ctrl-C during
    the next frame would); returns the function that undoes it."""
    from vkgraph.cli.progress import Progress

    real = Progress.update

    def update(self, build, frame):
        real(self, build, frame)
        if frame == at:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(Progress, "update", update)
    return lambda: monkeypatch.setattr(Progress, "update", real)


def test_interrupt_finishes_frame_writes_sinks_and_checkpoint(full, tmp_path, monkeypatch):
    """Ctrl-C during frame 2: the frame completes, main.pfm, w.lut and a checkpoint are
    written, exit 130; resuming from it gives the uninterrupted run's weights."""
    restore = interrupt_after(monkeypatch, 2)
    before = signal.getsignal(signal.SIGINT)
    cfg = scene(tmp_path)
    rc, out, err = vkgraph(tmp_path, "-g", str(cfg), *OUT)
    assert rc == 130, err
    assert signal.getsignal(signal.SIGINT) is before  # handlers restored
    assert "interrupted after frame 2 of 6; continue with --resume tiny.ckpt.npz" in err
    assert "kpn-t:01: 3 frames" in out
    assert read_pfm(tmp_path / "main.pfm").shape == (SIZE, SIZE, 3)
    assert int(arrays(tmp_path / "tiny.ckpt.npz")["frame"]) == 3
    restore()
    ok(vkgraph(tmp_path, "-g", str(cfg), *OUT, "--resume", "tiny.ckpt.npz"))
    assert (tmp_path / "w.lut").read_bytes() == (full[0] / "w.lut").read_bytes()


def test_sigterm_stops_a_running_cli(tmp_path):
    """A real process: SIGTERM while it trains ends it after that frame with exit 130, a
    checkpoint, complete output files and no temp files."""
    cfg = scene(tmp_path)
    proc = subprocess.Popen([*VKGRAPH, "cli", "-g", str(cfg), *OUT, "--frames", "100000",
                             "--checkpoint", "ck.npz", "--checkpoint-every", "1"],
                            cwd=tmp_path, env=vkgraph_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE,
                            text=True)

    def first_checkpoint():
        t0 = time.monotonic()
        while not (tmp_path / "ck.npz").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() - t0 < 120, "no checkpoint after 120 s"
            time.sleep(0.05)

    out, err = sigterm_when_ready(proc, first_checkpoint)
    assert proc.returncode == 130, err
    assert "interrupted after frame" in err and "Traceback" not in err
    done = int(arrays(tmp_path / "ck.npz")["frame"])
    assert 1 <= done < 100000
    assert f"kpn-t:01: {done} frames" in out
    assert read_pfm(tmp_path / "main.pfm").shape == (SIZE, SIZE, 3)
    assert np.isfinite(read_lut(tmp_path / "w.lut")[0]).all()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.npz", "main.pfm", "tiny.cfg",
                                                          "w.lut", "x.pfm"]


def error_line(res) -> str:
    rc, out, err = res
    assert rc == 2, f"exit {rc}\n{out}\n{err}"
    lines = [ln for ln in err.splitlines() if ln.startswith("vkgraph: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_resume_refuses_what_does_not_fit(full, tmp_path):
    d = full[0]
    cfg = scene(tmp_path)
    ck = str(d / "full.npz")
    line = error_line(vkgraph(tmp_path, "-g", str(cfg), "--resume", ck, "--frames", "9",
                              "--config", "param:kpn-t:01:alpha:0.5"))
    assert "different graph" in line and "alpha" in line
    line = error_line(vkgraph(tmp_path, "-g", str(cfg), "--resume", ck))
    assert "6 frames done" in line and "nothing left" in line
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04 not really")
    assert "not a vkgraph checkpoint" in error_line(
        vkgraph(tmp_path, "-g", str(cfg), "--resume", "bad.npz"))
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    assert "not a vkgraph checkpoint" in error_line(
        vkgraph(tmp_path, "-g", str(cfg), "--resume", "other.npz"))
    assert "no such checkpoint" in error_line(
        vkgraph(tmp_path, "-g", str(cfg), "--resume", "missing.npz"))
    assert "--checkpoint FILE" in error_line(
        vkgraph(tmp_path, "-g", str(cfg), "--checkpoint-every", "2"))
    assert "does not exist" in error_line(
        vkgraph(tmp_path, "-g", str(cfg), "--checkpoint", "no/such/ck.npz"))


def test_resume_runs_longer_than_the_first_run(full, tmp_path):
    """A checkpoint after 6 frames continues to 8 (another frame count, another history
    length is fine)."""
    cfg = scene(tmp_path)
    out, _ = ok(vkgraph(tmp_path, "-g", str(cfg), *OUT, "--resume", str(full[0] / "full.npz"),
                        "--frames", "8", "--checkpoint", "more.npz"))
    assert "kpn-t:01: 8 frames" in out
    z = arrays(tmp_path / "more.npz")
    assert int(z["frame"]) == 8
    assert np.isfinite(z["kpn-t:01/lsum.hist"][:8]).all() and z["kpn-t:01/lsum.hist"][7] > 0


ACCUM = """frames:6
module:i-pfm:main
module:exposure:01
module:accum:01
module:o-pfm:main
connect:i-pfm:main:output:exposure:01:input
connect:exposure:01:output:accum:01:input
feedback:accum:01:output:accum:01:back
connect:accum:01:output:o-pfm:main:input
keyframe:0:exposure:01:exposure:0:1:-2
keyframe:5:exposure:01:exposure:0:1:2
param:o-pfm:main:filename:mean
param:i-pfm:main:filename:x.pfm
"""


def test_resume_restores_feedback_buffers_of_any_module(tmp_path):
    """accum has no state hooks: its running mean lives in a feedback buffer, which the
    engine saves by itself. 3 + 3 frames give the 6-frame mean exactly (the exposure is
    keyframed: params change during a run, the checkpoint keeps the cfg as written)."""
    scene(tmp_path)
    (tmp_path / "accum.cfg").write_text(ACCUM)
    ok(vkgraph(tmp_path, "-g", "accum.cfg", "--last-frame-only"))
    whole = (tmp_path / "mean.pfm").read_bytes()
    ok(vkgraph(tmp_path, "-g", "accum.cfg", "--last-frame-only", "--frames", "3",
               "--checkpoint", "a.npz"))
    assert (tmp_path / "mean.pfm").read_bytes() != whole
    assert any(k.startswith("accum:01/@") for k in arrays(tmp_path / "a.npz"))
    ok(vkgraph(tmp_path, "-g", "accum.cfg", "--last-frame-only", "--resume", "a.npz"))
    assert (tmp_path / "mean.pfm").read_bytes() == whole


def test_trainer_without_state_hooks_is_refused(device, tmp_path):
    """A module with a loss history but no state hooks would lose its weights silently."""
    from vkgraph.pipeline import checkpoint

    mod = tmp_path / "mods" / "trainer"
    mod.mkdir(parents=True)
    (mod / "connectors").write_text("output:source:rgba:f32\n")
    (mod / "module.py").write_text(
        "import numpy as np\nfrom pipeline.module import Roi\n\n\n"
        "def modify_roi_out(graph, module):\n"
        "    module.connector('output').roi = Roi(4, 4)\n\n\n"
        "def read_source(graph, module, connector):\n"
        "    return np.zeros((4, 4, 4), np.float32)\n\n\n"
        "def losses(graph, module):\n"
        "    return np.zeros(1)\n")
    g = graph_from_lines("""
        module:trainer:01
        module:o-pfm:main
        connect:trainer:01:output:o-pfm:main:input""",
        registry=Registry([tmp_path / "mods", DEFAULT_DIR]))
    build = Build(g, device)
    with pytest.raises(GraphError, match="trainer:01 cannot be checkpointed"):
        checkpoint.check_supported(build)


# ------------------------------------------------------------------------------------------
# divergence guard

def kpn_build(device, tmp_path, loss=0, frames=6):
    """kpn-t straight on two i-pfm sources (no cnngenin, which would clamp bad pixels)."""
    scene(tmp_path)
    X = read_pfm(tmp_path / "x.pfm")
    g = kpn_graph(tmp_path, X, X, 2, f"param:kpn-t:01:loss:{loss}")
    g.frames = frames
    build = Build(g, device)
    return build, g.modules[("kpn-t", "01")]


def train_with_bad_pixel(build, m, inst: str, value: float, at: int = 2):
    """Run the frames; at frame `at` one pixel of source `inst` is `value`. Returns per frame
    (loss, weights, gradient finite?, skipped count)."""
    src = next(n for n in build.plan.schedule if n.kernel is None and n.is_source
               and n.module.inst == inst)
    buf = build.memory.buffers[(id(src), "output")][0]
    clean = None
    rows = []
    for f in range(build.frames):
        if f == at:
            clean = buf.download(np.float32).copy()
            bad = clean.copy()
            bad[4 * (5 * SIZE + 7) + 1] = value
            buf.upload(bad)
        elif f == at + 1:
            buf.upload(clean)
        build.run_frame(f)
        t = m.trainable
        rows.append((m.cls.hook("current_loss")(build.context, m), build.read(t.adam, "w"),
                     bool(np.isfinite(build.read(m.trainable.dw, "dw")).all()),
                     int(build.read(m.trainable.adam, "stats")[0])))
    return rows


def assert_skipped_once(rows, build, m, at: int = 2):
    for f, (_, w, _, skipped) in enumerate(rows):
        assert np.isfinite(w).all(), f"weights of frame {f}"
        assert skipped == (1 if f > at else 0), f"frame {f}: {skipped} skipped"
    assert np.array_equal(rows[at + 1][1], rows[at][1])  # the update of frame at + 1 skipped
    assert not np.array_equal(rows[at + 2][1], rows[at + 1][1])  # training goes on
    assert all(np.isfinite(r[0]) for i, r in enumerate(rows) if i != at)
    build.seconds = 1.0
    assert m.cls.hook("stats")(build.context, m)["skipped"] == 1
    assert "1 updates skipped (non-finite loss or gradient)" in m.cls.hook("summary")(build, m)


def test_nan_pixel_skips_one_update(device, tmp_path):
    build, m = kpn_build(device, tmp_path)
    rows = train_with_bad_pixel(build, m, "main", np.nan)
    assert np.isnan(rows[2][0]) and not rows[2][2]  # NaN loss and gradient at frame 2
    assert_skipped_once(rows, build, m)


def test_non_finite_loss_with_finite_gradient_skips_too(device, tmp_path):
    """L2 on a reference pixel of 2e19: (o - r)^2 overflows, so the loss is inf/NaN, while
    the gradient 2 (o - r) / N stays finite. The update must still be skipped."""
    build, m = kpn_build(device, tmp_path, loss=1)
    rows = train_with_bad_pixel(build, m, "ref", 2e19)
    assert not np.isfinite(rows[2][0]) and rows[2][2]
    assert_skipped_once(rows, build, m)


def test_absurd_learning_rate_never_makes_weights_non_finite(tmp_path):
    cfg = scene(tmp_path)
    out, err = ok(vkgraph(tmp_path, "-g", str(cfg), *OUT, "--frames", "5", "--progress",
                          "--checkpoint", "c.npz", "--config", "param:kpn-t:01:alpha:1e30"))
    assert "updates skipped (non-finite loss or gradient)" in out
    assert "skipped=" in err  # the progress bar
    w = arrays(tmp_path / "c.npz")["kpn-t:01/adam.w"]
    assert np.isfinite(w).all() and np.abs(w).max() > 1e20  # huge, never inf or NaN
    assert np.isfinite(read_lut(tmp_path / "w.lut")[0]).all()


# ------------------------------------------------------------------------------------------
# atomic outputs

def interrupting_write(target: str, after: int = 7):
    """os.write that raises KeyboardInterrupt after `after` bytes of a temp file of
    `target` (atomic_write's `.<name>.<pid>.<hex>.tmp`); other files are written normally."""
    real = os.write

    def write(fd, data):
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        if name.startswith(f".{target}.") and name.endswith(".tmp"):
            real(fd, bytes(memoryview(data)[:after]))
            raise KeyboardInterrupt
        return real(fd, data)

    return write


@pytest.mark.parametrize("target", ["main.pfm", "w.lut", "ck.npz"])
def test_interrupted_write_keeps_previous_file(full, tmp_path, monkeypatch, target):
    """A run interrupted while it writes one of its files (exit 130) leaves the previous
    version of that file byte for byte and no partial or temp file."""
    cfg = scene(tmp_path)
    for name, src in (("main.pfm", "main.pfm"), ("w.lut", "w.lut"), ("ck.npz", "full.npz")):
        (tmp_path / name).write_bytes((full[0] / src).read_bytes())
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    monkeypatch.setattr(F.os, "write", interrupting_write(target))
    rc, _, err = vkgraph(tmp_path, "-g", str(cfg), *OUT, "--frames", "1",
                         "--checkpoint", "ck.npz", "--config", "param:kpn-t:01:alpha:0.5")
    monkeypatch.undo()
    assert rc == 130 and "interrupted" in err
    assert (tmp_path / target).read_bytes() == before[target]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before)


@pytest.mark.parametrize("name,fmt", [("o-pfm", "pfm"), ("o-png", "png"), ("o-jpg", "jpg"),
                                      ("o-exr", "exr"), ("o-lut", "lut")])
def test_every_writer_module_writes_atomically(tmp_path, monkeypatch, name, fmt):
    """Each writer module's write_sink, interrupted mid-write: old file intact, nothing else."""
    from test_io_modules import FakeGraph, hook, sink

    monkeypatch.chdir(tmp_path)
    img = np.random.default_rng(1).random((8, 8, 4), dtype=np.float32)
    m, c = sink(name, "rgba", "f32", Roi(8, 8), filename="out")
    hook(m, "write_sink")(FakeGraph(tmp_path), m, c, img)
    previous = (tmp_path / f"out.{fmt}").read_bytes()
    monkeypatch.setattr(F.os, "write", interrupting_write(f"out.{fmt}"))
    with pytest.raises(KeyboardInterrupt):
        hook(m, "write_sink")(FakeGraph(tmp_path), m, c, img * 0.5)
    monkeypatch.undo()
    assert (tmp_path / f"out.{fmt}").read_bytes() == previous
    assert [p.name for p in tmp_path.iterdir()] == [f"out.{fmt}"]


def test_no_writer_bypasses_atomic_write():
    """Files are written only through pipeline.formats.atomic_write: no other code in the
    engine, the cli or a module opens a file for writing."""
    root = Path(__file__).resolve().parent.parent
    bad = re.compile(r"open\([^)]*['\"][wax]b?\+?['\"]|\.write_(bytes|text)\(|np\.save|"
                     r"\.tofile\(|imwrite\((?!\"<bytes>\")")
    found = []
    for folder in ("pipeline", "cli", "modules"):
        for path in (root / folder).rglob("*.py"):
            if path.name == "reference.py":
                continue
            for i, line in enumerate(path.read_text().splitlines(), 1):
                if bad.search(line) and "savez(buf" not in line:
                    found.append(f"{path.relative_to(root)}:{i}: {line.strip()}")
    assert not found, "\n".join(found)


# ------------------------------------------------------------------------------------------
# resource limits

@pytest.fixture
def huge_registry(tmp_path):
    """A source module `huge` that declares a size param's ROI and has no data at all."""
    mod = tmp_path / "mods" / "huge"
    mod.mkdir(parents=True)
    (mod / "connectors").write_text("output:source:rgba:f32\n")
    (mod / "params").write_text("size:int:1:1024\n")
    (mod / "module.py").write_text(
        "from pipeline.module import Roi\n\n\n"
        "def modify_roi_out(graph, module):\n"
        "    n = module.param('size')\n"
        "    module.connector('output').roi = Roi(n, n)\n\n\n"
        "def read_source(graph, module, connector):\n"
        "    raise AssertionError('a graph this big must not run')\n")
    return Registry([tmp_path / "mods", DEFAULT_DIR])


def test_graph_larger_than_device_memory(device, huge_registry):
    g = graph_from_lines("""
        module:huge:main
        module:kpn-t:01
        module:o-lut:w
        param:huge:main:size:40000
        connect:huge:main:output:kpn-t:01:input
        connect:huge:main:output:kpn-t:01:ref
        connect:kpn-t:01:w:o-lut:w:input""", registry=huge_registry)
    with pytest.raises(GraphError) as e:
        Build(g, device)
    line = e.value.line()
    assert "GiB of buffers but" in line and device.info.name in line
    assert "largest: kpn-t:01/fwd:A 716800000000x1" in line  # 7 x 64 activations a pixel
    assert "bck:G" in line


def test_buffer_larger_than_a_storage_binding(device, huge_registry, monkeypatch):
    """Fits in memory, but one buffer exceeds maxStorageBufferRange (lavapipe: 128 MiB)."""
    monkeypatch.setattr(device.info, "memory_mib", 1 << 30)
    monkeypatch.setattr(device.info, "max_storage_range", 64 << 20)
    g = graph_from_lines("""
        module:huge:main
        module:exposure:01
        module:o-pfm:main
        param:huge:main:size:3000
        connect:huge:main:output:exposure:01:input
        connect:exposure:01:output:o-pfm:main:input""", registry=huge_registry)
    with pytest.raises(GraphError) as e:
        Build(g, device)
    assert "needs 137 MiB but a storage buffer" in e.value.line()
    assert "at most 64 MiB" in e.value.line()


def test_memory_limit_is_a_clean_cli_error(tmp_path, monkeypatch):
    """`vkgraph cli` on a device with (pretend) 1 MiB: exit 2, one line naming the largest
    buffers, nothing allocated, nothing written."""
    import vkgraph.pipeline.vk.device as D

    real = D._describe

    def describe(index, pd):
        info = real(index, pd)
        info.memory_mib = 1
        return info

    monkeypatch.setattr(D, "_describe", describe)
    cfg = scene(tmp_path)
    line = error_line(vkgraph(tmp_path, "-g", str(cfg), *OUT))
    assert "GiB of buffers but" in line and "largest: kpn-t:01/" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.cfg", "x.pfm"]


@pytest.mark.parametrize("name", ["fit-poly", "fit-image-hash"])
def test_mlp_t_resume_is_bit_exact(tmp_path, name):
    """mlp-t (graphs/fit-poly.cfg; fit-image-hash.cfg on a 16 x 16 target with a smaller
    table, whose gradient sums with atomics: fixed point, so in any order the same), small
    batch: 6 frames in one run equal 3 + resume to 6."""
    cfg = str(ROOT / "graphs" / f"{name}.cfg")
    extra = []
    if name == "fit-image-hash":
        write_pfm(tmp_path / "t.pfm", np.random.default_rng(3).random((16, 16, 3), np.float32))
        extra = [f"param:i-img:main:filename:{tmp_path / 't.pfm'}", "param:mlp-t:01:levels:3",
                 "param:mlp-t:01:log2size:8", "param:mlp-t:01:width:16"]
    args = ("--last-frame-only", "--format", "o-pfm", "--config", "param:mlp-t:01:batch:64",
            *extra)
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    ok(vkgraph(one, "-g", cfg, "--frames", "6", "--checkpoint", "end.npz", *args))
    ok(vkgraph(two, "-g", cfg, "--frames", "3", "--checkpoint", "half.npz", *args))
    out, _ = ok(vkgraph(two, "-g", cfg, "--frames", "6", "--resume", "half.npz",
                        "--checkpoint", "end.npz", *args))
    assert "mlp-t:01: 6 frames" in out
    assert_same_state(arrays(one / "end.npz"), arrays(two / "end.npz"))
    assert (one / f"{name}-w.lut").read_bytes() == (two / f"{name}-w.lut").read_bytes()


def test_photo_recipe_resumes_bit_exactly(tmp_path, monkeypatch):
    """The photo recipe (a training set, a batch of tiles, feat 1, apply 2, L1, the cosine
    schedule) interrupted after frame 2 and resumed ends with the weights of the run that was
    never interrupted (the schedule runs over the cfg's frames in both)."""
    rng = np.random.default_rng(4)
    (tmp_path / "set").mkdir()
    for k, (wd, ht) in enumerate([(24, 20), (40, 18)]):
        write_pfm(tmp_path / "set" / f"{k}.pfm", rng.uniform(0, 1, (ht, wd, 3)).astype(np.float32))
    text = (ROOT / "graphs" / "train-kpn.cfg").read_text()
    text = text.replace("frames:80", "frames:5").replace("photos/train.txt", "set")
    text = text.replace("batch:4", "batch:2").replace("tile:32", "tile:16")
    cfg = tmp_path / "photo.cfg"
    cfg.write_text(text + "param:kpn-t:01:levels:2\n")
    (tmp_path / "full").mkdir()
    ok(vkgraph(tmp_path / "full", "-g", str(cfg), *OUT))
    restore = interrupt_after(monkeypatch, 2)
    rc, _, err = vkgraph(tmp_path, "-g", str(cfg), *OUT)
    assert rc == 130, err
    restore()
    ok(vkgraph(tmp_path, "-g", str(cfg), *OUT, "--resume", "photo.ckpt.npz"))
    assert (tmp_path / "mlp-w.lut").read_bytes() == (tmp_path / "full" / "mlp-w.lut").read_bytes()


def test_unet_recipe_resumes_bit_exactly(tmp_path, monkeypatch):
    """unet-t's recipe (graphs/train-unet.cfg: a training set, tiles, the cosine schedule over
    the cfg's frames, Adam with clipping) on a tiny network, interrupted after frame 2 and
    resumed, ends with the weights of the run that was never interrupted, to the byte."""
    rng = np.random.default_rng(5)
    (tmp_path / "set").mkdir()
    for k, (wd, ht) in enumerate([(24, 20), (40, 18)]):
        write_pfm(tmp_path / "set" / f"{k}.pfm", rng.uniform(0, 1, (ht, wd, 3)).astype(np.float32))
    text = (ROOT / "graphs" / "train-unet.cfg").read_text().replace("photos/train.txt", "set")
    text, n = re.subn(r"^frames:\d+$", "frames:5", text, flags=re.MULTILINE)
    assert n == 1
    text += ("param:cnngenin:01:batch:2\nparam:cnngenin:01:tile:16\n"
             "param:unet-t:01:width:4\nparam:unet-t:01:scales:2\n")
    cfg = tmp_path / "unet.cfg"
    cfg.write_text(text)
    (tmp_path / "full").mkdir()
    out, _ = ok(vkgraph(tmp_path / "full", "-g", str(cfg), "--last-frame-only"))
    assert "unet-t:01: 5 frames" in out
    restore = interrupt_after(monkeypatch, 2)
    rc, _, err = vkgraph(tmp_path, "-g", str(cfg), "--last-frame-only")
    assert rc == 130, err
    restore()
    ok(vkgraph(tmp_path, "-g", str(cfg), "--last-frame-only", "--resume", "unet.ckpt.npz"))
    lut = (tmp_path / "unet-photo.lut").read_bytes()
    assert lut == (tmp_path / "full" / "unet-photo.lut").read_bytes()


# ------------------------------------------------------------------------------------------
# checkpoint contents are checked before they are used

@pytest.fixture(scope="module")
def fresh_build(full, device):
    """A build of the tiny graph that could resume full.npz (9 frames > its 6)."""
    d = full[0]
    g = graph_from_lines(TINY.replace("filename:x.pfm", f"filename:{d / 'x.pfm'}"))
    g.frames = 9
    return Build(g, device)


def damaged(full, path: Path, **change) -> Path:
    z = arrays(full[0] / "full.npz")
    for key, value in change.items():
        key = key.replace("__", "/").replace("_", ".")
        z[key] = np.full_like(z[key], value) if np.isscalar(value) else value
    np.savez(path, **z)
    return path


@pytest.mark.parametrize("change,words", [
    ({"kpn-t:01__adam_m": np.nan}, r"state 'adam\.m' of kpn-t:01 holds nan at element 0"),
    ({"kpn-t:01__adam_w": 1e30}, r"'adam\.w' of kpn-t:01 holds 1e\+30 .*beyond the f16"),
    ({"kpn-t:01__adam_stats": np.inf}, r"'adam\.stats' of kpn-t:01 holds inf"),
    ({"kpn-t:01__adam_v": -1.0}, r"'adam\.v' .* -1 .*never negative"),
    ({"kpn-t:01__extra": np.zeros(3)}, r"'kpn-t:01/extra' has no place .*saves adam\.m"),
    ({"kpn-t:01__@99_lsum_cur_0": np.zeros(16, np.uint8)}, r"'kpn-t:01/@99\.lsum\.cur\.0'"),
    ({"kpn-t:01__adam_w": np.zeros(7, np.float64)}, r"adam\.w' is 56 bytes of float64"),
])
def test_checkpoint_state_is_checked(full, fresh_build, tmp_path, change, words):
    """Non-finite state, weights beyond what the module outputs, a negative second moment,
    keys the module does not save and entries of another type are refused, naming the file
    (they used to be loaded or ignored, and the run went on)."""
    from vkgraph.pipeline.checkpoint import Checkpoint

    path = damaged(full, tmp_path / "bad.npz", **change)
    with pytest.raises(GraphError, match=words) as e:
        Checkpoint(path).restore(fresh_build)
    assert e.value.where == str(path)


def test_resume_of_non_finite_state_is_a_clean_error(full, tmp_path):
    """The trial's case through the command: an all-NaN Adam state is exit 2, one line naming
    the file, and nothing is written."""
    cfg = scene(tmp_path)
    z = {k: np.full_like(v, np.nan) if k.startswith("kpn-t:01/adam.") else v
         for k, v in arrays(full[0] / "full.npz").items()}
    np.savez(tmp_path / "nan.npz", **z)
    line = error_line(vkgraph(tmp_path, "-g", str(cfg), *OUT, "--resume", "nan.npz",
                              "--frames", "8"))
    assert "nan.npz: state 'adam." in line and "holds nan" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nan.npz", "tiny.cfg", "x.pfm"]


def test_checkpoint_entry_is_bounded_before_it_is_read(full, fresh_build, tmp_path):
    """A small file whose entry decompresses to 256 MiB of zeros: refused from its header,
    without the data being decompressed (it used to be read whole)."""
    import tracemalloc
    import zipfile

    from vkgraph.pipeline.checkpoint import Checkpoint

    path = damaged(full, tmp_path / "bomb.npz")
    n = 64 << 20  # float32 elements
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        names = [i.filename for i in zf.infolist() if i.filename != "kpn-t:01/adam.m.npy"]
        data = {name: zf.read(name) for name in names}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for name, raw in data.items():
            zf.writestr(name, raw)
        with zf.open("kpn-t:01/adam.m.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": "<f4", "fortran_order": False, "shape": (n,)})
            zeros = bytes(16 << 20)
            for _ in range(n * 4 // len(zeros)):
                f.write(zeros)
    assert path.stat().st_size < 2 << 20
    tracemalloc.start()
    try:
        with pytest.raises(GraphError, match=r"'kpn-t:01/adam\.m' is 268435456 bytes"):
            Checkpoint(path).restore(fresh_build)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"{peak} bytes allocated"


# ------------------------------------------------------------------------------------------
# no writer emits NaN or Inf

@pytest.mark.parametrize("name,fmt,chan", [("o-pfm", "pfm", "f32"), ("o-png", "png", "f32"),
                                           ("o-jpg", "jpg", "f32"), ("o-exr", "exr", "f32"),
                                           ("o-exr", "exr", "f16"), ("o-lut", "lut", "f32"),
                                           ("o-lut", "lut", "f16"), ("o-lut", "lut", "ui8")])
@pytest.mark.parametrize("bad", [np.nan, -np.inf])
def test_every_writer_refuses_non_finite_data(tmp_path, monkeypatch, name, fmt, chan, bad):
    """Each writer module given a NaN or Inf pixel: one error naming the file and the pixel,
    the previous file byte for byte, nothing else written."""
    from test_io_modules import FakeGraph, hook, sink

    from vkgraph.pipeline.errors import RuntimeFailure

    monkeypatch.chdir(tmp_path)
    img = np.random.default_rng(1).random((8, 8, 4), dtype=np.float32)
    m, c = sink(name, "rgba", chan, Roi(8, 8), filename="out")
    hook(m, "write_sink")(FakeGraph(tmp_path), m, c, img)
    previous = (tmp_path / f"out.{fmt}").read_bytes()
    img[5, 3, 1] = bad
    with pytest.raises(RuntimeFailure, match=rf"out\.{fmt}: not written: the data holds "
                       rf"{bad} at x=3 y=5 channel 1 \(a file never gets NaN or Inf\)"):
        hook(m, "write_sink")(FakeGraph(tmp_path), m, c, img)
    assert (tmp_path / f"out.{fmt}").read_bytes() == previous
    assert [p.name for p in tmp_path.iterdir()] == [f"out.{fmt}"]


def test_writers_refuse_values_their_format_cannot_hold(tmp_path):
    """f32 weights beyond 65504 written as f16 would be Inf in the file: refused too, as is
    NaN in the unwritten alpha channel not (the file does not hold it)."""
    from vkgraph.pipeline.errors import RuntimeFailure

    w = np.ones(64, np.float32)
    w[9] = 1e30
    with pytest.raises(RuntimeFailure, match=r"w\.lut: .*inf at element 9"):
        F.write_lut(tmp_path / "w.lut", w, 1, "f16", 64, 1, ssbo=True)
    F.write_lut(tmp_path / "w.lut", w, 1, "f32", 64, 1, ssbo=True)  # f32 holds it
    img = np.ones((4, 4, 4), np.float32)
    img[0, 0, 0] = 1e5
    with pytest.raises(RuntimeFailure, match=r"x\.exr: .*inf at x=0 y=0 channel 0"):
        F.write_exr(tmp_path / "x.exr", img, half=True)
    img[0, 0, 0], img[1, 1, 3] = 1.0, np.nan
    for write in (F.write_pfm, F.write_png, F.write_exr):
        write(tmp_path / "a", img)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "w.lut"]


EXPOSED = """frames:1
module:i-pfm:main
module:exposure:01
module:o-pfm:main
connect:i-pfm:main:output:exposure:01:input
connect:exposure:01:output:o-pfm:main:input
param:i-pfm:main:filename:x.pfm
param:o-pfm:main:filename:main
"""


def test_a_graph_that_overflows_writes_nothing(tmp_path):
    """exposure +127 stops on pixels of 10: Inf in the output. The run ends with exit 1 and
    one line naming the file; the previous main.pfm stays."""
    write_pfm(tmp_path / "x.pfm", np.full((4, 4, 3), 10.0, np.float32))
    (tmp_path / "e.cfg").write_text(EXPOSED)
    ok(vkgraph(tmp_path, "-g", "e.cfg"))
    previous = (tmp_path / "main.pfm").read_bytes()
    rc, out, err = vkgraph(tmp_path, "-g", "e.cfg", "--config", "param:exposure:01:exposure:127")
    assert rc == 1, f"{out}\n{err}"
    lines = [ln for ln in err.splitlines() if ln.startswith("vkgraph: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "main.pfm: not written" in lines[0] and "inf at x=0 y=0 channel 0" in lines[0]
    assert (tmp_path / "main.pfm").read_bytes() == previous


def test_denoise_writes_no_non_finite_pixels(tmp_path, monkeypatch, capsys):
    """A denoiser output holding NaN (the H100's f16 path with diverged weights): the file
    is reported failed, exit 1, no output file; on the float path (a 16-bit PNG) and on the
    8-bit one, a GPU's (srgb-out counts the non-finite pixels, which reach no file as
    codes)."""
    from vkgraph.apps import denoise
    from vkgraph.cli.main import main

    F.write_lut(tmp_path / "w.lut", np.zeros(64 * 448, np.float16), 1, "f16", 64, 448,
                ssbo=True)  # kpn-t's size: denoise checks the weights before any input
    F.write_png(tmp_path / "a.png", np.full((8, 8, 3), 0.5, np.float32), depth="u16")
    F.write_png(tmp_path / "b.png", np.full((8, 8, 3), 0.5, np.float32))
    monkeypatch.setattr(denoise.Denoiser, "__call__",
                        lambda self, image, a, b: np.full(image.shape[:2] + (3,), np.nan))
    monkeypatch.setattr(denoise.Denoiser, "_srgb_all",
                        lambda self, px, a, b: (np.zeros_like(px), 64))
    monkeypatch.setattr(denoise.Denoiser, "srgb8", lambda self: True)  # as on a GPU
    monkeypatch.chdir(tmp_path)
    rc = main(["denoise", "a.png", "--weights", "w.lut", "--noise", "0", "0"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "a-denoised.png: not written" in err and "nan at x=0 y=0" in err
    rc = main(["denoise", "b.png", "--weights", "w.lut", "--noise", "0", "0"])
    err = capsys.readouterr().err
    assert rc == 1 and "64 pixels of non-finite values" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "b.png", "w.lut"]


# ------------------------------------------------------------------------------------------
# i-lut: all of a file's channels, or an error

def test_i_lut_refuses_image_data_of_more_than_four_channels(tmp_path):
    """A 9-channel image .lut: an image wire holds 4, so it is refused naming the file (it
    used to keep 4 of the 9 silently); as ssbo data all 9 are read."""
    from test_io_modules import FakeGraph, instance, source

    data = np.arange(2 * 3 * 9, dtype=np.float32).reshape(2, 3, 9)
    F.write_lut(tmp_path / "nine.lut", data, 9, "f32", 3, 2)
    with pytest.raises(GraphError, match=r"nine\.lut: 9 channels of image data"):
        source(FakeGraph(tmp_path), instance("i-lut", filename="nine.lut"))
    F.write_lut(tmp_path / "nine.lut", data, 9, "f32", 3, 2, ssbo=True)
    out, got = source(FakeGraph(tmp_path), instance("i-lut", filename="nine.lut"))
    assert out.chan == "ssbo" and np.array_equal(got, data.reshape(-1))
