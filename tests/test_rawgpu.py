"""A raw file's path on the device for weights of RGGB mosaics: raw-in (16-bit codes ->
levels and white balance) and rgb-out (the camera matrix, three floats a pixel, the count of
non-finite pixels) against the host's numbers, and the Denoiser's raw16() against the float
path it replaces (whole and tiled, every Bayer phase, odd sizes)."""

from __future__ import annotations

import numpy as np
import pytest
from test_srgb8 import chain
from test_unet_infer import A, B, noisy, write_weights

from vkgraph.apps.denoise import Denoiser
from vkgraph.modules.unet_t import reference as ref
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.raw import RawImage, RawMeta
from vkgraph.pipeline.testing import session_device

BLACK = np.array([[500.0, 510.0], [520.0, 530.0]])
WHITE = 16383.0
WB = (2.0, 1.0, 1.5)
MATRIX = ((1.6, -0.4, -0.2), (-0.3, 1.5, -0.2), (0.0, -0.5, 1.5))


def codes(h: int, w: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 16384, (h, w), dtype=np.uint16)


def test_raw_in_levels_and_white_balance():
    """Each photosite (code - black) * scale with its place's black and scale, in r, g and
    b, alpha 1: the host's (code - black) / (white - black) * gain to float32 rounding."""
    values = codes(6, 10)
    gain = np.array([[2.0, 1.0], [1.0, 1.5]])
    scale = gain / (WHITE - BLACK)
    got = chain("raw-in", "i-bytes", values.view(np.uint8).reshape(6, 5, 4),
                params={"black": BLACK.ravel().tolist(),
                        "scale": scale.ravel().tolist()})["output"]
    assert got.shape == (6, 10, 4) and got.dtype == np.float32
    blk, g = np.tile(BLACK, (3, 5)), np.tile(gain, (3, 5))
    want = (values - blk) / (WHITE - blk) * g
    np.testing.assert_allclose(got[..., 0], want, rtol=2e-6, atol=1e-7)
    assert np.array_equal(got[..., 0], got[..., 1]) and np.array_equal(got[..., 0], got[..., 2])
    assert np.all(got[..., 3] == 1)
    # the place's own black: moving one column over gives other numbers
    assert np.abs(got[:, 1:, 0] - want[:, :-1]).max() > 1e-3


def test_rgb_out_matrix_packed_and_non_finite_counted():
    rng = np.random.default_rng(2)
    rgba = rng.random((5, 7, 4)).astype(np.float32)
    rgba[1, 2, :3] = 3e38  # finite in, infinite after the matrix
    out = chain("rgb-out", "i-array", rgba, ("output", "bad"),
                {"matrix": np.ravel(MATRIX).tolist()})
    got = out["output"].reshape(5, 7, 3)
    want = rgba[..., :3].astype(np.float64) @ np.array(MATRIX).T
    ok = np.ones((5, 7), bool)
    ok[1, 2] = False
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-5, atol=1e-6)
    assert not np.all(np.isfinite(got[1, 2]))
    assert int(out["bad"][0]) == 1
    # planar 1: each row's r, g and b planes, the same numbers
    planes = chain("rgb-out", "i-array", rgba, ("output",),
                   {"matrix": np.ravel(MATRIX).tolist(), "planar": 1})["output"]
    assert np.array_equal(planes.reshape(5, 3, 7).transpose(0, 2, 1)[ok], got[ok])


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    return write_weights(tmp_path_factory.mktemp("w") / "raw.lut", 2, 2, cfa=True)[0]


