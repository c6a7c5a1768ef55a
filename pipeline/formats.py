"""Image and `.lut` files: PFM, vkdt `.lut`, PNG/JPG (through imageio), OpenEXR; atomic writes.

Pure Python and numpy; modules and the CLI call these. Readers take a path and return float32
(or the lut's own dtype) arrays laid out row-major, top row first, never flipped. Every bad
input raises `GraphError` with one line naming the file, the byte offset and what was
expected; writers go through `atomic_write`, so an interrupted or failing write leaves the
previous file untouched, and data holding a NaN or Inf is refused there (RuntimeFailure,
nothing written). Readers take regular files only (a device such as /dev/zero, a pipe
or a folder is refused before a byte is read), check the data size a header declares
against the file and against READ_MAX before reading the data, and read in chunks, so a
long read stays interruptible.

PFM as vkdt reads and writes it:

* header `PF` (rgb) or `Pf` (grey), width, height and a scale, separated by any whitespace;
  exactly one whitespace character (or `\\r\\n`) ends the header and the data follows;
* data: 32-bit floats, rows in file order placed top-down (vkdt does not flip, unlike the
  PFM convention of bottom-up rows);
* vkdt ignores the scale; we ignore its magnitude too but honour its sign as the PFM
  convention says: negative = little-endian (what every writer we know uses), positive =
  big-endian;
* writing: `PF\\n<w> <h>\\n-1.0`, padded with `0` characters so that the header including its
  final newline is a multiple of 16 bytes, then little-endian rgb floats (alpha dropped).

`.lut` (vkdt `src/core/lut.h`): 16-byte little-endian header (uint32 magic 1234, uint16
version 2, uint8 channels, uint8 datatype = 0 f16 / 1 f32 / 2 ui8, +16 for ssbo data, uint32
wd, uint32 ht), `wd*ht*channels` elements row-major, then optional text and a newline.
"""

from __future__ import annotations

import io
import os
import secrets
import stat
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import GraphError, RuntimeFailure

PathLike = str | os.PathLike

# ------------------------------------------------------------------------------------------
# errors and raw file access


def _fail(path: PathLike, offset: int | None, message: str) -> GraphError:
    text = f"byte {offset}: {message}" if offset is not None else message
    return GraphError(text, where=str(path))


# The most any reader takes in: no device binds a storage buffer larger than 4 GiB (its range
# is a 32-bit number), so a file declaring more could never run. Headers are checked against
# it before their data is read.
READ_MAX = 4 << 30
_CHUNK = 16 << 20  # bytes per read(): between two, Python handles a signal (Ctrl-C)


