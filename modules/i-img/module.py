"""i-img: read a PNG/JPG (sRGB decoded to linear), OpenEXR or PFM image as linear rgba f32."""

from __future__ import annotations

import numpy as np

from vkgraph.pipeline.formats import fit_channels, read_cached, read_image
from vkgraph.pipeline.module import Roi


def _load(graph, module) -> np.ndarray:
    """The decoded image, cached between the ROI pass and the upload."""
    return read_cached(module.data, "image", graph.resolve(module.param("filename")),
                       lambda path: read_image(path, finite=True))


def modify_roi_out(graph, module) -> None:
    ht, wd = _load(graph, module).shape[:2]
    module.connector("output").roi = Roi(wd, ht)


def read_source(graph, module, connector) -> np.ndarray:
    return fit_channels(_load(graph, module), connector.nchan)