def raw_of(cfa, h: int, w: int, seed: int = 4) -> RawImage:
    """A RawImage as read_raw makes it: stored codes, their levels, the float mosaic."""
    clean = ref.mosaic(noisy(w + 2, h + 2, seed))[..., 0]  # RGGB values in [0, ~1]
    top, left = np.argwhere(np.asarray(cfa) == 0)[0]  # red's place: crop the RGGB picture
    m = clean[top:top + h, left:left + w]
    black = np.array([[BLACK[(y + top) % 2, (x + left) % 2] for x in range(2)]
                      for y in range(2)])
    blk = np.tile(black, (h // 2 + 1, w // 2 + 1))[:h, :w]
    values = np.clip(np.rint(m * (WHITE - blk) + blk), 0, 65535).astype(np.uint16)
    mosaic = ((values.astype(np.float32) - blk) / (np.float32(WHITE) - blk)).astype(np.float32)
    meta = RawMeta(tuple(tuple(r) for r in cfa), WB, MATRIX)
    return RawImage(mosaic, meta, values, tuple(map(tuple, black)), WHITE)


@pytest.mark.parametrize("cfa,h,w", [(((0, 1), (1, 2)), 40, 64), (((1, 0), (2, 1)), 40, 63),
                                     (((1, 2), (0, 1)), 39, 50), (((2, 1), (1, 0)), 37, 45)])
def test_raw16_is_the_float_path(weights, cfa, h, w):
    """denoise_raw on a raw that keeps its codes (the device's levels, white balance and
    matrix) against the same raw without them (the host's: balanced mosaic, RGGB phase,
    network, matrix): the same image within the float rounding of the levels."""
    from vkgraph.apps.rawdenoise import denoise_raw

    raw = raw_of(cfa, h, w)
    den = Denoiser(session_device(), weights)
    host, _, ab = denoise_raw(den, None, RawImage(raw.mosaic, raw.meta), noise=(A, B))
    dev, _, ab2 = denoise_raw(den, None, raw, noise=(A, B))
    assert ab == ab2 and dev.shape == host.shape == (h, w, 3)
    assert any(k[3] == "raw16" for k in den.builds)
    np.testing.assert_allclose(dev, host, rtol=1e-4, atol=1e-5)


def test_raw16_tiles_equal_the_whole(weights):
    """raw16 in tiles (limits["raw16"] small) gives the whole mosaic's numbers."""
    from vkgraph.apps.rawdenoise import raw16

    raw = raw_of(((0, 1), (1, 2)), 64, 96)
    whole = raw16(Denoiser(session_device(), weights), raw, A, B)
    den = Denoiser(session_device(), weights)
    den.limits["raw16"] = 48 * 48
    seen = []
    den.on_tile = lambda done, total: seen.append((done, total))
    tiled = raw16(den, raw, A, B)
    assert len(seen) > 2 and seen[-1][0] == seen[-1][1]
    np.testing.assert_array_equal(tiled, whole)
    # planar: the same numbers, each row's channels in planes (x the innermost step)
    planes = raw16(den, raw, A, B, planar=True)
    assert planes.strides[1] == 4 and planes.strides[2] > 4
    np.testing.assert_array_equal(planes, whole)


def test_raw16_refuses_what_it_cannot_run(weights, monkeypatch):
    den = Denoiser(session_device(), weights)
    with pytest.raises(GraphError, match="raw16: expected an RGGB mosaic"):
        den.raw16(np.zeros((4, 5), np.uint16), BLACK, BLACK, np.eye(3), A, B)  # odd width
    with pytest.raises(GraphError, match="raw16: expected an RGGB mosaic"):
        den.raw16(np.zeros((4, 6), np.float32), BLACK, BLACK, np.eye(3), A, B)
    # pixels rgb-out counted as not finite are refused, nothing returned
    step = den._step

    def counted(*args, **kwargs):
        session = step(*args, **kwargs)
        take = session.take
        monkeypatch.setattr(session, "take", lambda name: np.array([3], np.uint32)
                            if name == "o-array:bad" else take(name))
        return session

    monkeypatch.setattr(den, "_step", counted)
    raw = raw_of(((0, 1), (1, 2)), 16, 16)
    with pytest.raises(GraphError, match="has 3 pixels of non-finite values"):
        den.raw16(raw.values, BLACK, np.ones((2, 2)) / WHITE, np.eye(3), A, B)


@pytest.mark.parametrize("p", [2, 6])
def test_normalised_is_the_plane_arithmetic(p):
    """read_raw's normalisation, place by place on threads: the numbers of (values - black)
    / (white - black) over whole planes, bit for bit (Bayer and X-Trans periods)."""
    from vkgraph.pipeline.raw import normalised, pattern_plane

    rng = np.random.default_rng(p)
    values = rng.integers(0, 16384, (37, 50), dtype=np.uint16)
    tile = (rng.random((p, p)) * 600).astype(np.float32)
    blk = pattern_plane(tile, 37, 50)
    want = (values.astype(np.float32) - blk) / (np.float32(WHITE) - blk)
    assert np.array_equal(normalised(values, tile, WHITE), want)


@pytest.mark.parametrize("planar", [False, True])
def test_exr_written_band_by_band_is_the_result(weights, tmp_path, planar):
    """denoise_raw telling an ExrStream its rows band by band (tiles of a few rows, a
    mosaic cropped after its RGGB phase), pixel by pixel or in planes (written from the
    array as it lies): the file holds the result, bit for bit."""
    pytest.importorskip("OpenEXR")
    from vkgraph.apps.rawdenoise import denoise_raw
    from vkgraph.pipeline.exrstream import ExrStream
    from vkgraph.pipeline.formats import read_exr

    raw = raw_of(((1, 0), (2, 1)), 70, 45)  # GRBG, odd width: a mirrored column in front
    den = Denoiser(session_device(), weights)
    den.limits["raw16"] = 48 * 48
    told = []
    with ExrStream(tmp_path / "a.exr", 45, 70) as exr:
        def rows(out, stop):
            told.append(stop)
            exr.rows(out, stop)

        out, _, _ = denoise_raw(den, None, raw, noise=(A, B), rows=rows, planar=planar)
        exr.finish(out)
    assert (out.strides[1] == 4) == planar
    assert len(told) > 2 and told == sorted(told) and told[-1] == 70
    assert np.array_equal(read_exr(tmp_path / "a.exr")[..., :3], out)


def test_raw16_tiles_a_landscape_raw_in_bands_of_whole_rows(weights):
    """A raw wider than tall in tiles: bands of whole rows (a writer streams each band as
    it is done), not the strips of whole columns that would denoise fewer pixels."""
    from vkgraph.apps.rawdenoise import raw16

    raw = raw_of(((0, 1), (1, 2)), 48, 160)
    den = Denoiser(session_device(), weights)
    den.limits["raw16"] = 176 * 40
    cx, cy, _ = den.tiling(160, 48, den.limits["raw16"])
    assert cx < 160  # where any tiles would do, columns
    tiles, told = [], []
    den.on_tile = lambda done, total: tiles.append(total)
    raw16(den, raw, A, B, lambda out, stop: told.append(stop))
    assert tiles[-1] == len(told) > 1 and told == sorted(told) and told[-1] == 48


@pytest.mark.parametrize("limit", [None, 48 * 48])
def test_prepare_builds_what_raw16_runs(weights, limit):
    """rawdenoise.prepare (the command, while the profile is estimated) builds the session
    raw16 then runs (whole, or its tiles): one build in all."""
    from vkgraph.apps.rawdenoise import prepare, raw16

    raw = raw_of(((1, 2), (0, 1)), 61, 50)  # GBRG, odd height: a mirrored row in front
    den = Denoiser(session_device(), weights)
    if limit:
        den.limits["raw16"] = limit
    prepare(den, raw)
    assert len(den.builds) == 1
    raw16(den, raw, A, B)
    assert len(den.builds) == 1


def test_a_dng_on_the_device_path_never_makes_the_float_mosaic(weights, tmp_path):
    """read_raw keeps the stored codes and makes the float mosaic only when asked: the
    device's path with a given profile never asks, and gives the float path's image."""
    pytest.importorskip("rawpy")
    pytest.importorskip("tifffile")
    from test_raw import scene, write

    from vkgraph.apps.rawdenoise import denoise_raw
    from vkgraph.pipeline.raw import read_raw

    write(tmp_path / "a.dng", scene(36, 50), ((1, 2), (0, 1)), noise=(A, B))  # GBRG
    raw = read_raw(tmp_path / "a.dng")
    assert raw.values.dtype == np.uint16 and raw.shape == (36, 50)
    den = Denoiser(session_device(), weights)
    dev, _, _ = denoise_raw(den, None, raw, noise=(A, B))
    assert raw._mosaic is None  # not made
    host, _, _ = denoise_raw(den, None, RawImage(raw.mosaic, raw.meta), noise=(A, B))
    np.testing.assert_allclose(dev, host, rtol=1e-4, atol=1e-5)


def test_a_portrait_raw_to_exr_on_the_device_path_is_upright(weights, tmp_path, capsys):
    """`vkgraph denoise` with weights of mosaics (the device's path, its EXR written by
    ExrStream): a portrait raw (Orientation 8) is the landscape one's result turned."""
    pytest.importorskip("rawpy")
    pytest.importorskip("tifffile")
    from test_raw import scene, write

    from vkgraph.cli.main import main
    from vkgraph.pipeline.formats import orient, read_exr

    clean = 0.5 * scene(32, 40) + 0.1
    for name, turn in (("land", 1), ("port", 8)):
        write(tmp_path / f"{name}.dng", clean, ((0, 1), (1, 2)), noise=(A, B),
              orientation=turn)
        assert main(["denoise", str(tmp_path / f"{name}.dng"), "-o",
                     str(tmp_path / f"{name}.exr"), "--weights", str(weights),
                     "--noise", str(A), str(B)]) == 0
    assert "turned upright (EXIF orientation 8)" in capsys.readouterr().out
    land, port = (read_exr(tmp_path / f"{n}.exr")[..., :3] for n in ("land", "port"))
    assert land.shape == (32, 40, 3) and port.shape == (40, 32, 3)
    assert np.array_equal(port, orient(land, 8))
