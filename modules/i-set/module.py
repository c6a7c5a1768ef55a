"""i-set: a training set of images (folder, glob or list file) as one storage buffer.

The images are decoded to linear rgba f32 (as i-img/i-pfm do) and packed into one buffer of
vec4s, so `cnngenin` can cut tiles from any of them on the device:

    vec4 0          (n, 0, 0, 0)                  uint32 bits in the float slots
    vec4 1 + k      (offset_k, wd_k, ht_k, 0)     image k's first pixel (a vec4 index)
    vec4 offset_k   the pixels of image k, row-major, wd_k x ht_k

The set is read once per build (and cached while its files are unchanged).
"""

from __future__ import annotations

import os

import numpy as np

from vkgraph.pipeline.datasets import image_set
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.formats import read_image
from vkgraph.pipeline.module import Roi

MAX_PIXELS = 1 << 28  # 4 GiB of f32 rgba: more does not fit one storage buffer binding


def files(graph, module) -> list:
    name = module.param("filename")
    return image_set(name, graph.resolve)


def _key(paths) -> tuple:
    out = []
    for p in paths:
        st = os.stat(p)
        out.append((str(p), st.st_mtime_ns, st.st_size))
    return tuple(out)


def pack(images: list[np.ndarray]) -> np.ndarray:
    """The set's buffer (see the module docstring) as float32 (its header as uint32 bits)."""
    n = len(images)
    header = np.zeros((1 + n, 4), np.uint32)
    header[0, 0] = n
    offset = 1 + n
    for k, im in enumerate(images):
        ht, wd = im.shape[:2]
        header[1 + k, :3] = (offset, wd, ht)
        offset += wd * ht
    out = np.empty((offset, 4), np.float32)
    out[: 1 + n] = header.view(np.float32)
    for k, im in enumerate(images):
        start = int(header[1 + k, 0])
        out[start:start + im.shape[0] * im.shape[1]] = im.reshape(-1, 4)
    return out.reshape(-1)


def load(graph, module) -> np.ndarray:
    """The packed set, cached in module.data while its files are unchanged."""
    paths = files(graph, module)
    key = _key(paths)
    cached = module.data.get("set")
    if cached is not None and cached[0] == key:
        return cached[1]
    images, total = [], 0
    for path in paths:
        try:
            im = read_image(path, finite=True)
        except GraphError:
            raise
        except Exception as e:  # a reader's own error: name the file
            raise GraphError(f"{module}: cannot read '{path}': {str(e)[:200]}") from e
        total += im.shape[0] * im.shape[1]
        if total > MAX_PIXELS:
            raise GraphError(f"{module}: the set holds more than {MAX_PIXELS} pixels "
                             "(4 GiB); use fewer or smaller images")
        images.append(np.ascontiguousarray(im[:, :, :4], np.float32))
    data = pack(images)
    module.data["set"] = (key, data)
    module.data["sizes"] = [(im.shape[1], im.shape[0]) for im in images]
    module.data["files"] = paths
    return data


def modify_roi_out(graph, module) -> None:
    data = load(graph, module)
    module.connector("output").roi = Roi(data.size, 1)


def read_source(graph, module, connector) -> np.ndarray:
    return load(graph, module)
