"""The divergence guard of the trainer scaffold (shaders/include/guard.glsl,
pipeline/trainer.py): a run whose updates keep failing rolls back to the last good weights
and halves its learning rate; out of rollbacks it stops with one error line and exit 1; o-lut
`best 1` writes the best weights seen. On the tiny kpn-t graph of test_reliability."""

from __future__ import annotations

import numpy as np
from test_kpn_gpu import kpn_graph
from test_reliability import OUT, SIZE, arrays, scene

from vkgraph.pipeline import trainer
from vkgraph.pipeline.formats import read_lut, read_pfm
from vkgraph.pipeline.runner import Build


def tiny(device, tmp_path, frames: int, *lines: str):
    scene(tmp_path)
    X = read_pfm(tmp_path / "x.pfm")
    g = kpn_graph(tmp_path, X, X, 2, "\n".join(lines))
    g.frames = frames
    build = Build(g, device)
    return build, g.modules[("kpn-t", "01")]


def run(build, m, bad_frames=()):
    """Frames 0 .. frames-1, a NaN input pixel in `bad_frames`; per frame the weights after
    it and the guard's state."""
    src = next(n for n in build.plan.schedule if n.kernel is None and n.is_source
               and n.module.inst == "main")
    buf = build.memory.buffers[(id(src), "output")][0]
    clean = None
    rows = []
    for f in range(build.frames):
        if f in bad_frames and clean is None:
            clean = buf.download(np.float32).copy()
            bad = clean.copy()
            bad[4 * (5 * SIZE + 7) + 1] = np.nan
            buf.upload(bad)
        elif f not in bad_frames and clean is not None:
            buf.upload(clean)
            clean = None
        build.run_frame(f)
        rows.append((build.read(m.trainable.adam, "w").copy(),
                     trainer.guard(build.context, m)))
    return rows


def test_consecutive_bad_updates_roll_back_and_halve_the_rate(device, tmp_path):
    """NaN losses at frames 18..20 make adam's updates of frames 19..21 bad; with rollback 3
    frame 22 restores the weights of the last snapshot (taken at frame 16: the weights after
    frame 15) and the rate is halved; training then goes on."""
    build, m = tiny(device, tmp_path, 25, "param:kpn-t:01:rollback:3")
    rows = run(build, m, bad_frames=(18, 19, 20))
    for f in range(21):  # thread 0 decides at frame 21, every thread rolls back at 22
        assert rows[f][1]["rollbacks"] == 0 and rows[f][1]["rate"] == 1.0, f
    assert np.array_equal(rows[21][0], rows[18][0])  # the bad updates were skipped
    assert np.array_equal(rows[22][0], rows[15][0])  # rolled back to the snapshot
    assert rows[22][1]["rollbacks"] == 1 and rows[22][1]["rate"] == 0.5
    assert not np.array_equal(rows[23][0], rows[22][0])  # and trains on
    assert not rows[24][1]["stopped"] and trainer.diverged(build.context, m) is None
    build.seconds = 1.0
    summary = m.cls.hook("summary")(build.context, m)
    assert "1 rollbacks to the last good weights (learning rate x0.5)" in summary
    assert m.cls.hook("stats")(build.context, m)["rollbacks"] == 1


def test_rollback_0_keeps_skipping(device, tmp_path):
    """The guard off: the same bad frames are only skipped (today's behaviour)."""
    build, m = tiny(device, tmp_path, 23, "param:kpn-t:01:rollback:0")
    rows = run(build, m, bad_frames=(18, 19, 20))
    assert np.array_equal(rows[21][0], rows[18][0])
    assert not np.array_equal(rows[22][0], rows[15][0])
    assert rows[22][1]["rollbacks"] == 0


def test_best_weights_are_what_o_lut_best_writes(device, tmp_path):
    """o-lut best 1: the weights of the lowest smoothed loss at a snapshot (every 16
    frames): after 21 frames, frame 16's (the weights after frame 15), not the last."""
    build, m = tiny(device, tmp_path, 21, "param:o-lut:w:best:1")
    rows = run(build, m)
    lut = read_lut(tmp_path / "mlp-w.lut")[0].ravel()
    assert np.array_equal(lut, rows[15][0].astype(np.float16))
    assert not np.array_equal(lut, rows[20][0].astype(np.float16))


def test_the_last_weights_without_best(device, tmp_path):
    build, m = tiny(device, tmp_path, 21)
    rows = run(build, m)
    lut = read_lut(tmp_path / "mlp-w.lut")[0].ravel()
    assert np.array_equal(lut, rows[20][0].astype(np.float16))


def test_out_of_rollbacks_the_run_stops_with_an_error(tmp_path):
    """A learning rate of 1e30 diverges whatever the halvings: after `retries` rollbacks the
    run stops, exit 1 with one line; the weights written are finite (the last good ones)."""
    from conftest import vkgraph

    cfg = scene(tmp_path)
    rc, out, err = vkgraph(tmp_path, "-g", str(cfg), *OUT, "--frames", "60", "--checkpoint",
                           "c.npz", "--config", "param:kpn-t:01:alpha:1e30",
                           "param:kpn-t:01:rollback:2", "param:kpn-t:01:retries:1")
    assert rc == 1, f"exit {rc}\n{out}\n{err}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "training diverged" in lines[0], err
    assert "stopped: diverged" in out and "1 rollbacks" in out
    w = arrays(tmp_path / "c.npz")["kpn-t:01/adam.w"]
    assert np.isfinite(w).all()
    assert np.isfinite(read_lut(tmp_path / "w.lut")[0]).all()


def test_mlp_t_out_of_rollbacks_stops_with_finite_weights(device, tmp_path):
    """mlp-t's adam has the same guard: a learning rate of 1e30 with a linear output blows
    up; one rollback (halving the rate is not enough), then it stops, the weights the last
    good ones."""
    from test_mlp_gpu import mlp_graph, target_image

    g = mlp_graph(tmp_path, target_image(16, 16), dict(
        enc="frequency", octaves=2, width=16, depth=2, bias=1, batch=64, outact="none",
        alpha=1e30, rollback=2, retries=1), frames=20)
    b = Build(g, device)
    m = g.modules[("mlp-t", "01")]
    b.run_frame(0, download=False)
    w0 = b.read(m.trainable.adam, "w").copy()
    for f in range(1, 20):
        b.run_frame(f, download=False)
    state = trainer.guard(b.context, m)
    assert state["stopped"] and state["rollbacks"] == 1
    assert "training diverged" in trainer.diverged(b.context, m)
    assert np.array_equal(b.read(m.trainable.adam, "w"), w0)  # frame 0's: no snapshot since
