"""i-img: read a PNG/JPG (sRGB decoded to linear), OpenEXR or PFM image as linear rgba f32."""

from __future__ import annotations

import os

import numpy as np

from pipeline.formats import fit_channels, read_image
from pipeline.module import Roi


def _load(graph, module) -> np.ndarray:
    """The decoded image, cached between the ROI pass and the upload while the file is
    unchanged."""
    path = graph.resolve(module.param("filename"))
    try:
        st = os.stat(path)
        key = (str(path), st.st_mtime_ns, st.st_size)
    except OSError:
        key = None  # read_image names the problem
    cached = module.data.get("image")
    if key is not None and cached is not None and cached[0] == key:
        return cached[1]
    image = read_image(path, finite=True)
    module.data["image"] = (key, image)
    return image


def modify_roi_out(graph, module) -> None:
    ht, wd = _load(graph, module).shape[:2]
    module.connector("output").roi = Roi(wd, ht)


def read_source(graph, module, connector) -> np.ndarray:
    return fit_channels(_load(graph, module), connector.nchan)
