"""Camera raw files without camera files: small DNGs written here (vkgraph/apps/dng.py) from clean
images with known noise, read back through LibRaw (pipeline/raw.py, i-raw), demosaiced
(modules/demosaic against its numpy reference), colour-converted, noise profiles (darktable's
format, estimated from the mosaic) and `vkgraph denoise photo.dng`."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("rawpy", reason="the raw extra: pip install 'vkgraph[raw]'")
pytest.importorskip("tifffile", reason="the dev extra writes the test DNGs")

from conftest import vkgraph  # noqa: E402

from vkgraph.apps import camnoise, dng  # noqa: E402
from vkgraph.apps.heldout import add_noise, psnr  # noqa: E402
from vkgraph.cli.main import main  # noqa: E402
from vkgraph.modules.demosaic import reference as ref  # noqa: E402
from vkgraph.modules.demosaic.module import push_values  # noqa: E402
from vkgraph.pipeline.errors import GraphError  # noqa: E402
from vkgraph.pipeline.formats import read_image, read_pfm, srgb_to_linear  # noqa: E402
from vkgraph.pipeline.raw import RawImage, RawMeta, check_raw, read_raw  # noqa: E402
from vkgraph.pipeline.testing import dispatch, session_device  # noqa: E402

PATTERNS = [*dng.BAYER.items(), ("X-Trans", dng.XTRANS)]
BLACK = np.array([[500, 510], [520, 530]])  # a different black level per Bayer position
WHITE = 16383


def scene(h: int = 48, w: int = 60, seed: int = 0) -> np.ndarray:
    """A clean linear rgb picture: smooth colour gradients, an edge and some texture."""
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    rgb = np.stack([0.3 + 0.25 * np.sin(6 * xx + 1) * np.cos(4 * yy),
                    0.35 + 0.2 * np.cos(5 * yy + 2 * xx),
                    0.25 + 0.2 * np.sin(7 * yy + 0.5)], -1)
    rgb[:, w // 2:] *= 1.4  # a vertical edge
    rng = np.random.default_rng(seed)
    return np.clip(rgb + 0.01 * rng.standard_normal(rgb.shape), 0.02, 0.95)


def write(path, clean, cfa, noise=None, black=BLACK, iso=800, make="Acme", model="Cam 1",
          **more):
    """A DNG of `clean` through vkgraph/apps/dng.py's camera; noise (a, b) on the mosaic;
    `more`: write_dng's other tags (orientation, taken)."""
    mosaic = dng.camera_mosaic(clean, cfa)
    if noise is not None:
        mosaic = add_noise(mosaic, *noise, seed=3)
    p = len(cfa)
    blk = black if p == 2 else int(np.asarray(black).min())
    levels = np.asarray(blk).ravel() if p == 2 else blk
    dng.write_dng(path, dng.mosaic_counts(mosaic, blk, WHITE), cfa, levels, WHITE,
                  dng.CAMERA_MATRIX, dng.CAMERA_NEUTRAL, make=make, model=model, iso=iso,
                  **more)
    return mosaic


@pytest.mark.parametrize("name,cfa", PATTERNS)
def test_read_levels_pattern_and_metadata(tmp_path, name, cfa):
    clean = scene()
    mosaic = write(tmp_path / "a.dng", clean, cfa)
    raw = read_raw(tmp_path / "a.dng")
    assert raw.mosaic.shape == clean.shape[:2] and raw.mosaic.dtype == np.float32
    assert raw.meta.cfa == tuple(tuple(r) for r in cfa)
    # per-position black levels and the white level: within one count of rounding
    assert np.abs(raw.mosaic - mosaic).max() <= 0.5 / (WHITE - 530) + 1e-6
    assert raw.meta.wb == pytest.approx((2.0, 1.0, 1 / 0.65), rel=1e-5)
    assert (raw.meta.make, raw.meta.model, raw.meta.iso) == ("Acme", "Cam 1", 800.0)
    # balanced camera rgb -> Rec.709 undoes the camera: rgb_cam diag(wb) cam_from_rgb = I
    m = np.array(raw.meta.rgb_cam) @ np.diag(raw.meta.wb) @ dng.camera_from_rgb()
    assert np.abs(m - np.eye(3)).max() < 1e-4
    assert np.array(raw.meta.rgb_cam).sum(axis=1) == pytest.approx([1, 1, 1], abs=1e-4)
    # camera -> XYZ takes the camera's white to D65's white
    xyz = raw.meta.cam_xyz @ np.array(dng.CAMERA_NEUTRAL)
    assert xyz / xyz[1] == pytest.approx([0.9505, 1.0, 1.089], abs=2e-3)


