"""i-array: a source whose image is a numpy array the host program gives it (`give`, which
`vkgraph.Session.feed` calls), (h, w, c) linear float, instead of a file."""

from __future__ import annotations

import numpy as np

from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.formats import fit_channels
from vkgraph.pipeline.module import Roi


def give(module, image: np.ndarray) -> bool:
    """Host port: the image of the next frames. True where the graph's sizes change with it
    (the first image, or one of another size: the graph is built again)."""
    old = module.data.get("image")
    module.data["image"] = image
    return old is None or old.shape[:2] != image.shape[:2]


def _image(module) -> np.ndarray:
    image = module.data.get("image")
    if image is None:
        raise GraphError(f"{module}: no image given (Session.feed)")
    return image


def modify_roi_out(graph, module) -> None:
    ht, wd = _image(module).shape[:2]
    module.connector("output").roi = Roi(wd, ht)


def read_source(graph, module, connector) -> np.ndarray:
    return fit_channels(_image(module), connector.nchan)
