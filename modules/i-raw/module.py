"""i-raw: a camera raw file (LibRaw through rawpy) as its normalised mosaic, with the colour
filter array, white balance and camera matrix as the output's metadata "raw" (README.md)."""

from __future__ import annotations

import numpy as np

from vkgraph.pipeline.formats import read_cached
from vkgraph.pipeline.module import Roi
from vkgraph.pipeline.raw import RawImage, read_raw


def give(module, raw: RawImage) -> bool:
    """Host port (`vkgraph.Session.feed`): a RawImage already read, in place of the file.
    True where the graph must be built again: the first one, another mosaic size, or other
    metadata (the pattern and white balance are recorded into the build)."""
    old = module.data.get("given")
    module.data["given"] = raw
    return (not isinstance(old, RawImage) or old.shape != raw.shape
            or old.meta != raw.meta)


def _load(graph, module) -> RawImage:
    given = module.data.get("given")  # a host program's RawImage (give; apps/rawdenoise.py)
    if isinstance(given, RawImage):
        return given
    return read_cached(module.data, "raw", graph.resolve(module.param("filename")), read_raw)


def modify_roi_out(graph, module) -> None:
    raw = _load(graph, module)
    ht, wd = raw.shape
    module.connector("output").roi = Roi(wd, ht)
    graph.meta(module, "output")["raw"] = raw.meta


def read_source(graph, module, connector) -> np.ndarray:
    return _load(graph, module).mosaic[:, :, None]
