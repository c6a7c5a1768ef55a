"""Image and `.lut` files: PFM, vkdt `.lut`, PNG/JPEG/TIFF/WebP (Pillow, tifffile), OpenEXR
(the OpenEXR wheel); atomic writes.

Python, numpy and the image libraries; modules and the CLI call these. Readers take a path
and return float32 (or the lut's own dtype) arrays laid out row-major, top row first, never
flipped. Every bad input raises `GraphError` with one line naming the file, the byte offset
(where our own parser finds the fault; Pillow, tifffile and OpenEXR give their reason
instead) and what was expected; writers go through `atomic_write`, so an interrupted or
failing write leaves the previous file untouched, and data holding a NaN or Inf is refused
there (RuntimeFailure, nothing written). Readers take regular files only (a device such as
/dev/zero, a pipe or a folder is refused before a byte is read), check the data size a
header declares against the file and against READ_MAX before reading the data, and read in
chunks, so a long read stays interruptible.

Photographs keep what they carry (`decode_image` -> `ImageMeta`, `write_like`): EXIF, with
the Orientation applied to the pixels and reset to 1; the ICC profile; the bit depth; a
JPEG's quality, estimated from its quantisation tables.

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

import contextlib
import functools
import io
import os
import re
import secrets
import stat
import struct
import sys
import threading
import warnings
import zlib
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .constants import IMAGE_WRITERS, JPG_QUALITY  # noqa: F401 (the writers; cli)
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


def mode_kind(mode: int) -> str:
    """What a file of st_mode `mode` is, in words."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return "a folder" if stat.S_ISDIR(mode) else "a device, pipe or socket"


def path_kind(path: PathLike) -> str | None:
    """What is at `path` (mode_kind's words), or None where nothing is or it cannot be
    looked at."""
    try:
        return mode_kind(os.stat(path).st_mode)
    except (OSError, ValueError):
        return None


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
        raise _fail(path, None, f"cannot read {what}: it is {mode_kind(st.st_mode)}, not a "
                    "regular file")
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
    # min and max are NaN where a value is NaN, inf where one is inf: two reductions instead
    # of a bool image and its scan; the rgb of an rgba image is checked as the rgba, whose
    # reductions run over contiguous memory (12 MP: 40 -> 15 ms), and only where that finds
    # a value (which may be its alpha) value by value
    whole = rgba_of(data)
    whole = data if whole is None else whole
    if data.dtype.kind == "f" and (whole.size == 0 or np.isfinite(whole.min()) and
                                   np.isfinite(whole.max())):
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


def rgba_of(rgb: np.ndarray) -> np.ndarray | None:
    """The contiguous (ht, wd, 4) array whose first three channels `rgb` is a view of (what
    the Denoiser returns: the rgb of the rgba that kpn's output downloads to), else None:
    checks and conversions then read the rgba's contiguous memory (their loops over 3 of
    every 4 values are 3-4x slower), and ignore its alpha."""
    base = rgb.base
    if (rgb.ndim == 3 and rgb.shape[2] == 3 and isinstance(base, np.ndarray)
            and base.shape == rgb.shape[:2] + (4,) and base.dtype == rgb.dtype
            and base.flags.c_contiguous and base.strides == rgb.strides
            and base.ctypes.data == rgb.ctypes.data):
        return base
    return None


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


def temp_name(path: Path) -> Path:
    """A fresh name for a temp file beside `path`: `.<start of its name>.<pid>.<hex>.tmp`,
    at most about 150 bytes whatever the target's length (a target of 255 bytes, NAME_MAX,
    still gets its temp file)."""
    return path.parent / f".{path.name[:32]}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


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
    (where_in as for non_finite), before anything is written. (A writer that writes as its
    data comes, pipeline/exrstream.py, checks each part before it writes it.)"""
    path = Path(path)
    found = None if values is None else non_finite(values, where_in)
    if found is not None:
        raise RuntimeFailure(f"not written: the data holds {found[1]} (a file never gets "
                             "NaN or Inf)", where=str(path))
    parts = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
    with AtomicFile(path) as f:
        for part in parts:
            f.write(part)


IOV_MAX = 1024  # buffers a pwritev takes (Linux's limit; POSIX allows no fewer than 16)
SYNC_FILE_RANGE_WRITE = 2


@functools.cache
def _sync_file_range():
    """libc's sync_file_range where there is one (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return call


ASIDE_BYTES = 16 << 20  # a replaced file at least this large is freed on a thread


