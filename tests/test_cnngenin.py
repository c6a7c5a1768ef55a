"""cnngenin on the device against its numpy reference of vkdt's generator
(modules/cnngenin/reference.py: exact uint32 random numbers, float64 maths rounded to half).

Tolerances (per value, outputs are f16-rounded): |gpu - ref| <= 1 half ulp of ref (the f32
maths on the device may land on the other side of a half rounding boundary), plus, in the
noise modes, 2e-6 * (1 + |ref|) for the device's log/sqrt/cos/sin; and at least 99% of the
values must be bit-equal. noiseab (f32) and the modes without exposure or noise are exact.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vkgraph.api import run_graph
from vkgraph.modules.cnngenin.reference import (
    TILE,
    colour_transform,
    frame_numbers,
    is_clean,
    misreport,
    mrand,
    reference,
    set_numbers,
    set_reference,
    to_half,
    uses_mhc,
)
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.formats import write_pfm
from vkgraph.pipeline.graph import Graph
from vkgraph.pipeline.registry import Registry
from vkgraph.pipeline.testing import CAPTURE

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = CAPTURE  # the `capture` sink
FRAMES = 3
F32 = np.float32


# -- running the module on the device ----------------------------------------------------

@pytest.fixture(scope="module")
def device():
    from vkgraph.pipeline.vk import Device
    try:
        dev = Device.open()
    except Exception as e:  # no Vulkan here
        pytest.skip(f"no Vulkan device: {e}")
    yield dev
    dev.close()


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Two input pairs (rgb PFMs; i-pfm adds alpha 1): 37x23 for tiles=0, 80x70 for tiles=1.
    Values reach below 0 (noise uses max(ref, 0)) and above 1."""
    rng = np.random.default_rng(7)
    d = tmp_path_factory.mktemp("cnngenin")
    out = {}
    for key, (wd, ht) in {"small": (37, 23), "large": (80, 70)}.items():
        ref = rng.uniform(-0.05, 1.5, (ht, wd, 3)).astype(F32)
        img = (ref + rng.normal(0, 0.05, ref.shape)).astype(F32)
        write_pfm(d / f"{key}-img.pfm", img)
        write_pfm(d / f"{key}-ref.pfm", ref)
        rgba = [np.concatenate([a, np.ones((ht, wd, 1), F32)], -1) for a in (img, ref)]
        out[key] = (d / f"{key}-img.pfm", d / f"{key}-ref.pfm", *rgba)
    return out


def build_graph(img_path, ref_path, generate, tiles, seed=0, params=()):
    registry = Registry([ROOT / "modules", FIXTURES])
    g = Graph(registry=registry)
    for inst, path in (("img", img_path), ("ref", ref_path)):
        g.add_module("i-pfm", inst).set_param("filename", str(path))
    gen = g.add_module("cnngenin", "01")
    gen.set_param("generate", generate)
    gen.set_param("tiles", tiles)
    gen.set_param("seed", seed)
    for name, value in params:
        gen.set_param(name, value)
    g.connect("i-pfm", "img", "output", "cnngenin", "01", "imgi")
    g.connect("i-pfm", "ref", "output", "cnngenin", "01", "refi")
    for conn in ("imgo", "refo", "noiseab"):
        g.add_module("capture", conn)
        g.connect("cnngenin", "01", conn, "capture", conn, "input")
    return g, registry


_runs: dict = {}


def run(device, images, generate, tiles, seed=0, frames=FRAMES, cache=True, params=()):
    """{frame: (imgo, refo, noiseab)} from the device; params: (name, value) of more of
    cnngenin's params."""
    key = (generate, tiles, seed, frames, tuple(params))
    if cache and key in _runs:
        return _runs[key]
    img_path, ref_path = images["large" if tiles else "small"][:2]
    g, registry = build_graph(img_path, ref_path, generate, tiles, seed, params)
    captured = registry.get("capture").hooks.CAPTURED
    captured.clear()
    run_graph(g, device, frames=frames)
    out = {f: tuple(captured[(c, f)] for c in ("imgo", "refo", "noiseab"))
           for f in range(frames)}
    if cache:
        _runs[key] = out
    return out


