"""pipeline/exrstream.py: the OpenEXR file written as its rows come, read back by the OpenEXR
library (formats.read_exr) bit for bit, with rows given in uneven bands, again from another
array (a run made again), and its failures (a non-finite sample, an exception) leaving the
previous file and no temp file."""

from __future__ import annotations

import numpy as np
import pytest

from vkgraph.pipeline.errors import RuntimeFailure
from vkgraph.pipeline.exrstream import ExrStream
from vkgraph.pipeline.formats import read_exr, write_exr

pytest.importorskip("OpenEXR", reason="the OpenEXR wheel reads the files back")


def picture(ht: int, wd: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:ht, 0:wd] / max(ht, wd)
    base = np.stack([np.sin(5 * xx), np.cos(3 * yy), xx * yy, np.ones_like(xx)], -1)
    x = base[..., :channels] + 0.01 * rng.standard_normal((ht, wd, channels))
    x[0, 0, 0] = 1e30  # a large one, and values of every sign
    return x.astype(np.float32)


@pytest.mark.parametrize("compression", ["none", "zip"])
@pytest.mark.parametrize("ht,wd,stops", [(53, 37, [7, 16, 20, 40]), (16, 1, []), (1, 5, [1]),
                                         (200, 64, [48, 96, 144]),
                                         (600, 8, [7, 300, 301, 590])])  # groups split
def test_stream_reads_back_bit_for_bit(tmp_path, ht, wd, stops, compression):
    image = picture(ht, wd, 4)  # rgba in: alpha dropped, as write_exr drops it
    with ExrStream(tmp_path / "a.exr", wd, ht, compression, threads=3) as exr:
        for stop in stops:
            exr.rows(image, stop)
        exr.finish(image)
    back = read_exr(tmp_path / "a.exr")
    assert back.shape == (ht, wd, 4) and np.array_equal(back[..., :3], image[..., :3])
    write_exr(tmp_path / "b.exr", image)  # the library's own file holds the same samples
    assert np.array_equal(read_exr(tmp_path / "b.exr"), back)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.exr", "b.exr"]


@pytest.mark.parametrize("compression", ["none", "zip"])
def test_rows_from_another_array_start_over(tmp_path, compression):
    first, second = picture(70, 30, seed=1), picture(70, 30, seed=2)
    with ExrStream(tmp_path / "a.exr", 30, 70, compression) as exr:
        exr.rows(first, 64)  # written, then the run is made again
        exr.rows(second, 32)
        exr.finish(second)
    assert np.array_equal(read_exr(tmp_path / "a.exr")[..., :3], second)


def test_failures_leave_the_previous_file(tmp_path):
    target = tmp_path / "a.exr"
    target.write_bytes(b"previous")
    image = picture(40, 20)
    image[35, 3, 1] = np.nan
    with pytest.raises(RuntimeFailure, match=r"nan at x=3 y=35 channel 1"):
        with ExrStream(target, 20, 40) as exr:
            exr.rows(image, 16)
            exr.finish(image)
    with pytest.raises(KeyError):
        with ExrStream(target, 20, 40) as exr:
            exr.rows(picture(40, 20), 32)
            raise KeyError("stopped")
    with pytest.raises(RuntimeFailure, match="an EXR of 20x40 rgb was begun"):
        with ExrStream(target, 20, 40) as exr:
            exr.rows(picture(41, 20), 16)
    assert target.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["a.exr"]



def test_rows_of_planes_written_as_they_lie(tmp_path, monkeypatch):
    """An (h, w, 3) view of (h, 3, w) memory (rgb-out's planar result), cropped a column on
    either side, written by pwritev calls that write a few bytes each: the same file."""
    import os

    planes = np.ascontiguousarray(picture(40, 23).transpose(0, 2, 1))  # (h, 3, w)
    image = planes.transpose(0, 2, 1)[:, 1:-1]
    assert image.strides[1] == 4
    real = os.pwritev
    calls = []

    def short(fd, buffers, offset):  # at most 7 bytes a call, from at most 3 buffers
        calls.append(len(buffers))
        return real(fd, [bytes(memoryview(b).cast("B"))[:7] for b in buffers[:3]][:1], offset)

    monkeypatch.setattr(os, "pwritev", short)
    with ExrStream(tmp_path / "a.exr", 21, 40, threads=2) as exr:
        exr.rows(image, 17)
        exr.finish(image)
    assert len(calls) > 40 * 4
    assert np.array_equal(read_exr(tmp_path / "a.exr")[..., :3], image)
