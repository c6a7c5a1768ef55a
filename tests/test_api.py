"""The Python API (vkgraph/api.py): README's example runs as written; feed, set, run, read
and save_weights on small graphs."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY_KPN_LINES

import vkgraph
from vkgraph.pipeline.errors import GraphError, RuntimeFailure
from vkgraph.pipeline.formats import read_lut

ROOT = Path(__file__).resolve().parent.parent


def readme_example(n: int = 0) -> str:
    """The n-th python example of README's "Python API"."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Python API"):text.index("## Gradient check")]
    return re.findall(r"```python\n(.*?)```", section, re.S)[n]


def test_readme_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "example.py").write_text(readme_example())
    runpy.run_path(str(tmp_path / "example.py"), run_name="__main__")
    line = capsys.readouterr().out.strip()
    m = re.fullmatch(r"5 frames: loss ([\d.]+) -> ([\d.]+), output \(64, 64, 4\)", line)
    assert m, line
    assert float(m.group(2)) < float(m.group(1))  # it learns
    data, channels, text = read_lut(tmp_path / "my-weights.lut")
    assert data.size == 64 * 448 and "pyramid levels" in text


EXPOSURE = """module:i-pfm:main
module:exposure:01
module:display:main
connect:i-pfm:main:output:exposure:01:input
connect:exposure:01:output:display:main:input
param:i-pfm:main:filename:nothing-here.pfm
param:exposure:01:exposure:1"""


def picture(h=12, w=20, k=1.0):
    y, x = np.mgrid[0:h, 0:w]
    return (k * np.stack([x / w, y / h, (x * y) % 5 / 5.0], -1)).astype(np.float32)


def test_feed_set_run_read(device):
    s = vkgraph.Session.load(EXPOSURE, device=device)
    s.feed("i-pfm:main", picture())  # the file source becomes i-array, wires kept
    assert s.module("i-array:main") is not None
    s.run(1)
    out = s.read("exposure:01", "output")
    assert out.shape == (12, 20, 4)
    np.testing.assert_allclose(out[..., :3], 2 * picture(), rtol=1e-6)
    np.testing.assert_allclose(s.read("i-array:main", "output")[..., :3], picture())

    s.set("exposure:01", "exposure", 2)  # next frame, same build
    s.feed("i-array:main", picture(k=0.5))  # same size: uploaded again
    build = s.build
    s.run(2)
    assert s.build is build and s.frame == 3
    np.testing.assert_allclose(s.read("exposure:01", "output")[..., :3], 2 * picture(),
                               rtol=1e-6)
    s.feed("i-array:main", picture(6, 8))  # another size: rebuilt
    s.run(1)
    assert s.read("exposure:01", "output").shape == (6, 8, 4)

    with pytest.raises(GraphError, match="outside its range"):
        s.set("exposure:01", "exposure", 1000)
    with pytest.raises(GraphError, match="no connector 'nope'"):
        s.read("exposure:01", "nope")
    with pytest.raises(GraphError, match="trainable"):
        s.save_weights("w.lut")
    s.close()  # the device is the test session's: left open
    assert device is not None


# ------------------------------------------------------------------------------------------
# rebuilds keep what was trained; a closed session stays closed

def trainer(device, kind: str) -> vkgraph.Session:
    """A small kpn-t (16 x 16 picture) or mlp-t (graphs/fit-poly.cfg, batch 64) session; the
    sinks write w.lut or fit-poly-w.lut in the working folder."""
    if kind == "kpn-t":
        s = vkgraph.Session.load(TINY_KPN_LINES, device=device)
        s.feed("i-pfm:main", picture(16, 16))
    else:
        s = vkgraph.Session.load(ROOT / "graphs" / "fit-poly.cfg", device=device)
        s.set("mlp-t:01", "batch", 64)
    return s


def state(s: vkgraph.Session) -> dict[str, np.ndarray]:
    from vkgraph.pipeline import checkpoint

    return checkpoint.collect(s.build)