def assert_close(gpu, ref, noise: bool, what: str):
    assert gpu.shape == ref.shape, what
    tol = np.spacing(np.abs(ref).astype(np.float16)).astype(np.float64)
    if noise:
        tol = tol + 2e-6 * (1 + np.abs(ref))
    err = np.abs(gpu.astype(np.float64) - ref)
    worst = np.unravel_index(np.argmax(err - tol), err.shape)
    assert np.all(err <= tol), f"{what}: |err| {err[worst]:.3g} > {tol[worst]:.3g} at {worst}"
    exact = np.mean(gpu == ref)
    assert exact >= 0.99, f"{what}: only {exact:.4f} of the values are bit-equal"


# -- tests --------------------------------------------------------------------------------

@pytest.mark.parametrize("tiles", [0, 1])
@pytest.mark.parametrize("generate", [0, 1, 2, 3, 4, 5])
def test_matches_reference(device, images, generate, tiles):
    _, _, img, ref = images["large" if tiles else "small"]
    out = run(device, images, generate, tiles)
    exposure = tiles and generate
    for f in range(FRAMES):
        imgo, refo, nab = out[f]
        want_img, want_ref, want_nab = reference(img, ref, generate, tiles, f)
        if exposure or generate in (2, 4, 5):
            assert_close(imgo, want_img, generate in (2, 4, 5), f"imgo frame {f}")
            assert_close(refo, want_ref, False, f"refo frame {f}")
        else:  # pure copies (and mosaics) of half-rounded inputs: exact
            np.testing.assert_array_equal(imgo, want_img)
            np.testing.assert_array_equal(refo, want_ref)
        np.testing.assert_array_equal(nab, want_nab)


@pytest.mark.parametrize("generate,tiles", [(3, 0), (3, 1), (4, 1)])
def test_xtrans_mosaic_matches_reference(device, images, generate, tiles):
    """pattern 1: the X-Trans mosaic at each tile's drawn phase, the colour in alpha, as the
    reference makes it; with tiles the phases differ over the frames (without, the image keeps
    phase 0: generate 3 stays static), and every 6 x 6 block holds X-Trans's 8 red, 20 green
    and 8 blue photosites."""
    _, _, img, ref = images["large" if tiles else "small"]
    out = run(device, images, generate, tiles, params=(("pattern", 1),))
    from vkgraph.modules.cnngenin.reference import XTRANS

    alphas = set()
    for f in range(FRAMES):
        imgo, refo, nab = out[f]
        want_img, want_ref, want_nab = reference(img, ref, generate, tiles, f, pattern=1)
        if generate == 4 or tiles:
            assert_close(imgo, want_img, generate == 4, f"imgo frame {f}")
            assert_close(refo, want_ref, False, f"refo frame {f}")
        else:
            np.testing.assert_array_equal(imgo, want_img)
            np.testing.assert_array_equal(refo, want_ref)
        np.testing.assert_array_equal(nab, want_nab)
        colours = imgo[:6, :6, 3].astype(XTRANS.dtype)
        assert [np.sum(colours == c) for c in range(3)] == [8, 20, 8]
        assert any(np.array_equal(colours, np.roll(XTRANS, (-y, -x), (0, 1)))
                   for y in range(6) for x in range(6))
        alphas.add(colours.tobytes())
        assert np.array_equal(imgo[..., 0], imgo[..., 1])  # the value in r, g and b
    assert len(alphas) > 1 if tiles else alphas == {XTRANS.tobytes()}


def test_camera_noise_on_half_the_frames_is_demosaiced(device, images):
    """generate 5: the frames drawn for camera noise are a bilinear demosaic of a noisy RGGB
    mosaic, so mosaicking and demosaicking them again gives them back (up to the f16 outputs'
    rounding); the others carry i.i.d. noise, as generate 2, which that changes; both kinds
    occur."""
    from vkgraph.modules.cnngenin.reference import cfa, demosaic_bilinear, frame_numbers

    kinds = [frame_numbers(5, 0, f, 0, 37, 23)[6] for f in range(FRAMES)]
    assert True in kinds and False in kinds, kinds
    out = run(device, images, 5, 0)
    for f, camera in enumerate(kinds):
        rgb = out[f][0][..., :3].astype(np.float64)
        again = demosaic_bilinear(np.take_along_axis(rgb, cfa(37, 23)[..., None], -1)[..., 0])
        off = np.abs(again - rgb).max() / np.abs(rgb).max()
        assert (off < 2e-3) if camera else (off > 1e-2), (f, camera, off)


