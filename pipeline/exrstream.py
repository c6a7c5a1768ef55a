"""An OpenEXR file written while its rows are still being made (`vkgraph denoise` of a raw
file on a GPU: the file is written band by band while the device makes the next band).

    with ExrStream("out.exr", wd, ht) as exr:
        for ...:                      # as rows of `image` (ht, wd, >= 3) float32 become final
            exr.rows(image, stop)     # rows [0, stop) are final
        exr.finish(image)             # the rest; the file replaces out.exr

The file is one part of scanlines, channels B, G, R (OpenEXR's order by name) of FLOAT
samples, line order increasing y, and either uncompressed (`none`, the default: one chunk
a row, the row's samples channel by channel) or ZIP (`zip`: chunks of 16 rows, the rows'
samples channel by channel, their bytes split into even and odd halves, each byte replaced
by its difference to the one before plus 128, then zlib; stored as they are where that is
not smaller). The OpenEXR library reads both (tests/test_exrstream.py: the same samples,
bit for bit). Uncompressed is the default because float32 samples of a photograph hardly
compress: ZIP saves 4-6% of a denoised photograph's bytes (the held-out photographs,
lightly blurred) and 2% of the raw benchmark's picture, for about a second of 16 cores on
24 megapixels.

Each group of final rows (16 with ZIP, a chunk; up to 256 uncompressed) is made into its
chunks on a thread of its own pool (zlib and numpy let go of the GIL) and written at its
place by one writer thread, in order, so that when the last rows come only their chunks, the
offset table and the file's fsync are left. Uncompressed rows whose channels each lie
contiguous (an (h, w, 3) view of (h, 3, w) memory, as rgb-out's `planar` makes them) are
written from the array as they are, a row's y and size and its three planes by one pwritev,
without a pass over the samples but the non-finite check. After each write the system is
asked to start writing it to the disk (AtomicFile.start_writeback), so that the fsync at the
end finds little left (a 288 MB file on an H100 machine: 0.14-0.23 s -> 1 ms; an fdatasync
every 32 MB, which waits, made the command 0.12 s slower: bench/README.md).
The file is an AtomicFile: a failure (an exception in the `with` block, a non-finite
sample, an OS error) removes it and the previous file stays. Rows given from another array
(a run made again: the Denoiser's fp32 retry) start the file over; a view of the same rows
is the same.
"""

from __future__ import annotations

import os
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .errors import RuntimeFailure
from .formats import AtomicFile, non_finite, planar_rows

ROWS = {"zip": 16, "none": 256}  # rows a group holds: a ZIP chunk's; uncompressed, 18 MB at
# 6000 pixels a row (a task of the encoders, written by one pwrite)
THREADS = {"zip": 16, "none": 4}  # encoders at most: zlib's work, or three copies a group
# (more threads of short tasks wait on each other for the interpreter's lock)
LEVEL = 1  # zlib's: float samples compress little at any level, and 1 is the fastest
CODES = {"none": 0, "zip": 3}  # OpenEXR's compression codes
FLOAT = 2  # OpenEXR's pixel type code for 32-bit float


def header(wd: int, ht: int, compression: str = "none") -> bytes:
    """The magic number, the version (2: one part of scanlines) and the attributes an
    OpenEXR file must have, for float32 B, G, R and the compression."""
    def attr(name: str, kind: str, value: bytes) -> bytes:
        return (name.encode() + b"\0" + kind.encode() + b"\0" + struct.pack("<i", len(value))
                + value)

    channels = b"".join(c + b"\0" + struct.pack("<iB3xii", FLOAT, 0, 1, 1)
                        for c in (b"B", b"G", b"R")) + b"\0"
    window = struct.pack("<4i", 0, 0, wd - 1, ht - 1)
    return (struct.pack("<ii", 20000630, 2) + attr("channels", "chlist", channels)
            + attr("compression", "compression", bytes([CODES[compression]]))
            + attr("dataWindow", "box2i", window) + attr("displayWindow", "box2i", window)
            + attr("lineOrder", "lineOrder", b"\0")
            + attr("pixelAspectRatio", "float", struct.pack("<f", 1.0))
            + attr("screenWindowCenter", "v2f", struct.pack("<2f", 0.0, 0.0))
            + attr("screenWindowWidth", "float", struct.pack("<f", 1.0)) + b"\0")


