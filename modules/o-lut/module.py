"""o-lut: write the input (image or ssbo) as a vkdt `<filename>.lut`, with the trailing text
its writer published (the input's metadata "text")."""

from __future__ import annotations

import numpy as np

from vkgraph.pipeline.formats import output_path, write_lut

_FROM_DTYPE = {np.dtype(np.float16): "f16", np.dtype(np.uint8): "ui8"}


def write_sink(graph, module, connector, data) -> None:
    data = np.asarray(data)
    fmt = connector.format
    if fmt not in ("f16", "f32", "ui8"):  # unresolved wildcard: go by the data
        fmt = _FROM_DTYPE.get(data.dtype, "f32")
    if connector.is_ssbo:
        channels = 1
        wd, ht = connector.roi.wd, connector.roi.ht
        if wd * ht != data.size:
            wd, ht = data.size, 1
    else:
        if data.ndim == 2:
            data = data[:, :, None]
        ht, wd, channels = data.shape
    write_lut(output_path(module.param("filename"), "lut", graph.frame), data, channels, fmt,
              wd, ht, ssbo=connector.is_ssbo, text=graph.meta(module, "input").get("text"))
