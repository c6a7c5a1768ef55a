"""Barriers in a frame's command list: one only where an operation reads or writes a buffer
written since the last barrier, or writes one read since then (pipeline/recording.py:
Hazards); independent nodes in a row run side by side. The tracking must give the same bits
as a barrier after every node (VKGRAPH_BARRIERS=all)."""

from __future__ import annotations

import numpy as np
import pytest
from test_kpn_coopmat import has_coopmat
from test_mlp_gpu import mlp_graph, small_trainer, target_image

from vkgraph.pipeline.recording import Hazards
from vkgraph.pipeline.runner import Build


class FakeList:
    def __init__(self):
        self.ops = []

    def barrier(self):
        self.ops.append("|")


def test_hazards_barrier_only_where_needed(monkeypatch):
    monkeypatch.delenv("VKGRAPH_BARRIERS", raising=False)
    a, b, c, d = object(), object(), object(), object()
    cl = FakeList()
    h = Hazards(cl)

    def op(name, reads=(), writes=()):
        h.access(reads, writes)
        cl.ops.append(name)

    op("w a", writes=[a])
    op("r c w b", reads=[c], writes=[b])  # independent of a: no barrier
    op("r a", reads=[a])  # read after write
    op("r c", reads=[c])  # read after read: none
    op("w c", writes=[c])  # write after read
    op("w d", writes=[d])
    op("w d again", writes=[d])  # write after write
    assert cl.ops == ["w a", "r c w b", "|", "r a", "r c", "|", "w c", "w d", "|", "w d again"]
    monkeypatch.setenv("VKGRAPH_BARRIERS", "all")
    cl = FakeList()
    h = Hazards(cl)
    op("w a", writes=[a])
    op("r c", reads=[c])
    assert cl.ops == ["|", "w a", "|", "r c"]


def _frame_ops(build) -> list[str]:
    """The frame's command list as node labels and '|' for barriers."""
    out = []
    for op in build.program.commands[0].ops:
        if op[0] == "barrier":
            out.append("|")
        elif op[0] == "dispatch":
            out.append(op[6].split("/")[-1])
        else:
            out.append(op[0])
    return out


def _build(tmp_path, device, name):
    folder = tmp_path / name
    folder.mkdir()
    g = mlp_graph(folder, target_image(20, 24), {"width": 16, "depth": 1, "batch": 64,
                                                  "resample": 1, "preview": 3}, frames=7)
    return Build(g, device, profile=True), g.modules[("mlp-t", "01")]


def test_mlp_t_frame_runs_independent_nodes_side_by_side(device, tmp_path, monkeypatch):
    monkeypatch.delenv("VKGRAPH_BARRIERS", raising=False)
    b1, m1 = _build(tmp_path, device, "tracked")
    ops = _frame_ops(b1)
    names = [o for o in ops if o not in ("|", "fill", "copy")]
    assert "norm" not in names and {"adam", "lsum", "reduce", "eval"} <= set(names)
    # the frame's list: (where the global slot is not device-local: its copy) the barrier
    # against the frame before, tacc's clear, then the nodes: eval and train both read adam's
    # w, lsum and wgrad train's outputs; no sink copies (download_sinks)
    head = "| " if b1.memory.global_direct else "copy | "
    assert " ".join(ops) == head + "fill | adam | eval train | lsum wgrad | reduce"


def test_mlp_t_coopmat_frame(device, tmp_path, monkeypatch):
    """The coopmat variant (emulated here): the preview runs beside train_cm; reduce also
    sums the loss (no lsum node)."""
    monkeypatch.delenv("VKGRAPH_BARRIERS", raising=False)
    monkeypatch.delenv("VKGRAPH_PORTABLE", raising=False)
    monkeypatch.setenv("VKGRAPH_MLP", "coopmat")
    monkeypatch.setenv("VKGRAPH_COOPMAT_EMULATE", "1")
    b, _ = _build(tmp_path, device, "cm")
    head = "| " if b.memory.global_direct else "copy | "
    assert " ".join(_frame_ops(b)) == head + "adam | eval train_cm | reduce"


@pytest.mark.parametrize("variant",
                         ["portable", pytest.param("coopmat", marks=pytest.mark.coopmat)])