def _planar(rows: np.ndarray) -> np.ndarray:
    """rows (n, wd, >= 3) float32 as OpenEXR's scanlines hold them: (n, 3, wd), B G R."""
    return np.ascontiguousarray(rows[:, :, 2::-1].transpose(0, 2, 1), np.float32)


def zip_block(rows: np.ndarray, level: int = LEVEL) -> bytes:
    """A ZIP chunk's data of rows (n, wd, >= 3) float32 (the module docstring's steps)."""
    raw = _planar(rows).reshape(-1).view(np.uint8)
    n = raw.size
    half = (n + 1) // 2
    split = np.empty(n, np.uint8)
    split[:half] = raw[0::2]
    split[half:] = raw[1::2]
    delta = np.empty(n, np.uint8)
    delta[0] = split[0]
    np.subtract(split[1:], split[:-1], out=delta[1:])
    delta[1:] += 128  # uint8: both wrap modulo 256, as OpenEXR's predictor does
    packed = zlib.compress(delta, level)
    return packed if len(packed) < n else raw.tobytes()


def chunks(rows: np.ndarray, y0: int, compression: str = "none") -> tuple[object, list[int]]:
    """The chunks of rows (n, wd, >= 3) float32 that start at row y0, one after another as
    the file holds them (each: its first row, its data's size, its data; bytes, or an array
    of exactly those bytes), and where each begins in them."""
    if compression == "zip":
        data = zip_block(rows)
        return struct.pack("<ii", y0, len(data)) + data, [0]
    n, wd = rows.shape[:2]
    out = np.empty((n, 2 + 3 * wd), np.float32)  # a row: y and size (int32), B, G, R
    out.view(np.int32)[:, :2] = line_heads(y0, n, wd)
    for c in range(3):  # a channel's samples at a time (numpy's whole transpose of
        out[:, 2 + c * wd:2 + (c + 1) * wd] = rows[:, :, 2 - c]  # them is several x slower)
    return out, [k * (8 + 12 * wd) for k in range(n)]


def line_heads(y0: int, n: int, wd: int) -> np.ndarray:
    """The heads of the uncompressed chunks of rows y0 .. y0 + n - 1, wd pixels of three
    float32 a row: (n, 2) int32 of each row's y and its data's size."""
    heads = np.empty((n, 2), "<i4")
    heads[:, 0] = np.arange(y0, y0 + n)
    heads[:, 1] = 12 * wd
    return heads


def _where(image) -> tuple | None:
    """An array's memory, shape and strides: views of the same rows compare equal (the
    array given before is held, so another array cannot have its memory)."""
    if image is None:
        return None
    return image.__array_interface__["data"][0], image.shape, image.strides


