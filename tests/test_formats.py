"""pipeline/formats.py: byte layouts as vkdt writes them, round trips, and one-line errors."""

from __future__ import annotations

import base64
import errno
import os
import struct
import zlib

import imageio.v3 as iio
import numpy as np
import pytest

from vkgraph.pipeline import formats as F
from vkgraph.pipeline.errors import GraphError, RuntimeFailure

KPN_TEXT = ("lut contains weights for\nmulti-level kernel predicting mlp with:\n"
            "6 hidden layers\n64 network width\nplain kernel weight activation\n"
            "const alpha blending activation\nleaky relu mlp activation\nSMAPE loss")


def image(ht=5, wd=7, c=4, seed=0):
    return np.random.default_rng(seed).random((ht, wd, c), dtype=np.float32) * 3 - 1


def error_line(excinfo, path=None, offset=None) -> str:
    """The error is one line, names the file and, where given, the byte offset."""
    text = str(excinfo.value)
    assert "\n" not in text
    if path is not None:
        assert str(path) in text
    if offset is not None:
        assert f"byte {offset}:" in text
    return text


# ------------------------------------------------------------------------------------------
# PFM


@pytest.mark.parametrize("wd,ht", [(256, 256), (64, 448), (1000, 1000), (1, 1), (12345, 7)])
def test_pfm_header_is_vkdt_layout(tmp_path, wd, ht):
    path = tmp_path / "a.pfm"
    F.write_pfm(path, np.zeros((ht, wd, 4), np.float32))
    raw = path.read_bytes()
    head = f"PF\n{wd} {ht}\n-1.0".encode()
    n = len(F.pfm_header(wd, ht))
    assert n % 16 == 0 and n >= len(head) + 1
    assert raw[:len(head)] == head
    assert raw[len(head):n - 1] == b"0" * (n - 1 - len(head))
    assert raw[n - 1:n] == b"\n"
    assert len(raw) == n + wd * ht * 12


def test_pfm_known_headers():
    assert F.pfm_header(256, 256) == b"PF\n256 256\n-1.0\n"
    assert F.pfm_header(64, 448) == b"PF\n64 448\n-1.00\n"
    assert F.pfm_header(1000, 1000) == b"PF\n1000 1000\n-1.000000000000000\n"


def test_pfm_data_is_top_row_first_rgb_little_endian(tmp_path):
    img = image()
    path = tmp_path / "a.pfm"
    F.write_pfm(path, img)
    raw = path.read_bytes()
    assert raw[16:] == np.ascontiguousarray(img[:, :, :3]).astype("<f4").tobytes()


def test_pfm_round_trip_rgb_and_grey(tmp_path):
    img = image()
    F.write_pfm(tmp_path / "rgb.pfm", img)
    got = F.read_pfm(tmp_path / "rgb.pfm")
    assert got.dtype == np.float32 and got.shape == (5, 7, 3)
    assert np.array_equal(got, img[:, :, :3])
    F.write_pfm(tmp_path / "grey.pfm", img[:, :, 0])
    assert (tmp_path / "grey.pfm").read_bytes()[:2] == b"Pf"
    got = F.read_pfm(tmp_path / "grey.pfm")
    assert got.shape == (5, 7, 1) and np.array_equal(got[:, :, 0], img[:, :, 0])
    info = F.pfm_info(tmp_path / "grey.pfm")
    assert (info.wd, info.ht, info.channels, info.offset) == (7, 5, 1, 16)


def test_pfm_reader_is_whitespace_tolerant(tmp_path):
    data = np.arange(6, dtype="<f4")
    for head in (b"PF  \n 2\t1 \n\n-1.0\n", b"PF\r\n2 1\r\n-1.0\r\n", b"PF 2 1 -1.0000000 ",
                 b"PF\n2 1\n-2.5\n"):  # the scale's magnitude is ignored, as in vkdt
        path = tmp_path / "w.pfm"
        path.write_bytes(head + data.tobytes())
        assert np.array_equal(F.read_pfm(path).reshape(-1), data), head


def test_pfm_positive_scale_means_big_endian(tmp_path):
    data = np.arange(6, dtype=np.float32) / 4
    path = tmp_path / "be.pfm"
    path.write_bytes(b"PF\n2 1\n1.0\n" + data.astype(">f4").tobytes())
    got = F.read_pfm(path)
    assert got.dtype == np.float32 and got.dtype.byteorder in "=<"
    assert np.array_equal(got.reshape(-1), data)


def raw_pfm(path, img) -> None:
    """The PFM write_pfm would make of an rgb image, NaN/Inf included (which it refuses)."""
    ht, wd, _ = img.shape
    path.write_bytes(F.pfm_header(wd, ht) + np.ascontiguousarray(img, "<f4").tobytes())


def test_pfm_finite_check(tmp_path):
    img = image(c=3)
    img[3, 4, 2] = np.nan
    path = tmp_path / "nan.pfm"
    raw_pfm(path, img)
    assert np.isnan(F.read_pfm(path)[3, 4, 2])  # allowed unless asked
    with pytest.raises(GraphError) as e:
        F.read_pfm(path, finite=True)
    text = error_line(e, path, 16 + 4 * ((3 * 7 + 4) * 3 + 2))
    assert "x=4 y=3 channel 2" in text and "finite" in text
    img[3, 4, 2] = np.inf
    raw_pfm(path, img)
    with pytest.raises(GraphError):
        F.read_pfm(path, finite=True)


