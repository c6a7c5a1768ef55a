"""Camera raw files through LibRaw (PyPI `rawpy`, the optional extra `vkgraph[raw]`).

    raw = read_raw("photo.dng")
    raw.mosaic          # (h, w) float32: the visible area, (value - black) / (white - black)
    raw.values          # (h, w) uint16: the same photosites as stored
    raw.meta.cfa        # the colour (0 R, 1 G, 2 B) of each photosite of the top-left P x P
    raw.meta.wb         # as-shot white-balance multipliers (r, g, b), green 1
    raw.meta.rgb_cam    # white-balanced camera rgb -> linear Rec.709 (rows sum to 1)
    raw.meta.orientation  # the EXIF Orientation the camera recorded (exif_of: the rest)

Normalisation: each photosite has the black level of its CFA position (LibRaw's per-channel
black plus the common one) and the white level; the mosaic is (value - black) / (white -
black), not clipped (the noise around black is data: clipping it would bias dark areas).

Colour: LibRaw turns the file's colour matrix (a DNG's ColorMatrix, XYZ to camera rgb, or
its own table for other formats) into `rgb_cam`, which maps white-balanced camera rgb to
linear sRGB/Rec.709 with white kept white (its rows sum to 1). `cam_xyz` =
XYZ_FROM_RGB @ rgb_cam @ diag(wb) maps the raw (not balanced) camera rgb to CIE XYZ (D65).

The camera's make, model and ISO (for its noise profile, vkgraph/apps/camnoise.py) are not all
exposed by rawpy: make and model are read from LibRaw's own `libraw_iparams_t` through ctypes
(the library rawpy ships); where that fails they are empty and the profile is estimated.

A file LibRaw cannot read (truncated, not raw, unsupported, a JPEG named .NEF), a layout
vkgraph does not handle (a non-CFA or four-colour sensor) or a size beyond MAX_PIXELS is one
GraphError (exit 2) naming the file. A truncated file is only found by decoding it, so
`check_raw` (the CLI's check before it starts) decodes; `read_raw` keeps the last file it
read, so a file checked and then denoised is decoded once.
"""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .constants import RAW_EXTENSIONS, is_raw  # noqa: F401 (the readers; cli, apps)
from .errors import GraphError
from .formats import PART, in_parts, open_regular

MAX_PIXELS = 1 << 28  # 268 megapixels: more is refused before LibRaw unpacks anything
MAX_SIDE = 1 << 16
# linear sRGB/Rec.709 (D65) -> CIE XYZ
XYZ_FROM_RGB = np.array([[0.4124564, 0.3575761, 0.1804375],
                         [0.2126729, 0.7151522, 0.0721750],
                         [0.0193339, 0.1191920, 0.9503041]])
MISSING = ("reading camera raw files needs rawpy (LibRaw): pip install 'vkgraph[raw]' "
           "(or pip install rawpy)")


@dataclass(frozen=True)
class RawMeta:
    """What a raw mosaic carries besides its pixels (i-raw publishes it as the connector
    metadata "raw"; demosaic and the noise profile read it)."""

    cfa: tuple[tuple[int, ...], ...]  # P x P colours (0 R, 1 G, 2 B) from the top-left
    wb: tuple[float, float, float]  # white-balance multipliers, green 1
    rgb_cam: tuple[tuple[float, ...], ...]  # 3 x 3: balanced camera rgb -> linear Rec.709
    make: str = ""
    model: str = ""
    iso: float = 0.0
    # how the photo is meant to be seen (the EXIF Orientation 1..8 the camera recorded) and
    # what it says of the shot (0 or "" where it says nothing)
    orientation: int = 1
    exposure: float = 0.0  # seconds
    fnumber: float = 0.0
    focal: float = 0.0  # mm
    taken: str = ""  # "YYYY:MM:DD HH:MM:SS"
    artist: str = ""

    @property
    def period(self) -> int:
        """2 for Bayer, 6 for X-Trans."""
        return len(self.cfa)

    @property
    def cam_xyz(self) -> np.ndarray:
        """3 x 3: raw camera rgb (not white-balanced) -> CIE XYZ (D65)."""
        return XYZ_FROM_RGB @ np.array(self.rgb_cam) @ np.diag(self.wb)


# LibRaw's flip (ImageSizes.flip) -> the EXIF Orientation it came from (LibRaw reads EXIF's o
# as flip "50132467"[o])
FLIP_ORIENTATION = {0: 1, 1: 2, 2: 4, 3: 3, 4: 5, 5: 8, 6: 6, 7: 7}