def _set_aside(path: Path) -> Path | None:
    """A second name (a temp name beside it) for the regular file of ASIDE_BYTES or more
    at `path`, which a rename over it is about to replace; None where there is none (or the
    filesystem has no hard links)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size < ASIDE_BYTES:
            return None
        aside = temp_name(path)
        os.link(path, aside, follow_symlinks=False)
        return aside
    except (OSError, NotImplementedError):
        return None


def _remove(path: Path | None) -> None:
    """unlink(path), quietly (a name set aside, or a temp file left)."""
    if path is not None:
        try:
            os.unlink(path)
        except OSError:
            pass


class AtomicFile:
    """A file written through a temp file beside `path` (atomic_write's): `write` appends,
    `pwrite` writes at an offset; leaving the `with` block normally fsyncs it and renames it
    over the target (`commit`), leaving it by an exception removes it (`abort`) and the
    previous file stays as it was. Errors as atomic_write's."""

    def __init__(self, path: PathLike):
        self.path = Path(path)
        self.freeing = None  # commit's thread that frees the file it replaced
        try:
            self.mode = os.stat(self.path).st_mode & 0o7777
        except OSError:
            self.mode = None
        while True:
            self.tmp = temp_name(self.path)
            try:
                self.fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
                break
            except FileExistsError:
                continue
            except OSError as e:
                raise _write_error(self.path, e) from None

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, kind, value, tb) -> None:
        if kind is None:
            self.commit()
        else:
            self.abort()

    def write(self, data) -> None:
        self._io(lambda view: os.write(self.fd, view), data)

    def pwrite(self, data, offset: int) -> None:
        done = [offset]

        def at(view) -> int:
            n = os.pwrite(self.fd, view, done[0])
            done[0] += n
            return n

        self._io(at, data)

    def pwritev(self, buffers, offset: int) -> None:
        """The buffers (each contiguous) one after another from `offset`, by as few calls
        as the system's limit on buffers a call allows (pwrite where it has no pwritev)."""
        views = [memoryview(b).cast("B") for b in buffers]
        if not hasattr(os, "pwritev"):
            for v in views:
                self.pwrite(v, offset)
                offset += v.nbytes
            return
        at = [0, offset]  # the first view not yet written whole, where it goes

        def call() -> None:
            while at[0] < len(views):
                n = os.pwritev(self.fd, views[at[0]:at[0] + IOV_MAX], at[1])
                at[1] += n
                while at[0] < len(views) and n >= views[at[0]].nbytes:
                    n -= views[at[0]].nbytes
                    at[0] += 1
                if n:  # a view written in part: the rest of it next
                    views[at[0]] = views[at[0]][n:]

        self._io(call)

    def start_writeback(self, offset: int, nbytes: int) -> None:
        """Ask the system to start writing these bytes to the disk now, without waiting
        (Linux's sync_file_range; elsewhere nothing): commit's fsync then finds them written
        (a 288 MB EXR streamed on an H100 machine: fsync 0.14-0.23 s -> 1 ms). A hint:
        its failures are ignored."""
        writeback = _sync_file_range()
        if writeback is not None and self.fd is not None:
            writeback(self.fd, offset, nbytes, SYNC_FILE_RANGE_WRITE)

    def truncate(self, size: int) -> None:
        self._io(lambda: os.ftruncate(self.fd, size))

    def _io(self, call, data=None) -> None:
        """call(view) until the data is written (a call returns what it wrote), or call()
        once without data; an OSError removes the temp file."""
        try:
            if data is None:
                call()
                return
            view = memoryview(data).cast("B")
            while view:
                view = view[call(view):]
        except OSError as e:
            self.abort()
            raise _write_error(self.path, e) from None

    def commit(self) -> None:
        """fsync, rename over the target, fsync the folder (where it can be opened). A
        large file replaced is freed on a thread (`freeing`, joined at exit): it keeps a
        second name (_set_aside) until the rename is done, so that the rename does not free
        its blocks (a 288 MB file replaced on ext4: 60-80 ms in the rename)."""
        if self.fd is None:
            return
        aside = None
        try:
            try:
                if self.mode is not None:
                    os.fchmod(self.fd, self.mode)
                os.fsync(self.fd)
            finally:
                os.close(self.fd)
                self.fd = None
            aside = _set_aside(self.path)
            os.replace(self.tmp, self.path)
            self.tmp = None
        except BaseException as e:
            _remove(aside)
            self.abort()
            if isinstance(e, OSError):
                raise _write_error(self.path, e) from None
            raise
        try:  # make the rename itself durable; not every filesystem lets us open a folder
            dfd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass
        if aside is not None:
            self.freeing = threading.Thread(target=_remove, args=(aside,),
                                            name="vkgraph-free")
            self.freeing.start()

    def abort(self) -> None:
        """Close and remove the temp file (the target untouched); once, then nothing."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        _remove(self.tmp)
        self.tmp = None


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
    image = np.asarray(image)
    if image.ndim == 2:
        image = image[:, :, None]
    c = image.shape[2]
    if c == nchan:
        return np.asarray(image, dtype=np.float32)
    # one pass into the result (a 24 MP rgba is 384 MB: each array between costs a pass)
    out = np.empty(image.shape[:2] + (nchan,), np.float32)
    k = min(nchan, 3) if c == 1 else min(c, nchan)  # grey fills r, g and b
    out[:, :, :k] = image if c == 1 else image[:, :, :k]
    if k < nchan:
        out[:, :, k:] = 0.0
        if nchan == 4:
            out[:, :, 3] = 1.0
    return out


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
    """fn applied elementwise to x, SRGB_CHUNK values at a time over the host's threads
    (in_parts: each a share of them, so the temporaries stay those of one chunk; the same
    values as at once)."""
    x = np.asarray(x)
    out = np.empty(x.shape, dtype)
    src, dst = np.ascontiguousarray(x).reshape(-1), out.reshape(-1)

    def part(i: int, j: int) -> None:
        dst[i:j] = fn(src[i:j])

    in_parts(part, src.size, max(1, SRGB_CHUNK // WORKERS))
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


PART = 1 << 18  # values a worker converts at a time (in_parts): 1-2 MB, in the cache
WORKERS = min(8, os.cpu_count() or 1)  # threads of in_parts
PARTS_THREADS = "vkgraph-parts"  # their names' prefix (in_parts run from one runs in place)


def in_parts(fn, n: int, step: int = PART) -> None:
    """fn(start, stop) over [0, n) in runs of `step`, on up to WORKERS threads at once:
    numpy's take and ufuncs let go of the GIL, so a whole-image table lookup or conversion
    (12 MP: 36-48 M values) runs on the host's cores. The parts must not overlap in what
    they write; each is one call, in no particular order. The parts run under the caller's
    numpy error state (np.errstate: numpy keeps one per thread), as they would in its
    thread. Called from one of those threads (a part that converts in parts itself) it runs
    there, in order: waiting on the pool from inside it could wait for ever."""
    import threading

    spans = [(i, min(n, i + step)) for i in range(0, n, step)]
    inside = threading.current_thread().name.startswith(PARTS_THREADS)
    if len(spans) < 2 or WORKERS < 2 or inside:
        for i, j in spans:
            fn(i, j)
        return
    state = np.geterr()

    def part(span: tuple[int, int]) -> None:
        with np.errstate(**state):
            fn(*span)

    for _ in _pool().map(part, spans):
        pass


_POOLS: dict = {}  # process id -> its in_parts threads


def _pool():
    """This process's threads (a process forked from one that made them has none of them:
    a pool inherited through fork would take work and never run it)."""
    pid = os.getpid()
    if pid not in _POOLS:
        from concurrent.futures import ThreadPoolExecutor

        _POOLS[pid] = ThreadPoolExecutor(WORKERS, thread_name_prefix=PARTS_THREADS)
    return _POOLS[pid]


def decode_unorm(image: np.ndarray) -> np.ndarray:
    """Unsigned-integer (or bool) pixels (ht, wd, c) as every reader takes 8- and 16-bit
    files: scaled by the dtype's largest value (1 for bool) to [0, 1], colour sRGB-decoded
    to linear, alpha (the second of 2 channels, the fourth of 4 or more) kept linear.
    float32."""
    c = image.shape[2]
    alpha = 1 if c == 2 else 3 if c >= 4 else None
    colour = [i for i in range(c) if i != alpha]
    if image.dtype in (np.uint8, np.uint16):  # a table of every value: the same numbers,
        out = np.empty(image.shape, np.float32)  # 20x faster than the formula on 12 MP
        lut = _decode_table(image.dtype.itemsize)
        for i in range(c):
            out[:, :, i] = (lut if i != alpha else _unorm_table(image.dtype.itemsize))[
                image[:, :, i]]
        return out
    scale = 1.0 if image.dtype.kind == "b" else float(np.iinfo(image.dtype).max)
    out = image / scale
    out[:, :, colour] = srgb_to_linear(out[:, :, colour])
    return out.astype(np.float32)


@functools.cache
def _unorm_table(nbytes: int) -> np.ndarray:
    """float32 v / max of every unsigned value of nbytes bytes."""
    top = (1 << (8 * nbytes)) - 1
    return (np.arange(top + 1, dtype=np.float64) / top).astype(np.float32)


def srgb8_linear() -> np.ndarray:
    """The float32 linear value of each 8-bit sRGB code (256; decode_unorm's numbers)."""
    return _decode_table(1)


@functools.cache
def _decode_table(nbytes: int) -> np.ndarray:
    """float32 linear value of every sRGB-encoded unsigned value of nbytes bytes."""
    top = (1 << (8 * nbytes)) - 1
    return _to_linear(np.arange(top + 1, dtype=np.float64) / top).astype(np.float32)


def srgb8_glsl() -> str:
    """shaders/include/srgb8.glsl, the 8-bit sRGB curves of the srgb-in and srgb-out kernels
    as tables of this module's exact numbers (tests/test_srgb8.py keeps the file equal to
    this): the linear float32 value of each code (_decode_table), each code / 255 (alpha,
    _unorm_table) and, for codes 1..255, the smallest float32 that the host's encoder
    (srgb_samples) gives that code or more."""
    want = np.arange(1, 256)
    lo = np.zeros(255, np.int64)  # bits of 0.0: code 0, below every edge
    hi = np.full(255, 0x3F800000, np.int64)  # bits of 1.0: code 255, at or above every edge
    while np.any(hi - lo > 1):  # bisect the bits: non-negative float32s order as their bits
        mid = (lo + hi) // 2
        up = _srgb8_float32(mid.astype(np.uint32).view(np.float32)) >= want
        hi, lo = np.where(up, mid, hi), np.where(up, lo, mid)
    words = [int(v) for v in _decode_table(1).view(np.uint32)]
    unorm = [int(v) for v in _unorm_table(1).view(np.uint32)]
    edges = [int(v) for v in hi]

    def table(name: str, values) -> str:
        rows = [", ".join(f"0x{int(v):08X}u" for v in values[i:i + 6])
                for i in range(0, len(values), 6)]
        return (f"const uint {name}[{len(values)}] = uint[](\n  "
                + ",\n  ".join(rows) + ");\n")

    return ("// Generated by pipeline/formats.py srgb8_glsl(); do not edit "
            "(tests/test_srgb8.py).\n"
            "// SRGB8_LINEAR[c]: the linear float32 bits of 8-bit sRGB code c (the host's\n"
            "// table, the float64 formula rounded once); SRGB8_UNORM[c]: c / 255 rounded once\n"
            "// (alpha). SRGB8_EDGE[k - 1]: the bits of the smallest float32 in [0, 1] whose\n"
            "// code is k or more (k = 1..255; non-negative float32s order as their bits).\n"
            "#ifndef SRGB8_GLSL\n#define SRGB8_GLSL\n"
            + table("SRGB8_LINEAR", words) + table("SRGB8_UNORM", unorm)
            + table("SRGB8_EDGE", edges)
            + "#endif\n")


def to_srgb8(array) -> np.ndarray:
    """Linear float -> sRGB-encoded uint8, clamped to [0, 1]; NaN becomes 0."""
    return srgb_samples(array, "u8")


# ------------------------------------------------------------------------------------------
# OpenEXR, through the OpenEXR wheel (the Academy Software Foundation's library): every
# codec, scanline and tiled files; the first part of a multi-part file

_EXR_MAGIC = b"\x76\x2f\x31\x01"
EXR_COMPRESSIONS = ("none", "rle", "zips", "zip", "piz", "pxr24", "b44", "b44a", "dwaa",
                    "dwab")


@functools.cache
def _openexr():
    """The OpenEXR wheel, with its thread pool sized to the machine's cores: the library
    compresses and decompresses blocks of scanlines in parallel (the same bytes as with one
    thread); its default of no threads made a 24 MP float EXR write take 6.6 s on the H100
    machine (bench/raw_speed.py)."""
    try:
        import OpenEXR
    except ImportError:
        raise RuntimeFailure("OpenEXR files need the OpenEXR wheel (pip install OpenEXR), "
                             "which this installation lacks") from None
    if OpenEXR.global_thread_count() == 0:
        OpenEXR.set_global_thread_count(min(os.cpu_count() or 1, 16))
    return OpenEXR


# _quietly takes the process's stdout and stderr (its file descriptors 1 and 2 and Python's
# sys.stdout and sys.stderr) for one call, so what another thread prints meanwhile lands in
# the capture and would turn a good file into an error. _quietly holds STDIO; a thread that
# works beside others (`vkgraph denoise`'s reader) holds it while it works, and leaves the
# files whose decoding captures (captures_stdio) to the thread that prints.
STDIO = threading.RLock()


def captures_stdio(path: PathLike) -> bool:
    """Whether decode_image of `path` takes the process's stdout and stderr (OpenEXR's
    decoder runs in _quietly), so that it must not run beside a thread that prints. An
    unreadable file: False (its decode reports it)."""
    try:
        head, _ = _read_bytes(path, 4)
    except GraphError:
        return False
    return head[:4] == _EXR_MAGIC


def _quietly(call):
    """(call's result or None, its exception or None, what native code printed meanwhile).
    OpenEXR's binding prints some decoding failures (to Python's stdout) and then raises a
    less telling error; captured, that text joins the one error line instead of standing
    as a stray line of its own. The process's own stdout and stderr are captured too, for
    what the C++ library may print. Holds STDIO (above)."""
    import tempfile

    result = error = None
    with STDIO, tempfile.TemporaryFile() as tmp:
        saved = []
        for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
            try:
                stream.flush()
                saved.append((fd, os.dup(fd)))
                os.dup2(tmp.fileno(), fd)
            except (OSError, ValueError, AttributeError):  # no such stream to redirect
                pass
        printed = io.StringIO()  # what the binding prints through Python's sys.stdout
        try:
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                result = call()
        except Exception as e:  # the binding raises RuntimeError, ValueError, TypeError
            error = e
        finally:
            _flush_c_stdio()  # C++'s std::cout writes into C's stdout buffer
            for fd, copy in saved:
                os.dup2(copy, fd)
                os.close(copy)
        tmp.seek(0)
        said = printed.getvalue() + tmp.read(4096).decode("utf-8", "replace")
    return result, error, said


def _flush_c_stdio() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):  # no C library to ask: nothing buffered there to lose
        pass