class ExrStream:
    """A float32 rgb OpenEXR file written as its rows come (module docstring), compression
    "none" or "zip"."""

    def __init__(self, path, wd: int, ht: int, compression: str = "none",
                 threads: int | None = None):
        if compression not in CODES:
            raise RuntimeFailure(f"ExrStream writes compression {' or '.join(CODES)}, not "
                                 f"'{compression}'")
        self.path, self.wd, self.ht, self.compression = Path(path), wd, ht, compression
        # a ZIP chunk is 16 rows, so its groups begin at multiples of 16; uncompressed
        # rows go as they come, in groups of at most ROWS
        self.group, self.align = ROWS[compression], (16 if compression == "zip" else 1)
        self.table = -(-ht // 16) if compression == "zip" else ht  # chunks: offsets
        # an uncompressed row's chunk head, for the rows written from the array
        self.lines = line_heads(0, ht, wd) if compression == "none" else None
        self.head = header(wd, ht, compression)
        self.start = len(self.head) + 8 * self.table  # where the chunks begin
        self.file = AtomicFile(self.path)
        self.encoders = ThreadPoolExecutor(threads or min(THREADS[compression],
                                                          os.cpu_count() or 1),
                                           thread_name_prefix="vkgraph-exr")
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="vkgraph-exr-write")
        self.image = None
        self.pending = []
        self._over(None)

    def __enter__(self) -> ExrStream:
        return self

    def __exit__(self, kind, value, tb) -> None:
        if kind is not None:
            self.abort()

    def _over(self, image) -> None:
        """Start the blocks again, for `image`: what was queued is dropped, what runs is
        waited for."""
        for f in self.pending:
            f.cancel()
        for f in self.pending:
            if not f.cancelled():
                f.exception()  # waits; a failure of the old rows does not matter now
        self.image, self.pending, self.done = image, [], 0  # rows given to the encoders
        self.offsets = [0] * self.table
        self.end = self.start  # where the next chunk goes
        self.bad = None

    def rows(self, image: np.ndarray, stop: int) -> None:
        """Rows [0, stop) of image (ht, wd, >= 3), float32, are final: those not yet given
        (in groups of whole ZIP chunks where compressed, unless stop reaches the last row)
        are encoded and written."""
        if _where(image) != _where(self.image):  # (a view made again of it is the same)
            if image.shape[:2] != (self.ht, self.wd) or image.shape[2] < 3:
                raise RuntimeFailure(f"an EXR of {self.wd}x{self.ht} rgb was begun; got rows "
                                     f"of an array {image.shape}", where=str(self.path))
            self._over(image)
        last = self.ht if stop >= self.ht else stop // self.align * self.align
        for y0 in range(self.done, last, self.group):
            y1 = min(y0 + self.group, last)
            encoded = self.encoders.submit(self._encode, image, y0, y1)
            self.pending.append(self.writer.submit(self._write, y0, encoded))
        self.done = max(self.done, last)

    def _encode(self, image: np.ndarray, y0: int, y1: int):
        """The chunks (chunks()) of rows [y0, y1), or the rows themselves where they are
        written as they lie (uncompressed rows of channel planes: _planes), or None (and
        self.bad said) where a sample is not finite."""
        rows = image[y0:y1, :, :3]
        found = non_finite(rows)
        if found is not None:
            i, _ = found
            y, x, c = np.unravel_index(i, rows.shape)
            self.bad = f"{rows[y, x, c]} at x={x} y={y0 + y} channel {c}"
            return None
        # (rows of planes: a row's chunk is written from them as they are)
        if self.compression == "none" and rows.dtype == np.float32 and planar_rows(rows):
            return rows
        return chunks(rows, y0, self.compression)

    def _write(self, y0: int, encoded) -> None:
        done = encoded.result()
        if done is None:
            return
        at = self.end
        if isinstance(done, np.ndarray):  # rows of planes: each row's y and size, its B,
            rows = done                   # G and R planes, straight from the array
            size = 8 + 12 * self.wd
            starts = [k * size for k in range(len(rows))]
            self.file.pwritev([part for k, row in enumerate(rows) for part in (
                self.lines[y0 + k], row[:, 2], row[:, 1], row[:, 0])], at)
            self.end += size * len(rows)
        else:
            data, starts = done
            self.file.pwrite(data, at)
            self.end += memoryview(data).nbytes
        first = y0 // 16 if self.compression == "zip" else y0  # its first chunk
        for j, start in enumerate(starts):
            self.offsets[first + j] = at + start
        self.file.start_writeback(at, self.end - at)

    def finish(self, image: np.ndarray) -> None:
        """The rows not yet given (all of image's), the offset table and the header; the
        file replaces the target. RuntimeFailure, nothing written, where a sample is not
        finite (a file never gets NaN or Inf)."""
        self.rows(image, self.ht)
        try:
            for f in self.pending:
                f.result()
            if self.bad is not None:
                raise RuntimeFailure(f"not written: the data holds {self.bad} (a file never "
                                     "gets NaN or Inf)", where=str(self.path))
            self.file.pwrite(self.head + struct.pack(f"<{self.table}Q", *self.offsets), 0)
            self.file.truncate(self.end)  # (a run made again may have written more)
            self.file.commit()
        except BaseException:
            self.abort()
            raise
        finally:
            self._close_pools()

    def abort(self) -> None:
        """Drop the blocks and the temp file; the target stays as it was."""
        self._over(None)
        self._close_pools()
        self.file.abort()

    def _close_pools(self) -> None:
        self.encoders.shutdown(wait=True, cancel_futures=True)
        self.writer.shutdown(wait=True, cancel_futures=True)
