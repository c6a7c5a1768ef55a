"""What a photograph carries, through the readers and `vkgraph denoise`: EXIF (Orientation
applied to the pixels, reset to 1), the ICC profile, 16-bit and float depth, TIFF and WebP in
and out, a JPEG's quality; CMYK and other Pillow modes as rgb; OpenEXR through the OpenEXR
wheel (every codec, tiled) and a damaged EXR as one error line."""

from __future__ import annotations

import io
import struct

import numpy as np
import OpenEXR
import pytest
import tifffile
from PIL import Image, ImageCms, ImageOps
from test_formats import png16
from test_kpn_gpu import conditioned_weights

from vkgraph.cli.main import main
from vkgraph.pipeline import formats as F
from vkgraph.pipeline.errors import GraphError

H, W = 40, 48  # stored landscape; the portrait JPEG is W x H once upright
MAKE, ISO = "TestCam", 800
SRGB_ICC = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()


def exif_block(orientation: int = 1) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    exif[0x010F] = MAKE
    exif.get_ifd(0x8769)[0x8827] = ISO  # ISOSpeedRatings, in the Exif sub-IFD
    return exif.tobytes()


def picture8(seed: int = 1) -> np.ndarray:
    """Smooth sRGB 8-bit colour with a white 16x16 block in the stored top-left corner."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:H, 0:W]
    img = np.stack([0.3 + 0.2 * np.sin(xx / 5.0 + c) * np.cos(yy / 6.0) for c in range(3)], -1)
    px = np.clip(img * 255 + 3 * rng.standard_normal(img.shape), 0, 255).astype(np.uint8)
    px[:16, :16] = 255
    return px


def picture16(seed: int = 2) -> np.ndarray:
    """16-bit samples whose low bytes matter (not multiples of 257)."""
    yy, xx = np.mgrid[0:H, 0:W]
    img = np.stack([20000 + 9000 * np.sin(xx / 7.0 + c) * np.cos(yy / 9.0) for c in range(3)],
                   -1)
    return (img + np.random.default_rng(seed).integers(0, 200, img.shape)).astype(np.uint16)


def pillow_save(path, px, fmt, **options) -> None:
    buf = io.BytesIO()
    Image.fromarray(px).save(buf, fmt, **options)
    path.write_bytes(buf.getvalue())


# ------------------------------------------------------------------------------------------
# readers


@pytest.mark.parametrize("orientation", range(1, 9))
def test_orient_is_pillows_exif_transpose(orientation):
    px = np.random.default_rng(orientation).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    im = Image.fromarray(px)
    exif = im.getexif()
    exif[0x0112] = orientation
    im.info["exif"] = exif.tobytes()
    want = np.asarray(ImageOps.exif_transpose(im))
    assert np.array_equal(F.orient(px, orientation), want)
    assert np.array_equal(F.orient(px.astype(np.uint16), orientation), want)


def test_portrait_jpeg_reads_upright(tmp_path):
    path = tmp_path / "p.jpg"
    pillow_save(path, picture8(), "JPEG", quality=90, exif=exif_block(6))
    image, meta = F.decode_image(path)
    assert image.shape == (W, H, 4) and meta.orientation == 6
    # Orientation 6: the stored top-left corner is seen top-right
    assert image[:16, -16:, :3].mean() > 0.9 and image[-16:, :16, :3].mean() < 0.5
    exif = Image.Exif()
    exif.load(meta.exif)
    assert exif[0x0112] == 1 and exif[0x010F] == MAKE and exif.get_ifd(0x8769)[0x8827] == ISO


def test_cmyk_jpeg_is_rgb(tmp_path):
    """Issue 31 defect 3: C, M, Y were read as r, g, b and K as alpha."""
    px = picture8()
    path = tmp_path / "cmyk.jpg"
    pillow_save(path, px, "JPEG", quality=95)  # the rgb JPEG, the same way, for reference
    rgb = F.read_image(path)
    Image.fromarray(px).convert("CMYK").save(path, "JPEG", quality=95)
    assert Image.open(path).mode == "CMYK"
    got = F.read_image(path)
    assert np.all(got[:, :, 3] == 1.0)
    seen = F.linear_to_srgb(got[:, :, :3]) * 255
    assert np.abs(seen - px).mean() < 3 and np.abs(got[:, :, :3] - rgb[:, :, :3]).max() < 0.1


def test_other_pillow_modes(tmp_path):
    palette = Image.fromarray(picture8()).convert("P", palette=Image.Palette.ADAPTIVE)
    palette.save(tmp_path / "p.png")
    want = np.asarray(palette.convert("RGB")) / 255.0
    got = F.read_image(tmp_path / "p.png")
    assert np.allclose(F.linear_to_srgb(got[:, :, :3]), want, atol=1e-6)
    la = np.stack([picture8()[:, :, 0], np.full((H, W), 128, np.uint8)], -1)
    Image.fromarray(la, "LA").save(tmp_path / "la.png")
    got = F.read_image(tmp_path / "la.png")
    assert np.allclose(got[:, :, 3], 128 / 255) and np.array_equal(got[:, :, 0], got[:, :, 2])
    grey = picture16()[:, :, 0]
    Image.fromarray(grey).save(tmp_path / "g.tif")  # Pillow: I;16 TIFF
    got, meta = F.decode_image(tmp_path / "g.tif")
    assert meta.depth == "u16"
    assert np.allclose(got[:, :, 1], F.srgb_to_linear(grey / 65535.0), rtol=1e-6, atol=0)


@pytest.mark.parametrize("planar", [False, True])
def test_tiff_16bit_and_float(tmp_path, planar):
    px = picture16()
    path = tmp_path / "t.tif"
    tifffile.imwrite(path, np.moveaxis(px, -1, 0) if planar else px, photometric="rgb",
                     planarconfig="separate" if planar else "contig", iccprofile=SRGB_ICC)
    got, meta = F.decode_image(path)
    assert meta.depth == "u16" and meta.icc == SRGB_ICC
    assert np.allclose(got[:, :, :3], F.srgb_to_linear(px / 65535.0), rtol=1e-6, atol=0)
    lin = (px / 65535.0).astype(np.float32)
    tifffile.imwrite(path, lin, photometric="rgb")
    got, meta = F.decode_image(path)
    assert meta.depth == "f32" and np.array_equal(got[:, :, :3], lin)


def test_jpeg_quality_estimate(tmp_path):
    for q in (35, 50, 80, 92, 100):
        pillow_save(tmp_path / "q.jpg", picture8(), "JPEG", quality=q)
        assert F.decode_image(tmp_path / "q.jpg")[1].quality == q


# ------------------------------------------------------------------------------------------
# OpenEXR through the wheel


def exr_file(path, rgb, compression: str, half: bool = True, tiled: bool = False) -> None:
    """Written with the OpenEXR wheel itself, not with vkgraph's writer."""
    header = {"compression": getattr(OpenEXR, f"{compression}_COMPRESSION"),
              "type": OpenEXR.tiledimage if tiled else OpenEXR.scanlineimage}
    if tiled:
        tiles = OpenEXR.TileDescription()
        tiles.xSize, tiles.ySize, tiles.mode = 16, 16, OpenEXR.ONE_LEVEL
        header["tiles"] = tiles
    data = rgb.astype(np.float16 if half else np.float32)
    channels = {n: np.ascontiguousarray(data[:, :, c]) for c, n in enumerate("RGB")}
    OpenEXR.File(header, channels).write(str(path))


