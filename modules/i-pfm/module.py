"""i-pfm: read a PFM image (rgb or grey f32), or a `%04d` sequence of them."""

from __future__ import annotations

import numpy as np

from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.formats import fit_channels, frame_name, pfm_info, read_pfm
from vkgraph.pipeline.module import Roi


def _is_sequence(module) -> bool:
    return "%04d" in module.param("filename")


def _path(graph, module):
    name = module.param("filename")
    if _is_sequence(module):
        name = frame_name(name, module.param("startid") + graph.frame)
    return graph.resolve(name)


def modify_roi_out(graph, module) -> None:
    info = pfm_info(_path(graph, module))
    module.connector("output").roi = Roi(info.wd, info.ht)
    # vkdt copies the noise profile into the image metadata; downstream modules find it here
    module.data["noise"] = (module.param("noise a"), module.param("noise b"))


def source_due(graph, module) -> bool:
    return _is_sequence(module)


def read_source(graph, module, connector) -> np.ndarray:
    path = _path(graph, module)
    image = read_pfm(path, finite=True)
    ht, wd = image.shape[:2]
    roi = connector.roi
    if (wd, ht) != (roi.wd, roi.ht):
        raise GraphError(f"image is {wd}x{ht}, expected {roi.wd}x{roi.ht} like the first "
                         "frame (all frames of a sequence must have the same size)",
                         where=str(path))
    return fit_channels(image, connector.nchan)
