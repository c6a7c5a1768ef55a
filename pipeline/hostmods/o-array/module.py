"""o-array: a sink that keeps what reaches it for the host program (`take`, which
`vkgraph.Session.take` calls), instead of writing a file."""

from __future__ import annotations


def write_sink(graph, module, connector, data) -> None:
    module.data["image"] = data


def take(module):
    """Host port: what reached the sink at its last download, handed over once (None until
    a frame was downloaded): an image as (h, w, 4) float32, a storage buffer as its
    elements (1-D, in its format)."""
    return module.data.pop("image", None)
