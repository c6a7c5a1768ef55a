"""i-array: a source whose image is a numpy array the host program put in
`module.data["image"]` (h, w, c) linear float, instead of a file."""

from __future__ import annotations

import numpy as np

from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.formats import fit_channels
from vkgraph.pipeline.module import Roi


def _image(module) -> np.ndarray:
    image = module.data.get("image")
    if image is None:
        raise GraphError(f"{module}: no image given (module.data['image'])")
    return image


def modify_roi_out(graph, module) -> None:
    ht, wd = _image(module).shape[:2]
    module.connector("output").roi = Roi(wd, ht)


def read_source(graph, module, connector) -> np.ndarray:
    return fit_channels(_image(module), connector.nchan)
