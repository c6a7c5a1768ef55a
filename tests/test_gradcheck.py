"""`vkgraph gradcheck` end to end on a small static input (CPU driver)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vkgraph.pipeline.formats import write_pfm

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("variant", [
    [],  # vkdt's: plain taps, SMAPE, |D| features
    # the photo recipe's: noise-normalised features with the bias, softmax taps with the band
    # gain (float64 softmax and sigmoid in the precise forward), L1
    ["param:kpn-t:01:feat:1", "param:kpn-t:01:apply:2", "param:kpn-t:01:loss:2",
     "connect:cnngenin:01:noiseab:kpn-t:01:noiseab"],
])
def test_gradcheck_passes_on_a_sample(tmp_path, variant):
    rng = np.random.default_rng(2)
    yy, xx = np.mgrid[0:24, 0:24]
    clean = np.stack([0.5 + 0.3 * np.sin(xx / 2.5 + c) * np.cos(yy / 3.0) for c in range(3)], -1)
    write_pfm(tmp_path / "ref.pfm", clean.astype(np.float32))
    write_pfm(tmp_path / "noisy.pfm",
              (clean + 0.1 * rng.standard_normal(clean.shape)).astype(np.float32))
    cfg = tmp_path / "gc.cfg"
    cfg.write_text("\n".join([
        "frames:1", "module:i-pfm:main", "module:i-pfm:ref", "module:cnngenin:01",
        "module:kpn-t:01", "module:display:main",
        "param:i-pfm:main:filename:noisy.pfm", "param:i-pfm:ref:filename:ref.pfm",
        "param:cnngenin:01:generate:0", "param:cnngenin:01:tiles:0",
        "param:kpn-t:01:init:1", "param:kpn-t:01:levels:2",
        "connect:i-pfm:main:output:cnngenin:01:imgi", "connect:i-pfm:ref:output:cnngenin:01:refi",
        "connect:cnngenin:01:imgo:kpn-t:01:input", "connect:cnngenin:01:refo:kpn-t:01:ref",
        "connect:kpn-t:01:output:display:main:input", *variant]))
    res = subprocess.run([sys.executable, "-m", "vkgraph", "gradcheck", "-g", str(cfg),
                          "--count", "14", "--image", str(tmp_path / "gc.pfm")],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "PASS" in res.stdout
    rows = [ln for ln in res.stdout.splitlines() if ln[:7].strip().isdigit()]
    assert len(rows) == 14
    assert (tmp_path / "gc.pfm").exists()


def test_gradcheck_refuses_a_changing_input(tmp_path):
    clean = np.full((16, 16, 3), 0.5, np.float32)
    write_pfm(tmp_path / "ref.pfm", clean)
    cfg = tmp_path / "gc.cfg"
    cfg.write_text("\n".join([
        "module:i-pfm:main", "module:cnngenin:01", "module:kpn-t:01", "module:display:main",
        "param:i-pfm:main:filename:ref.pfm", "param:cnngenin:01:generate:2",
        "param:cnngenin:01:tiles:0", "param:kpn-t:01:levels:1",
        "connect:i-pfm:main:output:cnngenin:01:imgi", "connect:i-pfm:main:output:cnngenin:01:refi",
        "connect:cnngenin:01:imgo:kpn-t:01:input", "connect:cnngenin:01:refo:kpn-t:01:ref",
        "connect:kpn-t:01:output:display:main:input"]))
    res = subprocess.run([sys.executable, "-m", "vkgraph", "gradcheck", "-g", str(cfg)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 2
    assert "static input" in res.stderr


@pytest.mark.parametrize("enc,extra", [
    ("hashgrid", ["param:mlp-t:01:log2size:6", "param:mlp-t:01:baseres:3"]),
    ("permuto", ["param:mlp-t:01:dims:3", "param:mlp-t:01:slices:2",
                 "param:mlp-t:01:baseres:2"]),
])
def test_gradcheck_covers_encoding_tables(tmp_path, enc, extra):
    """Table entries are params like the weights: the check samples every table level too
    (mostly entries the batch touches) and passes."""
    yy, xx = np.mgrid[0:32, 0:16]
    img = np.stack([0.5 + 0.3 * np.sin(xx / 2.5 + c) * np.cos(yy / 3.0) for c in range(3)], -1)
    write_pfm(tmp_path / "t.pfm", img.astype(np.float32))
    cfg = tmp_path / "gc.cfg"
    cfg.write_text("\n".join([
        "frames:1", "module:i-pfm:main", "module:mlp-t:01", "module:display:main",
        "param:i-pfm:main:filename:t.pfm", f"param:mlp-t:01:enc:{enc}",
        "param:mlp-t:01:levels:2", "param:mlp-t:01:features:2", "param:mlp-t:01:perlevel:3",
        "param:mlp-t:01:width:16", "param:mlp-t:01:depth:1", "param:mlp-t:01:act:tanh",
        "param:mlp-t:01:batch:64", "param:mlp-t:01:resample:0", "param:mlp-t:01:preview:0",
        *extra,
        "connect:i-pfm:main:output:mlp-t:01:target",
        "connect:mlp-t:01:output:display:main:input"]))
    # --warmup: a few Adam steps (talpha 0.05) move the table entries off their 1e-4 start
    res = subprocess.run([sys.executable, "-m", "vkgraph", "gradcheck", "-g", str(cfg),
                          "--count", "16", "--warmup", "3", "--config",
                          "param:mlp-t:01:talpha:0.05"],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "PASS" in res.stdout
    rows = [ln.split() for ln in res.stdout.splitlines() if ln[:7].strip().isdigit()]
    assert {r[1] for r in rows} == {"0", "1", "t0", "t1"}
    assert sum(float(r[4]) != 0 for r in rows if r[1].startswith("t")) >= 4