@pytest.mark.parametrize("kind", ["kpn-t", "mlp-t"])
def test_rebuild_carries_the_trained_state(device, kind, tmp_path, monkeypatch):
    """3 frames, then `apply` (which builds the graph again), then 1 frame: the weights, Adam
    moments, loss history and pending gradient are those of 4 frames in one build, bit for
    bit, and save_weights writes them (a rebuild used to start from zero weights)."""
    monkeypatch.chdir(tmp_path)
    ref = trainer(device, kind)
    ref.run(3).run(1)
    s = trainer(device, kind)
    s.run(3)
    first = s.build
    s.apply([f"param:{kind}:01:alpha:{s.get(f'{kind}:01', 'alpha')!r}"])  # the same value
    s.run(1)
    assert s.build is not first and s.frame == 4
    want, got = state(ref), state(s)
    assert sorted(want) == sorted(got)
    for key in want:
        assert want[key].tobytes() == got[key].tobytes(), key
    assert np.any(got[f"{kind}:01/adam.w"] != 0)
    s.save_weights(tmp_path / "saved.lut")
    w = read_lut(tmp_path / "saved.lut")[0].ravel()
    assert np.array_equal(w, got[f"{kind}:01/adam.w"].astype(w.dtype))
    # weights gone NaN (as a diverged f16 network's may) are refused, the file kept
    node, conn = s.module(f"{kind}:01").backing["w"]
    nan = s.build.read(node, conn)
    nan[5] = np.nan
    s.build.upload(node, conn, nan)
    with pytest.raises(RuntimeFailure, match=r"saved\.lut: not written: .*nan at element 5"):
        s.save_weights(tmp_path / "saved.lut")
    assert np.array_equal(read_lut(tmp_path / "saved.lut")[0].ravel(), w)


def test_feed_of_another_size_and_a_changed_network(device, caplog, tmp_path, monkeypatch):
    """A picture of another size rebuilds every buffer but the trained ones, which go on;
    a change the weights no longer fit (more levels) restarts from frame 0 and says so."""
    monkeypatch.chdir(tmp_path)
    s = trainer(device, "kpn-t")
    s.run(3)
    before = state(s)["kpn-t:01/adam.w"]
    s.feed("i-array:main", picture(8, 8))
    s.run(1)
    after = state(s)
    assert s.frame == 4 and after["kpn-t:01/adam.w"].shape == before.shape
    step = np.abs(after["kpn-t:01/adam.w"] - before)
    assert 0 < step.max() < 0.1  # one Adam step away, not a fresh initialisation
    assert np.any(after["kpn-t:01/adam.m"] != 0)
    s.apply(["param:kpn-t:01:levels:3"])
    with caplog.at_level("WARNING", logger="vkgraph"):
        s.run(1)
    assert s.frame == 1 and "runs again from frame 0" in caplog.text
    assert np.any(state(s)["kpn-t:01/adam.w"] != 0)  # frame 0 initialised the new network


def test_closed_session_does_not_run(device):
    s = vkgraph.Session.load(EXPOSURE, device=device)
    s.feed("i-pfm:main", picture())
    s.run(1)
    s.close()
    for call in (lambda: s.run(1), lambda: s.read("exposure:01", "output"),
                 lambda: s.save_weights("w.lut"), lambda: s.prepare()):
        with pytest.raises(GraphError, match="the session is closed"):
            call()


# ------------------------------------------------------------------------------------------
# what a session takes, and refuses

def test_feed_takes_integer_images_as_the_file_readers_do(tmp_path):
    """uint8 and uint16 arrays are sRGB-encoded like the PNG files they come from: fed, they
    equal what read_image makes of that file (colour decoded, alpha linear)."""
    import imageio.v3 as iio

    from vkgraph.pipeline.formats import read_image

    s = vkgraph.Session.load(EXPOSURE)  # no device until a run
    rng = np.random.default_rng(5)
    for dtype, channels in ((np.uint8, 3), (np.uint8, 4), (np.uint16, 1)):
        top = np.iinfo(dtype).max
        img = rng.integers(0, top + 1, (5, 7, channels)).astype(dtype)
        iio.imwrite(tmp_path / "a.png", img if channels > 1 else img[:, :, 0])
        s.feed("i-array:main" if channels != 3 else "i-pfm:main",
               img if channels > 1 else img[:, :, 0])
        fed = s.module("i-array:main").data["image"]
        want = read_image(tmp_path / "a.png")
        assert fed.dtype == np.float32 and fed.shape == (5, 7, channels)
        np.testing.assert_array_equal(fed[..., :3] if channels > 1 else fed[..., 0],
                                      want[..., :3] if channels > 1 else want[..., 0])
        if channels == 4:
            np.testing.assert_array_equal(fed[..., 3], want[..., 3])


