"""Write a small CFA DNG that LibRaw reads: the raw files of the tests and of
bench/raw_quality.py (no camera files ship anywhere they could be taken from).

    write_dng(path, counts, cfa=((0, 1), (1, 2)), black=(512,) * 4, white=4095,
              color_matrix=XYZ->camera 3x3, neutral=(0.5, 1, 0.7), iso=800)

`counts` is the (h, w) uint16 mosaic as the sensor gives it (black level included). The
file is one uncompressed IFD through `tifffile` (the `dev` and `bench` extras) with the DNG
tags LibRaw needs: DNGVersion, UniqueCameraModel, Make, Model, CFARepeatPatternDim and
CFAPattern (0 R, 1 G, 2 B), BlackLevelRepeatDim and BlackLevel (one per photosite of the
repeat, row by row), WhiteLevel, ColorMatrix1 (XYZ -> camera, D65) and AsShotNeutral
(camera rgb of white: the white-balance multipliers are its reciprocals). The ISO is an
EXIF ISOSpeedRatings in an EXIF IFD appended after tifffile has written the file (tifffile
writes no EXIF pointer itself: a placeholder tag is written and renamed in place).
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from ..pipeline.formats import atomic_write
from ..pipeline.raw import pattern_plane

_EXIF_IFD = 34665
_PLACEHOLDER = 34666  # sorts where the EXIF pointer belongs; renamed after writing


def _rationals(values, den: int = 1_000_000) -> tuple[int, ...]:
    out = []
    for v in values:
        out += [int(round(float(v) * den)), den]
    return tuple(out)


def dng_bytes(counts: np.ndarray, cfa, black, white: int, color_matrix, neutral,
              make: str = "vkgraph", model: str = "synthetic", iso: int = 0,
              active_area: tuple[int, int, int, int] | None = None, orientation: int = 1,
              taken: str = "") -> bytes:
    """The file's bytes (module docstring); active_area (top, left, bottom, right): the
    photosites that see light, the rest a masked margin (the CFA pattern starts at its
    top-left); orientation: the EXIF Orientation (1..8) the camera recorded; taken: its
    DateTime, "YYYY:MM:DD HH:MM:SS"."""
    import io

    import tifffile

    counts = np.ascontiguousarray(counts, np.uint16)
    cfa = np.asarray(cfa, np.uint8)
    p = cfa.shape[0]
    black = np.broadcast_to(np.asarray(black, np.float64).ravel(), (p * p,)) if np.size(
        black) in (1, p * p) else None
    if black is None or cfa.shape != (p, p):
        raise ValueError("cfa must be P x P and black one value or one per photosite of it")
    tags = [
        (50706, "B", 4, (1, 4, 0, 0), True),  # DNGVersion
        (50707, "B", 4, (1, 1, 0, 0), True),  # DNGBackwardVersion
        (271, "s", 0, make, True),
        (272, "s", 0, model, True),
        (50708, "s", 0, f"{make} {model}", True),  # UniqueCameraModel
        (33421, "H", 2, (p, p), True),  # CFARepeatPatternDim
        (33422, "B", p * p, tuple(int(c) for c in cfa.ravel()), True),  # CFAPattern
        (50710, "B", 3, (0, 1, 2), True),  # CFAPlaneColor
        (50711, "H", 1, 1, True),  # CFALayout: rectangular
        (50713, "H", 2, (p, p), True),  # BlackLevelRepeatDim
        (50714, "2I", p * p, _rationals(black, 100), True),  # BlackLevel
        (50717, "I", 1, int(white), True),  # WhiteLevel
        (50721, "2i", 9, _rationals(np.ravel(color_matrix)), True),  # ColorMatrix1
        (50728, "2I", 3, _rationals(neutral), True),  # AsShotNeutral
        (50778, "H", 1, 21, True),  # CalibrationIlluminant1: D65
    ]
    if active_area is not None:
        tags.append((50829, "I", 4, tuple(int(v) for v in active_area), True))  # ActiveArea
    if orientation != 1:
        tags.append((274, "H", 1, int(orientation), True))  # Orientation
    if taken:
        tags.append((306, "s", 0, taken, True))  # DateTime
    if iso:
        tags.append((_PLACEHOLDER, "I", 1, 0, True))
    buf = io.BytesIO()
    with tifffile.TiffWriter(buf, byteorder="<") as tw:  # into memory: atomic_write writes
        tw.write(counts, photometric=32803, extratags=tags, subfiletype=0, compression=None,
                 metadata=None)
    data = bytearray(buf.getvalue())
    if iso:
        buf.seek(0)
        with tifffile.TiffFile(buf) as tf:
            tag = tf.pages[0].tags[_PLACEHOLDER]
            entry, value = tag.offset, tag.valueoffset
        pos = len(data) + len(data) % 2
        data += b"\0" * (pos - len(data))
        # one entry: ISOSpeedRatings (34855), SHORT, 1 value; next IFD 0
        data += struct.pack("<H", 1) + struct.pack("<HHIHH", 34855, 3, 1, int(iso), 0)
        data += struct.pack("<I", 0)
        data[entry:entry + 2] = struct.pack("<H", _EXIF_IFD)
        data[value:value + 4] = struct.pack("<I", pos)
    return bytes(data)


def write_dng(path, counts, cfa, black, white, color_matrix, neutral, make="vkgraph",
              model="synthetic", iso=0, active_area=None, orientation=1, taken="") -> Path:
    atomic_write(path, dng_bytes(counts, cfa, black, white, color_matrix, neutral, make,
                                 model, iso, active_area, orientation, taken))
    return Path(path)


def mosaic_counts(mosaic: np.ndarray, black, white: int) -> np.ndarray:
    """A normalised mosaic (value in [0, 1] above black) as sensor counts: rounded, clipped
    to [0, white]; black is one level or a P x P tile of levels."""
    ht, wd = mosaic.shape
    blk = np.asarray(black, np.float64)
    if blk.ndim == 2:
        blk = pattern_plane(blk, ht, wd)
    counts = np.rint(blk + np.asarray(mosaic, np.float64) * (white - blk))
    return np.clip(counts, 0, white).astype(np.uint16)


# A made-up camera for the synthetic raw files: ColorMatrix1 (XYZ -> camera rgb, D65) and
# the camera rgb of white (AsShotNeutral); its white balance is (1 / 0.5, 1, 1 / 0.65)
CAMERA_MATRIX = ((0.72, -0.18, -0.06), (-0.42, 1.22, 0.22), (-0.08, 0.18, 0.68))
CAMERA_NEUTRAL = (0.5, 1.0, 0.65)
BAYER = {"RGGB": ((0, 1), (1, 2)), "GRBG": ((1, 0), (2, 1)), "GBRG": ((1, 2), (0, 1)),
         "BGGR": ((2, 1), (1, 0))}
XTRANS = ((1, 1, 0, 1, 1, 2), (1, 1, 2, 1, 1, 0), (2, 0, 1, 0, 2, 1),
          (1, 1, 2, 1, 1, 0), (1, 1, 0, 1, 1, 2), (0, 2, 1, 2, 0, 1))


def camera_from_rgb(color_matrix=CAMERA_MATRIX, neutral=CAMERA_NEUTRAL) -> np.ndarray:
    """3 x 3: linear Rec.709 -> the raw camera rgb a DNG with this ColorMatrix1 and
    AsShotNeutral describes. LibRaw (as Adobe's DNG reading) normalises the rows of
    ColorMatrix1 x XYZ_FROM_RGB to sum 1 (white -> camera (1, 1, 1) after balance) and
    inverts that to its rgb_cam; the raw values of white are the neutral."""
    from ..pipeline.raw import XYZ_FROM_RGB

    cam_rgb = np.asarray(color_matrix, np.float64) @ XYZ_FROM_RGB
    cam_rgb /= cam_rgb.sum(axis=1, keepdims=True)
    n = np.asarray(neutral, np.float64)
    return np.diag(n / n[1]) @ cam_rgb


def camera_mosaic(rgb: np.ndarray, cfa, color_matrix=CAMERA_MATRIX,
                  neutral=CAMERA_NEUTRAL) -> np.ndarray:
    """(h, w) float64: what the made-up camera's sensor records of a linear Rec.709 image,
    each photosite its colour's value."""
    cam = np.einsum("ij,hwj->hwi", camera_from_rgb(color_matrix, neutral),
                    np.asarray(rgb, np.float64)[..., :3])
    ht, wd = cam.shape[:2]
    colours = pattern_plane(np.asarray(cfa, np.int64), ht, wd)
    return np.take_along_axis(cam, colours[..., None], axis=2)[..., 0]
