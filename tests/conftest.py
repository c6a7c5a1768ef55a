"""Shared test fixtures: one Vulkan device per test session (closed at the end), and a
helper to build a graph from cfg lines."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pipeline.cfg import apply_line
from pipeline.graph import Graph

# The suite tests the portable fp32 kpn-t kernels against fp32 tolerances, also on a GPU where
# the default would be the fused f16 ones; tests/test_kpn_coopmat.py picks its variants itself.
# (VKGRAPH_KPN_MLP=auto pytest runs everything else on the default variant.)
os.environ.setdefault("VKGRAPH_KPN_MLP", "portable")


@pytest.fixture(scope="session")
def device():
    from pipeline.vk import Device

    dev = Device.open()
    yield dev
    dev.close()


def graph_from_lines(text: str, registry=None) -> Graph:
    """A module graph from cfg lines (one per line), as `vkgraph cli --config` applies them."""
    g = Graph(registry=registry) if registry is not None else Graph()
    for i, line in enumerate(text.strip().splitlines(), 1):
        apply_line(g, line.strip(), f"test:{i}")
    return g


ROOT = Path(__file__).resolve().parent.parent
# `vkgraph` as a subprocess: the module, so tests need no console script on PATH
VKGRAPH = [sys.executable, "-m", "cli.main"]


def vkgraph_env(env: dict | None = None) -> dict:
    """An environment in which `python -m cli.main` finds the package from any directory."""
    out = dict(os.environ if env is None else env)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), out.get("PYTHONPATH")) if p)
    return out
