"""`vkgraph gui` in a virtual X server (Xvfb): the window shows what `vkgraph cli` writes.

The gui runs a graph with two displays and a file writer for a few frames, writes the file on
quitting and saves a screenshot read back from the swapchain. The main panel must equal the
cli's PNG of the same graph resampled to the panel the way the compose kernel does (linear
interpolation when enlarging, the mean of the footprint when shrinking, both on clamped linear
values), within 3 levels of 255 anywhere and 0.5 on average (the PNG is quantised to 8 bits
before it is resampled, the window after).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import CPU_DRIVER, VKGRAPH, has_cpu_driver, vkgraph_env
from test_kpn_views import font

from vkgraph.apps.compose import (
    FONT_SCALE,
    LABEL_HT,
    STATUS_HT,
    fit,
    image_area,
    layout,
    plot_area,
    training_layout,
)
from vkgraph.pipeline.formats import linear_to_srgb, read_pfm, srgb_to_linear, write_pfm

WD, HT = 320, 240  # enlarged in the main panel, shrunk in the side panel
TIMEOUT = 120

GRAPH = """frames:3
module:i-pfm:main
param:i-pfm:main:filename:in.pfm
module:exposure:01
param:exposure:01:exposure:0.5
connect:i-pfm:main:output:exposure:01:input
module:display:main
connect:exposure:01:output:display:main:input
module:display:view0
connect:i-pfm:main:output:display:view0:input
module:o-pfm:out
param:o-pfm:out:filename:sink
connect:exposure:01:output:o-pfm:out:input
"""


def make_image() -> np.ndarray:
    """Gradients (x in red, y in green), a bright block and a checker patch: a flip, shift or
    wrong scale of the panel shows."""
    y, x = np.mgrid[0:HT, 0:WD].astype(np.float32)
    img = np.stack([x / (WD - 1), y / (HT - 1), np.full_like(x, 0.2)], -1)
    img[40:90, 150:230] = [0.9, 0.1, 0.6]
    img[150:200, 30:80] = ((x[150:200, 30:80] // 5 + y[150:200, 30:80] // 5) % 2)[..., None]
    return img




def axis_weights(n: int, m: int, maxtap: int = 16) -> np.ndarray:
    """(n, m) matrix: output pixel u of n from m source pixels along one axis, as
    shaders/display/panel.comp computes it."""
    w = np.zeros((n, m))
    for u in range(n):
        if m > n:
            i0 = u * m // n
            length = max(1, ((u + 1) * m + n - 1) // n - i0)
            stride = -(-length // maxtap)
            taps = -(-length // stride)
            for k in range(taps):
                w[u, min(i0 + k * stride, m - 1)] += 1.0 / taps
        else:
            x = (u + 0.5) * m / n - 0.5
            x0 = np.floor(x)
            t = x - x0
            w[u, int(np.clip(x0, 0, m - 1))] += 1 - t
            w[u, int(np.clip(x0 + 1, 0, m - 1))] += t
    return w


def resample_srgb8(linear: np.ndarray, wd: int, ht: int) -> np.ndarray:
    ht0, wd0 = linear.shape[:2]
    wx, wy = axis_weights(wd, wd0), axis_weights(ht, ht0)
    img = linear[:, :, :3].astype(np.float64)
    out = np.stack([wy @ img[:, :, c] @ wx.T for c in range(3)], -1)
    return np.rint(linear_to_srgb(out) * 255).astype(np.int64)


@pytest.fixture(scope="module")
def xdisplay():
    """A fresh Xvfb on a display number the server picks itself (-displayfd)."""
    exe = shutil.which("Xvfb")
    if exe is None:
        pytest.skip("Xvfb is not installed (Debian: apt install xvfb); CI installs it")
    rfd, wfd = os.pipe()
    proc = subprocess.Popen([exe, "-displayfd", str(wfd), "-screen", "0", "1280x1024x24",
                             "-nolisten", "tcp"], pass_fds=(wfd,),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(wfd)
    try:
        number = b""
        deadline = time.monotonic() + 20
        while not number.endswith(b"\n") and time.monotonic() < deadline:
            chunk = os.read(rfd, 16)
            if not chunk:
                break
            number += chunk
        if not number.strip():
            pytest.fail("Xvfb did not report a display number")
        yield f":{int(number)}"
    finally:
        os.close(rfd)
        proc.terminate()
        proc.wait(timeout=10)


def run_env(display: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["PYGLFW_LIBRARY_VARIANT"] = "x11"
    if display is not None:
        env["DISPLAY"] = display
    # the window runs on the CPU driver where there is one (it presents to any X server)
    if has_cpu_driver():
        env["VKGRAPH_DEVICE"] = CPU_DRIVER
    return env


def vkgraph(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([*VKGRAPH, *args], cwd=cwd, env=vkgraph_env(env), capture_output=True,
                          text=True,
                          timeout=TIMEOUT)


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("gui")
    write_pfm(d / "in.pfm", make_image())
    (d / "g.cfg").write_text(GRAPH)
    return d


def read_png(path: Path) -> np.ndarray:
    import imageio.v3 as iio

    return iio.imread(path).astype(np.int64)


def read_text(ink: np.ndarray, x: int, y: int, wd: int, scale: int = FONT_SCALE) -> str:
    """The 5x7 font's text (cells of 6 x 8 font pixels, `scale` window pixels each) whose top
    left is at (x, y) in the boolean image `ink`, read up to `wd` pixels to the right; "?"
    for a cell that is no glyph."""
    glyphs = {ch: g for ch, g in font().items()}
    out = []
    for cx in range(x, x + wd - 6 * scale + 2, 6 * scale):
        cell = ink[y:y + 7 * scale:scale, cx:cx + 5 * scale:scale]
        if cell.shape != (7, 5):
            break
        out.append(next((ch for ch, g in glyphs.items() if np.array_equal(g, cell)), "?"))
    return "".join(out).rstrip()


def read_label(shot: np.ndarray, rect) -> str:
    """The label in the strip along the top of a panel (shaders/display/label.comp)."""
    x, y, wd, _ = rect
    top = y + (LABEL_HT - 7 * FONT_SCALE) // 2
    return read_text(shot[:, :, 1] > 128, x + 4, top, wd - 4)


def test_screenshot_shows_the_cli_output(xdisplay, graph_dir):
    env = run_env(xdisplay)
    res = vkgraph(["gui", "-g", "g.cfg", "--exit-after", "5", "--screenshot", "shot.png"],
                  graph_dir, env)
    assert res.returncode == 0, res.stderr
    # quitting wrote the file sinks
    sink = read_pfm(graph_dir / "sink.pfm")
    assert np.allclose(sink[:, :, :3], make_image() * 2**0.5, rtol=1e-6, atol=1e-6)
    (graph_dir / "sink.pfm").unlink()
    res = vkgraph(["cli", "-g", "g.cfg", "--format", "o-png", "--filename", "ref",
                   "--last-frame-only"], graph_dir, env)
    assert res.returncode == 0, res.stderr

    shot = read_png(graph_dir / "shot.png")
    ref = read_png(graph_dir / "ref.png")
    assert ref.shape == (HT, WD, 3)
    ht, wd = shot.shape[:2]
    rects, strip = layout(wd, ht, 2)
    assert strip == (0, ht - STATUS_HT, wd, STATUS_HT)

    x, y, fw, fh = fit(image_area(rects[0]), WD, HT)
    assert fw > WD  # enlarged
    want = resample_srgb8(srgb_to_linear(ref / 255.0), fw, fh)
    got = shot[y:y + fh, x:x + fw]
    diff = np.abs(got - want)
    assert diff.max() <= 3 and diff.mean() <= 0.5, (diff.max(), diff.mean())
    # letterbox around the image in the panel colour
    px, py, pw, ph = image_area(rects[0])
    outside = np.ones((ph, pw), bool)
    outside[y - py:y - py + fh, x - px:x - px + fw] = False
    assert outside.any() and np.all(np.abs(shot[py:py + ph, px:px + pw][outside] - 15) <= 1)

    # view0 shows the i-pfm image itself, shrunk into the side column
    x, y, fw, fh = fit(image_area(rects[1]), WD, HT)
    assert fw < WD
    want = resample_srgb8(make_image(), fw, fh)
    diff = np.abs(shot[y:y + fh, x:x + fw] - want)
    assert diff.max() <= 2 and diff.mean() <= 0.5, (diff.max(), diff.mean())

    # each panel's label names its display and what it shows
    assert read_label(shot, rects[0]) == "MAIN: EXPOSURE OUTPUT"
    assert read_label(shot, rects[1]) == "VIEW0: I-PFM OUTPUT"

    # the status line has text on its background
    line = shot[ht - STATUS_HT:, :]
    assert (line > 200).any() and np.median(line) < 60


RESIZE = """
import sys
import vkgraph.cli.gui as gui

