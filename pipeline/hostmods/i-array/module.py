"""i-array: a source whose image is a numpy array the host program gives it (`give`, which
`vkgraph.Session.feed` calls), (h, w, c) linear float, instead of a file."""

from __future__ import annotations

import numpy as np

from vkgraph.pipeline.formats import fit_channels
from vkgraph.pipeline.hostports import held, held_roi, hold

modify_roi_out = held_roi


def give(module, image: np.ndarray) -> bool:
    """Host port: the image of the next frames. True where the graph's sizes change with it
    (the first image, or one of another size: the graph is built again)."""
    return hold(module, image)


def read_source(graph, module, connector) -> np.ndarray:
    return fit_channels(held(module), connector.nchan)