PFM_BAD = [
    (b"", 0, "magic"),
    (b"P6\n2 1\n255\n", 0, "magic 'PF' or 'Pf'"),
    (b"PF\nx 1\n-1.0\n", 3, "width"),
    (b"PF\n-2 1\n-1.0\n", 3, "width"),
    (b"PF\n2 0\n-1.0\n", 5, "height"),
    (b"PF\n2", 4, "height"),
    (b"PF\n2 1\n", 7, "scale"),
    (b"PF\n2 1\nabc\n", 7, "scale"),
    (b"PF\n2 1\n0\n", 7, "scale"),
    (b"PF\n2 1\n-1.0", 11, "newline after the scale"),
    (b"PF\n2 1\n-1.0\n" + b"\0" * 20, 12, "truncated data: expected 24 bytes"),
    (b"PF\n2 1\n-1.0\n" + b"\0" * 30, 36, "expected end of file"),
    (b"PF\n99999 99999\n-1.0\n" + b"\0" * 8, 20, "truncated data"),
]


@pytest.mark.parametrize("raw,offset,expect", PFM_BAD)
def test_pfm_bad_files(tmp_path, raw, offset, expect):
    path = tmp_path / "bad.pfm"
    path.write_bytes(raw)
    for read in (F.read_pfm, F.pfm_info, F.read_image):
        with pytest.raises(GraphError) as e:
            read(path)
        if read is not F.read_image or raw[:2] == b"PF":
            assert expect in error_line(e, path, offset)


@pytest.mark.parametrize("read", [F.read_pfm, F.pfm_info, F.read_lut, F.lut_info,
                                  F.read_image, F.read_exr])
def test_missing_or_unreadable_files(tmp_path, read):
    with pytest.raises(GraphError) as e:
        read(tmp_path / "nope.pfm")
    assert "cannot read file" in error_line(e, tmp_path / "nope.pfm")
    with pytest.raises(GraphError) as e:
        read(tmp_path)  # a folder
    error_line(e, tmp_path)


# ------------------------------------------------------------------------------------------
# .lut


def test_lut_kpn_weights_layout(tmp_path):
    w = np.random.default_rng(1).standard_normal(64 * 448).astype(np.float16)
    path = tmp_path / "w.lut"
    F.write_lut(path, w, 1, "f16", 64, 448, ssbo=True, text=KPN_TEXT)
    raw = path.read_bytes()
    assert len(KPN_TEXT) + 1 == 198
    assert len(raw) == 16 + 57344 + len(KPN_TEXT) + 1 == 57558
    assert struct.unpack("<IHBBII", raw[:16]) == (1234, 2, 1, 16, 64, 448)
    assert raw[16:16 + 57344] == w.astype("<f2").tobytes()
    assert raw[16 + 57344:] == KPN_TEXT.encode() + b"\n"
    data, info, text = F.read_lut(path)
    assert info.ssbo and info.format == "f16" and (info.wd, info.ht, info.channels) == (64, 448, 1)
    assert data.dtype == np.float16 and data.shape == (448, 64, 1)
    assert np.array_equal(data.reshape(-1), w)
    assert text == KPN_TEXT
    assert F.lut_info(path) == info


@pytest.mark.parametrize("fmt,code,dtype", [("f16", 0, np.float16), ("f32", 1, np.float32),
                                            ("ui8", 2, np.uint8)])
def test_lut_image_round_trip(tmp_path, fmt, code, dtype):
    rng = np.random.default_rng(2)
    src = (rng.random((3, 5, 4)) * (1 if fmt == "ui8" else 100)).astype(np.float32)
    path = tmp_path / "i.lut"
    F.write_lut(path, src, 4, fmt, 5, 3)
    raw = path.read_bytes()
    assert raw[7] == code and len(raw) == 16 + 60 * np.dtype(dtype).itemsize  # no text
    data, info, text = F.read_lut(path)
    assert text is None and not info.ssbo and data.dtype == dtype and data.shape == (3, 5, 4)
    if fmt == "ui8":  # float data is taken as unorm
        assert np.array_equal(data, np.rint(src * 255).astype(np.uint8))
    else:
        assert np.array_equal(data, src.astype(dtype))


def test_lut_codes_text_and_ui8_data(tmp_path):
    path = tmp_path / "c.lut"
    F.write_lut(path, np.arange(6, dtype=np.uint8), 2, 18, 3, 1, text="")
    raw = path.read_bytes()
    assert raw[7] == 18 and raw[-1:] == b"\n" and raw[16:22] == bytes(range(6))
    data, info, text = F.read_lut(path)
    assert info.ssbo and info.format == "ui8" and text == ""
    F.write_lut(path, np.ones(2, np.float32), 1, "f32", 2, 1, ssbo=True, text="two\nlines")
    assert F.read_lut(path)[2] == "two\nlines" and F.lut_info(path).datatype == 17