shown = {"n": 0}
events = gui.Window.events

def events_then_resize(self, wait=0.0):
    events(self, wait)
    shown["n"] += 1
    if shown["n"] == 2:
        self.glfw.set_window_size(self.handle, 500, 300)

gui.Window.events = events_then_resize
from vkgraph.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_resize_recreates_the_swapchain(xdisplay, graph_dir):
    env = run_env(xdisplay)
    res = subprocess.run([sys.executable, "-c", RESIZE, "gui", "-g", "g.cfg", "--exit-after",
                          "8", "--screenshot", "small.png"], cwd=graph_dir, env=env,
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert res.returncode == 0, res.stderr
    shot = read_png(graph_dir / "small.png")
    assert shot.shape == (300, 500, 3)
    rects, _ = layout(500, 300, 2)
    x, y, fw, fh = fit(image_area(rects[0]), WD, HT)
    # the main panel still shows the image (bright block of exposure 0.5 in red)
    assert shot[y + fh * 65 // HT, x + fw * 190 // WD, 0] > 240


KEYS = """
import os
import sys
import vkgraph.cli.gui as gui
from vkgraph.pipeline.runner import Build

turn = {"n": 0, "frames": 0}
events = gui.Window.events
run_frame = Build.run_frame

def count(self, frame, download=True):
    turn["frames"] += 1
    run_frame(self, frame, download)

def press(self, wait=0.0):
    self.glfw.post_empty_event()  # an idle window sleeps until an event: this is one
    events(self, wait)
    turn["n"] += 1
    key = {2: self.glfw.KEY_SPACE, 4: self.glfw.KEY_S, 8: self.glfw.KEY_Q}.get(turn["n"])
    if turn["n"] == 6:
        print("written", os.path.exists("sink.pfm"), "frames", turn["frames"])
    if key is not None:
        self._key(self.handle, key, 0, self.glfw.PRESS, 0)

Build.run_frame = count
gui.Window.events = press
from vkgraph.cli.main import main
rc = main(sys.argv[1:])
print("total", turn["frames"])
sys.exit(rc)
"""


def test_keys_pause_write_quit(xdisplay, graph_dir):
    """space pauses (no frames run meanwhile), s writes the file sinks at once, q quits."""
    (graph_dir / "sink.pfm").unlink(missing_ok=True)
    res = subprocess.run([sys.executable, "-c", KEYS, "gui", "-g", "g.cfg", "--frames",
                          "1000"], cwd=graph_dir, env=run_env(xdisplay), capture_output=True,
                         text=True, timeout=TIMEOUT)
    assert res.returncode == 0, res.stderr
    words = res.stdout.split()
    assert words[:2] == ["written", "True"] and words[4] == "total"
    assert 1 <= int(words[3]) == int(words[5]) < 1000  # no frame ran while paused


def test_without_display_exit_1(graph_dir):
    res = vkgraph(["gui", "-g", "g.cfg", "--exit-after", "1"], graph_dir, run_env(None))
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "no display available" in lines[0]
    assert "vkgraph cli" in lines[0]


def test_graph_error_exit_2(graph_dir):
    (graph_dir / "bad.cfg").write_text("module:exposure:01\nfrobnicate:1\n")
    res = vkgraph(["gui", "-g", "bad.cfg"], graph_dir, run_env(None))
    assert res.returncode == 2, res.stderr


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_idle_window_sleeps_and_signals_write_sinks(xdisplay, graph_dir, sig):
    """After the last frame the window waits for events (it redrew every 50 ms: 0.8
    CPU-seconds a second); SIGINT or SIGTERM then quits like `q`, writing the file sinks,
    with exit 130 (it exited without writing them)."""
    import signal

    (graph_dir / "sink.pfm").unlink(missing_ok=True)
    proc = subprocess.Popen([*VKGRAPH, "gui", "-g", "g.cfg"], cwd=graph_dir,
                            env=vkgraph_env(run_env(xdisplay)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        t0, last, idle = time.monotonic(), None, False
        while time.monotonic() - t0 < TIMEOUT and proc.poll() is None:
            time.sleep(1.0)
            now = cpu_seconds(proc.pid)
            if last is not None and now - last < 0.1:
                idle = True
                break
            last = now
        assert idle, f"the idle window keeps using CPU ({last} s so far)"
        before = cpu_seconds(proc.pid)
        time.sleep(2.0)
        assert cpu_seconds(proc.pid) - before < 0.2
        assert not (graph_dir / "sink.pfm").exists()
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted after frame 2 of 3" in err and "Traceback" not in err
    assert np.allclose(read_pfm(graph_dir / "sink.pfm"), read_pfm(graph_dir / "in.pfm")
                       * 2 ** 0.5, rtol=1e-6)


def test_training_layout_gives_the_loss_plot_room():
    """The training view at the default window (1152 x 800 on this Xvfb): three images side
    by side, left to right, the loss plot below them at least half the window wide and a
    third of it high (it was kpn-t's 500 x 200 plot in the side column, shown at 288 x
    115), one side panel on the right."""
    wd, ht = 1152, 800
    rects, loss, status = training_layout(wd, ht, 3, 1)
    row, side = rects[:3], rects[3]
    assert [r[0] for r in row] == sorted(r[0] for r in row)
    assert len({r[1] for r in row}) == 1 and len({r[3] for r in row}) == 1
    assert all(r[0] + r[2] <= side[0] for r in row)
    assert loss[1] >= row[0][1] + row[0][3] and loss[0] + loss[2] <= side[0]
    assert loss[2] >= wd / 2 and loss[3] >= ht / 3
    x0, y0, x1, y1 = plot_area(loss)
    assert x1 - x0 >= 600 and y1 - y0 >= 250
    assert status[1] >= loss[1] + loss[3]


TRAINING = [
    ("train-kpn.cfg", [], ["INPUT", "OUTPUT", "REF"], ["VIEW0: KPN-T VIS"]),
    ("fit-image.cfg", ["--config", "param:mlp-t:01:batch:1024"], ["TARGET", "OUTPUT"], []),
]


@pytest.mark.parametrize(("cfg", "extra", "images", "side"), TRAINING)
def test_training_view(xdisplay, tmp_path, cfg, extra, images, side):
    """A training graph shows its trainable module's images side by side, labelled in its
    connector order, its loss plot below them at the window's font scale with its labels
    and a curve, and the displays that show something else in a column on the right
    (train-kpn's `main` shows kpn-t's output again and `hist` its small loss plot: both
    left out)."""
    graph = Path(__file__).resolve().parent.parent / "graphs" / cfg
    res = vkgraph(["gui", "-g", str(graph), "--frames", "3", "--exit-after", "4",
                   "--screenshot", "shot.png", *extra], tmp_path, run_env(xdisplay))
    assert res.returncode == 0, res.stderr
    shot = read_png(tmp_path / "shot.png")
    ht, wd = shot.shape[:2]
    rects, loss, _ = training_layout(wd, ht, len(images), len(side))
    assert [read_label(shot, r) for r in rects] == images + side
    # every image panel shows something other than the panel colour below its label
    for r in rects:
        x, y, w, h = image_area(r)
        assert (np.abs(shot[y:y + h, x:x + w] - 15) > 8).any()
    # the loss plot: its title, the x axis' name, and the curve in its plot area
    lx, ly, lw, lh = loss
    s = FONT_SCALE
    grey = (shot.max(-1) - shot.min(-1) < 8) & (shot[:, :, 1] > 200)
    assert read_text(grey, lx + 4 * s, ly + 3 * s, 10 * 6 * s) == "LOSS (LOG)"
    x0, y0, x1, y1 = plot_area(loss)
    assert read_text(grey, lx + (x0 + x1) // 2 - 14 * s, ly + y1 + 4 * s, 5 * 6 * s) == "FRAME"
    area = shot[ly + y0:ly + y1, lx + x0:lx + x1]
    orange = (area[:, :, 0] > 200) & (area[:, :, 2] < 150)
    assert orange.sum() >= x1 - x0  # a line across the plot