def exr_picture() -> np.ndarray:
    yy, xx = np.mgrid[0:H, 0:W]
    return np.stack([xx / W, yy / H, 0.5 + 0.4 * np.sin((xx + yy) / 6.0)], -1)


@pytest.mark.parametrize("compression,tiled,lossy", [
    ("PIZ", False, False), ("DWAA", False, True), ("DWAB", False, True), ("PXR24", False, False),
    ("B44", False, True), ("B44A", False, True), ("ZIP", True, False), ("PIZ", True, False),
    ("RLE", False, False), ("NO", False, False)])
def test_exr_every_codec(tmp_path, compression, tiled, lossy):
    rgb = exr_picture()
    path = tmp_path / "c.exr"
    exr_file(path, rgb, compression, tiled=tiled)
    got = F.read_image(path, finite=True)
    want = rgb.astype(np.float16).astype(np.float32)
    assert got.shape == (H, W, 4) and np.all(got[:, :, 3] == 1)
    assert np.abs(got[:, :, :3] - want).max() <= (0.02 if lossy else 0)


def test_exr_writer_round_trips_codecs(tmp_path):
    rgb = exr_picture().astype(np.float32)
    for compression in ("piz", "dwaa", "zip"):
        F.write_exr(tmp_path / "w.exr", rgb, compression=compression)
        assert OpenEXR.File(str(tmp_path / "w.exr")).header()["compression"] == getattr(
            OpenEXR, f"{compression.upper()}_COMPRESSION")
        tol = 0.02 if compression == "dwaa" else 0
        assert np.abs(F.read_image(tmp_path / "w.exr")[:, :, :3] - rgb).max() <= tol
    with pytest.raises(GraphError, match="compression 'lzw'"):
        F.write_exr(tmp_path / "w.exr", rgb, compression="lzw")