def test_lut_write_errors(tmp_path):
    path = tmp_path / "e.lut"
    with pytest.raises(GraphError) as e:
        F.write_lut(path, np.zeros(10), 1, "f16", 4, 4)
    assert "needs 16 elements, got 10" in error_line(e)
    with pytest.raises(GraphError):
        F.write_lut(path, np.zeros(4), 1, "f64", 2, 2)
    with pytest.raises(GraphError):
        F.write_lut(path, np.zeros(4), 1, 5, 2, 2)
    assert not path.exists()


def lut_header(magic=1234, version=2, channels=1, datatype=1, wd=2, ht=2):
    return struct.pack("<IHBBII", magic, version, channels, datatype, wd, ht)


LUT_BAD = [
    (b"", 0, "truncated header: expected 16 bytes, found 0"),
    (lut_header()[:10], 10, "truncated header"),
    (lut_header(magic=4321) + bytes(16), 0, "magic 1234, found 4321"),
    (lut_header(version=1) + bytes(16), 4, "version 2, found 1"),
    (lut_header(channels=0) + bytes(16), 6, "channel"),
    (lut_header(datatype=3) + bytes(16), 7, "datatype"),
    (lut_header(datatype=19) + bytes(16), 7, "datatype"),
    (lut_header(datatype=33) + bytes(16), 7, "datatype"),
    (lut_header(wd=0) + bytes(16), 8, "width"),
    (lut_header(ht=0) + bytes(16), 12, "height"),
    (lut_header() + bytes(15), 16, "truncated data: expected 16 bytes for 2x2x1 f32, found 15"),
    (lut_header(wd=2**31, ht=2**31) + bytes(64), 16, "truncated data"),
    (b"PF\n2 1\n-1.0\n" + bytes(24), 0, "magic"),
]


@pytest.mark.parametrize("raw,offset,expect", LUT_BAD)
def test_lut_bad_files(tmp_path, raw, offset, expect):
    path = tmp_path / "bad.lut"
    path.write_bytes(raw)
    for read in (F.read_lut, F.lut_info):
        with pytest.raises(GraphError) as e:
            read(path)
        assert expect in error_line(e, path, offset)


def test_lut_finite_check(tmp_path):
    path = tmp_path / "n.lut"
    data = np.zeros(8, np.float16)
    data[5] = np.inf
    path.write_bytes(b"".join(bytes(p) for p in F.lut_bytes(data, 1, "f16", 8, 1, ssbo=True)))
    assert np.isinf(F.read_lut(path)[0].reshape(-1)[5])
    with pytest.raises(GraphError) as e:
        F.read_lut(path, finite=True)
    assert "element 5" in error_line(e, path, 16 + 10)


# ------------------------------------------------------------------------------------------
# atomic writes


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(b"old")
    path.chmod(0o640)
    F.atomic_write(path, [b"new ", memoryview(b"data"), np.arange(3, dtype=np.uint8)])
    assert path.read_bytes() == b"new data\0\1\2"
    assert path.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_a_large_file_replaced_is_freed_on_a_thread(tmp_path, monkeypatch):
    """The file an AtomicFile replaces keeps a second name until the rename is done and is
    freed on a thread after it; nothing is left behind, and where the rename fails the old
    file stays as it was, without a second name."""
    monkeypatch.setattr(F, "ASIDE_BYTES", 4)
    path = tmp_path / "out.exr"
    path.write_bytes(b"old samples")
    inode = path.stat().st_ino
    names = []
    real_replace = os.replace

    def replace(src, dst):  # what the folder holds as the rename runs
        names.extend(sorted(p.name for p in tmp_path.iterdir()))
        return real_replace(src, dst)

    monkeypatch.setattr(F.os, "replace", replace)
    with F.AtomicFile(path) as f:
        f.write(b"new samples")
    f.freeing.join()
    assert len(names) == 3 and names[-1] == "out.exr"  # the temp file and the second name
    assert path.read_bytes() == b"new samples" and path.stat().st_ino != inode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.exr"]
    # small files are replaced as they are (no thread)
    monkeypatch.setattr(F, "ASIDE_BYTES", 1 << 20)
    with F.AtomicFile(path) as f:
        f.write(b"again")
    assert f.freeing is None and path.read_bytes() == b"again"

    def broken(src, dst):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(F, "ASIDE_BYTES", 4)
    monkeypatch.setattr(F.os, "replace", broken)
    with pytest.raises(RuntimeFailure), F.AtomicFile(path) as f:
        f.write(b"lost")
    assert path.read_bytes() == b"again"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.exr"]


def failing_write(after: int, exc: BaseException):
    """os.write that writes `after` bytes for real, then fails (a full disk, a Ctrl-C)."""
    real = os.write
    state = {"left": after}

    def write(fd, data):
        if state["left"] <= 0:
            raise exc
        n = real(fd, bytes(memoryview(data)[: state["left"]]))
        state["left"] -= n
        return n

    return write