def test_side_by_side_gives_the_bits_of_a_barrier_after_every_node(device, tmp_path,
                                                                   monkeypatch, variant):
    """7 frames with the preview every frame (it runs beside train_cm), back to back: weights,
    loss history and preview are those of a barrier after every node, bit for bit."""
    if variant == "coopmat" and not has_coopmat(device):
        pytest.skip(f"{device.info.name} has no cooperative matrices")
    monkeypatch.delenv("VKGRAPH_PORTABLE", raising=False)
    monkeypatch.delenv("VKGRAPH_COOPMAT_EMULATE", raising=False)
    monkeypatch.setenv("VKGRAPH_MLP", variant)
    runs = []
    for mode in ("", "all"):
        monkeypatch.setenv("VKGRAPH_BARRIERS", mode)
        folder = tmp_path / f"run{mode}"
        folder.mkdir()
        g = mlp_graph(folder, target_image(96, 80), {"width": 32, "depth": 2, "batch": 8192,
                                                      "resample": 1, "preview": 1}, frames=7)
        b = Build(g, device)
        m = g.modules[("mlp-t", "01")]
        assert m.data["variant"] == variant
        b.run_frames(0, 7, last_frame_only=True)
        runs.append([b.read(m.trainable.adam, "w"), b.read(m.trainable.lsum, "hist"),
                     b.read(m.data["eval"], "output")])
    assert np.abs(runs[0][2]).max() > 0  # the preview ran
    for x, y in zip(runs[0], runs[1], strict=True):
        assert np.array_equal(x, y)


def test_profile_switched_on_mid_run_keeps_the_state(device, tmp_path, monkeypatch):
    """set_profile re-records the frame lists with timestamps: the run goes on from the same
    state (same bits as a run without the switch) and the frame's nodes report times."""
    monkeypatch.delenv("VKGRAPH_BARRIERS", raising=False)
    b1, m1 = _build(tmp_path, device, "plain")
    b1.program.set_profile(False)
    b2, m2 = _build(tmp_path, device, "switched")
    b2.program.set_profile(False)
    assert b2.timings() == [] and b2.gpu_span() == 0.0
    b1.run_frames(0, 7, last_frame_only=True)
    b2.run_frames(0, 4, last_frame_only=True)
    b2.program.set_profile(True)
    b2.run_frames(4, 7, last_frame_only=True)
    assert np.array_equal(b1.read(m1.trainable.adam, "w"), b2.read(m2.trainable.adam, "w"))
    times = b2.timings()
    assert {label.split("/")[-1] for label, _ in times} >= {"adam", "train", "reduce"}
    assert all(t >= 0 for _, t in times) and b2.gpu_span() > 0


def test_global_slots_copied_where_not_device_local(device, tmp_path, monkeypatch):
    """Where the host-visible slots are not device-local, each frame's list copies its slot
    to a device buffer first; the frames train as with the slots read in place."""
    monkeypatch.delenv("VKGRAPH_BARRIERS", raising=False)
    b1, m1 = _build(tmp_path, device, "direct")
    make = type(device).buffer

    def far(self, nbytes, host=False, near=False, zero=True, cached=False):
        buf = make(self, nbytes, host, near, zero, cached)
        if near:
            buf.device_local = False
        return buf

    monkeypatch.setattr(type(device), "buffer", far)
    b2, m2 = _build(tmp_path, device, "copied")
    assert not b2.memory.global_direct and b2.memory.global_bufs[0] is not b2.memory.global_slots[0]
    assert _frame_ops(b2)[:2] == ["copy", "|"]
    for b in (b1, b2):
        b.run_frames(0, 7, last_frame_only=True)
    assert np.array_equal(b1.read(m1.trainable.adam, "w"), b2.read(m2.trainable.adam, "w"))
    assert np.array_equal(b1.read(m1.trainable.lsum, "hist"), b2.read(m2.trainable.lsum, "hist"))


def test_frames_leave_out_the_preview_when_it_is_not_due(device, tmp_path, monkeypatch):
    """mlp-t's eval is due on frames f % preview == 0 and on the last: the other frames run
    the lean list without it, and the output keeps the last preview."""
    monkeypatch.delenv("VKGRAPH_BARRIERS", raising=False)
    b, m = _build(tmp_path, device, "lean")  # preview 3, 7 frames
    lean = [f for f in range(7) if b.program.frame_list(f, b.frames) in b.program.lean]
    assert lean == [1, 2, 4, 5]
    lean_ops = b.program.lean[0].ops
    assert "eval" not in " ".join(op[6] or "" for op in lean_ops if op[0] == "dispatch")
    ev = m.data["eval"]
    outs = []
    for f in range(7):
        b.run_frame(f, download=False)
        outs.append(b.read(ev, "output"))
    assert not np.array_equal(outs[0], outs[3]) and not np.array_equal(outs[3], outs[6])
    assert np.array_equal(outs[3], outs[4]) and np.array_equal(outs[3], outs[5])
    assert {label.split("/")[-1] for label, _ in b.timings()} >= {"eval"}  # frame 6: full


def test_lean_and_full_lists_alternate_back_to_back(device, tmp_path, monkeypatch):
    """Frames back to back that switch between the lean and the full list of one parity
    (preview 3: full at 0, 3, 6, 9): each list's fence is waited for before it is submitted
    again, and the run gives the bits of frames run one at a time."""
    monkeypatch.delenv("VKGRAPH_BARRIERS", raising=False)
    runs = []
    for name in ("flight", "wait"):
        folder = tmp_path / name
        folder.mkdir()
        g = mlp_graph(folder, target_image(20, 24), {"width": 16, "depth": 1, "batch": 64,
                                                      "resample": 1, "preview": 3}, frames=13)
        b = Build(g, device)
        m = g.modules[("mlp-t", "01")]
        if name == "flight":
            b.run_frames(0, 13, last_frame_only=True)
        else:
            for f in range(13):
                b.run_frame(f, download=False)
        runs.append((b.read(m.trainable.adam, "w"), b.read(m.data["eval"], "output")))
    assert np.array_equal(runs[0][0], runs[1][0]) and np.array_equal(runs[0][1], runs[1][1])


