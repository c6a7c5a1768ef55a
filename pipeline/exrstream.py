"""An OpenEXR file written while its rows are still being made (`vkgraph denoise` of a raw
file on a GPU: the compression of a band of rows overlaps the device's work on the next).

    with ExrStream("out.exr", wd, ht) as exr:
        for ...:                      # as rows of `image` (ht, wd, >= 3) float32 become final
            exr.rows(image, stop)     # rows [0, stop) are final
        exr.finish(image)             # the rest; the file replaces out.exr

The file is what formats.write_exr writes for float32 rgb: one part, scanlines, channels
B, G, R (OpenEXR's order by name) of FLOAT samples, ZIP compression (blocks of 16 rows,
each: the rows' samples channel by channel, their bytes split into even and odd halves, each
byte replaced by its difference to the one before plus 128, then zlib; stored as they are
where that is not smaller), line order increasing y. The OpenEXR library reads it
(tests/test_exrstream.py: the same samples, bit for bit).

Each whole block of final rows is compressed on a thread of its own pool (zlib and numpy let
go of the GIL) and written at its place by one writer thread, in order, so that when the
last rows come only their blocks, the offset table and the file's fsync are left. The file
is an AtomicFile: a failure (an exception in the `with` block, a non-finite sample, an OS
error) removes it and the previous file stays. Rows given from another array (a run made
again: the Denoiser's fp32 retry) start the file over; a view of the same rows is the same.
"""

from __future__ import annotations

import os
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .errors import RuntimeFailure
from .formats import AtomicFile, non_finite

ROWS = 16  # rows a ZIP block holds
LEVEL = 1  # zlib's: float samples compress little at any level, and 1 is the fastest
ZIP = 3  # OpenEXR's compression code for ZIP
FLOAT = 2  # OpenEXR's pixel type code for 32-bit float


def header(wd: int, ht: int) -> bytes:
    """The magic number, the version (2: one part of scanlines) and the attributes an
    OpenEXR file must have, for float32 B, G, R and ZIP."""
    def attr(name: str, kind: str, value: bytes) -> bytes:
        return (name.encode() + b"\0" + kind.encode() + b"\0" + struct.pack("<i", len(value))
                + value)

    channels = b"".join(c + b"\0" + struct.pack("<iB3xii", FLOAT, 0, 1, 1)
                        for c in (b"B", b"G", b"R")) + b"\0"
    window = struct.pack("<4i", 0, 0, wd - 1, ht - 1)
    return (struct.pack("<ii", 20000630, 2) + attr("channels", "chlist", channels)
            + attr("compression", "compression", bytes([ZIP]))
            + attr("dataWindow", "box2i", window) + attr("displayWindow", "box2i", window)
            + attr("lineOrder", "lineOrder", b"\0")
            + attr("pixelAspectRatio", "float", struct.pack("<f", 1.0))
            + attr("screenWindowCenter", "v2f", struct.pack("<2f", 0.0, 0.0))
            + attr("screenWindowWidth", "float", struct.pack("<f", 1.0)) + b"\0")


def zip_block(rows: np.ndarray, level: int = LEVEL) -> bytes:
    """A ZIP block's data of rows (n, wd, >= 3) float32 (the module docstring's steps)."""
    planar = np.ascontiguousarray(rows[:, :, 2::-1].transpose(0, 2, 1), np.float32)
    raw = planar.reshape(-1).view(np.uint8)
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


def _where(image) -> tuple | None:
    """An array's memory, shape and strides: views of the same rows compare equal (the
    array given before is held, so another array cannot have its memory)."""
    if image is None:
        return None
    return image.__array_interface__["data"][0], image.shape, image.strides


class ExrStream:
    """A float32 rgb OpenEXR file written as its rows come (module docstring)."""

    def __init__(self, path, wd: int, ht: int, threads: int | None = None):
        self.path, self.wd, self.ht = Path(path), wd, ht
        self.blocks = -(-ht // ROWS)
        self.head = header(wd, ht)
        self.start = len(self.head) + 8 * self.blocks  # where the blocks begin
        self.file = AtomicFile(self.path)
        self.encoders = ThreadPoolExecutor(threads or min(16, os.cpu_count() or 1),
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
        self.image, self.pending, self.done = image, [], 0
        self.offsets = [0] * self.blocks
        self.end = self.start  # where the next block goes
        self.bad = None

    def rows(self, image: np.ndarray, stop: int) -> None:
        """Rows [0, stop) of image (ht, wd, >= 3), float32, are final: their whole blocks
        (all of them where stop reaches the last row) are compressed and written."""
        if _where(image) != _where(self.image):  # (a view made again of it is the same)
            if image.shape[:2] != (self.ht, self.wd) or image.shape[2] < 3:
                raise RuntimeFailure(f"an EXR of {self.wd}x{self.ht} rgb was begun; got rows "
                                     f"of an array {image.shape}", where=str(self.path))
            self._over(image)
        last = self.blocks if stop >= self.ht else stop // ROWS
        for k in range(self.done, last):
            encoded = self.encoders.submit(self._encode, image, k)
            self.pending.append(self.writer.submit(self._write, k, encoded))
        self.done = max(self.done, last)

    def _encode(self, image: np.ndarray, k: int) -> bytes | None:
        """Block k's data, or None (and self.bad said) where a sample is not finite."""
        y0 = k * ROWS
        rows = image[y0:y0 + ROWS, :, :3]
        found = non_finite(rows)
        if found is not None:
            i, _ = found
            y, x, c = np.unravel_index(i, rows.shape)
            self.bad = f"{rows[y, x, c]} at x={x} y={y0 + y} channel {c}"
            return None
        return zip_block(rows)

    def _write(self, k: int, encoded) -> None:
        data = encoded.result()
        if data is None:
            return
        self.offsets[k] = self.end
        self.file.pwrite(struct.pack("<ii", k * ROWS, len(data)), self.end)
        self.file.pwrite(data, self.end + 8)
        self.file.start_writeback(self.end, 8 + len(data))
        self.end += 8 + len(data)

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
            self.file.pwrite(self.head + struct.pack(f"<{self.blocks}Q", *self.offsets), 0)
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