def exif_of(meta: RawMeta) -> bytes | None:
    """EXIF (Pillow's `exif=` form) for a picture made from the raw: the camera's make and
    model, the artist, the date and, in the Exif IFD, the exposure time, f-number, ISO,
    focal length and the date taken; no Orientation (the picture is made upright). None
    where the raw says none of it."""
    from fractions import Fraction

    from PIL import Image
    from PIL.TiffImagePlugin import IFDRational

    def rational(v: float) -> IFDRational:
        f = Fraction(v).limit_denominator(1_000_000)
        return IFDRational(f.numerator, f.denominator)

    exif = Image.Exif()
    for tag, text in ((0x010F, meta.make), (0x0110, meta.model), (0x013B, meta.artist),
                      (0x0132, meta.taken)):
        if text:
            exif[tag] = text
    shot = exif.get_ifd(0x8769)
    for tag, value in ((0x829A, meta.exposure), (0x829D, meta.fnumber),
                       (0x920A, meta.focal)):
        if value > 0:
            shot[tag] = rational(value)
    if meta.iso > 0:
        shot[0x8827] = min(65535, int(round(meta.iso)))
    if meta.taken:
        shot[0x9003] = meta.taken
    return exif.tobytes() if len(exif) or shot else None


def _shot(raw) -> dict:
    """RawMeta's orientation and shot fields from LibRaw (sizes.flip, rawpy's `other`)."""
    other = raw.other
    taken = other.timestamp
    stamp = (taken.strftime("%Y:%m:%d %H:%M:%S")
             if taken is not None and taken.timestamp() > 0 else "")
    artist = other.artist if isinstance(other.artist, str) else ""
    return {"orientation": FLIP_ORIENTATION.get(int(raw.sizes.flip), 1),
            "exposure": float(other.shutter_speed or 0.0),
            "fnumber": float(other.aperture or 0.0),
            "focal": float(other.focal_length or 0.0), "taken": stamp,
            "artist": "".join(ch for ch in artist if ch.isprintable()).strip()}


class RawImage:
    """A raw file's mosaic and its RawMeta. `mosaic`: (h, w) float32, given, or made on first
    use from what read_raw keeps: `values`, the visible photosites as stored ((h, w)
    uint16), `black`, their black levels (a P x P tile from the top-left, repeated) and
    `white`, mosaic = (values - black) / (white - black) (normalised()). The GPU's path takes
    the stored values instead (a quarter of the float mosaic's bytes;
    vkgraph/apps/rawdenoise.py) and never makes the mosaic; the noise estimate makes it on
    the reader thread."""

    def __init__(self, mosaic: np.ndarray | None, meta: RawMeta,
                 values: np.ndarray | None = None,
                 black: tuple[tuple[float, ...], ...] | None = None,
                 white: float | None = None):
        if mosaic is None and (values is None or black is None or white is None):
            raise GraphError("a raw image needs its mosaic, or its values and levels")
        self._mosaic, self.meta = mosaic, meta
        self.values, self.black, self.white = values, black, white
        self._lock = threading.Lock()

    @property
    def mosaic(self) -> np.ndarray:
        if self._mosaic is None:
            with self._lock:  # made once, whichever thread asks first
                if self._mosaic is None:
                    self._mosaic = normalised(self.values, np.asarray(self.black, np.float32),
                                              self.white)
        return self._mosaic

    @property
    def shape(self) -> tuple[int, int]:
        """(h, w) of the mosaic (without making it)."""
        return (self.values if self._mosaic is None else self._mosaic).shape


def import_rawpy():
    try:
        import rawpy
    except ImportError:
        raise GraphError(MISSING) from None
    return rawpy


def _libraw_names(rawpy, path: Path) -> tuple[str, str]:
    """(make, model) from LibRaw's libraw_iparams_t: char guard[4], then char make[64],
    model[64] (the layout of LibRaw 0.18 and later). ("", "") where anything fails."""
    try:
        folder = Path(rawpy.__file__).parent
        lib = next((p for p in sorted(folder.glob("libraw_r.so*")) if p.is_file()), None)
        if lib is None:
            lib = next(iter(sorted(folder.glob("libraw*.dll")) + sorted(folder.glob(
                "libraw*.dylib"))), None)
        if lib is None:
            return "", ""
        so = ctypes.CDLL(str(lib))
        so.libraw_init.restype = ctypes.c_void_p
        so.libraw_init.argtypes = [ctypes.c_uint]
        so.libraw_open_file.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        so.libraw_get_iparams.restype = ctypes.c_void_p
        so.libraw_get_iparams.argtypes = [ctypes.c_void_p]
        so.libraw_close.argtypes = [ctypes.c_void_p]
        handle = so.libraw_init(0)
        if not handle:
            return "", ""
        try:
            if so.libraw_open_file(handle, os.fsencode(path)) != 0:
                return "", ""
            base = so.libraw_get_iparams(handle)
            names = [ctypes.string_at(base + off, 64).split(b"\0")[0] for off in (4, 68)]
        finally:
            so.libraw_close(handle)
        make, model = (n.decode("latin-1").strip() for n in names)
        ok = all(s.isprintable() for s in (make, model))
        return (make, model) if ok else ("", "")
    except (OSError, AttributeError, ValueError):
        return "", ""