@pytest.mark.parametrize("writer", ["pfm", "lut", "png", "exr", "raw"])
def test_atomic_write_failure_keeps_old_file(tmp_path, monkeypatch, writer):
    path = tmp_path / f"out.{writer}"
    path.write_bytes(b"previous contents")
    monkeypatch.setattr(F.os, "write", failing_write(10, OSError(errno.ENOSPC,
                                                                  "No space left on device")))
    img = image(16, 16)
    with pytest.raises(RuntimeFailure) as e:
        if writer == "pfm":
            F.write_pfm(path, img)
        elif writer == "lut":
            F.write_lut(path, img, 4, "f32", 16, 16, text="x")
        elif writer == "png":
            F.write_png(path, img)
        elif writer == "exr":
            F.write_exr(path, img)
        else:
            F.atomic_write(path, b"x" * 100)
    assert "No space left" in error_line(e, path)
    assert path.read_bytes() == b"previous contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_atomic_write_interrupt_keeps_old_file(tmp_path, monkeypatch):
    path = tmp_path / "w.lut"
    path.write_bytes(b"old weights")
    monkeypatch.setattr(F.os, "write", failing_write(20, KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        F.write_lut(path, np.zeros(64 * 448, np.float16), 1, "f16", 64, 448, ssbo=True)
    assert path.read_bytes() == b"old weights"
    assert [p.name for p in tmp_path.iterdir()] == ["w.lut"]


def test_atomic_write_missing_folder(tmp_path):
    with pytest.raises(GraphError) as e:
        F.write_pfm(tmp_path / "no" / "such.pfm", image())
    assert "does not exist" in error_line(e, tmp_path / "no" / "such.pfm")


# ------------------------------------------------------------------------------------------
# PNG / JPG / EXR and read_image


def test_srgb_curves():
    x = np.linspace(0, 1, 1001)
    assert np.allclose(F.srgb_to_linear(F.linear_to_srgb(x)), x, atol=1e-12)
    assert F.linear_to_srgb(np.array([0.0031308]))[0] == pytest.approx(0.04045, abs=1e-6)
    assert list(F.to_srgb8(np.array([-1.0, 0.0, 1.0, 2.0, np.nan]))) == [0, 0, 255, 255, 0]


def test_png_8bit_decode_is_exact_srgb(tmp_path):
    px = np.random.default_rng(3).integers(0, 256, (4, 6, 3), dtype=np.uint8)
    path = tmp_path / "a.png"
    iio.imwrite(path, px)
    got = F.read_image(path)
    assert got.shape == (4, 6, 4) and got.dtype == np.float32
    assert np.array_equal(got[:, :, :3], F.srgb_to_linear(px / 255.0).astype(np.float32))
    assert np.all(got[:, :, 3] == 1.0)


def test_png_grey_and_alpha(tmp_path):
    grey = np.arange(12, dtype=np.uint8).reshape(3, 4) * 20
    iio.imwrite(tmp_path / "g.png", grey)
    got = F.read_image(tmp_path / "g.png")
    assert np.array_equal(got[:, :, 0], got[:, :, 2]) and np.all(got[:, :, 3] == 1)
    assert np.allclose(got[:, :, 1], F.srgb_to_linear(grey / 255.0))
    rgba = np.random.default_rng(4).integers(0, 256, (3, 4, 4), dtype=np.uint8)
    iio.imwrite(tmp_path / "a.png", rgba)
    got = F.read_image(tmp_path / "a.png")
    assert np.allclose(got[:, :, 3], rgba[:, :, 3] / 255.0)  # alpha: no sRGB curve


def test_png_16bit_grey(tmp_path):
    grey = np.random.default_rng(5).integers(0, 65536, (3, 5), dtype=np.uint16)
    iio.imwrite(tmp_path / "g16.png", grey)
    got = F.read_image(tmp_path / "g16.png")
    assert np.allclose(got[:, :, 0], F.srgb_to_linear(grey / 65535.0), atol=0, rtol=1e-6)


def png16(pixels: np.ndarray) -> bytes:
    """A 16-bit rgb/rgba PNG using the Sub, Up, Average and Paeth row filters in turn."""
    ht, wd, c = pixels.shape
    bpp = 2 * c
    rows = [np.frombuffer(pixels[y].astype(">u2").tobytes(), np.uint8).astype(int)
            for y in range(ht)]
    out = b""
    prev = np.zeros(wd * bpp, int)
    for y, row in enumerate(rows):
        ftype = 1 + y % 4
        left = np.concatenate([np.zeros(bpp, int), row[:-bpp]])
        upleft = np.concatenate([np.zeros(bpp, int), prev[:-bpp]])
        if ftype == 1:
            pred = left
        elif ftype == 2:
            pred = prev
        elif ftype == 3:
            pred = (left + prev) // 2
        else:
            p = left + prev - upleft
            pa, pb, pc = abs(p - left), abs(p - prev), abs(p - upleft)
            pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, prev, upleft))
        out += bytes([ftype]) + ((row - pred) & 255).astype(np.uint8).tobytes()
        prev = row

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", wd, ht, 16, {3: 2, 4: 6}[c], 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(out))
            + chunk(b"IEND", b""))


@pytest.mark.parametrize("c", [3, 4])
def test_png_16bit_colour_keeps_all_bits(tmp_path, c):
    px = np.random.default_rng(6).integers(0, 65536, (6, 5, c), dtype=np.uint16)
    path = tmp_path / "c16.png"
    path.write_bytes(png16(px))
    got = F.read_image(path)
    assert np.allclose(got[:, :, :3], F.srgb_to_linear(px[:, :, :3] / 65535.0), atol=0,
                       rtol=1e-6)
    if c == 4:
        assert np.allclose(got[:, :, 3], px[:, :, 3] / 65535.0)


