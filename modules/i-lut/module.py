"""i-lut: read a vkdt `.lut` file as an image (r/rg/rgba) or a storage buffer (ssbo)."""

from __future__ import annotations

import numpy as np

from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.formats import fit_channels, read_cached, read_lut
from vkgraph.pipeline.module import Roi

_CHAN = {1: "r", 2: "rg", 3: "rgba", 4: "rgba"}


def _load(graph, module):
    """(data, header, text), cached between the ROI pass and the upload."""
    return read_cached(module.data, "lut", graph.resolve(module.param("filename")),
                       lambda path: read_lut(path, finite=True))


def modify_roi_out(graph, module) -> None:
    _, info, text = _load(graph, module)
    out = module.connector("output")
    out.format = info.format
    if info.ssbo:
        # a storage buffer of wd*ht elements; several channels are laid out side by side
        out.chan = "ssbo"
        out.roi = Roi(info.wd * info.channels, info.ht)
    elif info.channels not in _CHAN:  # an image wire holds 4; keeping 4 would lose the rest
        raise GraphError(f"{info.channels} channels of image data: an image connector holds "
                         "at most 4 (r, rg, rgba), so the others would be lost (a .lut of "
                         "ssbo data, datatype +16, is read whole)",
                         where=str(graph.resolve(module.param("filename"))))
    else:
        out.chan = _CHAN[info.channels]
        out.roi = Roi(info.wd, info.ht)
    if text is not None:
        out.meta["text"] = text  # for readers: kpn matches it, o-lut writes it back


def read_source(graph, module, connector) -> np.ndarray:
    data, info, _ = _load(graph, module)
    if connector.is_ssbo:
        return np.ascontiguousarray(data.reshape(-1))
    image = data.astype(np.float32)
    if info.format == "ui8":
        image /= 255.0  # unorm
    return fit_channels(image, connector.nchan)