@pytest.mark.parametrize("cfa", [dng.BAYER["GRBG"], dng.XTRANS])
def test_read_keeps_the_visible_area(tmp_path, cfa):
    """A masked margin (DNG ActiveArea) is cut off; the pattern starts at the visible area."""
    mosaic = np.random.default_rng(2).random((30, 40))
    counts = dng.mosaic_counts(mosaic, 512, 4095)
    counts[:2] = counts[:, :4] = 100  # the masked photosites: below black
    dng.write_dng(tmp_path / "a.dng", counts, cfa, 512, 4095, dng.CAMERA_MATRIX,
                  dng.CAMERA_NEUTRAL, active_area=(2, 4, 30, 40))
    raw = read_raw(tmp_path / "a.dng")
    assert raw.mosaic.shape == (28, 36) and raw.meta.cfa == tuple(tuple(r) for r in cfa)
    assert np.abs(raw.mosaic - mosaic[2:, 4:]).max() <= 0.5 / (4095 - 512) + 1e-6


def hostile_files(tmp_path):
    good = dng.dng_bytes(np.full((32, 32), 600, np.uint16), dng.BAYER["RGGB"], 512, 4095,
                         dng.CAMERA_MATRIX, dng.CAMERA_NEUTRAL)
    import tifffile

    (tmp_path / "good.dng").write_bytes(good)
    with tifffile.TiffFile(tmp_path / "good.dng") as tf:
        at = [tf.pages[0].tags[t].valueoffset for t in (256, 257)]
    huge = bytearray(good)
    for off in at:  # width and height claim 60000 photosites each
        huge[off:off + 2] = (60000).to_bytes(2, "little")
    from vkgraph.pipeline.formats import write_jpg

    files = {"truncated.dng": good[:len(good) // 2], "header.dng": good[:100],
             "huge.dng": bytes(huge), "empty.nef": b"", "text.cr2": b"not a raw file " * 9}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    write_jpg(tmp_path / "jpeg.NEF", np.full((16, 16, 3), 0.5, np.float32))
    return [*files, "jpeg.NEF"]


def test_hostile_files_are_one_clear_error(tmp_path, capsys):
    for name in hostile_files(tmp_path):
        path = tmp_path / name
        for reader in (check_raw, read_raw):
            with pytest.raises(GraphError) as e:
                reader(path)
            assert str(path) in e.value.line() and "\n" not in e.value.line()
        code = main(["denoise", str(path), "-o", str(tmp_path / "out.exr")])
        err = capsys.readouterr().err
        assert code == 2, (name, err)
        assert "Traceback" not in err and name in err
        assert not (tmp_path / "out.exr").exists()
    with pytest.raises(GraphError, match="more than vkgraph reads"):
        read_raw(tmp_path / "huge.dng")
    with pytest.raises(GraphError, match="not a regular file"):
        read_raw(tmp_path)


def test_missing_rawpy_says_how_to_install(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_rawpy(name, *args, **kwargs):
        if name == "rawpy":
            raise ImportError("No module named 'rawpy'")
        return real(name, *args, **kwargs)

    write(tmp_path / "a.dng", scene(16, 16), dng.BAYER["RGGB"])
    monkeypatch.setattr(builtins, "__import__", no_rawpy)
    with pytest.raises(GraphError, match=r"vkgraph\[raw\]"):
        read_raw(tmp_path / "a.dng")


@pytest.mark.parametrize("name,cfa", PATTERNS)
def test_demosaic_kernel_matches_reference(name, cfa):
    rng = np.random.default_rng(1)
    h, w = 21, 30  # odd sizes: the pattern is cut at the borders
    mosaic = rng.random((h, w)).astype(np.float32)
    mosaic[::5, ::3] = 1.0  # saturated photosites
    matrix = ((1.5, -0.3, -0.2), (-0.2, 1.4, -0.2), (0.0, -0.5, 1.5))
    meta = RawMeta(cfa=tuple(tuple(r) for r in cfa), wb=(2.0, 1.0, 1.5), rgb_cam=matrix)
    for wb, colour in ((True, True), (False, False)):
        push = push_values(meta, wb, colour)
        gains = meta.wb if wb else (1, 1, 1)
        if len(cfa) == 2:
            out = dispatch("demosaic", "bayer", inputs={"input": mosaic[:, :, None]},
                           outputs={"output": (h, w, 4)}, push=push, size=(w, h))["output"]
        else:  # the two passes, each against its reference
            green = ref.xtrans_green(ref.balance(mosaic, cfa, gains), cfa)
            g = dispatch("demosaic", "xtrans_g", inputs={"input": mosaic[:, :, None]},
                         outputs={"g": (h, w, 1)}, push=push, size=(w, h))["g"]
            assert np.abs(g[..., 0] - green).max() < 1e-5
            out = dispatch("demosaic", "xtrans", inputs={"input": mosaic[:, :, None],
                                                         "g": green[:, :, None]},
                           outputs={"output": (h, w, 4)}, push=push, size=(w, h))["output"]
        want = ref.demosaic(mosaic, cfa, gains)
        if colour:
            want = ref.colour(want, matrix)
        assert np.abs(out[..., :3] - want).max() < 1e-5
        assert np.all(out[..., 3] == 1)


@pytest.mark.parametrize("cfa", [dng.BAYER["GBRG"], dng.XTRANS])
def test_demosaic_in_bands_equals_the_whole(cfa):
    """A mosaic larger than the device's buffers runs in bands of rows: the same result."""
    from vkgraph.apps.rawdenoise import Demosaicer

    rng = np.random.default_rng(4)
    raw = RawImage(rng.random((50, 24)).astype(np.float32),
                   RawMeta(cfa=tuple(tuple(r) for r in cfa), wb=(1.8, 1.0, 1.3),
                           rgb_cam=((1.2, -0.1, -0.1), (-0.2, 1.3, -0.1), (0, -0.3, 1.3))))
    whole = Demosaicer(session_device())(raw, colour=True)
    bands = Demosaicer(session_device(), max_pixels=24 * 30)
    assert np.array_equal(bands(raw, colour=True), whole)
    # it did cut the mosaic, into bands of one height: one build
    assert len(bands.sessions) == 1 and next(iter(bands.sessions))[1] < 50
    want = ref.colour(ref.demosaic(raw.mosaic, cfa, raw.meta.wb), raw.meta.rgb_cam)
    assert np.abs(whole - want).max() < 1e-5


def test_clipped_highlights_stay_white():
    """Saturated photosites (the white level) balance to white, not to the gains' tint."""
    cfa = dng.BAYER["RGGB"]
    mosaic = np.full((12, 12), 1.0)
    out = ref.demosaic(mosaic, cfa, (2.1, 1.0, 1.6))
    assert np.array_equal(out, np.ones((12, 12, 3), np.float32))


def test_demosaic_keeps_the_photosites_and_is_exact_on_flat_colour():
    cfa = dng.BAYER["GBRG"]
    clean = np.broadcast_to(np.array([0.2, 0.5, 0.3]), (16, 20, 3))
    mosaic = dng.camera_mosaic(clean, cfa, neutral=(1, 1, 1))
    out = ref.demosaic(mosaic, cfa)
    cam = dng.camera_from_rgb(neutral=(1, 1, 1)) @ np.array([0.2, 0.5, 0.3])
    assert np.abs(out - cam).max() < 1e-6  # every filter's weights sum to 1
    colours = ref.colours_of(cfa, 16, 20)
    assert np.array_equal(np.take_along_axis(out, colours[..., None], 2)[..., 0],
                          mosaic.astype(np.float32))


@pytest.mark.parametrize("name,cfa,floor", [("RGGB", dng.BAYER["RGGB"], 28.0),
                                            ("BGGR", dng.BAYER["BGGR"], 28.0),
                                            ("X-Trans", dng.XTRANS, 24.0)])
def test_demosaic_quality_on_a_photograph(tmp_path, name, cfa, floor):
    """The noise-free mosaic of a held-out photograph, read back from a DNG and demosaiced
    and colour-converted, against the clean photograph (PSNR reported)."""
    skimage = pytest.importorskip("skimage")
    from vkgraph.pipeline.datasets import package_file

    clean = read_image(package_file("pkg:skimage/data/astronaut.png"))[96:160, 192:256, :3]
    write(tmp_path / "a.dng", clean, cfa)
    raw = read_raw(tmp_path / "a.dng")
    out = ref.colour(ref.demosaic(raw.mosaic, raw.meta.cfa, raw.meta.wb), raw.meta.rgb_cam)
    value = psnr(out[4:-4, 4:-4], clean[4:-4, 4:-4])
    bilinear = psnr(ref.colour(ref.tent(ref.balance(raw.mosaic, raw.meta.cfa, raw.meta.wb),
                                        raw.meta.cfa), raw.meta.rgb_cam)[4:-4, 4:-4],
                    clean[4:-4, 4:-4])
    print(f"demosaic {name} astronaut 64x64: {value:.2f} dB (tent interpolation "
          f"{bilinear:.2f} dB)")
    assert value > floor
    # gradient correction (Bayer) and colour differences (X-Trans) beat plain interpolation
    assert value > bilinear + 1.0
    del skimage


def profiles_json(path, iso_points, skip_iso=None):
    """A darktable-format noiseprofiles.json with one camera."""
    profiles = [{"name": f"Cam 1 iso {iso}", "iso": iso, "a": list(a), "b": list(b)}
                for iso, a, b in iso_points]
    if skip_iso is not None:
        profiles.append({"name": "bad", "iso": skip_iso, "skip": True,
                         "a": [1, 1, 1], "b": [1, 1, 1]})
    data = {"version": 0, "noiseprofiles": [
        {"maker": "Other", "models": [{"model": "Cam 1", "profiles": [
            {"name": "x", "iso": 800, "a": [9, 9, 9], "b": [9, 9, 9]}]}]},
        {"maker": "ACME", "models": [{"model": "cam-1", "profiles": profiles}]}]}
    path.write_text(json.dumps(data))
    return path


def test_darktable_profile_lookup(tmp_path):
    a400, b400 = (2e-5, 1e-5, 3e-5), (1e-8, 2e-8, 3e-8)
    a1600, b1600 = (8e-5, 4e-5, 1.2e-4), (5e-8, 6e-8, 7e-8)
    path = profiles_json(tmp_path / "np.json", [(400, a400, b400), (1600, a1600, b1600)],
                         skip_iso=800)
    entries = camnoise.load_profiles(path)
    p = camnoise.lookup(entries, "Acme", "Cam 1", 400)
    # var = a_dt x + b_dt -> b = a_dt 65535, a = b_dt 65535^2
    assert p.b == pytest.approx(tuple(v * 65535 for v in a400))
    assert p.a == pytest.approx(tuple(v * 65535**2 for v in b400))
    assert p.source == "darktable: Acme Cam 1 ISO 400"
    mid = camnoise.lookup(entries, "Acme", "Cam 1", 1000)  # halfway; the skipped 800 unused
    halfway = (np.array(a400) + np.array(a1600)) / 2 * 65535
    assert mid.b == pytest.approx(tuple(halfway))
    assert camnoise.lookup(entries, "Acme", "Cam 1", 6400).b == pytest.approx(
        tuple(v * 65535 for v in a1600))  # beyond the profiled range: the nearest
    assert camnoise.lookup(entries, "Acme", "Cam 2", 400) is None
    assert camnoise.lookup(entries, "Acme", "Cam 1", 0) is None  # no ISO in the file
    (tmp_path / "bad.json").write_text("{\"noiseprofiles\": 3}")
    with pytest.raises(GraphError, match="noiseprofiles"):
        camnoise.load_profiles(tmp_path / "bad.json")


def test_noise_profile_of_a_raw_file(tmp_path, monkeypatch):
    """darktable's profile when the camera is in the file, else estimated from the mosaic."""
    # a ramp from dark to bright (the estimator fits the variance over intensity)
    clean = np.linspace(0.05, 1.0, 128)[None, :, None] * (0.7 + 0.3 * scene(128, 128))
    a, b = 2000.0, 40.0
    write(tmp_path / "a.dng", clean, dng.BAYER["RGGB"], noise=(a, b), iso=1600)
    raw = read_raw(tmp_path / "a.dng")
    monkeypatch.setenv("VKGRAPH_NOISEPROFILES", str(tmp_path / "none.json"))
    est = camnoise.profile_for(raw)
    assert est.source == "estimated"
    for x in (0.1, 0.4):  # the estimated std within 20% of the truth
        true = np.sqrt(a + 65535 * x * b)
        for ca, cb in zip(est.a, est.b, strict=True):
            assert abs(np.sqrt(ca + 65535 * x * cb) / true - 1) < 0.2
    path = profiles_json(tmp_path / "np.json", [(1600, (1e-4,) * 3, (1e-7,) * 3)])
    monkeypatch.setenv("VKGRAPH_NOISEPROFILES", str(path))
    dt = camnoise.profile_for(raw)
    assert dt.source == "darktable: Acme Cam 1 ISO 1600"
    assert camnoise.profile_for(raw, (5.0, 6.0)).scalar() == (5.0, 6.0)
    # white balance: a with the gain squared, b with the gain
    bal = dt.balanced((2.0, 1.0, 1.5))
    assert bal.a == pytest.approx((4 * dt.a[0], dt.a[1], 2.25 * dt.a[2]))
    assert bal.b == pytest.approx((2 * dt.b[0], dt.b[1], 1.5 * dt.b[2]))


def test_a_ray_worker_decodes_a_raw_file_once(tmp_path, monkeypatch, device):
    """`vkgraph denoise --ray`'s worker on a GPU: the raw file's colour pattern picks the
    weights, and the same decoded file is denoised (one read_raw, not one each)."""
    from vkgraph.cli import denoise as cli_denoise
    from vkgraph.pipeline import raw as raw_module

    write(tmp_path / "photo.dng", 0.5 * scene(32, 40) + 0.1, dng.BAYER["RGGB"],
          noise=(1e4, 100.0))
    reads = []
    real = raw_module.read_raw
    monkeypatch.setattr(raw_module, "read_raw", lambda path: reads.append(path) or real(path))
    monkeypatch.setattr(cli_denoise, "on_gpu", lambda device: True)  # the GPU's weights
    from concurrent.futures import ThreadPoolExecutor

    worker = object.__new__(cli_denoise.DenoiseWorker)
    worker.dens = cli_denoise.Denoisers(device, None, None)
    worker.pool = ThreadPoolExecutor(1)
    ok, line = worker.denoise(str(tmp_path / "photo.dng"), str(tmp_path / "out.exr"),
                              [1e4, 100.0])
    assert ok, line
    assert "weights unet-raw.lut" in line and reads == [tmp_path / "photo.dng"]
    assert np.isfinite(read_image(tmp_path / "out.exr")).all()


def test_denoise_a_dng(tmp_path, capsys, monkeypatch):
    """`vkgraph denoise photo.dng`: the whole chain on a noisy 32x40 DNG, written as EXR
    (linear), TIFF 16-bit and PNG (sRGB); the denoised image is closer to the clean one than
    the noisy mosaic demosaiced the same way, and its colours are Rec.709's."""
    clean = 0.5 * scene(32, 40) + 0.1
    cfa = dng.BAYER["GRBG"]
    noisy = write(tmp_path / "photo.dng", clean, cfa, noise=(1e4, 100.0), iso=3200)
    monkeypatch.setenv("VKGRAPH_NOISEPROFILES", str(profiles_json(
        tmp_path / "np.json", [(3200, (100 / 65535,) * 3, (1e4 / 65535**2,) * 3)])))
    code = main(["denoise", str(tmp_path / "photo.dng"), "-o", str(tmp_path / "out.exr")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "noise a 1e+04 b 100 (darktable: Acme Cam 1 ISO 3200)" in out
    assert "32x40" not in out and "40x32 Bayer" in out
    got = read_image(tmp_path / "out.exr")[..., :3]
    raw = read_raw(tmp_path / "photo.dng")
    plain = ref.colour(ref.demosaic(raw.mosaic, cfa, raw.meta.wb), raw.meta.rgb_cam)
    inner = np.s_[4:-4, 4:-4]
    before, after = psnr(plain[inner], clean[inner]), psnr(got[inner], clean[inner])
    print(f"demosaic {before:.2f} dB, demosaic + denoise {after:.2f} dB")
    assert after > before + 1.0
    assert np.all(np.isfinite(got))
    del noisy
    for ext in ("tif", "png"):
        assert main(["denoise", str(tmp_path / "photo.dng"), "-o",
                     str(tmp_path / f"out.{ext}")]) == 0
    import tifffile

    tif = tifffile.imread(tmp_path / "out.tif")
    assert tif.dtype == np.uint16 and tif.shape == (32, 40, 3)
    assert np.abs(srgb_to_linear(tif / 65535.0) - np.clip(got, 0, 1)).max() < 1e-4
    png = srgb_to_linear(np.asarray(__import__("imageio").v3.imread(tmp_path / "out.png"),
                                    np.float64) / 255)
    assert np.abs(png - np.clip(got, 0, 1)).max() < 0.02
    # without -o a raw file becomes IN-denoised.exr beside it
    monkeypatch.delenv("VKGRAPH_NOISEPROFILES")
    assert main(["denoise", str(tmp_path / "photo.dng"), "--noise", "1e4", "100"]) == 0
    assert "(given)" in capsys.readouterr().out
    assert (tmp_path / "photo-denoised.exr").is_file()


def test_denoise_an_xtrans_dng(tmp_path, capsys):
    """`vkgraph denoise` on a noisy X-Trans DNG of a held-out photograph's 90x102 centre crop
    (astronaut; sizes not a multiple of the pattern's 6) with the CPU's default, the U-Net of
    mosaics of any pattern: over 1 dB above the chain it replaced (demosaic, then
    kpn-photo-ctx.lut) and above the noisy mosaic demosaiced. (On smooth synthetic gradients
    it is below that chain: bench/README.md, raw_quality.py, "X-Trans files".)"""
    from vkgraph.apps import heldout

    photo = next(p for p in heldout.photos() if p.stem == "astronaut")
    clean = heldout.centre_crop(heldout.load_clean(photo), 102)[6:-6]
    write(tmp_path / "x.dng", clean, dng.XTRANS, noise=(800.0, 15.0))
    code = main(["denoise", str(tmp_path / "x.dng"), "-o", str(tmp_path / "a.exr"),
                 "--noise", "800", "15"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "102x90 X-Trans" in out and "weights unet-xtrans-w24.lut" in out
    from vkgraph.cli.denoise import WEIGHTS_LINEAR as ctx  # kpn-photo-ctx.lut

    assert main(["denoise", str(tmp_path / "x.dng"), "-o", str(tmp_path / "b.exr"),
                 "--noise", "800", "15", "--weights", str(ctx)]) == 0
    raw = read_raw(tmp_path / "x.dng")
    plain = ref.colour(ref.demosaic(raw.mosaic, dng.XTRANS, raw.meta.wb), raw.meta.rgb_cam)
    inner = np.s_[4:-4, 4:-4]
    got, old = (read_image(tmp_path / f"{n}.exr")[..., :3] for n in "ab")
    scores = [psnr(x[inner], clean[inner]) for x in (plain, old, got)]
    print("demosaic {:.2f} dB, demosaic + kpn-photo-ctx {:.2f}, unet-xtrans-w24 {:.2f}"
          .format(*scores))
    assert got.shape == (90, 102, 3) and np.all(np.isfinite(got))
    assert scores[2] > scores[1] + 1.0 and scores[2] > scores[0] + 1.0


@pytest.mark.parametrize("orientation", range(1, 9))
def test_read_orientation_and_the_shot(tmp_path, orientation):
    """The EXIF Orientation a camera recorded (LibRaw's flip, mapped back) and what the
    file says of the shot; exif_of makes EXIF of them without an Orientation."""
    from PIL import Image

    from vkgraph.pipeline.raw import exif_of

    write(tmp_path / "a.dng", scene(), dng.BAYER["RGGB"], iso=1600, orientation=orientation,
          taken="2024:05:06 07:08:09")
    meta = read_raw(tmp_path / "a.dng").meta
    assert (meta.orientation, meta.taken, meta.iso) == (orientation, "2024:05:06 07:08:09",
                                                        1600.0)
    exif = Image.Exif()
    exif.load(exif_of(meta))
    assert (exif[0x010F], exif[0x0110], exif[0x0132]) == ("Acme", "Cam 1",
                                                          "2024:05:06 07:08:09")
    assert 0x0112 not in exif
    shot = exif.get_ifd(0x8769)
    assert (shot[0x8827], shot[0x9003]) == (1600, "2024:05:06 07:08:09")


def test_denoise_turns_a_raw_upright_and_keeps_its_exif(tmp_path, capsys):
    """A portrait raw (Orientation 6) comes out upright: the landscape file's result turned
    as Pillow's exif_transpose turns it, to the bit; a JPEG gets the camera's EXIF without
    an Orientation, so that a viewer does not turn it again."""
    from PIL import Image

    from vkgraph.pipeline.formats import orient

    clean = 0.5 * scene(32, 40) + 0.1
    for name, turn in (("land", 1), ("port", 6)):
        write(tmp_path / f"{name}.dng", clean, dng.BAYER["GBRG"], noise=(1e4, 100.0),
              orientation=turn, taken="2024:05:06 07:08:09")
        for ext in ("tif", "jpg"):
            assert main(["denoise", str(tmp_path / f"{name}.dng"), "-o",
                         str(tmp_path / f"{name}.{ext}"), "--noise", "1e4", "100"]) == 0
    out = capsys.readouterr().out
    assert "port.tif: 40x32 Bayer" in out and "turned upright (EXIF orientation 6), EXIF" in out
    import tifffile

    land, port = (tifffile.imread(tmp_path / f"{n}.tif") for n in ("land", "port"))
    assert land.shape == (32, 40, 3) and port.shape == (40, 32, 3)
    assert np.array_equal(port, orient(land, 6))
    with Image.open(tmp_path / "port.jpg") as im:
        assert im.size == (32, 40)
        exif = im.getexif()
        assert exif.get(0x0112, 1) == 1 and exif[0x010F] == "Acme"
        assert exif.get_ifd(0x8769)[0x9003] == "2024:05:06 07:08:09"


def test_gpu_default_weights_follow_the_pattern(tmp_path, capsys, monkeypatch):
    """Without --weights on a GPU (here the CPU driver taken for one), a Bayer raw file gets
    the U-Net of RGGB mosaics and an X-Trans one the U-Net of mosaics of any pattern: both
    files denoised in one command, each line naming its weights."""
    from vkgraph.cli import denoise as cli_denoise

    monkeypatch.setattr(cli_denoise, "on_gpu", lambda device: True)
    write(tmp_path / "b.dng", scene(24, 30), dng.BAYER["RGGB"], noise=(1e3, 10.0))
    write(tmp_path / "x.dng", scene(24, 30), dng.XTRANS, noise=(1e3, 10.0))
    code = main(["denoise", str(tmp_path / "b.dng"), str(tmp_path / "x.dng"), "--outdir",
                 str(tmp_path / "o"), "--noise", "1e3", "10"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = {line.split(" -> ")[0]: line for line in out.splitlines() if " -> " in line}
    assert "Bayer" in lines[str(tmp_path / "b.dng")]
    assert "weights unet-raw.lut" in lines[str(tmp_path / "b.dng")]
    assert "X-Trans" in lines[str(tmp_path / "x.dng")]
    assert "weights unet-xtrans.lut" in lines[str(tmp_path / "x.dng")]


def test_raw_graph_matches_reference(tmp_path):
    """i-raw -> demosaic (camera rgb) -> colour (the raw's matrix through its `raw` input)
    as a cfg, against the numpy reference."""
    cfa = dng.XTRANS
    write(tmp_path / "a.dng", scene(36, 42), cfa, noise=(1e3, 10.0))
    (tmp_path / "g.cfg").write_text("\n".join([
        "frames:1", "module:i-raw:main", "module:demosaic:01", "module:colour:01",
        "module:display:main", "connect:i-raw:main:output:demosaic:01:input",
        "connect:demosaic:01:output:colour:01:input", "connect:i-raw:main:output:colour:01:raw",
        "connect:colour:01:output:display:main:input", "param:i-raw:main:filename:a.dng",
        "param:demosaic:01:colour:0"]) + "\n")
    code, _, err = vkgraph(tmp_path, "-g", "g.cfg", "--format", "o-pfm", "--filename", "out")
    assert code == 0, err
    raw = read_raw(tmp_path / "a.dng")
    want = ref.colour(ref.demosaic(raw.mosaic, cfa, raw.meta.wb), raw.meta.rgb_cam)
    assert np.abs(read_pfm(tmp_path / "out.pfm") - want).max() < 1e-5
    # demosaic needs a one-channel mosaic: an rgb image on its input is one clear error
    (tmp_path / "h.cfg").write_text("\n".join([
        "module:i-pfm:main", "module:demosaic:01", "module:display:main",
        "connect:i-pfm:main:output:demosaic:01:input",
        "connect:demosaic:01:output:display:main:input",
        "param:i-pfm:main:filename:out.pfm"]) + "\n")
    code, _, err = vkgraph(tmp_path, "-g", "h.cfg", "--format", "o-pfm", "--filename", "x")
    assert code == 2 and "demosaic:01:input wants y" in err and "Traceback" not in err
    # a hostile file in a graph: one line, exit 2
    from vkgraph.pipeline.formats import write_jpg

    write_jpg(tmp_path / "a.NEF", np.full((16, 16, 3), 0.5, np.float32))
    (tmp_path / "n.cfg").write_text((tmp_path / "g.cfg").read_text().replace("a.dng", "a.NEF"))
    code, _, err = vkgraph(tmp_path, "-g", "n.cfg", "--format", "o-pfm", "--filename", "y")
    assert code == 2 and "a.NEF: not a raw file LibRaw reads" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "y.pfm").exists()