def test_output_sizes(device, images):
    assert run(device, images, 1, 1)[0][0].shape == (TILE, TILE, 4)
    assert run(device, images, 1, 0)[0][0].shape == (23, 37, 4)
    assert run(device, images, 1, 0)[0][2].shape == (4,)


def test_static_tile_is_top_left_crop(device, images):
    _, _, img, ref = images["large"]
    out = run(device, images, 0, 1)
    for f in range(FRAMES):
        np.testing.assert_array_equal(out[f][0], to_half(img[:TILE, :TILE]))
        np.testing.assert_array_equal(out[f][1], to_half(ref[:TILE, :TILE]))


def test_deterministic(device, images):
    for generate, tiles in ((1, 1), (4, 1), (2, 0)):
        a = run(device, images, generate, tiles)
        b = run(device, images, generate, tiles, cache=False)
        for f in range(FRAMES):
            for x, y in zip(a[f], b[f], strict=True):
                np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("generate,tiles", [(1, 1), (2, 1), (3, 1), (4, 1), (2, 0), (4, 0)])
def test_frames_differ(device, images, generate, tiles):
    out = run(device, images, generate, tiles)
    for f in range(1, FRAMES):
        assert not np.array_equal(out[f][0], out[0][0])
        if tiles:  # a new tile, flip and exposure
            assert not np.array_equal(out[f][1], out[0][1])


@pytest.mark.parametrize("generate,tiles", [(0, 1), (3, 0), (1, 0)])
def test_frames_equal_without_randomness(device, images, generate, tiles):
    out = run(device, images, generate, tiles)
    for f in range(1, FRAMES):
        for x, y in zip(out[f], out[0], strict=True):
            np.testing.assert_array_equal(x, y)


def test_noiseab(device, images):
    for generate in (2, 4):
        for tiles in (0, 1):
            out = run(device, images, generate, tiles)
            for f in range(FRAMES):
                nab = out[f][2]
                assert 0 <= nab[0] < 65535000 and 0 <= nab[1] < 1000 and nab[1] > 0
                assert nab[2] == (TILE if tiles else 0) and nab[3] == 1
    # tiles=1 draws ev, flip and the offset first, so a and b differ from tiles=0's
    assert run(device, images, 2, 1)[0][2][0] != run(device, images, 2, 0)[0][2][0]
    for generate in (0, 1, 3):
        assert not np.any(run(device, images, generate, 1)[0][2][:2])


@pytest.mark.parametrize("params,lo,hi", [
    ((("noise", 0.1),), (0, 0), (6553500, 100)),
    ((("noise", 0.1), ("nlog", 1)), (6553.5, 0.1), (6553500, 100)),
    ((("amax", 1e4), ("bmax", 120.0), ("nlog", 1)), (10, 0.12), (1e4, 120)),
    ((("noise", 5.0), ("amax", 1e4)), (0, 0), (1e4, 5000)),
])
def test_noise_range_params(device, images, params, lo, hi):
    """noise scales vkdt's maxima, nlog draws log-uniformly over the three decades below
    them, amax and bmax replace them: noiseab and the noisy image are the reference's with
    those params, and a, b fall in [lo, hi)."""
    _, _, img, ref = images["large"]
    out = run(device, images, 2, 1, params=params, cache=False)
    kw = dict(params)
    for f in range(FRAMES):
        imgo, refo, nab = out[f]
        want_img, want_ref, want_nab = reference(img, ref, 2, 1, f, **kw)
        np.testing.assert_allclose(nab, want_nab, rtol=1e-6)
        assert lo[0] <= nab[0] < hi[0] and lo[1] <= nab[1] < hi[1], nab
        assert_close(imgo, want_img, True, f"imgo frame {f}")
        assert_close(refo, want_ref, False, f"refo frame {f}")


