"""i-bytes: a source whose data is a numpy array of 8-bit pixels the host program gives it
(`give`, which `vkgraph.Session.feed` calls): (h, w, 4) uint8, uploaded as it is in memory,
one uint32 a pixel (the first channel in the low byte on the little-endian hosts and GPUs
this runs on). `srgb-in` reads it as packed sRGB; the 8 bits travel instead of i-array's 32-bit
floats (a quarter of the upload)."""

from __future__ import annotations

import numpy as np

from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.hostports import held, held_roi, hold

modify_roi_out = held_roi


def give(module, image: np.ndarray) -> bool:
    """Host port: the pixels of the next frames. True where the graph's sizes change with
    them (the first image, or one of another size: the graph is built again)."""
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 4:
        raise GraphError(f"{module}: expected (h, w, 4) uint8 pixels, got {image.dtype} "
                         f"{image.shape}")
    return hold(module, image)


def read_source(graph, module, connector) -> np.ndarray:
    return np.ascontiguousarray(held(module)).view(np.uint32).reshape(-1)