def test_png_write_round_trip(tmp_path):
    img = np.random.default_rng(7).random((8, 9, 4), dtype=np.float32)
    path = tmp_path / "o.png"
    F.write_png(path, img)
    px = iio.imread(path)
    assert px.dtype == np.uint8 and px.shape == (8, 9, 3)
    assert np.array_equal(px, F.to_srgb8(img[:, :, :3]))
    got = F.read_image(path)
    assert np.abs(F.linear_to_srgb(got[:, :, :3]) - F.linear_to_srgb(img[:, :, :3])).max() \
        <= 0.5 / 255 + 1e-6
    F.write_png(path, img[:, :, 0])  # one channel: grey
    assert iio.imread(path).shape == (8, 9)


def test_jpg_write_and_quality(tmp_path):
    y, x = np.mgrid[0:32, 0:32] / 32
    img = np.stack([x, y, x * y, x], axis=2).astype(np.float32)  # smooth: JPEG does well
    F.write_jpg(tmp_path / "lo.jpg", img, quality=10)
    F.write_jpg(tmp_path / "hi.jpg", img, quality=100)
    assert (tmp_path / "lo.jpg").stat().st_size < (tmp_path / "hi.jpg").stat().st_size
    got = F.read_image(tmp_path / "hi.jpg")
    assert got.shape == (32, 32, 4)
    assert np.abs(F.linear_to_srgb(got[:, :, :3]) - F.linear_to_srgb(img[:, :, :3])).mean() \
        < 0.01


@pytest.mark.parametrize("half", [False, True])
def test_exr_round_trip(tmp_path, half):
    img = image(21, 13)  # more than one 16-line ZIP block
    path = tmp_path / "a.exr"
    F.write_exr(path, img, half=half)
    got = F.read_image(path)
    ref = img[:, :, :3].astype(np.float16 if half else np.float32).astype(np.float32)
    assert np.array_equal(got[:, :, :3], ref) and np.all(got[:, :, 3] == 1)
    F.write_exr(path, img[:, :, :1])
    got = F.read_exr(path)
    assert np.array_equal(got[:, :, 1], img[:, :, 0])


@pytest.mark.parametrize("half", [False, True])
def test_exr_writes_strided_arrays_as_their_pixels(tmp_path, half):
    """Views whose memory is not their pixels in order (the rgb of rgba, a transpose, every
    other row, a float64 array) are written as the pixels they show: the encoder takes one
    rgb array and reads its memory as it lies."""
    img = image(18, 11).astype(np.float32)
    views = {"rgba": img, "transposed": img[:, :, :3].transpose(1, 0, 2),
             "rows": img[::2, :, :3], "float64": img[:, :, :3].astype(np.float64)}
    for name, view in views.items():
        assert name == "float64" or not view[:, :, :3].flags.c_contiguous
        path = tmp_path / f"{name}.exr"
        F.write_exr(path, view, half=half)
        want = view[:, :, :3].astype(np.float16 if half else np.float32).astype(np.float32)
        assert np.array_equal(F.read_exr(path)[:, :, :3], want), name


# written by the OpenEXR library (3.5.3): 3x2 rgba half, no compression / RLE; 8x20 rgb ZIP
EXR_NONE = (
    "di8xAQIAAABjaGFubmVscwBjaGxpc3QASQAAAEEAAQAAAAAAAAABAAAAAQAAAEIAAQAAAAAAAAABAAAAAQAAAEcA"
    "AQAAAAAAAAABAAAAAQAAAFIAAQAAAAAAAAABAAAAAQAAAABjb21wcmVzc2lvbgBjb21wcmVzc2lvbgABAAAAAGRh"
    "dGFXaW5kb3cAYm94MmkAEAAAAAAAAAAAAAAAAgAAAAEAAABkaXNwbGF5V2luZG93AGJveDJpABAAAAAAAAAAAAAA"
    "AAIAAAABAAAAbGluZU9yZGVyAGxpbmVPcmRlcgABAAAAAHBpeGVsQXNwZWN0UmF0aW8AZmxvYXQABAAAAAAAgD9z"
    "Y3JlZW5XaW5kb3dDZW50ZXIAdjJmAAgAAAAAAAAAAAAAAHNjcmVlbldpbmRvd1dpZHRoAGZsb2F0AAQAAAAAAIA/"
    "dHlwZQBzdHJpbmcADQAAAHNjYW5saW5laW1hZ2UAeAEAAAAAAACYAQAAAAAAAAAAAAAYAAAAALkAsAA2ALoAtAA0"
    "ALsAtgAwALwAuAAAAQAAABgAAAAAO4A9gD8AOgA9AD8AOYA8gD4AOAA8AD4=")