def test_nerr_misreports_the_profile_only(device, images):
    """nerr > 0: noiseab's a and b are the drawn ones each times a factor within
    exp(+-nerr), as the reference draws them, and the noisy image is nerr 0's (the noise is
    the drawn one): the network is told the level as an estimate would tell it."""
    _, _, img, ref = images["large"]
    plain = run(device, images, 6, 1, cache=False)
    off = run(device, images, 6, 1, params=(("nerr", 1.5),), cache=False)
    ratios = []
    for f in range(FRAMES):
        np.testing.assert_array_equal(off[f][0], plain[f][0])
        np.testing.assert_array_equal(off[f][1], plain[f][1])
        _, _, _, a, b, s, _ = frame_numbers(6, 1, f, 0, img.shape[1], img.shape[0])
        np.testing.assert_allclose(off[f][2][:2], misreport(a, b, s, 1.5), rtol=1e-5)
        r = off[f][2][:2] / plain[f][2][:2]
        assert np.all((r > np.exp(-1.5) * 0.999) & (r < np.exp(1.5) * 1.001)), r
        ratios += list(r)
    assert np.ptp(np.log(ratios)) > 0.5  # the factors vary


def beside_plain(device, images, params, frames=8, same_ref=True, base=()):
    """generate 5 with base + params and with `base` alone (the plain run), frame by frame
    (tiles 1, the large pair): asserts that noiseab (and where same_ref, refo; else imgo) are
    the same, and yields (frame, imgo, refo, the plain imgo, the tile's state s after the
    camera draw, camera); with same_ref False, the plain refo in place of the plain imgo."""
    _, _, img, _ = images["large"]
    plain = run(device, images, 5, 1, frames=frames, params=base, cache=False)
    out = run(device, images, 5, 1, frames=frames, params=base + params, cache=False)
    for f in range(frames):
        imgo, refo, nab = out[f]
        np.testing.assert_array_equal(nab, plain[f][2])
        if same_ref:
            np.testing.assert_array_equal(refo, plain[f][1])
        else:
            np.testing.assert_array_equal(imgo, plain[f][0])
        _, _, _, _, _, s, camera = frame_numbers(5, 1, f, 0, img.shape[1], img.shape[0])
        yield f, imgo, refo, plain[f][0 if same_ref else 1], s, camera


def test_clean_tiles_get_no_noise(device, images):
    """clean > 0: a tile drawn clean (is_clean) is the reference's without noise (a camera
    tile the demosaic of the clean mosaic, another the reference itself) and noiseab reports
    its drawn profile; the other tiles are clean 0's, bit for bit."""
    _, _, img, ref = images["large"]
    seen = set()
    for f, imgo, refo, plain, s, camera in beside_plain(device, images, (("clean", 0.5),)):
        quiet = is_clean(s, 0.5)
        seen.add((quiet, camera))
        if not quiet:
            np.testing.assert_array_equal(imgo, plain)
            continue
        assert not np.array_equal(imgo, plain)
        want_img, _, _ = reference(img, ref, 5, 1, f, clean=0.5)
        assert_close(imgo, want_img, True, f"imgo frame {f}")
        if not camera:
            np.testing.assert_array_equal(imgo, refo)
    assert {q for q, _ in seen} == {True, False}, seen


@pytest.mark.parametrize("demosaic", [1, 2])
def test_camera_tiles_malvar_he_cutler(device, images, demosaic):
    """demosaic 1: a camera tile is the Malvar-He-Cutler demosaic of its noisy mosaic (the
    demosaic module's reference, the tile's borders reflected without repeating the edge);
    2: each camera tile draws that or bilinear (uses_mhc). Every other tile, refo and noiseab
    stay demosaic 0's, bit for bit."""
    _, _, img, ref = images["large"]
    seen = set()
    for f, imgo, _, plain, s, camera in beside_plain(device, images, (("demosaic", demosaic),)):
        mhc = camera and uses_mhc(s, demosaic)
        seen.add((camera, mhc))
        if not mhc:
            np.testing.assert_array_equal(imgo, plain)
            continue
        assert not np.array_equal(imgo, plain)
        want_img, _, _ = reference(img, ref, 5, 1, f, demosaic=demosaic)
        assert_close(imgo, want_img, True, f"imgo frame {f}")
    assert (True, True) in seen, seen
    assert demosaic == 1 or (True, False) in seen, seen