def _exr_reason(error: Exception | None, said: str) -> str:
    """One line from what the library printed and raised."""
    parts = []
    for text in (said, str(error) if error is not None else ""):
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if not lines or "Invalid part index" in lines[0]:
            continue
        line = lines[0].replace("<python_buffer>", "")
        line = re.sub(r"^Warning: Exception raised reading pixel data for part \d+ - ", "",
                      line)
        line = re.sub(r"^Unable to open '' for read: ", "", line).lstrip(": ")
        parts.append(line)
    return "; ".join(parts) or type(error).__name__


def _exr_load(path: PathLike, raw: bytes, header_only: bool) -> tuple[dict, dict]:
    """(header, {name: channel}) of the file's first part."""
    OpenEXR = _openexr()

    def load():
        f = OpenEXR.File(io.BytesIO(raw), separate_channels=True, header_only=header_only)
        return f.header(), f.channels()

    value, error, said = _quietly(load)
    if error is not None or said.strip():
        raise _fail(path, None, f"cannot decode OpenEXR file: {_exr_reason(error, said)}")
    return value


def read_exr(path: PathLike, finite: bool = False) -> np.ndarray:
    """float32 (ht, wd, 4) rgba from an OpenEXR file (channels R G B and optional A, or Y;
    half, float or uint pixels; any compression, scanline or tiled; a multi-part file's
    first part). A file the library finds damaged is an error, never black rows."""
    raw, _ = _read_bytes(path)
    return _read_exr(path, raw, finite)[0]


def _read_exr(path: PathLike, raw: bytes, finite: bool) -> tuple[np.ndarray, bool]:
    """(read_exr's image, whether its colour channels are half floats)."""
    if raw[:4] != _EXR_MAGIC:
        raise _fail(path, 0, "expected OpenEXR magic 76 2f 31 01")
    header, _ = _exr_load(path, raw, header_only=True)
    chans = {ch.name: ch for ch in header.get("channels", [])}
    kind = str(header.get("type", "scanlineimage")).rsplit(".", 1)[-1]
    if kind.startswith("deep"):
        raise _fail(path, None, "deep OpenEXR files are not supported (one sample per pixel "
                    "is)")
    (xmin, ymin), (xmax, ymax) = header["dataWindow"]
    wd, ht = int(xmax) - int(xmin) + 1, int(ymax) - int(ymin) + 1
    if wd < 1 or ht < 1:
        raise _fail(path, None, f"expected a non-empty data window, found {wd}x{ht}")
    _check_declared(path, wd * ht * max(len(chans), 4) * 4, f"a {wd}x{ht} data window")
    for name, ch in chans.items():
        if ch.xSampling != 1 or ch.ySampling != 1:
            raise _fail(path, None, f"subsampled channel '{name}' is not supported "
                        "(expected sampling 1 1)")
    names = set(chans)
    if not ({"R", "G", "B"} <= names or "Y" in names):
        raise _fail(path, None, "expected channels R, G, B (or Y), found "
                    + " ".join(sorted(names)))
    _, chans = _exr_load(path, raw, header_only=False)
    planes = {name: np.asarray(ch.pixels) for name, ch in chans.items()}
    if any(p.shape != (ht, wd) for p in planes.values()):
        raise _fail(path, None, f"expected {wd}x{ht} pixels per channel, the library "
                    "decoded " + ", ".join(f"{n} {p.shape}" for n, p in planes.items()))
    rgb = ["R", "G", "B"] if {"R", "G", "B"} <= names else ["Y"] * 3
    image = np.empty((ht, wd, 4), np.float32)
    for c, name in enumerate(rgb):
        image[:, :, c] = planes[name]
    image[:, :, 3] = planes["A"] if "A" in planes else 1.0
    if finite:
        _check_finite(path, image, None, 4)
    return image, all(planes[n].dtype == np.float16 for n in rgb)


def exr_bytes(array, half: bool = False, compression: str = "zip") -> list[bytes]:
    """A single-part scanline OpenEXR file: channels R G B (alpha dropped), or Y for
    one-channel arrays; half or float pixels; compression one of EXR_COMPRESSIONS."""
    return [_exr_encode(_exr_pixels(array, half), compression).getvalue()]