@pytest.mark.parametrize("image,words", [
    (np.ones((4, 4, 3), np.int32), r"signed integers \(int32\)"),
    (np.ones((4, 4, 3), np.complex64), r"complex numbers"),
    (np.where(np.arange(48).reshape(4, 4, 3) == 7, np.nan, 0.5), r"nan at x=2 y=0 channel 1"),
    (np.full((4, 4), -np.inf, np.float32), r"-inf at x=0 y=0 channel 0"),
    (np.full((4, 4, 3), 1e300), r"inf at x=0 y=0 .*as float32"),
    (np.zeros((4, 0, 3), np.float32), r"expected an image"),
])
def test_feed_refuses_what_is_no_image(image, words):
    s = vkgraph.Session.load(EXPOSURE)
    with pytest.raises(GraphError, match=words):
        s.feed("i-pfm:main", image)
    assert s.module("i-pfm:main") is not None  # nothing was replaced


def test_get_set_and_run_refuse_bad_names_and_counts():
    s = vkgraph.Session.load(EXPOSURE)
    with pytest.raises(GraphError, match=r"no param 'exposur'.*did you mean 'exposure'"):
        s.get("exposure:01", "exposur")
    for bad in (1.5, 2.0, True, "3", None):
        with pytest.raises(GraphError, match="frames must be a whole number"):
            s.run(bad)
    assert s.build is None and s.frame == 0
    with pytest.raises(GraphError, match="'filename' of i-pfm:main is empty, but it names a"):
        s.set("i-pfm:main", "filename", "")
    with pytest.raises(GraphError, match="is empty, but it names a file"):
        s.apply(["param:i-pfm:main:filename:"])
    assert s.get("i-pfm:main", "filename") == "nothing-here.pfm"


def test_one_session_from_two_threads(device):
    """Two threads running the same session take turns (they used to wait on each other's
    fences for minutes)."""
    import threading

    s = vkgraph.Session.load(EXPOSURE, device=device)
    s.feed("i-pfm:main", picture())
    s.run(1)
    errors = []

    def work():
        try:
            for _ in range(3):
                s.run(2)
                s.read("exposure:01", "output")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hangs"
    assert not errors, errors
    assert s.frame == 13


def test_readme_second_example_runs(tmp_path, monkeypatch, capsys):
    """A shipped graph by name, its losses as numpy and CSV, and vkgraph.dispatch (the
    kernel-test helper of pipeline/testing.py, at the package's door)."""
    from vkgraph.pipeline.testing import dispatch

    assert vkgraph.dispatch is dispatch
    monkeypatch.chdir(tmp_path)
    (tmp_path / "example.py").write_text(readme_example(1))
    runpy.run_path(str(tmp_path / "example.py"), run_name="__main__")
    first, second = capsys.readouterr().out.strip().splitlines()
    m = re.fullmatch(r"50 frames: loss ([\d.]+) -> ([\d.]+)", first)
    assert m, first
    assert float(m.group(2)) < float(m.group(1))
    assert second == "(4, 6, 4) [0.5  0.5  0.5  0.25]"
    rows = (tmp_path / "losses.csv").read_text().splitlines()
    assert rows[0] == "frame,mlp-t:01" and len(rows) == 51 and rows[50].startswith("49,")
    assert (tmp_path / "fit-poly-w.lut").is_file()