@pytest.mark.parametrize("demosaic", [0, 2])
def test_camera_reference_is_the_clean_mosaic_demosaiced(device, images, demosaic):
    """camref 1: a camera tile's refo is its clean mosaic through the tile's demosaicer (the
    reference's `demosaiced`); imgo, noiseab and every other tile's refo stay camref 0's, bit
    for bit."""
    _, _, img, ref = images["large"]
    base = (("demosaic", demosaic),)
    seen = set()
    for f, _, refo, plain_ref, s, camera in beside_plain(device, images, (("camref", 1),),
                                                         same_ref=False, base=base):
        seen.add((camera, camera and uses_mhc(s, demosaic)))
        if not camera:
            np.testing.assert_array_equal(refo, plain_ref)
            continue
        assert not np.array_equal(refo, plain_ref)
        _, want_ref, _ = reference(img, ref, 5, 1, f, demosaic=demosaic, camref=1)
        assert_close(refo, want_ref, True, f"refo frame {f}")
    assert (False, False) in seen and any(c for c, _ in seen), seen
    assert demosaic == 0 or (True, True) in seen, seen


def test_malvar_he_cutler_on_a_whole_odd_image(device, images):
    """demosaic 1 with tiles 0 on the 37x23 pair: the borders of an odd-sized image reflect
    as the reference's do (the camera frames among them)."""
    _, _, img, ref = images["small"]
    out = run(device, images, 5, 0, frames=6, params=(("demosaic", 1),), cache=False)
    cameras = 0
    for f in range(6):
        cameras += frame_numbers(5, 0, f, 0, img.shape[1], img.shape[0])[6]
        want_img, _, _ = reference(img, ref, 5, 0, f, demosaic=1)
        assert_close(out[f][0], want_img, True, f"imgo frame {f}")
    assert cameras >= 2


def test_seed_param_adds_to_frame_seed(device, images):
    """seed = 133700 at frame 0 draws what vkdt draws at frame 1."""
    shifted = run(device, images, 4, 1, seed=133700, frames=1)
    plain = run(device, images, 4, 1)
    for x, y in zip(shifted[0], plain[1], strict=True):
        np.testing.assert_array_equal(x, y)


def test_noise_statistics():
    """The reference's noise has the documented std: sqrt(a + 65535 x b) / 65535."""
    ref = np.full((256, 256, 4), 0.5, F32)
    _, _, _, a, b, _, _ = frame_numbers(2, 0, 0, 0, 256, 256)
    im, rf, _ = reference(ref, ref, 2, 0, 0)
    std = np.sqrt(float(a) + 65535 * 0.5 * float(b)) / 65535
    z = (im[..., :3] - rf[..., :3]) / std
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02


def test_mismatched_inputs_rejected(device, images):
    g, _ = build_graph(images["small"][0], images["large"][1], 0, 1)
    with pytest.raises(GraphError, match="equal sizes"):
        run_graph(g, device, frames=1)


# -- training sets: colour ---------------------------------------------------------------

@pytest.fixture(scope="module")
def photo_set(tmp_path_factory):
    """A training set (a folder for i-set) of three rgb PFMs of other sizes than a tile, one
    smaller, their channels of different ranges so that a permutation shows: (folder, the
    images as rgba)."""
    rng = np.random.default_rng(11)
    d = tmp_path_factory.mktemp("cnngenin-set")
    images = []
    for k, (wd, ht) in enumerate([(90, 70), (60, 100), (20, 24)]):
        rgb = (rng.uniform(0, 1, (ht, wd, 3)) * [1.0, 0.5, 0.2]).astype(F32)
        write_pfm(d / f"{k}.pfm", rgb)
        images.append(np.concatenate([rgb, np.ones((ht, wd, 1), F32)], -1))
    return d, images