EXR_RLE = (
    "di8xAQIAAABjaGFubmVscwBjaGxpc3QASQAAAEEAAQAAAAAAAAABAAAAAQAAAEIAAQAAAAAAAAABAAAAAQAAAEcA"
    "AQAAAAAAAAABAAAAAQAAAFIAAQAAAAAAAAABAAAAAQAAAABjb21wcmVzc2lvbgBjb21wcmVzc2lvbgABAAAAAWRh"
    "dGFXaW5kb3cAYm94MmkAEAAAAAAAAAAAAAAAAgAAAAEAAABkaXNwbGF5V2luZG93AGJveDJpABAAAAAAAAAAAAAA"
    "AAIAAAABAAAAbGluZU9yZGVyAGxpbmVPcmRlcgABAAAAAHBpeGVsQXNwZWN0UmF0aW8AZmxvYXQABAAAAAAAgD9z"
    "Y3JlZW5XaW5kb3dDZW50ZXIAdjJmAAgAAAAAAAAAAAAAAHNjcmVlbldpbmRvd1dpZHRoAGZsb2F0AAQAAAAAAIA/"
    "dHlwZQBzdHJpbmcADQAAAHNjYW5saW5laW1hZ2UAeAEAAAAAAACRAQAAAAAAAAAAAAARAAAA/wAKgPQ5dwYEegAH"
    "e/oMfMgBAAAAGAAAAAA7gD2APwA6AD0APwA5gDyAPgA4ADwAPg==")
EXR_ZIP = (
    "di8xAQIAAABjaGFubmVscwBjaGxpc3QANwAAAEIAAQAAAAAAAAABAAAAAQAAAEcAAQAAAAAAAAABAAAAAQAAAFIA"
    "AQAAAAAAAAABAAAAAQAAAABjb21wcmVzc2lvbgBjb21wcmVzc2lvbgABAAAAA2RhdGFXaW5kb3cAYm94MmkAEAAA"
    "AAAAAAAAAAAABwAAABMAAABkaXNwbGF5V2luZG93AGJveDJpABAAAAAAAAAAAAAAAAcAAAATAAAAbGluZU9yZGVy"
    "AGxpbmVPcmRlcgABAAAAAHBpeGVsQXNwZWN0UmF0aW8AZmxvYXQABAAAAAAAgD9zY3JlZW5XaW5kb3dDZW50ZXIA"
    "djJmAAgAAAAAAAAAAAAAAHNjcmVlbldpbmRvd1dpZHRoAGZsb2F0AAQAAAAAAIA/dHlwZQBzdHJpbmcADQAAAHNj"
    "YW5saW5laW1hZ2UAZgEAAAAAAABRAgAAAAAAAAAAAADjAAAAeF5lzz0OQUEUBWBrGJ3OKt4O/BMR0ViDQgTxP/Ni"
    "DTqdlyglVqC8NqFTWoFCOOdOuG7zcr7cd2Ym57wk2SHzZsiuy1xQB+cvxvtgt2M+6z7Y7c1+Anb24D44f2PWHg92"
    "+v/9l8X2Z2ApMjf5TcBizxXw9e9dYLH3eYDlyaz9Hiz2nmRJdE/nuE3TENKG5tMnhwHYT8g9+hAcZvQOfQT2C3qb"
    "PgaHJb1Fn4D9mt6gT8FhZXwGjl5XB8eeGn0O9ht6VR0cp0JfgIPuRwfHHvUlOE6Z/r5f+Or58jfH/RL9BQygdMsQ"
    "AAAAUAAAAHhem3Ty1EkQCGmAACkoHQ0RPlkE5W+G0kshwqf6oHxfKP0OInxyDZT/DErvaGhsACEYcNvQ0tTU2NhY"
    "iyoMF6+DCMOlXOHiKMJwcQAfqWi8")


def test_exr_threads_write_the_same_bytes():
    """The OpenEXR wheel's thread pool is sized to the machine (formats._openexr): blocks
    of scanlines are compressed in parallel, into the same file as with one thread."""
    OpenEXR = F._openexr()
    assert OpenEXR.global_thread_count() >= 1
    img = np.random.default_rng(3).random((96, 80, 3), dtype=np.float32)
    threads = OpenEXR.global_thread_count()
    try:
        files = []
        for n in (0, 4):
            OpenEXR.set_global_thread_count(n)
            files.append([F.exr_bytes(img, half, c)[0] for half, c in ((False, "zip"),
                                                                        (True, "piz"))])
    finally:
        OpenEXR.set_global_thread_count(threads)
    assert files[0] == files[1]


@pytest.mark.parametrize("name", ["none", "rle"])
def test_exr_reads_openexr_files(tmp_path, name):
    path = tmp_path / f"{name}.exr"
    path.write_bytes(base64.b64decode(EXR_NONE if name == "none" else EXR_RLE))
    want = (np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 8 - 1)
    assert np.array_equal(F.read_image(path), want)


def test_exr_reads_openexr_zip(tmp_path):
    path = tmp_path / "zip.exr"
    path.write_bytes(base64.b64decode(EXR_ZIP))
    y, x = np.mgrid[0:20, 0:8]
    want = np.stack([x / 8, y / 20, (x + y) / 28], 2).astype(np.float16).astype(np.float32)
    got = F.read_exr(path)
    assert np.array_equal(got[:, :, :3], want) and np.all(got[:, :, 3] == 1)