def corrupt_exr(path) -> None:
    """Issue 31 defect 4's file: every scanline block claims the first block's y."""
    rgb = exr_picture()
    exr_file(path, rgb, "NO")
    raw = bytearray(path.read_bytes())
    table_at = raw.index(b"scanlineimage\0") + len(b"scanlineimage\0")  # the header's end
    table = np.frombuffer(bytes(raw[table_at:table_at + 8 * H]), "<u8")
    assert table[0] == table_at + 8 * H  # the offset table follows the header
    for offset in table[1:]:
        struct.pack_into("<i", raw, int(offset), 0)
    path.write_bytes(bytes(raw))


def test_corrupt_exr_is_one_error(tmp_path, capfd):
    path = tmp_path / "bad.exr"
    corrupt_exr(path)
    with pytest.raises(GraphError) as e:
        F.read_image(path)
    text = str(e.value)
    assert "\n" not in text and str(path) in text and "cannot decode OpenEXR file" in text
    assert "scanline" in text  # the library's reason, not only that it failed
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # nothing the library printed escapes
    code = main(["denoise", str(path), "--noise", "1e6", "100", "--weights",
                 str(tmp_path / "none.lut")])
    assert code == 2  # (no weights: refused before any file)


# ------------------------------------------------------------------------------------------
# vkgraph denoise keeps what a photo carries


@pytest.fixture(scope="module")
def denoised(tmp_path_factory):
    """One `vkgraph denoise` over a folder of photos of every kind: (inputs, outputs, stdout)."""
    d = tmp_path_factory.mktemp("photos")
    w = d / "w.lut"
    F.write_lut(w, conditioned_weights().astype(np.float16).ravel(), 1, "f16", 64, 448,
                ssbo=True, text="lut contains weights for\nplain kernel weight activation")
    src = d / "in"
    src.mkdir()
    px = picture8()
    pillow_save(src / "portrait.jpg", px, "JPEG", quality=80, exif=exif_block(6))
    pillow_save(src / "icc.png", px, "PNG", exif=exif_block(1), icc_profile=SRGB_ICC)
    (src / "deep.png").write_bytes(png16(picture16()))
    tifffile.imwrite(src / "deep.tif", picture16(), photometric="rgb")
    tifffile.imwrite(src / "float.tif", (picture16() / 65535.0).astype(np.float32),
                     photometric="rgb")
    pillow_save(src / "web.webp", px, "WEBP", quality=90, exif=exif_block(1),
                icc_profile=SRGB_ICC)
    Image.fromarray(px).convert("CMYK").save(src / "cmyk.jpg", "JPEG", quality=90)
    names = sorted(p.name for p in src.iterdir())
    out = d / "out"
    res = main(["-q", "denoise", *[str(src / n) for n in names], "--outdir", str(out),
                "--noise", "1e6", "100", "--weights", str(w)])
    assert res == 0
    return src, out


def test_denoise_portrait_comes_out_upright_with_its_exif(denoised):
    src, out = denoised
    im = Image.open(out / "portrait.jpg")
    assert im.size == (H, W)  # stored upright: portrait
    exif = im.getexif()
    assert exif.get(0x0112, 1) == 1 and exif[0x010F] == MAKE
    assert exif.get_ifd(0x8769)[0x8827] == ISO
    seen = np.asarray(ImageOps.exif_transpose(im))  # as a viewer shows it
    assert seen[2:12, -12:-2].mean() > 200 and seen[-16:, :16].mean() < 160
    # the input's quantisation tables, so its quality
    assert im.quantization == Image.open(src / "portrait.jpg").quantization
    assert F.jpeg_quality(im.quantization) == 80