def run_set(device, folder, frames, params):
    """{frame: (imgo, refo, noiseab)} of cnngenin on the i-set `folder` (into imgi and refi,
    synthetic noise), params (name, value)."""
    registry = Registry([ROOT / "modules", FIXTURES])
    g = Graph(registry=registry)
    g.add_module("i-set", "s").set_param("filename", str(folder))
    gen = g.add_module("cnngenin", "01")
    for name, value in params:
        gen.set_param(name, value)
    for conn in ("imgi", "refi"):
        g.connect("i-set", "s", "output", "cnngenin", "01", conn)
    for conn in ("imgo", "refo", "noiseab"):
        g.add_module("capture", conn)
        g.connect("cnngenin", "01", conn, "capture", conn, "input")
    captured = registry.get("capture").hooks.CAPTURED
    captured.clear()
    run_graph(g, device, frames=frames)
    return {f: tuple(captured[(c, f)] for c in ("imgo", "refo", "noiseab"))
            for f in range(frames)}


@pytest.mark.parametrize("generate,zoom", [(1, 1), (2, 1), (5, 2)])
def test_colour_matches_reference(device, images, photo_set, generate, zoom):
    """colour 0.5 on a training set: every tile's imgo and refo are the reference's (the
    drawn tiles permuted and white-balanced: generate 1 the input itself, 2 and 5 the
    reference before the noise, and 5 before the camera mosaic; zoom 2 means first), both
    kinds of tile occur, noiseab stays colour 0's and an untransformed tile is colour 0's
    bit for bit. colour 0 is a run without the param, bit for bit; colour without a
    training set is an error."""
    folder, pictures = photo_set
    tile, batch, frames = 32, 4, 4
    common = (("generate", generate), ("batch", batch), ("tile", tile), ("zoom", zoom),
              ("noise", 0.5), ("nlog", 1))
    plain = run_set(device, folder, frames, common)
    zero = run_set(device, folder, frames, common + (("colour", 0.0),))
    out = run_set(device, folder, frames, common + (("colour", 0.5),))
    sizes = [im.shape[1::-1] for im in pictures]
    kinds = set()
    for f in range(frames):
        for x, y in zip(zero[f], plain[f], strict=True):
            np.testing.assert_array_equal(x, y)
        imgo, refo, nab = out[f]
        np.testing.assert_array_equal(nab, plain[f][2])
        for t in range(batch):
            ox, oy = tile * (t % 2), tile * (t // 2)
            window = np.s_[oy:oy + tile, ox:ox + tile]
            s = set_numbers(generate, f, 0, sizes, tile, t, zoom)[5][0]
            moved = bool(colour_transform(s)[0] < F32(0.5))
            kinds.add(moved)
            want_img, want_ref, want_nab = set_reference(
                pictures, pictures, generate, f, tile=tile, t=t, origin=(ox, oy), zoom=zoom,
                colour=0.5, noise=0.5, nlog=1)
            what = f"frame {f} tile {t} ({'recoloured' if moved else 'as it was'})"
            assert_close(imgo[window], want_img, True, f"imgo {what}")
            assert_close(refo[window], want_ref, False, f"refo {what}")
            np.testing.assert_allclose(nab.reshape(-1, 4)[t, :3], want_nab[:3], rtol=1e-6)
            if moved:
                assert not np.array_equal(refo[window], plain[f][1][window]), what
            else:
                np.testing.assert_array_equal(imgo[window], plain[f][0][window])
                np.testing.assert_array_equal(refo[window], plain[f][1][window])
    assert kinds == {True, False}, kinds
    g, _ = build_graph(*images["large"][:2], 2, 1, params=(("colour", 0.5),))
    with pytest.raises(GraphError, match="colour 0.5 needs training sets"):
        run_graph(g, device, frames=1)


# -- generate 6: the camera pipeline (sRGB, 8 bits, JPEG round trip) ---------------------

def srgb_codes(linear: np.ndarray) -> np.ndarray:
    """The 8-bit sRGB code of each half-rounded decoded value: the nearest of the 256."""
    from vkgraph.modules.cnngenin.reference import srgb_decode8

    table = to_half(srgb_decode8(np.arange(256)))
    i = np.clip(np.searchsorted(table, linear), 1, 255)
    return np.where(linear - table[i - 1] < table[i] - linear, i - 1, i)


@pytest.mark.parametrize("tiles", [0, 1])
def test_camera_pipeline_matches_reference(device, images, tiles):
    """generate 6 against the reference, compared as 8-bit codes: the JPEG runs in libjpeg's
    integer arithmetic on both sides, so only an sRGB code of the noisy image that the f32
    device maths puts across a rounding boundary can differ (and then a few codes by 1).
    tiles 0 is 37x23: the padding to whole MCUs; noiseab is generate 5's, and refo generate
    5's clamped to [0, 1] (what a JPEG can hold; the frames' exposures push some above 1)."""
    _, _, img, ref = images["large" if tiles else "small"]
    out = run(device, images, 6, tiles)
    five = run(device, images, 5, tiles)
    assert any((five[f][1][..., :3] > 1).any() for f in range(FRAMES))
    for f in range(FRAMES):
        imgo, refo, nab = out[f]
        want_img, want_ref, want_nab = reference(img, ref, 6, tiles, f)
        np.testing.assert_array_equal(refo, np.clip(five[f][1], 0, 1))
        np.testing.assert_array_equal(nab, five[f][2])
        np.testing.assert_array_equal(nab, want_nab)
        assert_close(refo, want_ref, False, f"refo frame {f}")
        np.testing.assert_array_equal(imgo[..., 3], 1)
        got, want = srgb_codes(imgo[..., :3]), srgb_codes(want_img[..., :3])
        np.testing.assert_array_equal(srgb_codes(want_img[..., :3]), want)
        diff = np.abs(got - want)
        assert np.mean(diff == 0) >= 0.999 and diff.max() <= 1, (f, np.mean(diff == 0),
                                                                 diff.max())
        assert not np.array_equal(imgo, five[f][0])


def test_jpeg_roundtrip_matches_pillow():
    """The reference's JPEG round trip is Pillow's: 4:2:0, the same quality, on a smooth
    image and a noisy one, of sizes that are and are not whole MCUs. With libjpeg-turbo
    (Pillow's wheels) every code is equal; any libjpeg's is close."""
    import io

    from PIL import Image, features

    from vkgraph.modules.cnngenin.reference import jpeg_roundtrip

    rng = np.random.default_rng(3)
    exact = features.check_feature("libjpeg_turbo")
    for ht, wd in ((64, 64), (37, 23), (50, 70)):
        y, x = np.mgrid[0:ht, 0:wd]
        smooth = np.stack([128 + 100 * np.sin(x / 9 + y / 13), 128 + 90 * np.cos(y / 7),
                           60 + 2 * x + y], -1)
        for rgb in (smooth, smooth + rng.normal(0, 20, smooth.shape)):
            rgb = np.clip(np.rint(rgb), 0, 255).astype(np.uint8)
            for quality in (70, 85, 95):
                buf = io.BytesIO()
                Image.fromarray(rgb).save(buf, "JPEG", quality=quality, subsampling=2)
                pil = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
                ours = jpeg_roundtrip(rgb.astype(np.int64), quality)
                diff = np.abs(ours - pil.astype(np.int64))
                assert diff.mean() < 1.5, (ht, wd, quality, diff.mean())
                if exact:
                    assert diff.max() == 0, (ht, wd, quality, diff.max())


def test_quality_draw_covers_the_range():
    """The tiles' qualities (from the states of 3000 frames) are uniform over qlo..qhi."""
    from vkgraph.modules.cnngenin.reference import draw_quality

    states = [frame_numbers(6, 1, f, 0, 80, 70)[5] for f in range(3000)]
    q = [draw_quality(s, 70, 95) for s in states]
    assert min(q) == 70 and max(q) == 95
    assert abs(np.mean(q) - 82.5) < 0.5
    assert {draw_quality(s, 80, 80) for s in states[:100]} == {80}


def test_salted_draws_are_independent():
    """A tile's extra draws (zoom, clean, demosaic 2, nerr) come from hash32(s ^ salt) | 1,
    not s ^ salt: xorshift being linear, the latter's draws were tied to the tile's own next
    draws and to each other (with zoom 2, z = 1 tiles only got crops with ux >= 0.5; clean
    tiles only JPEG qualities 83-95, and clean camera tiles only Malvar-He-Cutler). Over 2000
    frames of the reference none of that is left, nor a tie of any of them to the tile's
    next draw from s. (generate 6's quality keeps s ^ salt, the shipped recipes' draws: tied
    only to that next draw, pixel (0, 0)'s noise state, and to none of the hashed ones.)"""
    from vkgraph.modules.cnngenin.reference import draw_quality

    frames = range(2000)
    W = H = 4000  # large enough that off / (W - z T + 1) is the crop's u to 1e-3
    z, ux = np.array([(z, off[0] / (W - z * TILE + 1)) for z, off in
                      (set_numbers(2, f, 0, [(W, H)], TILE, 0, 2)[3:5] for f in frames)]).T
    for zz in (1, 2):
        share = np.mean(ux[z == zz] >= 0.5)
        assert 0.4 < share < 0.6, (zz, share)
    draws = [frame_numbers(6, 1, f, 0, 80, 70)[3:] for f in frames]
    clean = np.array([is_clean(s, 0.5) for _, _, s, _ in draws])
    camera = np.array([c for _, _, _, c in draws])
    q = np.array([draw_quality(s, 70, 95) for _, _, s, _ in draws])
    assert abs(q[clean].mean() - q[~clean].mean()) < 2, (q[clean].mean(), q[~clean].mean())
    mhc = np.array([uses_mhc(s, 2) for _, _, s, _ in draws])
    shares = mhc[camera & clean].mean(), mhc[camera & ~clean].mean()
    assert abs(shares[0] - shares[1]) < 0.15, shares
    factor = np.array([np.log(misreport(a, b, s, 1.5)[0] / a) for a, b, s, _ in draws])
    assert abs(np.corrcoef(factor, clean)[0, 1]) < 0.1
    # each against the tile's own next draw from s (pixel (0, 0)'s noise state)
    after = np.array([mrand(np.array([s], np.uint32))[1][0] for _, _, s, _ in draws])
    for name, x in (("clean", clean), ("demosaic", mhc), ("nerr", factor)):
        r = np.corrcoef(x.astype(np.float64), after)[0, 1]
        assert abs(r) < 0.1, (name, r)


def test_quality_range_checked(device, images):
    g, _ = build_graph(*images["large"][:2], 6, 1)
    g.module("cnngenin", "01").set_param("qlo", 96)
    with pytest.raises(GraphError, match="qlo"):
        run_graph(g, device, frames=1)


def test_camera_pipeline_tiles_are_separate_jpegs(device, images):
    """generate 6 with a batch of 4 tiles of 24 (a grid of 2 x 2, each padded to 2 x 2
    MCUs): each tile is its own JPEG of its own draws, as the reference makes tile t."""
    from vkgraph.modules.cnngenin.module import grid

    batch, tile = 4, 24
    g, registry = build_graph(*images["large"][:2], 6, 1)
    gen = g.module("cnngenin", "01")
    gen.set_param("batch", batch)
    gen.set_param("tile", tile)
    captured = registry.get("capture").hooks.CAPTURED
    captured.clear()
    run_graph(g, device, frames=2)
    _, _, img, ref = images["large"]
    cols = grid(batch)[0]
    for f in range(2):
        imgo, refo, nab = (captured[(c, f)] for c in ("imgo", "refo", "noiseab"))
        assert imgo.shape == (2 * tile, 2 * tile, 4)
        for t in range(batch):
            ox, oy = tile * (t % cols), tile * (t // cols)
            want_img, want_ref, want_nab = reference(img, ref, 6, 1, f, tile=tile, t=t,
                                                     origin=(ox, oy))
            window = np.s_[oy:oy + tile, ox:ox + tile]
            np.testing.assert_array_equal(srgb_codes(imgo[window][..., :3]),
                                          srgb_codes(want_img[..., :3]))
            assert_close(refo[window], want_ref, False, f"refo frame {f} tile {t}")
            np.testing.assert_array_equal(nab.reshape(-1, 4)[t, :3], want_nab[:3])