@pytest.mark.parametrize("kind", ["mlp-t", "kpn-t"])
def test_batched_frames_give_the_bits_of_frames_one_at_a_time(device, tmp_path, monkeypatch,
                                                              kind):
    """run_frames puts BATCH frames in one submission where nothing needs the host between
    them (mlp-t: not across a due preview, preview 12 of 25 frames; kpn-t: ping-pong
    parities inside the batch): weights and losses are those of frames one at a time."""
    from vkgraph.pipeline.recording import BATCH

    monkeypatch.delenv("VKGRAPH_BARRIERS", raising=False)
    extra = {"preview": 12} if kind == "mlp-t" else {}
    b, m = small_trainer(device, tmp_path / "batched", kind, 25, **extra)
    used, seen = [], []
    run_batch = b._run_batch
    monkeypatch.setattr(b, "_run_batch", lambda f, k: (used.append(f), run_batch(f, k)))
    b.run_frames(0, 25, last_frame_only=True, each_frame=[lambda b_, f: seen.append(f)],
                 sync=lambda f: f == 9)
    assert seen == list(range(25))
    w, m2 = small_trainer(device, tmp_path / "wait", kind, 25, **extra)
    for f in range(25):
        w.run_frame(f, download=False)
    runs = [[x.read(mm.trainable.adam, "w"), x.read(mm.trainable.lsum, "hist")]
            for x, mm in ((b, m), (w, m2))]
    # mlp-t: 2..9 (10..17 holds the preview at 12; sync 9 ends a batch), 14..21; kpn-t: no
    # preview: 2..9, 10..17, then 18..24 one at a time (the last frame runs on its own)
    assert used == ([2, 14] if kind == "mlp-t" else [2, 10]), used
    assert all(f % 2 == 0 for f in used) and BATCH == 8
    for x, y in zip(runs[0], runs[1], strict=True):
        assert np.array_equal(x, y)


def test_kpn_t_levels_run_side_by_side(device, tmp_path, monkeypatch):
    """The schedule goes by dependency depth (pipeline/nodes.py wavefronts): each node after
    everything it reads, and one pyramid level's filter beside the next level's MLP, the one
    after that's features and the next's downsampling, without a barrier between them (the
    depth-first order put a barrier after nearly every node: 33 in the 4-level frame of
    bench/kpn_train.py, 19 now)."""
    monkeypatch.delenv("VKGRAPH_BARRIERS", raising=False)
    monkeypatch.delenv("VKGRAPH_PORTABLE", raising=False)
    monkeypatch.setenv("VKGRAPH_KPN_MLP", "fused")
    monkeypatch.setenv("VKGRAPH_COOPMAT_EMULATE", "1")
    b, _ = small_trainer(device, tmp_path / "fused", "kpn-t", 1, kpn_levels=3, profile=True)
    seen = set()
    for node in b.plan.schedule:
        for c in node.connectors:
            if c.is_input and c.source is not None and not c.feedback:
                assert id(c.source[0]) in seen, (node.label, c.name)
        seen.add(id(node))
    ops = " ".join(_frame_ops(b))
    assert "| apply fwd_cm diff |" in ops, ops
    assert "| dup dapply bck_fused |" in ops, ops
    nodes = sum(1 for n in b.plan.schedule if n.kernel is not None)
    assert ops.count("|") < 0.6 * nodes, ops  # 16 for 31 nodes here


def test_kpn_t_side_by_side_gives_the_bits_of_a_barrier_after_every_node(device, tmp_path,
                                                                         monkeypatch):
    """Three kpn-t frames (portable kernels, 3 levels): the weights and the loss history
    with the levels side by side are those with a barrier after every node, bit for bit."""
    monkeypatch.delenv("VKGRAPH_PORTABLE", raising=False)
    monkeypatch.delenv("VKGRAPH_COOPMAT_EMULATE", raising=False)
    monkeypatch.setenv("VKGRAPH_KPN_MLP", "portable")
    runs = []
    for mode in ("", "all"):
        monkeypatch.setenv("VKGRAPH_BARRIERS", mode)
        b, m = small_trainer(device, tmp_path / f"run{mode}", "kpn-t", 3, kpn_levels=3)
        b.run_frames(0, 3, last_frame_only=True)
        runs.append([b.read(m.trainable.adam, "w"), b.read(m.trainable.lsum, "hist")])
    assert np.abs(runs[0][0]).max() > 0
    for x, y in zip(runs[0], runs[1], strict=True):
        assert np.array_equal(x, y)
