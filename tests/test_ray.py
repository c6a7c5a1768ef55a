"""Sweeps and batch denoising on Ray (vkgraph/apps/distributed.py, vkgraph/apps/sweep.py, `vkgraph
sweep`, `vkgraph denoise --ray`): the GPU -> Vulkan device mapping and the search space as
plain functions, then a 4-trial sweep (FIFO and ASHA) and a 6-file denoise on one local Ray
instance of 2 CPUs on the CPU driver."""

from __future__ import annotations

import csv
import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vkgraph.apps.distributed import gpu_uuid, parse_ids, parse_smi
from vkgraph.apps.sweep import Space, line, text, window_means
from vkgraph.cli.main import main
from vkgraph.pipeline.errors import GraphError, RuntimeFailure
from vkgraph.pipeline.formats import read_image, read_lut, write_exr, write_pfm, write_png

ROOT = Path(__file__).resolve().parent.parent
UUID0 = "GPU-0a1b2c3d-0000-1111-2222-333344445555"
UUID1 = "GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff"


# -- the GPU mapping, with fake inputs


def test_gpu_ids_map_to_the_uuid_of_that_index():
    table = {0: UUID0, 1: UUID1}
    assert gpu_uuid([1], None, table) == UUID1
    assert gpu_uuid(["0"], "0", table) == UUID0
    # Ray's ids win over CUDA_VISIBLE_DEVICES; without them the variable is read
    assert gpu_uuid([], "1", table) == UUID1
    assert gpu_uuid(None, " 1 , 0", table) == UUID1  # several: the first
    # an id that is already a UUID needs no table
    assert gpu_uuid([], UUID1, {}) == UUID1


def test_no_gpu_or_no_nvidia_table_means_the_default_device():
    assert gpu_uuid([], None, {0: UUID0}) is None
    assert gpu_uuid([], "", {0: UUID0}) is None  # Ray sets it empty for CPU tasks
    assert gpu_uuid([0], "0", {}) is None  # no NVML, no nvidia-smi: not an NVIDIA machine
    assert parse_ids([], ",") == []


def test_an_unknown_gpu_index_is_an_error_not_a_shared_gpu():
    with pytest.raises(RuntimeFailure, match="given GPU 3, but the machine's GPUs are 0, 1"):
        gpu_uuid([3], None, {0: UUID0, 1: UUID1})
    with pytest.raises(RuntimeFailure, match="neither an index nor a UUID"):
        gpu_uuid(["gpu:x"], None, {0: UUID0})


def test_nvidia_smi_table():
    out = f"0, {UUID0}\n1, {UUID1}\n\nNo devices were found\n"
    assert parse_smi(out) == {0: UUID0, 1: UUID1}


def test_a_vulkan_device_is_picked_by_uuid(monkeypatch):
    from vkgraph.pipeline.vk import DeviceInfo, choose
    from vkgraph.pipeline.vk.device import uuid_key

    def info(i, name, uuid):
        return DeviceInfo(index=i, name=name, type="discrete GPU", api="1.3", driver="1",
                          fp16=True, storage16=True, float_atomics=False, int64_atomics=False,
                          subgroup_size=32, shared_memory=49152, memory_mib=1,
                          timestamp_period=1.0, uuid=uuid)

    infos = [info(0, "NVIDIA H200", UUID0[4:]), info(1, "NVIDIA H200", UUID1[4:])]
    assert uuid_key(UUID1) == uuid_key(UUID1[4:].upper().replace("-", ""))
    assert uuid_key("NVIDIA") is None
    assert choose(infos, UUID1) is infos[1]  # nvidia-smi's form, "GPU-" prefix
    monkeypatch.setenv("VKGRAPH_DEVICE_UUID", UUID1[4:])
    assert choose(infos) is infos[1]
    with pytest.raises(GraphError, match="no Vulkan device has the UUID"):
        choose(infos, "GPU-" + "0" * 32)


def test_devices_shows_the_uuid(capsys):
    from vkgraph.pipeline.vk import list_devices

    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    for d in list_devices():
        assert len(d.uuid) == 36 and f"uuid: {d.uuid}" in out


# -- the search space


def test_space_kinds_and_cfg_text(tmp_path):
    s = Space.parse({"frames": 20, "param:kpn-t:01:alpha": {"grid": [0.001, 0.002]},
                     "param:kpn-t:01:loss": {"choice": [0, 2]},
                     "param:kpn-t:01:eps": {"loguniform": ["1e-9", "1e-7"]},  # YAML's text
                     "param:cnngenin:01:batch": {"randint": [1, 4]}})
    assert [d.kind for d in s.dims] == ["fixed", "grid", "choice", "loguniform", "randint"]
    assert s.dim("param:kpn-t:01:eps").values == [1e-9, 1e-7]
    assert s.trials(3) == 6 and s.frames(5) == 20
    assert line("param:kpn-t:01:alpha", 0.0025) == "param:kpn-t:01:alpha:0.0025"
    assert text(np.float32(2.0)) == "2" and text([1, 0.5]) == "1:0.5" and text(True) == "1"