def test_denoise_keeps_icc_and_exif(denoised):
    _, out = denoised
    for name in ("icc.png", "web.webp"):
        im = Image.open(out / name)
        assert im.info.get("icc_profile") == SRGB_ICC, name
        assert im.getexif()[0x010F] == MAKE, name
        assert im.getexif().get_ifd(0x8769)[0x8827] == ISO, name
    assert Image.open(out / "web.webp").format == "WEBP"


def test_denoise_keeps_16_bits_and_float(denoised):
    _, out = denoised
    raw = (out / "deep.png").read_bytes()
    assert raw[24:26] == bytes([16, 2])  # IHDR: 16-bit rgb
    deep = F._png16_colour(out / "deep.png", raw)
    assert deep.shape == (H, W, 3) and np.any(deep % 257)  # low bytes in use
    tif = tifffile.imread(out / "deep.tif")
    assert tif.dtype == np.uint16 and tif.shape == (H, W, 3) and np.any(tif % 257)
    assert np.abs(tif.astype(int) - deep.astype(int)).max() <= 1  # the same result
    flt = tifffile.imread(out / "float.tif")
    assert flt.dtype == np.float32 and flt.shape == (H, W, 3)
    assert F.decode_image(out / "icc.png")[1].depth == "u8"  # 8-bit stays 8-bit


def test_denoise_cmyk_jpeg(denoised):
    _, out = denoised
    im = Image.open(out / "cmyk.jpg")
    assert im.mode == "RGB"
    # the white corner stays white (K read as alpha and C, M, Y as r, g, b made it black)
    assert np.asarray(im)[:12, :12].mean() > 230


def test_denoise_quality_flag_and_formats(denoised, tmp_path):
    src, _ = denoised
    w = denoised[0].parent / "w.lut"
    for name, dst, q in (("portrait.jpg", "q.jpg", 60), ("icc.png", "q.webp", None),
                         ("deep.tif", "q.jpg", None)):
        args = ["-q", "denoise", str(src / name), "-o", str(tmp_path / dst), "--noise", "1e6",
                "100", "--weights", str(w)]
        assert main(args + (["--quality", str(q)] if q else [])) == 0
        if dst.endswith(".jpg"):
            got = F.jpeg_quality(Image.open(tmp_path / dst).quantization)
            assert got == (q or F.JPG_QUALITY), (name, got)
        else:
            assert Image.open(tmp_path / dst).format == "WEBP"


def test_the_line_says_the_quality_written(denoised, tmp_path, capsys):
    """A JPEG input written as WebP without --quality gets the JPEG's own quality, and the
    file's line says that one (it said the default, 95)."""
    src, _ = denoised
    w = denoised[0].parent / "w.lut"
    assert main(["denoise", str(src / "portrait.jpg"), "-o", str(tmp_path / "p.webp"),
                 "--noise", "1e6", "100", "--weights", str(w)]) == 0
    assert ", quality 80, " in capsys.readouterr().out


def test_writers_refuse_a_quality_out_of_range(tmp_path):
    """1..100, as o-jpg's range says: an error, never a silent clamp."""
    for q in (0, 101):
        for write in (F.write_jpg, F.write_webp):
            with pytest.raises(GraphError, match="outside 1..100"):
                write(tmp_path / "x.out", np.zeros((4, 4, 3), np.float32), q)
    assert not list(tmp_path.iterdir())


def test_new_writers_refuse_non_finite_pixels(tmp_path):
    from vkgraph.pipeline.errors import RuntimeFailure

    img = np.full((4, 4, 3), 0.5, np.float32)
    img[1, 2, 0] = np.nan
    for name, write in (("x.tif", F.write_tiff), ("x.webp", F.write_webp),
                        ("x.png", lambda p, a: F.write_png(p, a, "u16"))):
        with pytest.raises(RuntimeFailure, match="NaN"):
            write(tmp_path / name, img)
    assert not list(tmp_path.iterdir())