def pattern_plane(tile, ht: int, wd: int) -> np.ndarray:
    """(ht, wd): a P x P tile (a CFA pattern, or per-photosite values) repeated over the
    mosaic from its top-left corner."""
    tile = np.asarray(tile)
    p = tile.shape[0]
    return np.tile(tile, (-(-ht // p), -(-wd // p)))[:ht, :wd]


def _cfa(raw, ht: int, wd: int) -> tuple[np.ndarray, tuple[tuple[int, ...], ...]]:
    """(LibRaw's colour indices of the P x P photosites at the visible area's top-left, the
    pattern of colours 0/1/2 they are); LibRaw's indices name letters of color_desc ('RGBG':
    index 3 is the second green). Only those P x P are asked for (LibRaw's COLOR at the
    visible area's offset, as rawpy's raw_colors_visible gives them), not the whole plane."""
    desc = raw.color_desc.decode("ascii", "replace")
    letters = {"R": 0, "G": 1, "B": 2}
    pattern = raw.raw_pattern
    shape = np.asarray(pattern).shape if pattern is not None else ()
    if shape not in ((2, 2), (6, 6)):
        raise GraphError("not a Bayer (2x2) or X-Trans (6x6) colour filter array (a linear "
                         "or RGB raw)")
    p = shape[0]
    if ht < p or wd < p:
        raise GraphError(f"the visible area ({wd}x{ht}) is smaller than its {p}x{p} pattern")
    s = raw.sizes
    top = np.array([[raw.raw_color(s.top_margin + y, s.left_margin + x) for x in range(p)]
                    for y in range(p)])
    if top.min() < 0 or top.max() >= len(desc) or any(desc[i] not in letters
                                                     for i in top.ravel()):
        raise GraphError(f"colour indices {sorted(set(top.ravel().tolist()))} outside the "
                         f"sensor's colours {desc!r}")
    cfa = np.vectorize(lambda i: letters[desc[i]])(top)
    if {0, 1, 2} - set(cfa.ravel().tolist()):
        raise GraphError("the colour filter array lacks red, green or blue")
    return top, tuple(tuple(int(c) for c in row) for row in cfa)


def _white_balance(raw) -> tuple[float, float, float]:
    """As shot, else the camera's daylight multipliers, else none; green normalised to 1."""
    for wb in (raw.camera_whitebalance, raw.daylight_whitebalance):
        wb = np.asarray(wb[:3], np.float64)
        if np.all(np.isfinite(wb)) and np.all(wb > 0):
            return tuple(float(v) for v in wb / wb[1])
    return (1.0, 1.0, 1.0)


def _rgb_cam(raw) -> tuple[tuple[float, ...], ...]:
    m = np.asarray(raw.color_matrix, np.float64)[:3, :3]
    if not np.all(np.isfinite(m)) or not np.any(m):
        m = np.eye(3)  # LibRaw knows no matrix: camera rgb is taken as Rec.709
    return tuple(tuple(float(v) for v in row) for row in m)


def _reason(e: Exception) -> str:
    """LibRaw's message (rawpy gives it as bytes) after the error's class name."""
    arg = e.args[0] if e.args else ""
    text = arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)
    return f"{type(e).__name__}: {text or 'no detail'}"


def _open(path: Path, max_pixels: int):
    """The file opened by LibRaw with its header checked (size, sensor layout), not yet
    unpacked; the caller closes it."""
    f, _ = open_regular(path, "raw file")  # a folder, device or missing file: GraphError
    f.close()
    rawpy = import_rawpy()
    try:
        raw = rawpy.imread(str(path))
    except rawpy.LibRawError as e:
        raise GraphError(f"not a raw file LibRaw reads ({_reason(e)})",
                         where=str(path)) from None
    except (OSError, ValueError) as e:
        raise GraphError(f"cannot read raw file: {e}", where=str(path)) from None
    try:
        _check_header(raw, max_pixels)
    except GraphError as e:
        raw.close()
        raise GraphError(e.message, where=str(path)) from None
    return raw


def _check_header(raw, max_pixels: int) -> None:
    s = raw.sizes
    if min(s.width, s.height, s.raw_width, s.raw_height) < 1:
        raise GraphError("no image in the file (zero size)")
    if max(s.raw_width, s.raw_height) > MAX_SIDE or s.raw_width * s.raw_height > max_pixels:
        raise GraphError(f"declares {s.raw_width}x{s.raw_height} photosites, more than "
                         f"vkgraph reads ({max_pixels} at most)")
    desc = raw.color_desc.decode("ascii", "replace")
    if raw.num_colors != 3 or any(ch not in "RGB" for ch in desc[:4].rstrip("\0")):
        raise GraphError(f"a {desc!r} sensor; vkgraph reads RGB colour filter arrays only")


def check_raw(path, max_pixels: int = MAX_PIXELS) -> None:
    """GraphError when the file is not one vkgraph can use: the CLI checks its inputs before
    it starts. A truncated file is only found by decoding it, so this reads the whole file;
    the last file read is kept (read_raw's cache), so one input is decoded once."""
    read_raw(path, max_pixels)


_LAST: dict = {}  # (path, mtime, size, max_pixels) -> RawImage of the last file read


def read_raw(path, max_pixels: int = MAX_PIXELS) -> RawImage:
    """The normalised mosaic and its RawMeta (module docstring); GraphError naming the file
    for anything LibRaw cannot read or vkgraph cannot use."""
    path = Path(path)
    try:
        st = path.stat()
        key = (str(path.resolve()), st.st_mtime_ns, st.st_size, max_pixels)
    except OSError:
        key = None  # _open names the problem
    if key is not None and key in _LAST:
        return _LAST[key]
    rawpy = import_rawpy()
    with _open(path, max_pixels) as raw:
        try:
            image = _unpack(raw, path, rawpy)
        except GraphError as e:
            raise GraphError(e.message, where=str(path)) from None
        except rawpy.LibRawError as e:  # the data, unpacked now, is broken or cut short
            raise GraphError(f"cannot decode its raw data ({_reason(e)})",
                             where=str(path)) from None
    _LAST.clear()
    if key is not None:
        _LAST[key] = image
    return image


def normalised(values: np.ndarray, tile: np.ndarray, white: float) -> np.ndarray:
    """(values - black) / (white - black) in float32, black the P x P `tile` repeated from
    the top-left: each place of the pattern with its own level, in bands of whole patterns
    on the host's threads (the same numbers as the whole-plane arithmetic: the levels are
    the same float32 scalars)."""
    ht, wd = values.shape
    p = tile.shape[0]
    out = np.empty((ht, wd), np.float32)
    span = np.float32(white) - tile  # float32, as the plane's would be

    def rows(r0: int, r1: int) -> None:  # r0 on the pattern's grid
        for dy in range(p):
            for dx in range(p):
                o = out[r0 + dy:r1:p, dx::p]
                np.subtract(values[r0 + dy:r1:p, dx::p], tile[dy, dx], out=o,
                            dtype=np.float32)
                np.divide(o, span[dy, dx], out=o)

    in_parts(rows, ht, max(p, PART // max(1, wd) // p * p))
    return out


def _unpack(raw, path: Path, rawpy) -> RawImage:
    values = np.asarray(raw.raw_image_visible)  # unpacks: LibRawError when cut short
    if values.ndim != 2:
        raise GraphError("not a single-plane colour filter array (a linear or RGB raw)")
    ht, wd = values.shape
    colours, cfa = _cfa(raw, ht, wd)
    black = np.asarray(raw.black_level_per_channel, np.float64)
    white = float(raw.white_level)
    if not np.all(white > black):
        raise GraphError(f"white level {white:g} is not above the black levels "
                         f"{', '.join(f'{b:g}' for b in black)}")
    # black per photosite: LibRaw's per-channel levels repeat with the CFA's period
    tile = black[np.clip(colours, 0, 3)].astype(np.float32)
    make, model = _libraw_names(rawpy, path)
    meta = RawMeta(cfa=cfa, wb=_white_balance(raw), rgb_cam=_rgb_cam(raw), make=make,
                   model=model, iso=float(raw.other.iso_speed or 0.0), **_shot(raw))
    levels = tuple(tuple(float(v) for v in row) for row in tile)
    if values.dtype != np.uint16:  # (LibRaw's photosites are uint16)
        return RawImage(normalised(values, tile, white), meta)
    # a copy: LibRaw's buffer goes with the file's handle; the mosaic is made when used
    return RawImage(None, meta, np.array(values, np.uint16, order="C"), levels, white)