def write_exr(path: PathLike, array, half: bool = False, compression: str = "zip") -> None:
    """Write linear float rgb (alpha dropped) as OpenEXR, f32 or f16 pixels (beyond f16's
    range: inf, refused)."""
    px = _exr_pixels(array, half)
    atomic_write(path, [_exr_encode(px, compression).getbuffer()], px)


def _exr_pixels(array, half: bool) -> np.ndarray:
    """What an EXR holds: rgb (alpha dropped) or grey, f16 or f32, C-contiguous (the binding
    reads an (h, w, 3) array as R, G, B only so: it writes a strided view's memory as it
    lies); no copy where the array already is that (a 24 MP image: each copy is 0.1-0.4 s)."""
    arr = _rgb_or_grey(_as_image(array, "EXR"))
    with np.errstate(over="ignore", invalid="ignore"):
        return np.ascontiguousarray(arr, dtype=np.float16 if half else np.float32)


def _exr_encode(px: np.ndarray, compression: str) -> io.BytesIO:
    """_exr_pixels' array encoded: one "RGB" array (the binding splits it into R, G, B
    itself, so no per-channel copies) or Y."""
    if compression not in EXR_COMPRESSIONS:
        raise GraphError(f"cannot write OpenEXR compression '{compression}': expected one "
                         f"of {', '.join(EXR_COMPRESSIONS)}")
    OpenEXR = _openexr()
    channels = {"RGB": px} if px.shape[2] == 3 else {"Y": px[:, :, 0]}
    codec = getattr(OpenEXR, "NO_COMPRESSION" if compression == "none"
                    else f"{compression.upper()}_COMPRESSION")
    header = {"compression": codec, "type": OpenEXR.scanlineimage}
    out = io.BytesIO()
    _, error, said = _quietly(lambda: OpenEXR.File(header, channels).write(out))
    if error is not None:
        raise RuntimeFailure(f"cannot encode OpenEXR file: {_exr_reason(error, said)}")
    return out


# ------------------------------------------------------------------------------------------
# photographs: PNG, JPEG, TIFF, WebP (Pillow; tifffile for TIFF) and what a file carries


@dataclass(frozen=True)
class ImageMeta:
    """What an image file carries besides its pixels: enough to write a result like it."""

    format: str  # "png", "jpg", "tiff", "webp", "exr", "pfm", or Pillow's name of it
    depth: str  # samples as stored: "u8", "u16", "f16" or "f32"
    exif: bytes | None = None  # EXIF (Pillow's `exif=` form), Orientation reset to 1
    icc: bytes | None = None  # ICC profile of the decoded colour (None after CMYK -> rgb)
    quality: int | None = None  # a JPEG's quality, estimated from its quantisation tables
    subsampling: int | None = None  # a JPEG's chroma subsampling (0 4:4:4, 1 4:2:2, 2 4:2:0)
    orientation: int = 1  # the EXIF Orientation the decoded pixels were turned upright by