def open_regular(path: PathLike, what: str = "file"):
    """(open binary file, its size) for a regular file. A folder, device (/dev/zero) or
    pipe would be read without end or fail obscurely, so it is the user's bad path, as is a
    missing or unreadable file: GraphError."""
    try:  # non-blocking: opening a FIFO without a writer must not hang
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise _fail(path, None, f"cannot read {what}: {e.strerror or e}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a device, pipe or socket"
        raise _fail(path, None, f"cannot read {what}: it is {kind}, not a regular file")
    return os.fdopen(fd, "rb"), st.st_size


def _read_chunks(f, n: int) -> bytes:
    """Up to n bytes (fewer at the end of the file), read in chunks so that a long read
    stays interruptible."""
    parts = []
    while n > 0:
        part = f.read(min(n, _CHUNK))
        if not part:
            break
        parts.append(part)
        n -= len(part)
    return b"".join(parts)


def read_bounded(path: PathLike, limit: int, what: str) -> bytes:
    """A whole regular file of at most `limit` bytes (a cfg, a list): larger is an error
    naming `what` the file should be."""
    f, size = open_regular(path, what)
    with f:
        if size > limit:
            raise _fail(path, None, f"cannot read {what}: it is {size} bytes, more than a "
                        f"{what} can be ({limit} at most)")
        try:
            return _read_chunks(f, limit + 1)[:limit]
        except OSError as e:
            raise _fail(path, None, f"cannot read {what}: {e.strerror or e}") from None


def _read_bytes(path: PathLike, limit: int | None = None) -> tuple[bytes, int]:
    """The first `limit` bytes (all when None) and the file's size. A missing or unreadable
    file, or anything but a regular file, is the user's bad path: GraphError. Reading all
    of a file larger than READ_MAX is refused before reading."""
    f, size = open_regular(path)
    with f:
        if limit is None and size > READ_MAX:
            raise _fail(path, None, f"file is {size} bytes; vkgraph reads at most {READ_MAX}")
        try:
            data = _read_chunks(f, size if limit is None else limit)
        except OSError as e:
            raise _fail(path, None, f"cannot read file: {e.strerror or e}") from None
    return data, size


def _check_declared(path: PathLike, nbytes: int, what: str) -> None:
    """A header's declared data size against READ_MAX, before any data is read."""
    if nbytes > READ_MAX:
        raise _fail(path, None, f"the header declares {what} ({nbytes} bytes of data), more "
                    f"than vkgraph reads ({READ_MAX} bytes at most)")


def _show(token: bytes, limit: int = 24) -> str:
    """A token from a file, printable and short, for an error message."""
    text = token[:limit].decode("latin-1")
    text = "".join(c if c.isprintable() else "?" for c in text)
    return repr(text + ("..." if len(token) > limit else ""))


def non_finite(data: np.ndarray, where_in: str = "pixel") -> tuple[int, str] | None:
    """(flat index, "nan at x=3 y=0 channel 1") of the first NaN/Inf value of a float
    array, or None when all are finite (other dtypes are always finite). A 3-D array is an
    image (pixel and channel named) unless where_in is "element"."""
    data = np.asarray(data)
    if data.dtype.kind not in "fc":
        return None
    bad = ~np.isfinite(data)
    if not bad.any():
        return None
    i = int(np.flatnonzero(bad.reshape(-1))[0])
    value = data.reshape(-1)[i]
    if data.ndim == 3 and where_in == "pixel":
        y, x, c = np.unravel_index(i, data.shape)
        return i, f"{value} at x={x} y={y} channel {c}"
    return i, f"{value} at element {i}"


def _check_finite(path: PathLike, data: np.ndarray, offset: int | None, itemsize: int,
                  where_in: str = "pixel") -> None:
    """Raise on the first NaN/Inf value, naming its pixel and, for data stored raw in the
    file (offset = its first byte), its byte offset; decoded data (compressed EXR, PNG)
    has no such offset, so offset None names the pixel only."""
    found = non_finite(data, where_in)
    if found is not None:
        i, what = found
        raise _fail(path, None if offset is None else offset + i * itemsize,
                    f"expected finite values, found {what}")


# ------------------------------------------------------------------------------------------
# atomic writes


def _write_error(path: Path, e: OSError) -> Exception:
    if isinstance(e, (FileNotFoundError, NotADirectoryError)) and not path.parent.is_dir():
        return GraphError(f"cannot write file: folder '{path.parent}' does not exist",
                          where=str(path))
    return RuntimeFailure(f"cannot write file: {e.strerror or e}", where=str(path))


def atomic_write(path: PathLike, data: bytes | Iterable[bytes], values=None,
                 where_in: str = "pixel") -> None:
    """Write `data` (bytes, or an iterable of bytes-like parts written in order) to `path`
    through a temp file in the same folder: write, fsync, rename over the target. On any
    failure (including KeyboardInterrupt) the temp file is removed and the previous file
    stays as it was. An existing file's permissions are kept; new files get 0666 & ~umask.
    Missing folder: GraphError; other OS failures: RuntimeFailure.

    values: the numbers the file holds (an array in the file's number type, or the float
    data an 8-bit encoding is made from). Every image and weights writer passes them, so
    this is the one check that no file gets a NaN or Inf (nor a value its number type cannot
    hold, which would become one): RuntimeFailure naming the file and the first such value
    (where_in as for non_finite), before anything is written."""
    path = Path(path)
    found = None if values is None else non_finite(values, where_in)
    if found is not None:
        raise RuntimeFailure(f"not written: the data holds {found[1]} (a file never gets "
                             "NaN or Inf)", where=str(path))
    parts = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
    folder = path.parent
    try:
        mode = os.stat(path).st_mode & 0o7777
    except OSError:
        mode = None
    while True:
        tmp = folder / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            continue
        except OSError as e:
            raise _write_error(path, e) from None
    try:
        try:
            for part in parts:
                view = memoryview(part).cast("B")
                while view:
                    view = view[os.write(fd, view):]
            if mode is not None:
                os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise _write_error(path, e) from None
        raise
    try:  # make the rename itself durable; not every filesystem lets us open a folder
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def read_cached(cache: dict, slot: str, path: PathLike, reader):
    """reader(path), kept in cache[slot] while the file (path, mtime, size) is unchanged:
    source modules read their file in the ROI pass and again for the upload."""
    try:
        st = os.stat(path)
        key = (str(path), st.st_mtime_ns, st.st_size)
    except OSError:
        key = None  # the reader names the problem
    cached = cache.get(slot)
    if key is not None and cached is not None and cached[0] == key:
        return cached[1]
    value = reader(path)
    cache[slot] = (key, value)
    return value


def frame_name(name: str, number: int) -> str:
    """vkdt's file sequences: the literal `%04d` replaced by the 4-digit number (no other
    printf pattern is honoured)."""
    return name.replace("%04d", f"{number:04d}")


def output_path(filename: str, ext: str, frame: int = 0) -> Path:
    """Where a writer module puts its file: `<filename>.<ext>` relative to the working
    directory as vkdt does, `%04d` replaced by the frame number."""
    if not filename:
        raise GraphError("param 'filename' of a writer is empty")
    return Path(f"{frame_name(filename, frame)}.{ext}")


def fit_channels(image: np.ndarray, nchan: int) -> np.ndarray:
    """float32 (ht, wd, nchan) from an image with any channel count: grey is repeated into
    rgb, missing alpha is 1, extra channels are dropped."""
    image = np.asarray(image, dtype=np.float32)
    if image.ndim == 2:
        image = image[:, :, None]
    c = image.shape[2]
    if c == nchan:
        return image
    if c == 1 and nchan > 1:
        image = np.repeat(image, min(nchan, 3), axis=2)
        c = image.shape[2]
    if c < nchan:
        pad = np.zeros(image.shape[:2] + (nchan - c,), np.float32)
        if nchan == 4:
            pad[:, :, -1] = 1.0
        image = np.concatenate([image, pad], axis=2)
    return np.ascontiguousarray(image[:, :, :nchan])


# ------------------------------------------------------------------------------------------
# PFM

_WS = b" \t\r\n"
_PFM_HEAD_MAX = 4096


@dataclass(frozen=True)
class PfmInfo:
    wd: int
    ht: int
    channels: int  # 3 for PF, 1 for Pf
    offset: int  # first data byte
    big_endian: bool

    @property
    def nbytes(self) -> int:
        return self.wd * self.ht * self.channels * 4


def _pfm_token(path, head: bytes, pos: int, what: str) -> tuple[bytes, int, int]:
    while pos < len(head) and head[pos] in _WS:
        pos += 1
    start = pos
    while pos < len(head) and head[pos] not in _WS:
        pos += 1
    if start == pos:
        raise _fail(path, start, f"expected {what}, found end of "
                    f"{'file' if len(head) < _PFM_HEAD_MAX else 'header'}")
    return head[start:pos], start, pos


def _pfm_size(path, head: bytes, pos: int, what: str) -> tuple[int, int]:
    token, start, pos = _pfm_token(path, head, pos, f"image {what} (a positive integer)")
    if not token.isdigit() or int(token) < 1:
        raise _fail(path, start, f"expected image {what} (a positive integer), found "
                    f"{_show(token)}")
    return int(token), pos


def _parse_pfm_header(path: PathLike, head: bytes, size: int) -> PfmInfo:
    magic = head[:2]
    if magic not in (b"PF", b"Pf"):
        raise _fail(path, 0, f"expected PFM magic 'PF' or 'Pf', found {_show(magic)}")
    channels = 3 if magic == b"PF" else 1
    wd, pos = _pfm_size(path, head, 2, "width")
    ht, pos = _pfm_size(path, head, pos, "height")
    token, start, pos = _pfm_token(path, head, pos, "scale (a non-zero number)")
    try:
        scale = float(token.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        scale = float("nan")
    if not np.isfinite(scale) or scale == 0:
        raise _fail(path, start, f"expected scale (a non-zero number, negative for "
                    f"little-endian data), found {_show(token)}")
    if pos >= len(head):
        raise _fail(path, pos, "expected a newline after the scale, found end of file")
    pos += 2 if head[pos:pos + 2] == b"\r\n" else 1
    info = PfmInfo(wd, ht, channels, pos, scale > 0)
    kind = "rgb" if channels == 3 else "grey"
    avail = size - pos
    if avail < info.nbytes:
        raise _fail(path, pos, f"truncated data: expected {info.nbytes} bytes of {wd}x{ht} "
                    f"{kind} f32 pixels, found {avail}")
    if avail > info.nbytes:
        raise _fail(path, pos + info.nbytes, f"expected end of file after {wd}x{ht} {kind} "
                    f"f32 pixels, found {avail - info.nbytes} more bytes")
    return info


def pfm_info(path: PathLike) -> PfmInfo:
    """Parse and check a PFM header (and that the file length matches it) without reading
    the pixels."""
    head, size = _read_bytes(path, _PFM_HEAD_MAX)
    return _parse_pfm_header(path, head, size)


def read_pfm(path: PathLike, finite: bool = False) -> np.ndarray:
    """float32 (ht, wd, 3) for `PF`, (ht, wd, 1) for `Pf`; rows top-down in file order.
    finite=True: NaN/Inf pixels are an error."""
    head, size = _read_bytes(path, _PFM_HEAD_MAX)
    info = _parse_pfm_header(path, head, size)  # the file holds exactly the declared data
    _check_declared(path, info.nbytes, f"{info.wd}x{info.ht} pixels")
    raw, _ = _read_bytes(path)
    dtype = ">f4" if info.big_endian else "<f4"
    data = np.frombuffer(raw, dtype=dtype, count=info.wd * info.ht * info.channels,
                         offset=info.offset).reshape(info.ht, info.wd, info.channels)
    data = data.astype(np.float32)  # native byte order, writable copy
    if finite:
        _check_finite(path, data, info.offset, 4)
    return data


def _as_image(array, what: str) -> np.ndarray:
    """(ht, wd, c) view of an image array; 2-D arrays are one channel."""
    arr = np.asarray(array)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3 or arr.shape[2] < 1 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise GraphError(f"cannot write {what}: expected an image array (ht, wd, channels), "
                         f"got shape {arr.shape}")
    return arr


def _rgb_or_grey(arr: np.ndarray) -> np.ndarray:
    """rgb from 3+ channels (alpha dropped), grey stays one channel, 2 channels get blue 0."""
    c = arr.shape[2]
    if c >= 3:
        return arr[:, :, :3]
    if c == 2:
        return np.concatenate([arr, np.zeros_like(arr[:, :, :1])], axis=2)
    return arr


def pfm_header(wd: int, ht: int, channels: int = 3) -> bytes:
    """vkdt's header: `PF\\n<w> <h>\\n-1.0`, '0'-padded to a multiple of 16 with the newline."""
    head = f"P{'F' if channels == 3 else 'f'}\n{wd} {ht}\n-1.0"
    head += "0" * (-(len(head) + 1) % 16)
    return (head + "\n").encode("ascii")


def write_pfm(path: PathLike, array) -> None:
    """Write an image as vkdt does: rgb f32 little-endian (alpha dropped), top row first.
    One-channel arrays are written as grey `Pf` with the same header layout."""
    arr = _rgb_or_grey(_as_image(array, "PFM"))
    ht, wd, c = arr.shape
    data = np.ascontiguousarray(arr, dtype="<f4")
    atomic_write(path, [pfm_header(wd, ht, c), data], values=data)


# ------------------------------------------------------------------------------------------
# .lut

LUT_MAGIC = 1234
LUT_VERSION = 2
_LUT_HEADER = struct.Struct("<IHBBII")
LUT_FORMATS = {0: "f16", 1: "f32", 2: "ui8"}
_LUT_CODES = {v: k for k, v in LUT_FORMATS.items()}
_LUT_DTYPES = {"f16": np.dtype("<f2"), "f32": np.dtype("<f4"), "ui8": np.dtype("u1")}
LUT_TEXT_MAX = 1 << 20  # the text after the data: a few lines describing it


@dataclass(frozen=True)
class LutHeader:
    channels: int
    datatype: int  # the raw code: 0/1/2, +16 for ssbo
    wd: int
    ht: int
    version: int = LUT_VERSION

    @property
    def ssbo(self) -> bool:
        return self.datatype >= 16

    @property
    def format(self) -> str:
        return LUT_FORMATS[self.datatype & 15]

    @property
    def dtype(self) -> np.dtype:
        return _LUT_DTYPES[self.format]

    @property
    def count(self) -> int:
        return self.wd * self.ht * self.channels

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.itemsize


def _parse_lut_header(path: PathLike, head: bytes, size: int) -> LutHeader:
    if len(head) < 16:
        raise _fail(path, len(head), f"truncated header: expected 16 bytes, found {len(head)}")
    magic, version, channels, datatype, wd, ht = _LUT_HEADER.unpack(head[:16])
    if magic != LUT_MAGIC:
        raise _fail(path, 0, f"expected .lut magic {LUT_MAGIC}, found {magic}")
    if version != LUT_VERSION:
        raise _fail(path, 4, f"expected .lut version {LUT_VERSION}, found {version}")
    if channels < 1:
        raise _fail(path, 6, "expected at least 1 channel, found 0")
    if datatype not in (0, 1, 2, 16, 17, 18):
        raise _fail(path, 7, f"expected datatype 0/1/2 (f16/f32/ui8), +16 for ssbo, found "
                    f"{datatype}")
    if wd < 1:
        raise _fail(path, 8, "expected width of at least 1, found 0")
    if ht < 1:
        raise _fail(path, 12, "expected height of at least 1, found 0")
    info = LutHeader(channels, datatype, wd, ht, version)
    if size - 16 < info.nbytes:
        raise _fail(path, 16, f"truncated data: expected {info.nbytes} bytes for {wd}x{ht}x"
                    f"{channels} {info.format}, found {size - 16}")
    return info


def lut_info(path: PathLike) -> LutHeader:
    """Parse and check a `.lut` header (and that the data fits in the file)."""
    head, size = _read_bytes(path, 16)
    return _parse_lut_header(path, head, size)


def read_lut(path: PathLike, finite: bool = False) -> tuple[np.ndarray, LutHeader, str | None]:
    """(data, header, text). data has shape (ht, wd, channels) in the lut's dtype (float16,
    float32 or uint8; ssbo data too). text is what follows the data, without its final
    newline, or None when nothing does. finite=True: NaN/Inf elements are an error."""
    head, size = _read_bytes(path, 16)
    info = _parse_lut_header(path, head, size)
    _check_declared(path, info.nbytes, f"{info.wd}x{info.ht}x{info.channels} elements")
    if size - 16 - info.nbytes > LUT_TEXT_MAX:
        raise _fail(path, 16 + info.nbytes, f"expected at most {LUT_TEXT_MAX} bytes of text "
                    f"after the data, found {size - 16 - info.nbytes}")
    raw, _ = _read_bytes(path)
    data = np.frombuffer(raw, dtype=info.dtype, count=info.count, offset=16)
    data = data.astype(info.dtype.newbyteorder("="))
    data = data.reshape(info.ht, info.wd, info.channels)
    if finite and info.format != "ui8":
        _check_finite(path, data, 16, info.dtype.itemsize,
                      "element" if info.ssbo else "pixel")
    tail = raw[16 + info.nbytes:]
    text = None
    if tail:
        text = tail.decode("utf-8", errors="replace")
        if text.endswith("\n"):
            text = text[:-1]
    return data, info, text


def _lut_format(datatype) -> tuple[str, bool]:
    if isinstance(datatype, str):
        if datatype not in _LUT_CODES:
            raise GraphError(f"cannot write .lut datatype '{datatype}': expected f16, f32 or "
                             "ui8")
        return datatype, False
    code = int(datatype)
    if code not in (0, 1, 2, 16, 17, 18):
        raise GraphError(f"cannot write .lut datatype {code}: expected 0/1/2, +16 for ssbo")
    return LUT_FORMATS[code & 15], code >= 16


def lut_bytes(data, channels: int, datatype, wd: int, ht: int, ssbo: bool = False,
              text: str | None = None) -> list[bytes]:
    """The parts of a `.lut` file (header, data, text). datatype: 'f16', 'f32', 'ui8' or a
    code (codes >= 16 imply ssbo). Float data written as ui8 is taken as unorm [0, 1]."""
    fmt, code_ssbo = _lut_format(datatype)
    ssbo = ssbo or code_ssbo
    arr = np.asarray(data)
    if not (1 <= channels <= 255 and 1 <= wd < 2**32 and 1 <= ht < 2**32):
        raise GraphError(f"cannot write .lut of {wd}x{ht}x{channels}: sizes out of range")
    if arr.size != wd * ht * channels:
        raise GraphError(f"cannot write .lut: {wd}x{ht}x{channels} needs "
                         f"{wd * ht * channels} elements, got {arr.size}")
    if fmt == "ui8" and arr.dtype.kind == "f":
        arr = np.rint(np.clip(np.nan_to_num(arr), 0.0, 1.0) * 255.0)
    elif fmt == "ui8":
        arr = np.clip(arr, 0, 255)
    with np.errstate(over="ignore", invalid="ignore"):
        payload = np.ascontiguousarray(arr.reshape(-1), dtype=_LUT_DTYPES[fmt])
    header = _LUT_HEADER.pack(LUT_MAGIC, LUT_VERSION, channels,
                              _LUT_CODES[fmt] + (16 if ssbo else 0), wd, ht)
    parts = [header, payload.tobytes()]
    if text is not None:
        parts.append(text.encode("utf-8") + b"\n")
    return parts


def write_lut(path: PathLike, data, channels: int, datatype, wd: int, ht: int,
              ssbo: bool = False, text: str | None = None) -> None:
    """Write a vkdt `.lut` (see `lut_bytes`) atomically; non-finite data (or f32 values
    beyond f16's range, written as f16) is refused (atomic_write)."""
    parts = lut_bytes(data, channels, datatype, wd, ht, ssbo, text)
    fmt, code_ssbo = _lut_format(datatype)
    source = np.asarray(data)
    values = source if fmt == "ui8" else np.frombuffer(parts[1], _LUT_DTYPES[fmt])
    if ssbo or code_ssbo:
        atomic_write(path, parts, values.reshape(-1), "element")
    else:
        atomic_write(path, parts, values.reshape(ht, wd, channels))


# ------------------------------------------------------------------------------------------
# sRGB


SRGB_CHUNK = 1 << 20  # values converted at a time: the float64 temporaries of a 12 MP photo
# at once were most of `vkgraph denoise`'s peak memory (2.0 of 2.1 GB, measured)


def _chunked(fn, x: np.ndarray, dtype) -> np.ndarray:
    """fn applied elementwise to x, SRGB_CHUNK values at a time (the same values as at once)."""
    x = np.asarray(x)
    out = np.empty(x.shape, dtype)
    src, dst = np.ascontiguousarray(x).reshape(-1), out.reshape(-1)
    for i in range(0, src.size, SRGB_CHUNK):
        dst[i:i + SRGB_CHUNK] = fn(src[i:i + SRGB_CHUNK])
    return out


def _to_linear(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return np.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4)


def _to_srgb(x: np.ndarray) -> np.ndarray:
    x = np.clip(np.nan_to_num(np.asarray(x, dtype=np.float64)), 0.0, 1.0)
    return np.where(x <= 0.0031308, 12.92 * x, 1.055 * x ** (1 / 2.4) - 0.055)


def srgb_to_linear(x: np.ndarray) -> np.ndarray:
    return _chunked(_to_linear, x, np.float64)


def linear_to_srgb(x: np.ndarray) -> np.ndarray:
    return _chunked(_to_srgb, x, np.float64)


def decode_unorm(image: np.ndarray) -> np.ndarray:
    """Unsigned-integer (or bool) pixels (ht, wd, c) as every reader takes 8- and 16-bit
    files: scaled by the dtype's largest value (1 for bool) to [0, 1], colour sRGB-decoded
    to linear, alpha (the second of 2 channels, the fourth of 4 or more) kept linear.
    float32."""
    scale = 1.0 if image.dtype.kind == "b" else float(np.iinfo(image.dtype).max)
    out = image / scale
    c = image.shape[2]
    alpha = 1 if c == 2 else 3 if c >= 4 else None
    colour = [i for i in range(c) if i != alpha]
    out[:, :, colour] = srgb_to_linear(out[:, :, colour])
    return out.astype(np.float32)


def to_srgb8(array) -> np.ndarray:
    """Linear float -> sRGB-encoded uint8, clamped to [0, 1]; NaN becomes 0."""
    return _chunked(lambda v: np.rint(_to_srgb(v) * 255.0).astype(np.uint8), array, np.uint8)


# ------------------------------------------------------------------------------------------
# OpenEXR (single-part scanline files; no, RLE, ZIPS and ZIP compression)

_EXR_MAGIC = b"\x76\x2f\x31\x01"
_EXR_COMPRESSION = {0: "none", 1: "RLE", 2: "ZIPS", 3: "ZIP", 4: "PIZ", 5: "PXR24",
                    6: "B44", 7: "B44A", 8: "DWAA", 9: "DWAB"}
_EXR_LINES = {0: 1, 1: 1, 2: 1, 3: 16}
_EXR_TYPES = {0: np.dtype("<u4"), 1: np.dtype("<f2"), 2: np.dtype("<f4")}


def _exr_unpredict(buf: bytes) -> bytes:
    """Undo OpenEXR's byte predictor and even/odd split (shared by ZIP and RLE)."""
    t = np.frombuffer(buf, dtype=np.uint8).astype(np.int64)
    if t.size:
        t[1:] -= 128
        t = np.cumsum(t) & 255
    t = t.astype(np.uint8)
    out = np.empty_like(t)
    half = (t.size + 1) // 2
    out[0::2] = t[:half]
    out[1::2] = t[half:]
    return out.tobytes()


def _exr_predict(raw: bytes) -> bytes:
    r = np.frombuffer(raw, dtype=np.uint8)
    t = np.concatenate([r[0::2], r[1::2]]).astype(np.int64)
    d = t.copy()
    d[1:] = (t[1:] - t[:-1] + 128) & 255
    return d.astype(np.uint8).tobytes()


def _exr_unrle(buf: bytes, expected: int) -> bytes:
    out = bytearray()
    i = 0
    while i < len(buf) and len(out) < expected:
        n = buf[i] - 256 if buf[i] > 127 else buf[i]
        if n < 0:
            out += buf[i + 1:i + 1 - n]
            i += 1 - n
        else:
            out += buf[i + 1:i + 2] * (n + 1)
            i += 2
    return bytes(out)


class _ExrReader:
    def __init__(self, path: PathLike, raw: bytes):
        self.path, self.raw, self.pos = path, raw, 0

    def take(self, n: int, what: str) -> bytes:
        if self.pos + n > len(self.raw):
            raise _fail(self.path, self.pos, f"expected {what}, found end of file")
        data = self.raw[self.pos:self.pos + n]
        self.pos += n
        return data

    def cstring(self, what: str) -> bytes:
        end = self.raw.find(b"\0", self.pos, self.pos + 256)
        if end < 0:
            raise _fail(self.path, self.pos, f"expected {what} (a 0-terminated name)")
        text = self.raw[self.pos:end]
        self.pos = end + 1
        return text


def _exr_channels(path, value: bytes, offset: int) -> list[tuple[str, int]]:
    chans = []
    pos = 0
    while pos < len(value) and value[pos] != 0:
        end = value.find(b"\0", pos)
        if end < 0 or end + 17 > len(value):
            raise _fail(path, offset + pos, "expected a channel entry in 'channels'")
        name = value[pos:end].decode("latin-1")
        ptype, _, xs, ys = struct.unpack("<iB3xii", value[end + 1:end + 17])
        if ptype not in _EXR_TYPES:
            raise _fail(path, offset + end + 1, f"expected pixel type 0/1/2 for channel "
                        f"'{name}', found {ptype}")
        if xs != 1 or ys != 1:
            raise _fail(path, offset + end + 9, f"subsampled channel '{name}' is not "
                        "supported (expected sampling 1 1)")
        chans.append((name, ptype))
        pos = end + 17
    return chans


def read_exr(path: PathLike, finite: bool = False) -> np.ndarray:
    """float32 (ht, wd, 4) rgba from a single-part scanline OpenEXR file (channels R G B
    and optional A, or Y); compression none, RLE, ZIPS or ZIP."""
    raw, _ = _read_bytes(path)
    r = _ExrReader(path, raw)
    if r.take(4, "OpenEXR magic") != _EXR_MAGIC:
        raise _fail(path, 0, "expected OpenEXR magic 76 2f 31 01")
    (version,) = struct.unpack("<I", r.take(4, "OpenEXR version"))
    if version & 0xFF != 2:
        raise _fail(path, 4, f"expected OpenEXR version 2, found {version & 0xFF}")
    if version & 0x1A00:
        raise _fail(path, 4, "only single-part scanline OpenEXR files are supported "
                    "(this one is tiled, deep or multi-part)")
    attrs: dict[str, tuple[bytes, int]] = {}
    while True:
        name = r.cstring("attribute name")
        if not name:
            break
        r.cstring("attribute type")
        (n,) = struct.unpack("<i", r.take(4, "attribute size"))
        if n < 0:
            raise _fail(path, r.pos - 4, f"expected a non-negative attribute size, found {n}")
        start = r.pos
        attrs[name.decode("latin-1")] = (r.take(n, f"{n} bytes of attribute value"), start)
    for need in ("channels", "compression", "dataWindow"):
        if need not in attrs:
            raise _fail(path, r.pos, f"expected attribute '{need}' in the header")
    for need, size in (("compression", 1), ("dataWindow", 16)):
        value, at = attrs[need]
        if len(value) < size:
            raise _fail(path, at, f"expected {size} bytes of attribute '{need}', found "
                        f"{len(value)}")
    chans = _exr_channels(path, *attrs["channels"])
    comp = attrs["compression"][0][0]
    if comp not in _EXR_LINES:
        raise _fail(path, attrs["compression"][1], f"compression "
                    f"{_EXR_COMPRESSION.get(comp, comp)} is not supported (none, RLE, ZIPS "
                    "or ZIP are)")
    xmin, ymin, xmax, ymax = struct.unpack("<iiii", attrs["dataWindow"][0][:16])
    wd, ht = xmax - xmin + 1, ymax - ymin + 1
    if wd < 1 or ht < 1:
        raise _fail(path, attrs["dataWindow"][1], f"expected a non-empty data window, "
                    f"found {wd}x{ht}")
    _check_declared(path, wd * ht * max(len(chans), 4) * 4, f"a {wd}x{ht} data window")
    lines = _EXR_LINES[comp]
    line_bytes = sum(_EXR_TYPES[t].itemsize for _, t in chans) * wd
    nblocks = (ht + lines - 1) // lines
    table = np.frombuffer(r.take(8 * nblocks, f"offset table of {nblocks} entries"), "<u8")
    if ht * line_bytes > 1100 * len(raw):  # more than zlib's best ratio: a broken header
        raise _fail(path, attrs["dataWindow"][1], f"expected a data window the file can "
                    f"hold, found {wd}x{ht} in a file of {len(raw)} bytes")
    planes = {name: np.zeros((ht, wd), np.float32) for name, _ in chans}
    for b, offset in enumerate(table):
        r.pos = int(offset)
        head = r.take(8, f"scanline block {b}")
        y, size = struct.unpack("<ii", head)
        row = y - ymin
        if not 0 <= row < ht or row % lines:
            raise _fail(path, int(offset), f"expected a block's first line in the data "
                        f"window, found y={y}")
        n = min(lines, ht - row)
        expected = n * line_bytes
        data = r.take(size, f"{size} bytes of block data") if size >= 0 else b""
        if size != expected and comp in (2, 3):
            try:
                data = _exr_unpredict(zlib.decompress(data))
            except zlib.error:
                raise _fail(path, int(offset) + 8, "expected zlib-compressed data") from None
        elif size != expected and comp == 1:
            data = _exr_unpredict(_exr_unrle(data, expected))
        if len(data) != expected:
            raise _fail(path, int(offset) + 8, f"expected {expected} bytes of pixels in the "
                        f"block at y={y}, found {len(data)}")
        pos = 0
        for i in range(n):
            for name, ptype in chans:
                dt = _EXR_TYPES[ptype]
                planes[name][row + i] = np.frombuffer(data, dt, wd, pos)
                pos += wd * dt.itemsize
    if all(c in planes for c in "RGB"):
        rgb = [planes["R"], planes["G"], planes["B"]]
    elif "Y" in planes:
        rgb = [planes["Y"]] * 3
    else:
        raise _fail(path, attrs["channels"][1], "expected channels R, G, B (or Y), found "
                    + " ".join(planes))
    alpha = planes.get("A", np.ones((ht, wd), np.float32))
    image = np.stack(rgb + [alpha], axis=2)
    if finite:
        _check_finite(path, image, None, 4)
    return image


def exr_bytes(array, half: bool = False) -> list[bytes]:
    """A ZIP-compressed single-part scanline OpenEXR file: channels R G B (alpha dropped),
    or Y for one-channel arrays; half or float pixels."""
    arr = _rgb_or_grey(_as_image(array, "EXR"))
    ht, wd, c = arr.shape
    ptype, dt = (1, np.dtype("<f2")) if half else (2, np.dtype("<f4"))
    names = ["B", "G", "R"] if c == 3 else ["Y"]  # OpenEXR stores channels sorted by name
    order = [2, 1, 0] if c == 3 else [0]

    def attr(name: str, kind: str, value: bytes) -> bytes:
        return name.encode() + b"\0" + kind.encode() + b"\0" + struct.pack("<i", len(value)) \
            + value

    chlist = b"".join(n.encode() + b"\0" + struct.pack("<iB3xii", ptype, 0, 1, 1)
                      for n in names) + b"\0"
    window = struct.pack("<iiii", 0, 0, wd - 1, ht - 1)
    header = (_EXR_MAGIC + struct.pack("<I", 2)
              + attr("channels", "chlist", chlist)
              + attr("compression", "compression", bytes([3]))
              + attr("dataWindow", "box2i", window)
              + attr("displayWindow", "box2i", window)
              + attr("lineOrder", "lineOrder", bytes([0]))
              + attr("pixelAspectRatio", "float", struct.pack("<f", 1.0))
              + attr("screenWindowCenter", "v2f", struct.pack("<ff", 0.0, 0.0))
              + attr("screenWindowWidth", "float", struct.pack("<f", 1.0))
              + b"\0")
    with np.errstate(over="ignore", invalid="ignore"):
        planar = np.ascontiguousarray(arr[:, :, order].transpose(0, 2, 1), dtype=dt)
    lines = _EXR_LINES[3]
    blocks = []
    for y in range(0, ht, lines):
        raw = planar[y:y + lines].tobytes()
        packed = zlib.compress(_exr_predict(raw), 6)
        data = packed if len(packed) < len(raw) else raw
        blocks.append(struct.pack("<ii", y, len(data)) + data)
    table_at = len(header)
    offsets, pos = [], table_at + 8 * len(blocks)
    for block in blocks:
        offsets.append(pos)
        pos += len(block)
    return [header, np.array(offsets, "<u8").tobytes(), *blocks]


def write_exr(path: PathLike, array, half: bool = False) -> None:
    """Write linear float rgb (alpha dropped) as OpenEXR, f32 or f16 pixels."""
    with np.errstate(over="ignore", invalid="ignore"):  # beyond f16: inf, refused
        values = _rgb_or_grey(_as_image(array, "EXR")).astype("<f2" if half else "<f4")
    atomic_write(path, exr_bytes(array, half), values)


# ------------------------------------------------------------------------------------------
# PNG / JPG (imageio) and the generic reader


def _png16_colour(path: PathLike, raw: bytes) -> np.ndarray | None:
    """16-bit rgb/rgba PNG at full precision, or None for any other file. Pillow (imageio's
    PNG backend) keeps only the high byte of 16-bit colour; we decode the same file twice
    with the big- and little-endian unpackers of its own zip decoder, which pick the high
    and the low byte of each sample."""
    if raw[:8] != b"\x89PNG\r\n\x1a\n" or len(raw) < 26 or raw[24] != 16 or raw[25] not in (2, 6):
        return None
    from PIL import Image

    planes = []
    for order in ("B", "L"):
        try:
            im = Image.open(io.BytesIO(raw))
            tile = im.tile[0]
            args = tile.args if isinstance(tile.args, str) else tile.args[0]
            im.tile = [tile._replace(args=args.replace(";16B", ";16" + order))]
            im.load()
        except Exception as e:  # any decoder failure is a bad file
            raise _fail(path, None, f"cannot decode PNG image: {_reason(e)}") from None
        planes.append(np.asarray(im, dtype=np.uint16))
    return planes[0] * 256 + planes[1]


def _reason(e: BaseException) -> str:
    """One line from a decoder's exception: its root cause (imageio wraps Pillow's errors,
    e.g. its decompression-bomb guard, in "An unknown error occurred ...")."""
    seen = {id(e)}
    while (e.__cause__ or e.__context__) is not None and id(e.__cause__ or e.__context__) \
            not in seen:
        e = e.__cause__ or e.__context__
        seen.add(id(e))
    msg = str(e).splitlines()[0] if str(e).strip() else type(e).__name__
    if any(t in msg for t in ("cannot identify image", "can not handle", "find a backend")):
        return "not a PNG, JPG or other image file that imageio (Pillow) can read"
    if type(e).__name__ == "DecompressionBombError":
        return f"{msg} (Pillow's guard against decompression bombs)"
    return msg


def _check_png_size(path: PathLike, raw: bytes) -> None:
    """A PNG's declared size (IHDR) against READ_MAX as f32 rgba, before decoding."""
    if raw[:8] == b"\x89PNG\r\n\x1a\n" and len(raw) >= 24 and raw[12:16] == b"IHDR":
        wd, ht = struct.unpack(">II", raw[16:24])
        _check_declared(path, wd * ht * 16, f"{wd}x{ht} pixels")


def _decode_imageio(path: PathLike, raw: bytes) -> np.ndarray:
    import imageio.v3 as iio

    try:
        image = iio.imread(raw, plugin="pillow")
    except Exception as e:  # imageio raises many kinds for a bad file
        raise _fail(path, None, f"cannot decode image: {_reason(e)}") from None
    if image.ndim == 4:  # animations: the first frame
        image = image[0]
    return image


def read_image(path: PathLike, finite: bool = False) -> np.ndarray:
    """float32 (ht, wd, 4) linear rgba from PFM, OpenEXR, or anything imageio reads (PNG,
    JPG, ...). 8- and 16-bit colour is sRGB-decoded, alpha scaled linearly (1 when the file
    has none); float data is taken as linear. finite=True: NaN/Inf pixels are an error."""
    raw, _ = _read_bytes(path)
    if not raw:
        raise _fail(path, 0, "cannot decode image: the file is empty")
    if raw[:2] in (b"PF", b"Pf"):
        image = read_pfm(path, finite)
    elif raw[:4] == _EXR_MAGIC:
        return read_exr(path, finite)
    else:
        _check_png_size(path, raw)
        image = _png16_colour(path, raw)
        if image is None:
            image = _decode_imageio(path, raw)
    image = _as_image(image, "image")
    if image.shape[2] > 4:
        image = image[:, :, :4]
    kind = image.dtype.kind
    if kind in "ub":
        image = decode_unorm(image)
    c = image.shape[2]
    alpha = image[:, :, 3 if c == 4 else 1] if c in (2, 4) else None
    colour = image[:, :, :3] if c >= 3 else np.repeat(image[:, :, :1], 3, axis=2)
    out = np.empty(image.shape[:2] + (4,), np.float32)
    out[:, :, :3] = colour
    out[:, :, 3] = 1.0 if alpha is None else alpha
    if finite and kind == "f":
        _check_finite(path, out, None, 4)
    return out


def _encode(array, ext: str, **kwargs) -> bytes:
    import imageio.v3 as iio

    arr = _as_image(array, ext.upper())
    arr = _rgb_or_grey(arr)
    pixels = to_srgb8(arr if arr.shape[2] == 3 else arr[:, :, 0])
    return iio.imwrite("<bytes>", pixels, extension="." + ext, **kwargs)


def write_png(path: PathLike, array) -> None:
    """Linear float -> sRGB 8-bit PNG (rgb, alpha dropped; grey for one channel)."""
    atomic_write(path, _encode(array, "png"), _rgb_or_grey(_as_image(array, "PNG")))


def write_jpg(path: PathLike, array, quality: int = 90) -> None:
    """Linear float -> sRGB 8-bit JPEG of the given quality (1..100)."""
    atomic_write(path, _encode(array, "jpg", quality=int(min(max(quality, 1), 100))),
                 _rgb_or_grey(_as_image(array, "JPG")))