def test_exr_bad_files(tmp_path):
    path = tmp_path / "b.exr"
    raw = base64.b64decode(EXR_ZIP)
    pos = raw.index(b"compression\0compression\0") + 28
    path.write_bytes(raw[:pos] + bytes([4]) + raw[pos + 1:])  # ZIP data said to be PIZ
    with pytest.raises(GraphError) as e:
        F.read_image(path)
    assert "cannot decode OpenEXR file" in error_line(e, path)
    for cut in (6, 60, 300, 600):
        path.write_bytes(raw[:cut])
        with pytest.raises(GraphError) as e:
            F.read_image(path)
        error_line(e, path)
    path.write_bytes(raw[:593 + 8] + b"\0" * (len(raw) - 593 - 8))  # broken zlib stream
    with pytest.raises(GraphError) as e:
        F.read_exr(path)
    assert "cannot decode OpenEXR file" in error_line(e, path)
    nan = image(2, 2)
    nan[1, 0, 1] = np.nan
    path.write_bytes(b"".join(bytes(p) for p in F.exr_bytes(nan)))  # (write_exr refuses it)
    with pytest.raises(GraphError) as e:
        F.read_image(path, finite=True)
    assert "x=0 y=1 channel 1" in error_line(e, path)


@pytest.mark.parametrize("raw", [b"garbage" * 10, b"\x89PNG\r\n\x1a\n" + b"\0" * 40, b""])
def test_read_image_garbage(tmp_path, raw):
    path = tmp_path / "bad.png"
    path.write_bytes(raw)
    with pytest.raises(GraphError) as e:
        F.read_image(path)
    assert "cannot decode" in error_line(e, path)


def test_read_image_truncated_png(tmp_path):
    path = tmp_path / "t.png"
    iio.imwrite(path, np.random.default_rng(9).integers(0, 256, (64, 64, 3), dtype=np.uint8))
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(GraphError) as e:
        F.read_image(path)
    error_line(e, path)
    raw = png16(np.random.default_rng(10).integers(0, 65536, (16, 16, 3), dtype=np.uint16))
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(GraphError) as e:
        F.read_image(path)
    error_line(e, path)


def test_read_image_pfm_is_rgba(tmp_path):
    img = image(c=3)
    F.write_pfm(tmp_path / "a.pfm", img)
    got = F.read_image(tmp_path / "a.pfm")
    assert got.shape == (5, 7, 4) and np.array_equal(got[:, :, :3], img)
    assert np.all(got[:, :, 3] == 1)


# ------------------------------------------------------------------------------------------
# helpers for modules


def test_frame_name_and_output_path():
    assert F.frame_name("seq%04d.pfm", 7) == "seq0007.pfm"
    assert F.frame_name("seq%d_%04d", 12345) == "seq%d_12345"
    assert F.frame_name("plain", 3) == "plain"
    assert str(F.output_path("out", "pfm", 2)) == "out.pfm"
    assert str(F.output_path("out_%04d", "jpg", 2)) == "out_0002.jpg"
    with pytest.raises(GraphError):
        F.output_path("", "pfm")


def test_fit_channels():
    rgb = image(c=3)
    rgba = F.fit_channels(rgb, 4)
    assert rgba.shape == (5, 7, 4) and np.array_equal(rgba[:, :, :3], rgb)
    assert np.all(rgba[:, :, 3] == 1)
    grey = F.fit_channels(rgb[:, :, :1], 4)
    assert np.array_equal(grey[:, :, 2], rgb[:, :, 0]) and np.all(grey[:, :, 3] == 1)
    assert np.array_equal(F.fit_channels(rgba, 1)[:, :, 0], rgb[:, :, 0])
    assert F.fit_channels(rgb[:, :, 0], 2).shape == (5, 7, 2)


# ------------------------------------------------------------------------------------------
# the shipped reference scenes


def test_reference_scenes_regenerate_bit_identically():
    from pathlib import Path

    from conftest import load_script

    folder = Path(__file__).resolve().parent.parent / "graphs" / "images"
    make_scene = load_script("graphs/images/make_scene.py", "make_scene")
    for name, seed in make_scene.SCENES:
        shipped = F.read_pfm(folder / f"{name}.pfm", finite=True)
        assert shipped.shape == (256, 256, 3)
        assert 0.0 <= shipped.min() and shipped.max() <= 1.0
        assert np.array_equal(make_scene.render(seed, name), shipped)


def test_srgb_conversions_work_in_chunks(monkeypatch):
    """The sRGB conversions of a large photo hold float64 temporaries of SRGB_CHUNK values at
    a time, not of the whole image (a 12 MP photo's were most of `vkgraph denoise`'s peak
    memory), and give the same values as at once (chunks of 7 values here)."""
    import tracemalloc

    x = np.random.default_rng(0).random((1500, 2000, 3)).astype(np.float32)
    for fn, most in ((F.to_srgb8, 2.0), (F.srgb_to_linear, 3.0)):  # x's bytes; at once: 8.25
        tracemalloc.start()
        fn(x)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < most * x.nbytes, (fn.__name__, peak / x.nbytes)
    y = x[:5, :9].astype(np.float64) * 1.4 - 0.2
    y[0, 0, 0] = np.nan
    whole = (F.to_srgb8(y), F.linear_to_srgb(y), F.srgb_to_linear(np.clip(y, 0, 1)))
    monkeypatch.setattr(F, "SRGB_CHUNK", 7)
    parts = (F.to_srgb8(y), F.linear_to_srgb(y), F.srgb_to_linear(np.clip(y, 0, 1)))
    for a, b in zip(whole, parts, strict=True):
        assert a.shape == y.shape and np.array_equal(a, b, equal_nan=True)


