"""Shared test fixtures: one Vulkan device per test session (closed at the end), and a
helper to build a graph from cfg lines."""

from __future__ import annotations

import pytest

from pipeline.cfg import apply_line
from pipeline.graph import Graph


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