_TIFF_MAGIC = (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+")
_ORIENTATION = 0x0112
# IFD0 tags that describe the photograph (not its pixel layout), with the Exif and GPS
# sub-IFDs: what a TIFF's tags give to another format's EXIF
_EXIF_DESCRIPTIVE = (270, 271, 272, 282, 283, 296, 305, 306, 315, 33432, 0x8769, 0x8825)
_TIFF_TEXT_TAGS = (270, 271, 272, 305, 306, 315, 33432)  # the ones a TIFF writer takes back


# EXIF Orientation -> (swap rows and columns, then reverse the rows, reverse the columns)
_TURNS = {1: (False, False, False), 2: (False, False, True), 3: (False, True, True),
          4: (False, True, False), 5: (True, False, False), 6: (True, False, True),
          7: (True, True, True), 8: (True, True, False)}


def orient(pixels: np.ndarray, orientation: int) -> np.ndarray:
    """The pixels as they are meant to be seen, given EXIF Orientation 1..8 (the row-0 /
    column-0 sides of the stored image): what Pillow's `ImageOps.exif_transpose` does, on
    arrays of any sample type."""
    swap, rows, cols = _TURNS.get(orientation, _TURNS[1])
    if not (swap or rows or cols):
        return np.ascontiguousarray(pixels)
    p = _pixel_words(pixels)
    p = np.swapaxes(p, 0, 1) if swap else p
    if rows:
        p = p[::-1]
    if cols:
        p = p[:, ::-1]
    out = copied(p)
    return out if out.dtype == pixels.dtype else out.view(pixels.dtype).reshape(
        out.shape[:2] + pixels.shape[2:])


def planar_rows(a: np.ndarray) -> bool:
    """Whether each channel of each row of an (h, w, c) array lies contiguous: a view of (h,
    c, w) memory (rgb-out's `planar` result, what an OpenEXR scanline holds), or rows of one
    pixel or one channel, where both layouts are the same."""
    return a.shape[1] == 1 or a.strides[1] == a.itemsize


def by_rows(fn, a: np.ndarray) -> None:
    """fn(r0, r1) for bands of a's rows (about PART values each) on the host's threads."""
    in_parts(fn, a.shape[0], max(1, PART // max(1, a[0].size)))


def copy_rows(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src in bands of rows on the host's threads (a 24 MP image turned, or a 6 M
    photosite tile's rgb put in place: tens of MB, 12 ms a 72 MB copy on one core of an H100
    machine)."""
    by_rows(lambda r0, r1: np.copyto(dst[r0:r1], src[r0:r1]), dst)


def copied(x: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of x, made by copy_rows."""
    out = np.empty(x.shape, x.dtype)
    copy_rows(out, x)
    return out


def _pixel_words(pixels: np.ndarray) -> np.ndarray:
    """A contiguous (ht, wd, c) array as (ht, wd) words of one whole pixel each where its
    samples make 2, 4 or 8 bytes (8-bit rgbx: uint32), else the array itself: turning an
    image then moves one word per pixel instead of c samples (12 MP rgbx: 90 -> 50 ms)."""
    nbytes = pixels.shape[2] * pixels.itemsize if pixels.ndim == 3 else 0
    if nbytes not in (2, 4, 8) or not pixels.flags.c_contiguous:
        return pixels
    return pixels.view(f"u{nbytes}")[:, :, 0]


def _exif_upright(im, descriptive_only: bool = False) -> tuple[bytes | None, int]:
    """(the image's EXIF with Orientation set to 1, the Orientation it had). A TIFF's IFD0
    also holds its pixel layout: descriptive_only keeps the tags that describe the photo."""
    from PIL import Image

    try:
        exif = im.getexif()
        orientation = int(exif.get(_ORIENTATION, 1))
        if descriptive_only:
            kept = Image.Exif()
            for tag in _EXIF_DESCRIPTIVE:
                if tag in (0x8769, 0x8825):
                    ifd = exif.get_ifd(tag)
                    if ifd:
                        kept[tag] = ifd
                elif tag in exif and not (tag == 270 and str(exif[tag]).startswith("{")):
                    kept[tag] = exif[tag]  # (a JSON description: tifffile's own metadata)
            exif = kept
        if not len(exif):
            return None, orientation if 1 <= orientation <= 8 else 1
        if _ORIENTATION in exif:
            exif[_ORIENTATION] = 1
        data = exif.tobytes()
    except Exception:  # a damaged EXIF block is dropped, the pixels still count
        return None, 1
    return data, orientation if 1 <= orientation <= 8 else 1


# ITU-T T.81 Annex K.1: the example luminance quantisation table (natural order), which the
# IJG library scales by quality
_JPEG_LUMA = np.array([
    16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55,
    14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29, 51, 87, 80, 62,
    18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
    49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99])


def jpeg_quality(tables: dict) -> int | None:
    """The quality (1..100) whose IJG-scaled Annex K luminance table is nearest to a JPEG's
    first table (Pillow's `quantization`): IJG scales by 5000/q below 50, by 200 - 2q
    above. Compared as sorted values, so the tables' entry order does not matter; a camera's
    own tables get the nearest IJG quality."""
    if not tables:
        return None
    table = np.sort(np.asarray(tables[min(tables)], np.int64).reshape(-1))
    if table.size != 64:
        return None
    q = np.arange(1, 101)[:, None]
    scale = np.where(q < 50, 5000 // q, 200 - 2 * q)
    ijg = np.clip((_JPEG_LUMA[None, :] * scale + 50) // 100, 1, 255)
    err = np.abs(np.sort(ijg, axis=1) - table[None, :]).sum(axis=1)
    return int(np.argmin(err)) + 1


def _cmyk_to_rgb(im, icc: bytes | None):
    """A CMYK image as sRGB: through its ICC profile where it has one lcms can use, else
    Pillow's conversion (r = (1 - c)(1 - k), ...)."""
    if icc:
        try:
            from PIL import ImageCms

            src = ImageCms.ImageCmsProfile(io.BytesIO(icc))
            return ImageCms.profileToProfile(im, src, ImageCms.createProfile("sRGB"),
                                             outputMode="RGB")
        except Exception:  # a profile lcms cannot use: the formula
            pass
    return im.convert("RGB")


_PILLOW_TO = {"P": None, "PA": "RGBA", "RGBX": "RGB", "YCbCr": "RGB", "HSV": "RGB",
              "LAB": "RGB", "RGBa": "RGBA", "La": "LA", "1": "L"}


def _pillow_pixels(im, icc: bytes | None) -> tuple[np.ndarray, bytes | None]:
    """(samples (ht, wd[, c]) as uint8, uint16 or float32, the ICC profile they are in) of
    a Pillow image in any mode: grey, grey+alpha, rgb, rgba (8-bit rgb comes as rgba of
    alpha 255); CMYK is converted to sRGB (so its CMYK profile no longer applies), a palette
    to its colours."""
    mode = im.mode
    if mode == "CMYK":
        return np.asarray(_cmyk_to_rgb(im, icc)), None
    if mode in _PILLOW_TO:
        to = _PILLOW_TO[mode] or ("RGBA" if "transparency" in im.info else "RGB")
        im = im.convert(to)
    if im.mode == "RGB":  # Pillow holds rgb as rgbx, x 255: copied as it is (read-only),
        # rgba of alpha 1 for _linear_rgba without a padding pass (12 MP: 45 ms less)
        wd, ht = im.size
        rgbx = np.frombuffer(im.tobytes("raw", "RGBX"), np.uint8).reshape(ht, wd, 4)
        if rgbx[:, :, 3].min() == 255:
            return rgbx, icc
    arr = np.asarray(im)
    if mode == "I":  # 32-bit integers: 16-bit data that Pillow widened
        if arr.size and (arr.min() < 0 or arr.max() > 65535):
            raise ValueError("32-bit integer samples beyond 0..65535 are not supported")
        arr = arr.astype(np.uint16)
    elif arr.dtype.kind == "u" and arr.dtype.itemsize == 2:
        arr = arr.astype(np.uint16)  # I;16B etc.: native byte order
    elif arr.dtype.kind == "f":
        arr = arr.astype(np.float32)
    return arr, icc


def _format_name(name: str | None) -> str:
    name = (name or "").lower()
    return {"jpeg": "jpg", "mpo": "jpg"}.get(name, name)


def _depth(pixels: np.ndarray) -> str:
    if pixels.dtype.kind == "f":
        return "f16" if pixels.dtype.itemsize == 2 else "f32"
    return "u16" if pixels.dtype.itemsize == 2 else "u8"


def _decode_pillow(path: PathLike, raw: bytes) -> tuple[np.ndarray, ImageMeta]:
    from PIL import Image, JpegImagePlugin

    try:
        with _pillow_quiet():
            im = Image.open(io.BytesIO(raw))
            fmt = _format_name(im.format)
            icc = im.info.get("icc_profile") or None
            exif, orientation = _exif_upright(im, descriptive_only=fmt == "tiff")
            quality = subsampling = None
            if fmt == "jpg":
                quality = jpeg_quality(getattr(im, "quantization", None))
                sampling = JpegImagePlugin.get_sampling(im)
                subsampling = sampling if sampling >= 0 else None
            pixels = _png16_colour(path, raw)  # Pillow keeps 8 of a 16-bit PNG's colour bits
            if pixels is None:
                pixels, icc = _pillow_pixels(im, icc)
    except GraphError:
        raise
    except Exception as e:  # Pillow raises many kinds for a bad file
        raise _fail(path, None, f"cannot decode image: {_reason(e)}") from None
    pixels = orient(pixels, orientation)
    return pixels, ImageMeta(fmt, _depth(pixels), exif, icc, quality, subsampling, orientation)


def _decode_tiff(path: PathLike, raw: bytes) -> tuple[np.ndarray, ImageMeta]:
    """TIFF through tifffile, which keeps 16-bit and float colour (Pillow has neither for
    rgb): grey, rgb (either with alpha, chunky or planar) and CMYK; other photometric
    interpretations (palette, YCbCr, ...) and codecs tifffile cannot decode go to Pillow."""
    import tifffile

    try:
        with tifffile.TiffFile(io.BytesIO(raw)) as tif:
            page = tif.pages[0]
            photometric = int(page.photometric)
            dtype = page.dtype
            if photometric not in (0, 1, 2, 5) or dtype is None or (dtype.kind, dtype.itemsize) \
                    not in (("u", 1), ("u", 2), ("f", 2), ("f", 4)):
                return _decode_pillow(path, raw)
            wd, ht = int(page.imagewidth), int(page.imagelength)
            _check_declared(path, wd * ht * 16, f"{wd}x{ht} pixels")
            try:
                arr = page.asarray()
            except Exception:  # e.g. a codec that needs imagecodecs: Pillow may have it
                return _decode_pillow(path, raw)
            axes = page.axes
            tag = page.tags.get(34675)
            icc = bytes(tag.value) if tag is not None and photometric != 5 else None
            tag = page.tags.get(274)
            orientation = int(tag.value) if tag is not None else 1
    except GraphError:
        raise
    except Exception as e:  # tifffile raises many kinds for a bad file
        raise _fail(path, None, f"cannot decode TIFF image: {_reason(e)}") from None
    if "S" in axes and axes.index("S") < axes.index("Y"):  # planar: samples first
        arr = np.moveaxis(arr, axes.index("S"), -1)
    arr = arr.reshape(ht, wd, -1)
    depth = _depth(arr)
    if photometric == 0:  # min-is-white
        arr = (np.iinfo(arr.dtype).max - arr) if arr.dtype.kind == "u" else 1.0 - arr
    elif photometric == 5:  # CMYK (+ extra samples): rgb = (1 - c)(1 - k), ...
        top = float(np.iinfo(arr.dtype).max) if arr.dtype.kind == "u" else 1.0
        ink = arr[:, :, :4].astype(np.float64) / top
        rgb = (1 - ink[:, :, :3]) * (1 - ink[:, :, 3:4])
        arr = np.rint(rgb * top).astype(arr.dtype) if arr.dtype.kind == "u" else rgb
    if arr.dtype.kind == "f":
        arr = arr.astype(np.float32)
    exif = None
    try:
        from PIL import Image

        exif = _exif_upright(Image.open(io.BytesIO(raw)), descriptive_only=True)[0]
    except Exception:  # the tags Pillow cannot parse: no EXIF to carry
        pass
    pixels = orient(arr, orientation if 1 <= orientation <= 8 else 1)
    return pixels, ImageMeta("tiff", depth, exif, icc, orientation=orientation)


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
            with _pillow_quiet():
                im = Image.open(io.BytesIO(raw))
                tile = im.tile[0]
                args = tile.args if isinstance(tile.args, str) else tile.args[0]
                im.tile = [tile._replace(args=args.replace(";16B", ";16" + order))]
                im.load()
        except Exception as e:  # any decoder failure is a bad file
            raise _fail(path, None, f"cannot decode PNG image: {_reason(e)}") from None
        planes.append(np.asarray(im, dtype=np.uint16))
    return planes[0] * 256 + planes[1]


@contextmanager
def _pillow_quiet():
    """Pillow's DecompressionBombWarning silenced: vkgraph checks an image's size against
    READ_MAX before decoding it (_check_png_size) and Pillow's own error still stops twice
    its limit, so the warning would only print a Python warning on the user's terminal."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        yield


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
        return "not a PNG, JPEG, TIFF, WebP or other image file that Pillow can read"
    if type(e).__name__ == "DecompressionBombError":
        return f"{msg} (Pillow's guard against decompression bombs)"
    return msg


def _check_png_size(path: PathLike, raw: bytes) -> None:
    """A PNG's declared size (IHDR) against READ_MAX as f32 rgba, before decoding."""
    if raw[:8] == b"\x89PNG\r\n\x1a\n" and len(raw) >= 24 and raw[12:16] == b"IHDR":
        wd, ht = struct.unpack(">II", raw[16:24])
        _check_declared(path, wd * ht * 16, f"{wd}x{ht} pixels")


def _linear_rgba(image: np.ndarray) -> np.ndarray:
    """float32 (ht, wd, 4) linear rgba from decoded samples: integers are sRGB-decoded
    (alpha scaled linearly), floats taken as linear; grey is repeated, missing alpha is 1."""
    image = _as_image(image, "image")
    if image.shape[2] > 4:
        image = image[:, :, :4]
    if image.dtype == np.uint8 and image.shape[2] >= 3:
        fast = _rgb8_linear_rgba(image)
        if fast is not None:
            return fast
    kind = image.dtype.kind
    if kind in "ub":
        image = decode_unorm(image)
    c = image.shape[2]
    alpha = image[:, :, 3 if c == 4 else 1] if c in (2, 4) else None
    colour = image[:, :, :3] if c >= 3 else np.repeat(image[:, :, :1], 3, axis=2)
    out = np.empty(image.shape[:2] + (4,), np.float32)
    out[:, :, :3] = colour
    out[:, :, 3] = 1.0 if alpha is None else alpha
    return out


def _rgb8_linear_rgba(image: np.ndarray) -> np.ndarray | None:
    """_linear_rgba of 8-bit rgb, or rgba whose alpha is all 255 (else None): rgb padded to
    rgbx (x = 255), then looked up two samples at a time (_pair_table) straight into the
    rgba output, whose alpha comes out 1 (the table's 255). The same numbers as decode_unorm
    and a copy into rgba, one pass over the output instead of four (12 MP: 0.57 -> 0.13 s)."""
    ht, wd, c = image.shape
    if c == 4:
        if image[:, :, 3].min() != 255:
            return None
        rgbx = np.ascontiguousarray(image)
    else:
        rgbx = np.empty((ht, wd, 4), np.uint8)
        rgbx[:, :, :3] = image
        rgbx[:, :, 3] = 255
    out = np.empty((ht, wd, 4), np.float32)
    table, src, dst = _pair_table(), rgbx.view(np.uint16).reshape(-1), out.view(np.uint64
                                                                               ).reshape(-1)

    def part(i: int, j: int) -> None:  # take widens its indices to intp: a part at a time
        np.take(table, src[i:j], out=dst[i:j], mode="clip")

    in_parts(part, src.size)
    return out


@functools.cache
def _pair_table() -> np.ndarray:
    """The linear float32 values of two sRGB-encoded bytes, as one 8-byte word per uint16
    that the two bytes make in memory (either byte order): 65536 words."""
    lut = _decode_table(1)
    if lut[255] != 1.0:  # the padding byte must decode to alpha 1
        raise AssertionError("sRGB 255 does not decode to 1")
    pairs = np.arange(1 << 16, dtype=np.uint16).view(np.uint8).reshape(-1, 2)
    return np.ascontiguousarray(lut[pairs]).view(np.uint64).reshape(-1)


def decode_image(path: PathLike, finite: bool = False) -> tuple[np.ndarray, ImageMeta]:
    """(float32 (ht, wd, 4) linear rgba, what the file carries) from PFM, OpenEXR, TIFF, or
    anything Pillow reads (PNG, JPEG, WebP, ...). Integer colour is sRGB-decoded, alpha
    scaled linearly (1 when the file has none); float data is taken as linear. EXIF
    Orientation is applied (the pixels come upright); CMYK, palette and other modes become
    rgb. finite=True: NaN/Inf pixels are an error."""
    pixels, meta = decode_pixels(path, finite)
    return linear_rgba(pixels), meta


def decode_pixels(path: PathLike, finite: bool = False) -> tuple[np.ndarray, ImageMeta]:
    """decode_image's samples before they become linear floats: (ht, wd[, c]) as the file
    stores them, upright (integers sRGB-encoded; 8-bit rgb as rgbx, see rgbx8), or float32
    linear rgba (PFM, OpenEXR); linear_rgba() of them is decode_image's image."""
    raw, _ = _read_bytes(path)
    if not raw:
        raise _fail(path, 0, "cannot decode image: the file is empty")
    if raw[:2] in (b"PF", b"Pf"):
        return _linear_rgba(read_pfm(path, finite)), ImageMeta("pfm", "f32")
    if raw[:4] == _EXR_MAGIC:
        image, half = _read_exr(path, raw, finite)
        return image, ImageMeta("exr", "f16" if half else "f32")
    if raw[:4] in _TIFF_MAGIC:
        pixels, meta = _decode_tiff(path, raw)
    else:
        _check_png_size(path, raw)
        pixels, meta = _decode_pillow(path, raw)
    if pixels.ndim == 4:  # animations: the first frame
        pixels = pixels[0]
    if finite and pixels.dtype.kind == "f":
        _check_finite(path, _linear_rgba(pixels), None, 4)  # (float TIFFs: rare)
    return pixels, meta


def linear_rgba(pixels: np.ndarray) -> np.ndarray:
    """float32 (ht, wd, 4) linear rgba of decode_pixels' samples (decode_image's image)."""
    if pixels.ndim == 3 and pixels.shape[2] == 4 and pixels.dtype == np.float32:
        return pixels  # PFM, OpenEXR: linear rgba already
    return _linear_rgba(pixels)


def rgbx8(pixels: np.ndarray) -> np.ndarray | None:
    """8-bit sRGB rgb (ht, wd, 3), or rgba whose alpha is all 255, as contiguous (ht, wd, 4)
    uint8 with alpha 255 (Pillow decodes 8-bit rgb to this layout: no copy then); None for
    any other samples (grey, 16-bit, float, a real alpha)."""
    if pixels.dtype != np.uint8 or pixels.ndim != 3 or pixels.shape[2] not in (3, 4):
        return None
    if pixels.shape[2] == 4:
        if pixels[:, :, 3].min() != 255:
            return None
        return np.ascontiguousarray(pixels)
    out = np.empty(pixels.shape[:2] + (4,), np.uint8)
    out[:, :, :3] = pixels
    out[:, :, 3] = 255
    return out


def image_size(path: PathLike) -> tuple[int, int]:
    """(wd, ht) of an image file from its header, without decoding the pixels: PFM and
    OpenEXR by their own headers, the rest by Pillow (quietly); else from the decoded image
    (read_image)."""
    head, _ = _read_bytes(path, 4)
    if head[:2] in (b"PF", b"Pf"):
        info = pfm_info(path)
        return info.wd, info.ht
    if head[:4] == _EXR_MAGIC:
        (xmin, ymin), (xmax, ymax) = _exr_load(path, _read_bytes(path)[0], True)[0][
            "dataWindow"]
        return int(xmax) - int(xmin) + 1, int(ymax) - int(ymin) + 1
    try:
        from PIL import Image

        with _pillow_quiet(), Image.open(path) as im:
            return im.size
    except Exception:  # a file Pillow does not read (some TIFFs): decode it
        ht, wd = read_image(path).shape[:2]
        return wd, ht


def upright_size(path: PathLike) -> tuple[int, int] | None:
    """(wd, ht) that decode_image will give a file Pillow reads (EXIF Orientation applied),
    from its header alone (a few ms); None where the header does not say (the decode will)."""
    try:
        from PIL import Image

        with _pillow_quiet(), Image.open(path) as im:
            wd, ht = im.size
            orientation = im.getexif().get(_ORIENTATION, 1)
    except Exception:  # the decode says what is wrong
        return None
    swap = isinstance(orientation, int) and _TURNS.get(orientation, _TURNS[1])[0]
    return (ht, wd) if swap else (wd, ht)


def read_image(path: PathLike, finite: bool = False) -> np.ndarray:
    """float32 (ht, wd, 4) linear rgba of an image file (see `decode_image`)."""
    return decode_image(path, finite)[0]


# writers: linear float in, the file's encoding out


DEPTHS = ("u8", "u16", "f32")


def srgb_samples(array, depth: str = "u8") -> np.ndarray:
    """Linear float rgb or grey -> sRGB-encoded uint8 or uint16 samples (ht, wd, c), clamped
    to [0, 1]; NaN becomes 0 (in chunks, as to_srgb8). float32 to 8 bits (what `vkgraph
    denoise` writes as JPEG) goes through _srgb8_tables: the same bytes, 6x faster."""
    top, dt = (65535.0, np.uint16) if depth == "u16" else (255.0, np.uint8)
    if dt == np.uint8 and np.asarray(array).dtype == np.float32:
        return _srgb8_float32(np.asarray(array))
    return _chunked(lambda v: np.rint(_to_srgb(v) * top).astype(dt), array, dt)


_SRGB8_CHUNK = 1 << 16  # values at a time: the temporaries stay in the cache
_HIGH_HALF = 1 if sys.byteorder == "little" else 0  # the uint16 of a float32's top 16 bits


def _srgb8_float32(x: np.ndarray) -> np.ndarray:
    """srgb_samples(x, "u8") of float32 x without its float64 formula: clamped to 1, each
    value's top 16 bits pick a code and the threshold of the next code within them
    (_srgb8_tables), code + (x >= threshold). 0.11 s against 0.7 on 36 M values, on one
    core; in_parts spreads the rows over the cores. x may be a strided view (the rgb of an
    rgba image, as the Denoiser gives it): the clamp reads it in place, into a small buffer."""
    codes, thresholds = _srgb8_tables()
    out = np.empty(x.shape, np.uint8)
    rows = x.reshape((-1,) + x.shape[-2:]) if x.ndim >= 3 else x if x.ndim == 2 else \
        x.reshape(1, -1)
    dst = out.reshape(rows.shape)
    per_row = max(1, rows.size // max(1, rows.shape[0]))
    step = max(1, _SRGB8_CHUNK // per_row)  # rows at a time: the temporaries stay in the cache

    def part(r0: int, r1: int) -> None:
        n = min(step, r1 - r0) * per_row
        buf, thr = np.empty(n, np.float32), np.empty(n, np.float32)
        up, index = np.empty(n, np.bool_), np.empty(n, np.intp)
        for r in range(r0, r1, step):
            k = min(step, r1 - r) * per_row
            v = buf[:k]
            np.minimum(rows[r:r + step], np.float32(1.0), out=v.reshape(rows[r:r + step].shape))
            top = index[:k]  # widened once for both takes (each would widen it: 20% slower)
            np.copyto(top, v.view(np.uint16)[_HIGH_HALF::2])  # (NaN stays NaN: code 0)
            o = dst[r:r + step].reshape(-1)
            np.take(codes, top, out=o)
            np.take(thresholds, top, out=thr[:k])
            np.greater_equal(v, thr[:k], out=up[:k])
            np.add(o, up[:k], out=o, casting="unsafe")

    in_parts(part, rows.shape[0], max(step, PART // per_row // step * step))
    return out


@functools.cache
def _srgb8_tables() -> tuple[np.ndarray, np.ndarray]:
    """(code, threshold) for each top 16 bits of a float32 value at most 1: the 8-bit sRGB
    code of the smallest value with those bits (the formula's, rint(_to_srgb(x) * 255)), and
    the smallest such value whose code is one more (inf where none: within 16 bits the code
    grows by at most 1, checked here). Negative values, -0 and NaN get 0, 1.0 gets 255.
    Equal to the formula on every float32 in [0, 1] (all 2^30 of them, checked once;
    tests/test_formats.py checks each threshold's neighbours)."""
    def code(v: np.ndarray) -> np.ndarray:
        return np.rint(_to_srgb(v) * 255.0)

    one = 0x3F80  # the top bits of 1.0; above it (after the clamp) only NaN
    hi = np.arange(one, dtype=np.uint32) << 16
    first, last = code(hi.view(np.float32)), code((hi | 0xFFFF).view(np.float32))
    if not np.all((last - first >= 0) & (last - first <= 1)):
        raise AssertionError("an 8-bit sRGB code step within 16 bits of float32")
    codes = np.zeros(1 << 16, np.uint8)
    codes[:one] = first
    codes[one] = 255
    thresholds = np.full(1 << 16, np.inf, np.float32)
    steps = np.nonzero(last > first)[0]
    lo, top, want = hi[steps], hi[steps] | 0xFFFF, first[steps] + 1
    for _ in range(16):  # the smallest value of the next code, by bisection of the bits
        mid = lo + (top - lo) // 2
        up = code(mid.view(np.float32)) >= want
        top, lo = np.where(up, mid, top), np.where(up, lo, mid)
    thresholds[steps] = top.view(np.float32)
    return codes, thresholds


def _samples(array, what: str, depth: str) -> np.ndarray:
    """(ht, wd) grey or (ht, wd, 3) rgb samples for a writer: sRGB integers, or linear f32."""
    if depth not in DEPTHS:
        raise GraphError(f"cannot write {what} of depth '{depth}': expected one of "
                         f"{', '.join(DEPTHS)}")
    arr = _rgb_or_grey(_as_image(array, what))
    if arr.dtype == np.uint8:  # 8-bit sRGB samples already (the Denoiser's srgb8 path)
        if depth == "u8":
            return arr[:, :, 0] if arr.shape[2] == 1 else arr
        arr = decode_unorm(arr)
    if depth == "f32":
        with np.errstate(over="ignore", invalid="ignore"):
            px = arr.astype(np.float32)
    elif depth == "u8" and rgba_of(arr) is not None:
        px = srgb_samples(rgba_of(arr), depth)[:, :, :3]  # rgbx: see _pillow_bytes
    else:
        px = srgb_samples(arr, depth)
    return px[:, :, 0] if px.shape[2] == 1 else px


def _check_quality(quality: int, what: str) -> int:
    if not isinstance(quality, (int, np.integer)) or not 1 <= quality <= 100:
        raise GraphError(f"cannot write {what}: quality {quality!r} is outside 1..100")
    return int(quality)


def _pillow_bytes(px: np.ndarray, fmt: str, **options) -> bytes:
    """px encoded by Pillow; 8-bit rgb that is the rgb of rgbx (_samples of an rgba image) is
    handed to a JPEG encoder as the rgbx memory itself (Pillow's own layout for rgb: no copy,
    the same file; 12 MP: 40 ms less)."""
    from PIL import Image

    rgbx = None
    if fmt == "JPEG" and px.dtype == np.uint8:
        rgbx = px if _is_rgbx(px) else rgba_of(px)
    if rgbx is not None:
        im = Image.frombuffer("RGBX", (px.shape[1], px.shape[0]), rgbx, "raw", "RGBX", 0, 1)
    else:
        im = Image.fromarray(px)
    out = io.BytesIO()
    im.save(out, fmt, **{k: v for k, v in options.items() if v is not None})
    return out.getvalue()


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png16_bytes(px: np.ndarray, exif: bytes | None = None, icc: bytes | None = None) -> bytes:
    """A 16-bit PNG (grey, grey+alpha, rgb or rgba from px's channels) with the `Sub` row
    filter, its ICC profile (iCCP) and EXIF (eXIf). Pillow writes no 16-bit colour."""
    px = px[:, :, None] if px.ndim == 2 else px
    ht, wd, c = px.shape
    rows = np.ascontiguousarray(px, ">u2").view(np.uint8).reshape(ht, wd * c * 2)
    sub = rows.copy()
    sub[:, 2 * c:] -= rows[:, :-2 * c]  # each byte minus the same byte one pixel left
    data = np.concatenate([np.ones((ht, 1), np.uint8), sub], axis=1)
    ihdr = struct.pack(">IIBBBBB", wd, ht, 16, {1: 0, 2: 4, 3: 2, 4: 6}[c], 0, 0, 0)
    parts = [b"\x89PNG\r\n\x1a\n", _png_chunk(b"IHDR", ihdr)]
    if icc:
        parts.append(_png_chunk(b"iCCP", b"ICC profile\0\0" + zlib.compress(icc)))
    if exif:
        parts.append(_png_chunk(b"eXIf", exif.removeprefix(b"Exif\0\0")))
    parts += [_png_chunk(b"IDAT", zlib.compress(data.tobytes(), 6)), _png_chunk(b"IEND", b"")]
    return b"".join(parts)


def png_bytes(array, depth: str = "u8", exif: bytes | None = None,
              icc: bytes | None = None) -> bytes:
    px = _samples(array, "PNG", "u16" if depth == "f32" else depth)
    if px.dtype == np.uint16:
        return png16_bytes(px, exif, icc)
    return _pillow_bytes(px, "PNG", exif=exif, icc_profile=icc)


def _is_rgbx(array) -> bool:
    """8-bit sRGB rgbx samples (the Denoiser's srgb(): (ht, wd, 4) uint8, contiguous, alpha
    255 by construction), which a JPEG encoder takes as they are."""
    return (isinstance(array, np.ndarray) and array.dtype == np.uint8 and array.ndim == 3
            and array.shape[2] == 4 and array.flags.c_contiguous)


def jpg_bytes(array, quality: int = 90, exif: bytes | None = None, icc: bytes | None = None,
              subsampling: int | None = None) -> bytes:
    quality = _check_quality(quality, "JPEG")
    px = array if _is_rgbx(array) else _samples(array, "JPEG", "u8")  # rgbx: no copy
    return _pillow_bytes(px, "JPEG", quality=quality, exif=exif, icc_profile=icc,
                         subsampling=subsampling)


def webp_bytes(array, quality: int = 95, exif: bytes | None = None,
               icc: bytes | None = None) -> bytes:
    quality = _check_quality(quality, "WebP")
    return _pillow_bytes(_samples(array, "WebP", "u8"), "WEBP", quality=quality, exif=exif,
                         icc_profile=icc)


def _tiff_tags(exif: bytes | None) -> list[tuple]:
    """The descriptive text tags of an EXIF block as tifffile's extra tags (a TIFF writer
    cannot carry EXIF's sub-IFDs: exposure, ISO, GPS stay behind)."""
    if not exif:
        return []
    from PIL import Image

    tags = Image.Exif()
    try:
        tags.load(exif)
    except Exception:  # a damaged block: nothing to carry
        return []
    return [(tag, "s", 0, tags[tag], True) for tag in _TIFF_TEXT_TAGS
            if isinstance(tags.get(tag), str) and tags[tag].isascii()]


def tiff_bytes(array, depth: str = "u8", exif: bytes | None = None,
               icc: bytes | None = None) -> bytes:
    """A zlib-compressed TIFF: sRGB 8/16-bit or linear f32 rgb (grey for one channel), with
    its ICC profile and EXIF's descriptive tags (make, model, date, artist, ...). Strips of
    about 1 MB, which tifffile compresses on the host's threads (one strip of a whole 24 MP
    16-bit image: 3.8 s on one core; 2.1 s on 2)."""
    import tifffile

    px = _samples(array, "TIFF", depth)
    rows = max(1, (1 << 20) // max(1, px[0].nbytes))
    out = io.BytesIO()  # in memory: the file itself is written by atomic_write
    with tifffile.TiffWriter(out) as tiff:
        tiff.write(px, photometric="rgb" if px.ndim == 3 else "minisblack",
                   compression="zlib", iccprofile=icc or None, metadata=None, software=False,
                   extratags=_tiff_tags(exif), rowsperstrip=rows, maxworkers=WORKERS)
    return out.getvalue()


def _image_values(array, what: str) -> np.ndarray:
    """The float data a writer encodes, for atomic_write's check of non-finite values."""
    return _rgb_or_grey(_as_image(array, what))


def write_png(path: PathLike, array, depth: str = "u8", exif: bytes | None = None,
              icc: bytes | None = None) -> None:
    """Linear float -> sRGB PNG (rgb, alpha dropped; grey for one channel), 8 or 16 bits
    (depth u8/u16; f32 gives 16)."""
    atomic_write(path, png_bytes(array, depth, exif, icc), _image_values(array, "PNG"))


def write_jpg(path: PathLike, array, quality: int = 90, exif: bytes | None = None,
              icc: bytes | None = None, subsampling: int | None = None) -> None:
    """Linear float -> sRGB 8-bit JPEG of the given quality (1..100)."""
    atomic_write(path, jpg_bytes(array, quality, exif, icc, subsampling),
                 _image_values(array, "JPEG"))


def write_webp(path: PathLike, array, quality: int = 95, exif: bytes | None = None,
               icc: bytes | None = None) -> None:
    """Linear float -> sRGB 8-bit lossy WebP of the given quality (1..100)."""
    atomic_write(path, webp_bytes(array, quality, exif, icc), _image_values(array, "WebP"))


def write_tiff(path: PathLike, array, depth: str = "u8", exif: bytes | None = None,
               icc: bytes | None = None) -> None:
    """Linear float -> TIFF (see `tiff_bytes`)."""
    atomic_write(path, tiff_bytes(array, depth, exif, icc), _image_values(array, "TIFF"))


def output_quality(meta: ImageMeta, quality: int | None = None) -> int:
    """The JPEG/WebP quality write_like uses: `quality`, else the input JPEG's, else
    JPG_QUALITY."""
    return quality or meta.quality or JPG_QUALITY


def write_like(path: PathLike, array, meta: ImageMeta | None = None,
               quality: int | None = None) -> None:
    """Write a linear float image in the format of path's extension (IMAGE_WRITERS), like
    the input that `meta` describes: its EXIF (Orientation 1: the pixels are upright) and
    ICC profile, its bit depth where the format has it (16-bit or float in -> 16-bit PNG,
    16-bit or float TIFF; 8-bit stays 8-bit; EXR half stays half), and a JPEG input's
    quality and subsampling; `quality` (1..100) overrides it, else JPG_QUALITY."""
    kind = IMAGE_WRITERS.get(Path(path).suffix.lower())
    if kind is None:
        raise GraphError(f"cannot write '{path}': expected one of "
                         f"{', '.join(IMAGE_WRITERS)}")
    meta = meta or ImageMeta("", "u8")
    depth = "u8" if meta.depth == "u8" else "u16" if meta.depth == "u16" else "f32"
    q = output_quality(meta, quality)
    if kind == "png":
        write_png(path, array, depth, meta.exif, meta.icc)
    elif kind == "jpg":
        write_jpg(path, array, q, meta.exif, meta.icc, meta.subsampling)
    elif kind == "webp":
        write_webp(path, array, q, meta.exif, meta.icc)
    elif kind == "tiff":
        write_tiff(path, array, depth, meta.exif, meta.icc)
    elif kind == "exr":
        write_exr(path, array, half=meta.depth == "f16")
    else:
        write_pfm(path, array)
