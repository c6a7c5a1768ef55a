"""`vkgraph gradcheck` end to end on a small static input (CPU driver)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from pipeline.formats import write_pfm

ROOT = Path(__file__).resolve().parent.parent


def test_gradcheck_passes_on_a_sample(tmp_path):
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
        "connect:kpn-t:01:output:display:main:input"]))
    res = subprocess.run([sys.executable, "-m", "cli.main", "gradcheck", "-g", str(cfg),
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
    res = subprocess.run([sys.executable, "-m", "cli.main", "gradcheck", "-g", str(cfg)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 2
    assert "static input" in res.stderr