@pytest.mark.parametrize("data, message", [
    ({"param:kpn-t:01": 1}, "a key is `param:<module>:<instance>:<param>`"),
    ({"fps": 1}, "a key is"),
    ({"param:kpn-t:01:alpha": {"uniform": [0.1]}}, r"takes \[a, b\], got 1"),
    ({"param:kpn-t:01:alpha": {"uniform": [0.2, 0.1]}}, "needs a < b"),
    ({"param:kpn-t:01:alpha": {"loguniform": [0, 0.1]}}, "needs a > 0"),
    ({"param:kpn-t:01:alpha": {"normal": [0, 1]}}, "expected one of grid, choice"),
    ({"param:kpn-t:01:alpha": {"grid": []}}, "non-empty list"),
    ({"param:cnngenin:01:batch": {"randint": [1, 2.5]}}, "expected an integer"),
    ([1, 2], "expected an object"),
])
def test_bad_spaces_are_errors(data, message):
    with pytest.raises(GraphError, match=message):
        Space.parse(data)


def test_space_values_are_checked_against_the_graph(tmp_path):
    cfg = ROOT / "graphs" / "train-kpn.cfg"
    Space.parse({"param:kpn-t:01:alpha": {"uniform": [0.001, 0.01]}}).check(cfg)
    with pytest.raises(GraphError, match="loss"):  # 7 is outside loss's 0|1|2
        Space.parse({"param:kpn-t:01:loss": {"grid": [0, 7]}}).check(cfg)
    with pytest.raises(GraphError, match="kpn-t:02"):
        Space.parse({"param:kpn-t:02:alpha": 0.1}).check(cfg)
    with pytest.raises(GraphError, match=r"frames must be 1\.\.2147483647"):
        Space.parse({"frames": {"grid": [10, 0]}}).check(cfg)
    bad = tmp_path / "s.yaml"
    bad.write_text("param:kpn-t:01:alpha: {grid: [0.1\n")
    pytest.importorskip("yaml")
    with pytest.raises(GraphError, match="s.yaml"):
        Space.load(bad)


def test_window_means_skip_a_non_finite_loss():
    hist = np.array([4.0, 2.0, np.nan, 1.0, 3.0, 5.0, 7.0])
    assert window_means(hist, 2).tolist() == [3.0, 1.0, 4.0]  # the 7th frame: no window


# -- Ray is optional