def test_image_size_reads_headers_only(tmp_path, monkeypatch):
    """formats.image_size: (wd, ht) of PFM, OpenEXR, PNG and TIFF files without decoding the
    pixels (i-set sizes its set with it)."""
    from vkgraph.pipeline import formats

    img = np.random.default_rng(3).random((5, 7, 3)).astype(np.float32)
    formats.write_pfm(tmp_path / "a.pfm", img)
    formats.write_exr(tmp_path / "a.exr", img)
    formats.write_png(tmp_path / "a.png", img)
    formats.write_tiff(tmp_path / "a.tif", img, "u16")

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded")

    monkeypatch.setattr(formats, "read_image", no_decoding)
    for name in ("a.pfm", "a.exr", "a.png", "a.tif"):
        assert formats.image_size(tmp_path / name) == (7, 5), name


def test_8bit_rgb_decodes_as_the_per_channel_tables(tmp_path):
    """decode_image's fast 8-bit path (rgbx, two samples a lookup) gives decode_unorm's
    numbers with alpha 1, for every byte value, an rgba of opaque alpha and a portrait JPEG;
    rgba with real alpha still goes the per-channel way."""
    from PIL import Image

    def plain(px):
        lin = F.decode_unorm(px)
        out = np.ones(px.shape[:2] + (4,), np.float32)
        out[:, :, :lin.shape[2]] = lin
        return out

    rng = np.random.default_rng(1)
    px = rng.integers(0, 256, (37, 256, 3), dtype=np.uint8)
    px[0, :, 0] = px[1, :, 1] = px[2, :, 2] = np.arange(256)
    Image.fromarray(px).save(tmp_path / "a.png")
    got, _ = F.decode_image(tmp_path / "a.png")
    assert got.dtype == np.float32 and np.array_equal(got, plain(px))
    rgba = np.concatenate([px, np.full(px.shape[:2] + (1,), 255, np.uint8)], axis=2)
    assert np.array_equal(F._linear_rgba(rgba), plain(px))
    rgba[3, 5, 3] = 7
    assert np.array_equal(F._linear_rgba(rgba), F.decode_unorm(rgba))
    im = Image.fromarray(px)
    exif = im.getexif()
    exif[0x0112] = 6
    im.save(tmp_path / "p.jpg", quality=95, exif=exif)
    got, meta = F.decode_image(tmp_path / "p.jpg")
    with Image.open(tmp_path / "p.jpg") as j:
        stored = np.asarray(j.convert("RGB"))
    assert meta.orientation == 6 and np.array_equal(got, plain(F.orient(stored, 6)))


def test_8bit_srgb_of_float32_is_the_formulas():
    """srgb_samples' float32 -> 8-bit path (a code and a threshold per top 16 bits) against
    the float64 formula: around every threshold, on special values and random values."""
    def formula(v):
        return np.rint(F._to_srgb(v) * 255.0).astype(np.uint8)

    _, thresholds = F._srgb8_tables()
    bits = thresholds[np.isfinite(thresholds)].view(np.uint32).astype(np.int64)
    assert bits.size == 255  # one step to each code 1..255
    near = (bits[:, None] + np.arange(-4, 5)).astype(np.uint32).view(np.float32).reshape(-1)
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 2.0, 1e-45, -1e-45,
                        np.nextafter(np.float32(1), np.float32(0)), 0.0031308, 3e38],
                       np.float32)
    rng = np.random.default_rng(2)
    rand = rng.random((301, 203, 3), dtype=np.float32) * 1.4 - 0.2
    for x in (near, special, rand, rand[:, :, 1]):
        got = F.srgb_samples(x, "u8")
        assert got.dtype == np.uint8 and got.shape == x.shape
        assert np.array_equal(got, formula(x))
    assert np.array_equal(F.srgb_samples(rand.astype(np.float64)), formula(rand))


def test_rgb_of_rgba_is_written_and_checked_like_rgb(tmp_path):
    """The rgb view of an rgba image (what the Denoiser returns) takes the fast paths (the
    rgba's memory for the finite check and the sRGB encode, rgbx into Pillow's JPEG encoder):
    the same files as from the rgb itself, and its alpha is never checked nor written."""
    rgba = np.random.default_rng(5).uniform(-0.1, 1.2, (37, 53, 4)).astype(np.float32)
    rgba[:, :, 3] = np.nan
    view, rgb = rgba[:, :, :3], np.ascontiguousarray(rgba[:, :, :3])
    assert F.rgba_of(view) is rgba and F.rgba_of(rgb) is None
    assert F.non_finite(view) is None
    for ext in ("jpg", "png", "webp", "tif"):
        F.write_like(tmp_path / f"v.{ext}", view)
        F.write_like(tmp_path / f"c.{ext}", rgb)
        assert (tmp_path / f"v.{ext}").read_bytes() == (tmp_path / f"c.{ext}").read_bytes()
    rgba[2, 3, 1] = np.inf
    assert F.non_finite(view) == F.non_finite(np.ascontiguousarray(view))
    assert F.non_finite(view)[1] == "inf at x=3 y=2 channel 1"
