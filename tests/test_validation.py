"""Every shipped graph under the Vulkan validation layers (Debian vulkan-validationlayers),
with synchronization validation on: not one message.

The layers must be enabled before the process creates its Vulkan instance, so the graphs run
in one child process (VKGRAPH_VALIDATION=1), through `vkgraph cli` in that process, one after
the other: train-kpn writes mlp-w.lut, which continue-kpn and denoise read. To keep this
quick on the CPU driver, image inputs are 32x32 crops (a training set: two of them; a raw
file, a 36x36 corner of its mosaic written as a DNG of its own), cnngenin
uses the whole (cropped) image or, from a set, two tiles of 16x16, mlp-t trains on batches of
256, and each graph runs 2 frames (both buffer parities);
every display is written (so every view node runs). Two deliberate mistakes first prove the
layers are live: a pipeline layout that lacks bindings the shader uses, and a copy that
reads a buffer without a barrier after it was written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GRAPHS = ROOT / "graphs"
LAYER = "VkLayer_khronos_validation.json"
FIRST = ["train-kpn.cfg", "continue-kpn.cfg", "denoise.cfg"]  # the lut flows through these

DRIVER = r'''
import json, sys
from pathlib import Path

import imageio.v3 as iio

from vkgraph.cli.main import main
from vkgraph.pipeline.cfg import read_cfg
from vkgraph.pipeline.datasets import resolve_name
from vkgraph.pipeline.formats import read_image, write_pfm
from vkgraph.pipeline.kernels import kernel_spirv
from vkgraph.pipeline.vk import Device, validation_messages

GRAPHS = None  # filled in by the test

def report(**kw):
    print("@@" + json.dumps(kw), flush=True)

dev = Device.open()
dev.kernel(kernel_spirv("trainer", "norm"),  # layout: 1 of 3 buffers
           1, 0, (256, 1, 1))
a, b = dev.buffer(256), dev.buffer(256)
cl = dev.commands().begin()
cl.fill(a)
cl.copy(a, b, 256)  # no barrier between the fill and the copy
cl.end()
cl.submit()
cl.wait()
dev.close()
report(control=list(validation_messages()))
del validation_messages()[:]

for name in sys.argv[1:]:
    path = Path(name)
    g = read_cfg(path)
    cfg = ["frames:2"]
    outs = []
    has_set = any(mod == "i-set" for mod, _ in g.modules)
    for (mod, inst), m in g.modules.items():
        if mod in ("i-pfm", "i-img"):
            crop = read_image(resolve_name(m.param("filename"), lambda n: path.parent / n))
            crop = crop[:32, :32]
            out = Path.cwd() / f"{path.stem}-{mod}-{inst}.pfm"
            write_pfm(out, crop)
            cfg.append(f"param:{mod}:{inst}:filename:{out}")  # i-img reads PFM too
        elif mod == "i-raw":  # a 36x36 corner of the raw file, as a DNG of its own
            from vkgraph.apps import dng
            from vkgraph.pipeline.raw import read_raw

            raw = read_raw(resolve_name(m.param("filename"), lambda n: path.parent / n))
            out = Path.cwd() / f"{path.stem}-{inst}.dng"
            dng.write_dng(out, dng.mosaic_counts(raw.mosaic[:36, :36], 0, 65535), raw.meta.cfa,
                          0, 65535, dng.CAMERA_MATRIX, dng.CAMERA_NEUTRAL)
            cfg.append(f"param:{mod}:{inst}:filename:{out}")
        elif mod == "i-set":
            folder = Path.cwd() / f"{path.stem}-set"
            folder.mkdir(exist_ok=True)
            scene = read_image(GRAPHS / "images" / "scene.pfm")
            write_pfm(folder / "a.pfm", scene[:32, :32])
            write_pfm(folder / "b.pfm", scene[32:56, 40:80])
            cfg.append(f"param:{mod}:{inst}:filename:{folder}")
        elif mod == "cnngenin" and has_set:
            cfg += [f"param:{mod}:{inst}:batch:2", f"param:{mod}:{inst}:tile:16"]
        elif mod == "cnngenin":
            cfg.append(f"param:{mod}:{inst}:tiles:0")
        elif mod == "mlp-t":
            cfg.append(f"param:{mod}:{inst}:batch:256")
        elif mod == "display":
            outs += ["--format", "o-pfm", "--filename", f"{path.stem}-{inst}", "--output", inst]
    rc = main(["-q", "cli", "-g", str(path), "--last-frame-only", *outs, "--config", *cfg])
    report(graph=path.name, rc=rc, messages=list(validation_messages()))
    del validation_messages()[:]
'''


def layer_installed() -> bool:
    dirs = os.environ.get("VK_LAYER_PATH", "").split(":") + [
        "/usr/share/vulkan/explicit_layer.d", "/usr/local/share/vulkan/explicit_layer.d",
        "/etc/vulkan/explicit_layer.d"]
    return any((Path(d) / LAYER).exists() for d in dirs if d)


def test_shipped_graphs_are_clean_under_validation(tmp_path):
    if not layer_installed():
        if os.environ.get("CI"):
            pytest.fail("the Vulkan validation layers are not installed (.ci/run installs "
                        "vulkan-validationlayers)")
        pytest.skip("Vulkan validation layers not installed (apt install "
                    "vulkan-validationlayers)")
    names = FIRST + sorted(p.name for p in GRAPHS.glob("*.cfg") if p.name not in FIRST)
    env = dict(os.environ, VKGRAPH_VALIDATION="1",
               VK_LAYER_ENABLES="VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT")
    driver = DRIVER.replace("GRAPHS = None", f"GRAPHS = Path({str(GRAPHS)!r})")
    res = subprocess.run([sys.executable, "-c", driver, *(str(GRAPHS / n) for n in names)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    reports = [json.loads(line[2:]) for line in res.stdout.splitlines()
               if line.startswith("@@")]
    assert res.returncode == 0 and reports, f"exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    control = reports[0]["control"]
    assert any("VUID-VkComputePipelineCreateInfo-layout" in m for m in control), control
    assert any("SYNC-HAZARD-READ-AFTER-WRITE" in m for m in control), control
    runs = {r["graph"]: r for r in reports[1:]}
    assert sorted(runs) == sorted(names), res.stderr
    for name in names:
        r = runs[name]
        assert r["rc"] == 0, f"{name}: exit {r['rc']}\n{res.stderr}"
        assert not r["messages"], f"{name}:\n" + "\n".join(r["messages"][:5])