def test_import_vkgraph_and_the_parser_never_import_ray():
    code = ("import sys, vkgraph, vkgraph.cli.main as m; m.build_parser(); "
            "assert 'ray' not in sys.modules, 'ray imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_without_ray_a_clear_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    space = tmp_path / "s.json"
    space.write_text('{"param:kpn-t:01:alpha": 0.001}')
    assert main(["sweep", "-g", str(ROOT / "graphs" / "train-kpn.cfg"),
                 "--space", str(space)]) == 2
    assert "pip install 'vkgraph[ray]'" in capsys.readouterr().err
    assert main(["denoise", str(tmp_path / "x.png"), "--ray"]) == 2
    assert "pip install 'vkgraph[ray]'" in capsys.readouterr().err


# -- on a local Ray instance of 2 CPUs


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING,
             log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def tiny_graph(tmp_path):
    from conftest import TINY_KPN_LINES

    write_pfm(tmp_path / "x.pfm", np.random.default_rng(9).random((32, 32, 3)).astype(np.float32))
    (tmp_path / "t.cfg").write_text("frames:6\n" + TINY_KPN_LINES + "\n")
    return tmp_path / "t.cfg"


GRID = [0.001, 0.004]


def sweep(tmp_path, graph, *extra) -> tuple[int, list[dict], dict]:
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"param:kpn-t:01:alpha": {"grid": GRID},
                                 "param:kpn-t:01:gradclip": {"uniform": [0.5, 2.0]}}))
    out = tmp_path / "out"
    rc = main(["sweep", "-g", str(graph), "--space", str(space), "--samples", "2",
               "--report-every", "2", "--seed", "3", "--out", str(out), *extra])
    with open(out / "sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return rc, rows, json.loads((out / "sweep.json").read_text())


def test_sweep_of_four_trials(ray_local, tiny_graph, tmp_path, capsys):
    pytest.importorskip("skimage")  # the held-out photographs
    rc, rows, table = sweep(tmp_path, tiny_graph, "--metric", "psnr", "--eval-crop", "24")
    assert rc == 0
    assert len(rows) == 4 and len(table["trials"]) == 4
    assert {"trial", "status", "param:kpn-t:01:alpha", "param:kpn-t:01:gradclip", "frame",
            "loss", "best_loss", "seconds", "device", "device_uuid", "weights"} <= set(rows[0])
    assert sorted(float(r["param:kpn-t:01:alpha"]) for r in rows) == sorted(GRID * 2)
    clips = [float(r["param:kpn-t:01:gradclip"]) for r in rows]
    assert all(0.5 <= c <= 2.0 for c in clips) and len(set(clips)) == 4  # drawn per trial
    psnr = [float(r["psnr"]) for r in rows]
    assert psnr == sorted(psnr, reverse=True) and all(np.isfinite(psnr))  # best first
    assert all(np.isfinite(float(r["loss"])) for r in rows)
    for r in rows:
        assert r["status"] == "done" and r["frame"] == "6"
        assert float(r["best_loss"]) <= float(r["loss"])
        data, _, text_, *_ = read_lut(Path(r["weights"]))  # the trained weights, readable
        assert data.size > 0 and "2 pyramid levels" in text_
    assert len({r["trial"] for r in rows}) == 4
    assert table["trials"][0]["trial"] == rows[0]["trial"] and table["metric"] == "psnr"
    out = capsys.readouterr().out
    assert "4 trials (4 done, 0 stopped early, 0 failed)" in out
    assert f"best: {rows[0]['trial']}, weights {rows[0]['weights']}" in out


def test_sweep_with_asha(ray_local, tiny_graph, tmp_path):
    rc, rows, table = sweep(tmp_path, tiny_graph, "--scheduler", "asha", "--grace", "2")
    assert rc == 0 and len(rows) == 4 and table["scheduler"] == "asha"
    done = [r for r in rows if r["status"] == "done"]
    assert done and rows[:len(done)] == done  # finished trials rank first
    for r in rows:
        if r["status"] == "done":
            assert r["frame"] == "6" and Path(r["weights"]).is_file()
        else:  # stopped by ASHA at its rung: no weights
            assert r["status"] == "stopped" and int(r["frame"]) < 6 and not r["weights"]


def test_sweep_refuses_a_bad_space_before_starting(tmp_path, capsys):
    pytest.importorskip("ray")
    space = tmp_path / "s.json"
    space.write_text('{"param:kpn-t:01:alpha": {"grid": [0.001, -1]}}')
    assert main(["sweep", "-g", str(ROOT / "graphs" / "train-kpn.cfg"), "--space",
                 str(space), "--out", str(tmp_path / "o")]) == 2
    assert "alpha" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_heldout_psnr_of_the_shipped_weights(device):
    pytest.importorskip("skimage")
    from vkgraph.apps.heldout import LEVELS, evaluate

    res = evaluate(device, ROOT / "graphs" / "weights" / "kpn-photo.lut", crop=48)
    assert set(res["per_level"]) == {name for name, _, _ in LEVELS}
    assert res["gain"] > 1.0  # the shipped weights denoise: well above the noisy input
    assert res["per_level"]["low"] > res["per_level"]["mid"] > res["per_level"]["high"]


@pytest.fixture
def photos(tmp_path):
    """5 small noisy images (EXR and PNG, two sizes) and one that is not an image."""
    rng = np.random.default_rng(4)
    names = []
    for i in range(5):
        ht = 40 if i < 3 else 48
        img = 0.4 + 0.2 * np.sin(np.arange(48)[None, :, None] / (3 + i)) \
            + 0.05 * rng.standard_normal((ht, 48, 3))
        path = tmp_path / f"p{i}.{'exr' if i % 2 == 0 else 'png'}"
        (write_exr if i % 2 == 0 else write_png)(path, np.clip(img, 0, 1).astype(np.float32))
        names.append(path)
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    names.insert(2, bad)
    return names


def test_denoise_on_ray_matches_the_plain_run(ray_local, photos, tmp_path, capsys):
    args = [str(p) for p in photos]
    assert main(["denoise", *args, "--outdir", str(tmp_path / "ray"), "--ray"]) == 1
    out, err = capsys.readouterr()
    assert "broken.png" in err and "1 of 6 files failed" in err
    assert main(["denoise", *args, "--outdir", str(tmp_path / "plain")]) == 1
    capsys.readouterr()
    good = [p for p in photos if p.name != "broken.png"]
    for p in good:
        assert f"{p} -> {tmp_path / 'ray' / p.name}" in out  # named as given
        a = read_image(tmp_path / "ray" / p.name)
        b = read_image(tmp_path / "plain" / p.name)
        assert a.shape == b.shape and np.array_equal(a, b)
    assert sorted(x.name for x in (tmp_path / "ray").iterdir()) == sorted(p.name for p in good)


def test_a_failed_trial_is_named_by_its_last_line():
    from vkgraph.apps.sweep import error_line

    text = ("ray::run_trial() (pid=1, ip=x)\n  File \"a.py\", line 3, in f\n"
            "vkgraph.pipeline.errors.GraphError: buffer kpn-t:01/fwd:A needs 448 MiB\n")
    assert error_line(RuntimeError(text)) == "GraphError: buffer kpn-t:01/fwd:A needs 448 MiB"
    assert error_line(RuntimeError("x" * 400)) == "x" * 225 + "...(100 more characters)..." \
        + "x" * 75