def test_load_finds_shipped_graphs_by_name(tmp_path, monkeypatch):
    """As `vkgraph cli -g`: a path, else a shipped graph's name with or without .cfg; a
    file of that name in the working folder comes first; a near miss names the closest."""
    monkeypatch.chdir(tmp_path)
    assert "fit-poly" in vkgraph.shipped_graphs() and "train-kpn" in vkgraph.shipped_graphs()
    shipped = vkgraph.Session.load(ROOT / "graphs" / "fit-poly.cfg").graph
    for name in ("fit-poly", "fit-poly.cfg"):
        g = vkgraph.Session.load(name).graph
        assert set(g.modules) == set(shipped.modules) and g.frames == shipped.frames
    (tmp_path / "fit-poly.cfg").write_text(EXPOSURE)
    assert ("exposure", "01") in vkgraph.Session.load("fit-poly.cfg").graph.modules
    with pytest.raises(GraphError, match=r"fit-poli: no such graph file, nor a shipped graph "
                       r"of that name \(did you mean 'fit-poly'\?\)"):
        vkgraph.Session.load("fit-poli")
    with pytest.raises(GraphError, match="no such graph file"):
        vkgraph.Session.load(tmp_path / "sub" / "fit-poly.cfg")  # a path is only a path


def test_losses_of_every_trainable_module(device, tmp_path, monkeypatch):
    """losses(): the loss of each frame, in order, per trainable module (what the progress
    callback saw); save_losses writes them as CSV; no trainer, no history."""
    monkeypatch.chdir(tmp_path)  # the graph's o-lut writes fit-poly-w.lut here
    seen = []
    s = vkgraph.Session.load("fit-poly", device=device)
    with pytest.raises(GraphError, match="has not run yet"):
        s.losses()
    s.run(6, progress=lambda frame, last, stats: seen.append(stats["mlp-t:01"]["loss"]))
    s.run(3, progress=lambda frame, last, stats: seen.append(stats["mlp-t:01"]["loss"]))
    losses = s.losses()
    assert list(losses) == ["mlp-t:01"]
    assert losses["mlp-t:01"].dtype == np.float64
    np.testing.assert_allclose(losses["mlp-t:01"], seen, rtol=1e-6)
    s.save_losses(tmp_path / "l.csv")
    rows = [r.split(",") for r in (tmp_path / "l.csv").read_text().splitlines()]
    assert rows[0] == ["frame", "mlp-t:01"] and [int(r[0]) for r in rows[1:]] == list(range(9))
    np.testing.assert_allclose([float(r[1]) for r in rows[1:]], seen, rtol=1e-6)
    plain = vkgraph.Session.load(EXPOSURE, device=device)
    plain.feed("i-pfm:main", picture())
    plain.run(1)
    assert plain.losses() == {}
    with pytest.raises(GraphError, match="no trainable module"):
        plain.save_losses(tmp_path / "none.csv")
    assert not (tmp_path / "none.csv").exists()


def test_losses_unroll_the_ring_buffer():
    """Past hist_len frames the history is the last hist_len in frame order (lsum writes
    frame f at hist[f % hist_len]), and losses_csv numbers the rows by frame."""
    from types import SimpleNamespace

    from vkgraph.api import losses_csv
    from vkgraph.pipeline import trainer

    L, frames = 5, 13
    ring = np.zeros(L, np.float32)
    for f in range(frames):
        ring[f % L] = f
    module = SimpleNamespace(trainable=SimpleNamespace(lsum="lsum", hist_len=L))
    young = SimpleNamespace(frame=2, read=lambda node, conn: np.arange(L, dtype=np.float32))
    np.testing.assert_array_equal(trainer.losses(young, module), [0, 1, 2])
    old = SimpleNamespace(frame=frames - 1, read=lambda node, conn: ring)
    np.testing.assert_array_equal(trainer.losses(old, module), [8, 9, 10, 11, 12])
    text = losses_csv({"a:1": np.array([8.0, 9.0, float("nan")]), "b:1": np.array([1.5])}, 11)
    assert text == "frame,a:1,b:1\n8,8,\n9,9,\n10,nan,1.5\n"
