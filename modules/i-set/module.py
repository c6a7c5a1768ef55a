"""i-set: a training set of images (folder, glob or list file) as one storage buffer.

The images are decoded to linear rgba f32 (as i-img/i-pfm do) and packed into one buffer of
vec4s, so `cnngenin` can cut tiles from any of them on the device:

    vec4 0          (n, 0, 0, 0)                  uint32 bits in the float slots
    vec4 1 + k      (offset_k, wd_k, ht_k, 0)     image k's first pixel (a vec4 index)
    vec4 offset_k   the pixels of image k, row-major, wd_k x ht_k

The set is read once per build (and cached while its files are unchanged). A set larger
than `maxpix` (0: what one storage buffer of the device can span) is downscaled, every
image by the same factor, with an exact box filter (each output pixel the mean of the input
area it covers), and one line says so.
"""

from __future__ import annotations

import logging
import math
import os

import numpy as np

from vkgraph.pipeline.datasets import image_set
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.formats import image_size, read_image
from vkgraph.pipeline.module import Roi

MAX_PIXELS = 1 << 28  # 4 GiB of f32 rgba: more does not fit one storage buffer binding
BYTES_PER_PIXEL = 16  # rgba f32
ROWS = 256  # rows resampled at a time (the float64 sums of a whole photo would be large)

log = logging.getLogger("vkgraph")


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


def budget(graph, module, nimages: int) -> tuple[int, str]:
    """(the most pixels the set may hold, where that number comes from): `maxpix`, or
    with 0 what one storage buffer of the device can span (less the header)."""
    given = int(module.param("maxpix"))
    info = graph.capabilities
    span = int(getattr(info, "max_storage_range", 0) or 0) // BYTES_PER_PIXEL - 1 - nimages
    if given:
        if 0 < span < given:
            raise GraphError(f"{module}: maxpix {given} is more than one storage buffer of "
                             f"{info.name} holds ({span} pixels of rgba f32); set at most that, "
                             "or 0 to downscale to it")
        return given, f"maxpix is {given}"
    if span > 0:
        mib = info.max_storage_range / (1 << 20)
        return (min(span, MAX_PIXELS), f"a storage buffer of the device spans {mib:.0f} MiB; "
                "param maxpix sets another limit")
    return MAX_PIXELS, "4 GiB of rgba f32; param maxpix sets another limit"


def _named(module, path, read):
    """read(path), a reader's own error made one naming the file."""
    try:
        return read(path)
    except GraphError:
        raise
    except Exception as e:
        raise GraphError(f"{module}: cannot read '{path}': {str(e)[:200]}") from e


def _read(module, path) -> np.ndarray:
    return _named(module, path, lambda p: read_image(p, finite=True))


def pixel_count(module, path) -> int:
    """wd * ht of an image, from its header (formats.image_size: no decoding)."""
    wd, ht = _named(module, path, image_size)
    return wd * ht


def _box_axis(im: np.ndarray, n: int, axis: int) -> np.ndarray:
    """im resampled to n samples along axis (n <= its length) with a box filter: output j is
    the mean of the input over [j s, (j + 1) s), s = length / n, partial pixels weighted by
    their overlap (the integral of the piecewise-constant signal, differenced)."""
    m = im.shape[axis]
    x = np.arange(n + 1) * (m / n)
    i = np.minimum(np.floor(x).astype(np.int64), m - 1)
    frac = (x - i).reshape([-1 if a == axis else 1 for a in range(im.ndim)])
    cum = np.cumsum(im, axis=axis, dtype=np.float64)
    cum = np.concatenate([np.zeros_like(np.take(cum, [0], axis=axis)), cum], axis=axis)
    F = np.take(cum, i, axis=axis) + frac * np.take(im, i, axis=axis)
    return (np.diff(F, axis=axis) * (n / m)).astype(np.float32)


def downscale(im: np.ndarray, wd: int, ht: int) -> np.ndarray:
    """im (h, w, c) box-filtered to (ht, wd, c), a band of rows at a time."""
    rows = [_box_axis(im[y:y + ROWS], wd, 1) for y in range(0, im.shape[0], ROWS)]
    return _box_axis(np.concatenate(rows, axis=0), ht, 0)


def scaled_size(wd: int, ht: int, s: float) -> tuple[int, int]:
    return max(1, math.floor(wd * s)), max(1, math.floor(ht * s))


def load(graph, module) -> np.ndarray:
    """The packed set, cached in module.data while its files and `maxpix` are unchanged."""
    paths = files(graph, module)
    limit, why = budget(graph, module, len(paths))
    key = (_key(paths), limit)
    cached = module.data.get("set")
    if cached is not None and cached[0] == key:
        return cached[1]
    total = sum(pixel_count(module, p) for p in paths)
    # one factor for every image (their relative scale kept); floor() keeps the sum <= limit
    s = 1.0 if total <= limit else math.sqrt(limit / total)
    images, kept = [], 0
    for path in paths:
        im = np.ascontiguousarray(_read(module, path)[:, :, :4], np.float32)
        if s < 1.0:
            im = downscale(im, *scaled_size(im.shape[1], im.shape[0], s))
        images.append(im)
        kept += im.shape[0] * im.shape[1]
    if kept > limit:  # e.g. many images smaller than 1 / s pixels: they keep one pixel
        raise GraphError(f"{module}: the set holds {kept} pixels after downscaling, more than "
                         f"{limit} ({why}); use fewer images")
    if s < 1.0:
        log.warning("%s: %d images of %.3g MP in all, downscaled by %.3f to %.3g MP (%s)",
                    module, len(paths), total / 1e6, s, kept / 1e6, why)
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
