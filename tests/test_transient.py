"""Transient builds (`Session(..., transient=True)`, pipeline/buffers.py): node outputs whose
lifetimes in a frame do not overlap share memory. `vkgraph denoise` runs its networks so; the
result must be the bits of the build where every output has its own buffer, and no two
outputs that live at once may share."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import vkgraph.api as api
from vkgraph.apps.denoise import Denoiser

WEIGHTS = Path(__file__).resolve().parent.parent / "graphs" / "weights"
SESSION_INIT = api.Session.__init__


def lifetimes(memory) -> dict[tuple[int, str], tuple[int, int]]:
    """(first, last) schedule index of each node output: its node, its last reader."""
    sched = memory.schedule
    span = {}
    for i, node in enumerate(sched):
        for c in node.connectors:
            if c.is_output:
                span.setdefault((id(node), c.name), [i, i])
    for i, node in enumerate(sched):
        for c in node.connectors:
            if c.is_input and c.source is not None:
                key = (id(c.source[0]), c.source[1])
                span[key][1] = max(span[key][1], i)
    return {k: tuple(v) for k, v in span.items()}


def run(device, weights: str, image, transient: bool, monkeypatch):
    def session(self, *a, transient=False, _set=transient, **k):
        SESSION_INIT(self, *a, transient=_set, **k)

    monkeypatch.setattr(api.Session, "__init__", session)
    den = Denoiser(device, WEIGHTS / weights)
    out = np.array(den(image, 2e5, 20.0))
    memory = next(iter(den.sessions.values())).build.memory
    unique = {id(b): b for bufs in memory.buffers.values() for b in bufs}
    nbytes = sum(b.nbytes for b in unique.values())
    return out, memory, nbytes, den


@pytest.mark.parametrize("weights", ["unet-photo.lut", "unet-raw.lut", "kpn-photo-nl.lut",
                                     "kpn-photo.lut"])
def test_transient_build_shares_memory_and_gives_the_same_bits(device, weights, monkeypatch):
    rng = np.random.default_rng(3)
    image = np.clip(0.4 + 0.1 * rng.standard_normal((48, 64, 3)), 0, 1).astype(np.float32)
    whole, _, whole_bytes, den = run(device, weights, image, False, monkeypatch)
    den.close()
    shared, memory, shared_bytes, den = run(device, weights, image, True, monkeypatch)
    try:
        np.testing.assert_array_equal(shared, whole)
        assert memory.shared  # something shares
        assert shared_bytes < 0.9 * whole_bytes
        span = lifetimes(memory)
        by_slot: dict[int, list] = {}
        for key, slot in memory.shared.items():
            by_slot.setdefault(slot, []).append(span[key])
        for spans in by_slot.values():  # the outputs of one slot live one after another
            spans.sort()
            for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
                assert end < start
        for node in memory.schedule:  # sources' outputs and what sinks read keep their own
            for c in node.connectors:
                if node.kernel is None and c.is_output:
                    assert (id(node), c.name) not in memory.shared
                if node.kernel is None and c.is_input and c.source is not None:
                    assert (id(c.source[0]), c.source[1]) not in memory.shared
        for key, slot in memory.shared.items():  # a slot holds the largest of its outputs
            node = next(n for n in memory.schedule if id(n) == key[0])
            assert memory.shared_sizes[slot] >= node.connector(key[1]).nbytes()
    finally:
        den.close()
