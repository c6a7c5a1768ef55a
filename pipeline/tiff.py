"""16-bit rgb TIFF, sRGB-encoded: what `vkgraph denoise photo.dng -o photo.tif` writes.

One uncompressed strip, little-endian, baseline tags only (width, height, 16 bits x 3
samples, no compression, rgb, strip offset and size, rows per strip, chunky planes), so any
reader takes it. Written atomically (formats.atomic_write).
"""

from __future__ import annotations

import struct

import numpy as np

from .errors import GraphError
from .formats import PathLike, atomic_write, linear_to_srgb

_SHORT, _LONG = 3, 4


def tiff16_bytes(array) -> bytes:
    """Linear float (h, w, >= 3) -> the bytes of a 16-bit sRGB TIFF (alpha dropped)."""
    arr = np.asarray(array)
    if arr.ndim != 3 or arr.shape[2] < 3 or min(arr.shape[:2]) < 1:
        raise GraphError(f"TIFF: expected an rgb image (h, w, 3), got shape {arr.shape}")
    ht, wd = arr.shape[:2]
    pixels = np.rint(linear_to_srgb(arr[..., :3]) * 65535.0).astype("<u2").tobytes()
    if len(pixels) >= 1 << 32:
        raise GraphError(f"TIFF: a {wd}x{ht} image is larger than a TIFF holds (4 GiB)")
    data_at = 8
    ifd_at = data_at + len(pixels) + len(pixels) % 2
    tags = [(256, _LONG, 1, wd), (257, _LONG, 1, ht), (258, _SHORT, 3, None),
            (259, _SHORT, 1, 1), (262, _SHORT, 1, 2), (273, _LONG, 1, data_at),
            (277, _SHORT, 1, 3), (278, _LONG, 1, ht), (279, _LONG, 1, len(pixels)),
            (284, _SHORT, 1, 1)]
    bits_at = ifd_at + 2 + 12 * len(tags) + 4  # BitsPerSample's 3 values follow the IFD
    ifd = struct.pack("<H", len(tags))
    for tag, kind, count, value in tags:
        if value is None:
            ifd += struct.pack("<HHII", tag, kind, count, bits_at)
        elif kind == _SHORT:
            ifd += struct.pack("<HHIHH", tag, kind, count, value, 0)
        else:
            ifd += struct.pack("<HHII", tag, kind, count, value)
    ifd += struct.pack("<I", 0) + struct.pack("<3H", 16, 16, 16)
    pad = b"\0" * (ifd_at - data_at - len(pixels))
    return b"II*\0" + struct.pack("<I", ifd_at) + pixels + pad + ifd


def write_tiff16(path: PathLike, array) -> None:
    atomic_write(path, tiff16_bytes(array))
