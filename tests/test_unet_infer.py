"""unet (inference) with weights from a .lut: its output against unet-t's float64 reference
forward pass (modules/unet-t/reference.py) on the image padded mirrored to the network's
multiple, then cropped; against unet-t's own output for the same weights (the same kernels:
equal); the .lut's text and size checked; `vkgraph denoise` and the Denoiser with unet-t's
weights (the result, the noise it is given, tiles equal to the whole image)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_unet import clean, random_weights, unet_graph

from vkgraph.api import run_graph
from vkgraph.apps.denoise import Denoiser
from vkgraph.cli.main import main
from vkgraph.modules.unet_t import reference as ref
from vkgraph.modules.unet_t.forward import padded, reach
from vkgraph.modules.unet_t.module import lut_text
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.formats import (
    linear_to_srgb,
    read_image,
    read_pfm,
    write_lut,
    write_pfm,
    write_png,
)
from vkgraph.pipeline.graph import Graph
from vkgraph.pipeline.registry import Registry
from vkgraph.pipeline.runner import Build
from vkgraph.pipeline.testing import CAPTURE

ROOT = Path(__file__).resolve().parent.parent
A, B = 1e6, 100.0  # the noise profile (cnngenin's units)


def noisy(w: int, h: int, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (clean(w, h, seed) + 0.05 * rng.standard_normal((h, w, 3))).astype(np.float32)


def write_weights(path: Path, width: int, scales: int, text: str | None = None,
                  count: int | None = None, seed: int = 5,
                  cfa: int = ref.RGB) -> tuple[Path, np.ndarray]:
    """A .lut as o-lut writes unet-t's weights (f32 ssbo, n x 1, the text after them) of
    random weights (random_weights: every ReLU sees both signs); cfa: what the network reads
    (net.py's RGB, RGGB, CELLS or MOSAIC)."""
    w = random_weights(width, scales, seed, cfa)
    if count is not None:
        w = np.resize(w, count)
    write_lut(path, w, 1, "f32", w.size, 1, ssbo=True,
              text=lut_text(width, scales, cfa) if text is None else text)
    return path, w.astype(np.float64)


def expected(X: np.ndarray, w: np.ndarray, width: int, scales: int, a: float = A, b: float = B,
             mode: str = "symmetric", cfa: int = ref.RGB) -> np.ndarray:
    """The reference on X padded (numpy's `symmetric` is vkgraph.glsl's texel mirror) to the
    network's size, one tile, cropped to X's size; cfa CELLS: the network of RGB cells (any
    size: the cells are the padded image's)."""
    h, wd = X.shape[:2]
    Wp, Hp = padded(wd, h, scales, cfa)
    Xp = np.pad(X[..., :3].astype(np.float64), ((0, Hp - h), (0, Wp - wd), (0, 0)), mode=mode)
    O, _ = ref.forward(w, Xp, np.array([a]), np.array([b]), Hp, width, scales, cfa)
    return O[:h, :wd]


def unet_run(device, lut: Path, X: np.ndarray, folder: Path, a: float = A, b: float = B,
             precise: int = 0):
    """One frame of i-pfm (X) and i-lut -> unet -> capture: the output (h, w, 4)."""
    write_pfm(folder / "x.pfm", X)
    reg = Registry([ROOT / "modules", CAPTURE])
    g = Graph(reg)
    g.add_module("i-pfm", "main").set_param("filename", str(folder / "x.pfm"))
    g.add_module("i-lut", "w").set_param("filename", str(lut))
    m = g.add_module("unet", "01")
    for name, value in (("noise a", a), ("noise b", b), ("precise", precise)):
        m.set_param(name, value)
    g.connect("i-pfm", "main", "output", "unet", "01", "input")
    g.connect("i-lut", "w", "output", "unet", "01", "w")
    g.add_module("capture", "out")
    g.connect("unet", "01", "output", "capture", "out", "input")
    captured = reg.get("capture").hooks.CAPTURED
    captured.clear()
    run_graph(g, device, frames=1)
    return captured[("out", 0)]


@pytest.mark.parametrize("size,width,scales,precise", [
    ((37, 23), 2, 3, 0),   # padded to 40 x 24
    ((32, 24), 3, 3, 0),   # the network's size already
    ((3, 1), 2, 3, 1),     # padded by more than the image (to 4 x 4), float64 kernels
])
def test_output_matches_reference(device, tmp_path, size, width, scales, precise):
    lut, w = write_weights(tmp_path / "w.lut", width, scales)
    X = noisy(*size)
    out = unet_run(device, lut, X, tmp_path, precise=precise)
    assert out.shape == (size[1], size[0], 4)
    want = expected(X, w, width, scales)
    err = np.abs(out[..., :3] - want).max()
    assert err <= 1e-5, err
    assert np.array_equal(out[..., 3], np.ones(X.shape[:2], np.float32))  # the input's alpha
    assert np.abs(want - X).max() > 1e-3  # the network changes the image
    if size != padded(*size, scales):  # the padding is the mirror: other paddings differ
        other = expected(X, w, width, scales, mode="wrap")
        assert np.abs(out[..., :3] - other).max() > 100 * max(err, 1e-7)


def test_unet_equals_unet_t_output(device, tmp_path):
    """unet-t with the .lut on wcp (init 0, alpha 0: frame 0 runs those weights) on cnngenin's
    whole noisy image, and unet on that image with cnngenin's (a, b): the same kernels give
    the same numbers."""
    lut, _ = write_weights(tmp_path / "w.lut", 2, 2)
    g = unet_graph(tmp_path, clean(24, 16), 2, 2, None, f"""
        module:i-lut:w
        param:i-lut:w:filename:{lut}
        connect:i-lut:w:output:unet-t:01:wcp
        param:unet-t:01:init:0
        param:unet-t:01:alpha:0""")
    g.frames = 1
    b = Build(g, device)
    b.run_frame(0, download=False)
    m = g.modules[("unet-t", "01")]
    trained = b.read(m.backing["output"][0], "output")
    gen = g.modules[("cnngenin", "01")].nodes[0]
    X = np.ascontiguousarray(b.read(gen, "imgo"))
    nab = b.read(gen, "noiseab").ravel()
    b.close()
    assert nab[2] == 0 and nab[0] > 0  # one tile: the whole image
    out = unet_run(device, lut, X, tmp_path, float(nab[0]), float(nab[1]))
    assert np.array_equal(out[..., :3], trained[..., :3])


@pytest.mark.parametrize("text,count,match", [
    ("", None, "has no text"),
    ("lut contains weights for\nplain kernel weight activation", None, "not unet-t's"),
    ("lut contains weights for\nunet denoiser with:\nwidth 2\n", None, "not its scales"),
    ("lut contains weights for\nunet denoiser with:\nwidth 2\nscales 1\n", None, "scales >= 2"),
    (None, 100, "holds 100 values, but a U-Net of width 2 and 2 scales"),
])
def test_bad_weights_are_errors(device, tmp_path, text, count, match):
    lut, _ = write_weights(tmp_path / "w.lut", 2, 2, text=text, count=count)
    with pytest.raises(GraphError, match=match):
        unet_run(device, lut, noisy(8, 8), tmp_path)


def test_reach_covers_what_a_pixel_depends_on():
    """forward.reach: the reference's output at a pixel does not change when every input
    pixel farther than the reach (either axis) changes, at every phase of the 2^(S-1) grid."""
    width, scales = 2, 3
    R = reach(scales)
    w = random_weights(width, scales).astype(np.float64)
    X = noisy(64, 64).astype(np.float64)
    O = expected(X, w, width, scales)
    for y, x in [(28, 28), (29, 30), (31, 29), (30, 31)]:
        Y = noisy(64, 64, seed=9).astype(np.float64)
        Y[y - R:y + R + 1, x - R:x + R + 1] = X[y - R:y + R + 1, x - R:x + R + 1]
        assert np.array_equal(expected(Y, w, width, scales)[y, x], O[y, x])
        assert np.abs(expected(Y, w, width, scales) - O).max() > 1e-3  # the rest changed


def test_denoiser_tiles_equal_the_whole_image(device, tmp_path):
    """The Denoiser runs unet-t's weights through unet; an image larger than max_pixels (its
    padded size) goes in tiles on the network's grid whose margin is the U-Net's reach, which
    equal the whole image's result; a smaller margin would not. The noise params change
    between calls without a rebuild."""
    lut, w = write_weights(tmp_path / "w.lut", 2, 3)
    X = noisy(131, 110)
    whole = Denoiser(device, lut)
    assert (whole.module, whole.net, whole.levels) == ("unet", (2, 3), None)
    out = whole(X, A, B)
    np.testing.assert_allclose(out, expected(X, w, 2, 3), atol=1e-5)
    out2 = whole(X, 4 * A, 2 * B)
    np.testing.assert_allclose(out2, expected(X, w, 2, 3, 4 * A, 2 * B), atol=1e-5)
    assert len(whole.builds) == 1
    tiled = Denoiser(device, lut, max_pixels=5000)
    assert tiled.margin == 24 and reach(3) == 23  # rounded up to the grid of 4
    assert tiled.tiling(131, 110) == (20, 16, 24)
    seen = []
    tiled.on_tile = lambda done, total: seen.append(done)
    assert np.array_equal(tiled(X, A, B), out)
    assert len(seen) > 2 and len(tiled.builds) == 1
    tiled.margin = 8  # less than the reach: tiles see zeros where the image has pixels
    assert not np.array_equal(tiled(X, A, B), out)
    with pytest.raises(GraphError, match="less than one tile of 52\\^2 with a U-Net of 3"):
        Denoiser(device, lut, max_pixels=1000)(X, A, B)


def run(capsys, *args):
    code = main(["denoise", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_denoise_command(tmp_path, capsys):
    """`vkgraph denoise --weights unet.lut`: unet's result on the decoded photo with the
    noise the command estimates (PNG: within one 8-bit code value) or is given times
    --strength (PFM: unet's own values); the file's line; bad weights and --levels are
    exit 2 before anything is written."""
    from vkgraph.cli.denoise import read_photo

    lut, w = write_weights(tmp_path / "unet.lut", 2, 2)
    write_png(tmp_path / "p.png", noisy(45, 33))
    code, out, err = run(capsys, tmp_path / "p.png", "--weights", lut)
    assert code == 0, err
    assert "(estimated)" in out and "weights unet.lut" in out and "45x33" in out
    photo = read_photo(tmp_path / "p.png", None)
    image, (a, b) = photo.linear(), photo.profile
    assert a + b > 0
    want = expected(image, w, 2, 2, a, b)
    got = read_image(tmp_path / "p-denoised.png")
    assert got.shape == (33, 45, 4)
    assert np.abs(linear_to_srgb(got[..., :3]) - linear_to_srgb(want)).max() <= 1 / 255 + 1e-6
    code, out, err = run(capsys, tmp_path / "p.png", "--weights", lut, "--noise", A, B,
                         "--strength", 2, "-o", tmp_path / "q.pfm")
    assert code == 0, err
    assert "noise a 2e+06 b 200 (given, strength 2)" in out
    pfm = read_pfm(tmp_path / "q.pfm")
    assert np.abs(pfm - expected(image, w, 2, 2, 2 * A, 2 * B)).max() <= 1e-5
    files = sorted(p.name for p in tmp_path.iterdir())
    bad, _ = write_weights(tmp_path / "bad.lut", 2, 2, count=50)
    for args, msg in (((lut, "--levels", 3), "no pyramid levels"),
                      ((bad,), "holds 50 values, but a U-Net of width 2 and 2 scales")):
        code, out, err = run(capsys, tmp_path / "p.png", "--weights", *args, "-o",
                             tmp_path / "r.png")
        assert code == 2 and msg in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(files + ["bad.lut"])


# ----------------------------------------------------------------- RGGB mosaics (cfa rggb)


def pad_cells(M: np.ndarray, Hp: int, Wp: int, mode: str = "symmetric") -> np.ndarray:
    """The mosaic M (h, w, 3) padded to Hp x Wp by whole cells of 2 x 2 photosites (the cell
    index mirrored, each photosite keeping its place in its cell: the colour phase kept)."""
    h, wd = M.shape[:2]
    C = M.reshape(h // 2, 2, wd // 2, 2, 3).transpose(0, 2, 1, 3, 4)
    C = np.pad(C, ((0, (Hp - h) // 2), (0, (Wp - wd) // 2), (0, 0), (0, 0), (0, 0)), mode=mode)
    return C.transpose(0, 2, 1, 3, 4).reshape(Hp, Wp, 3)


def expected_cfa(M: np.ndarray, w: np.ndarray, width: int, scales: int, a: float = A,
                 b: float = B, pad=pad_cells) -> np.ndarray:
    """The reference's cfa network on the mosaic M padded by cells to the network's size,
    one tile, cropped to M's size: the full-resolution RGB."""
    h, wd = M.shape[:2]
    Wp, Hp = padded(wd, h, scales, cfa=True)
    O, _ = ref.forward(w, pad(M[..., :3].astype(np.float64), Hp, Wp), np.array([a]),
                       np.array([b]), Hp, width, scales, cfa=True)
    return O[:h, :wd]


def pad_pixels(M, Hp, Wp):
    """The photosites mirrored one by one: the colour phase flips at the edge."""
    h, wd = M.shape[:2]
    return np.pad(M, ((0, Hp - h), (0, Wp - wd), (0, 0)), mode="symmetric")


@pytest.mark.parametrize("size,width,scales,precise", [
    ((38, 22), 2, 3, 0),   # 19 x 11 cells, padded to 24 x 12 cells (48 x 24 photosites)
    ((32, 24), 3, 3, 0),   # the network's size already
    ((6, 2), 2, 3, 1),     # padded by more than the image (to 8 x 8), float64 kernels
])
def test_cfa_output_matches_reference(device, tmp_path, size, width, scales, precise):
    """unet on weights whose .lut says 'cfa rggb', reading an RGGB mosaic: the
    full-resolution RGB of the reference on the mosaic padded by mirrored cells; mirroring
    photosites instead (the colour phase flipped) gives other numbers."""
    lut, w = write_weights(tmp_path / "w.lut", width, scales, cfa=True)
    M = ref.mosaic(noisy(*size)).astype(np.float32)
    out = unet_run(device, lut, M, tmp_path, precise=precise)
    assert out.shape == (size[1], size[0], 4)
    want = expected_cfa(M, w, width, scales)
    err = np.abs(out[..., :3] - want).max()
    assert err <= 1e-5, err
    assert np.array_equal(out[..., 3], np.ones(M.shape[:2], np.float32))
    if size != padded(*size, scales, cfa=True):
        other = expected_cfa(M, w, width, scales, pad=pad_pixels)
        assert np.abs(out[..., :3] - other).max() > 100 * max(err, 1e-7)


def test_cfa_weights_errors(device, tmp_path):
    """An odd-sized input, weights of the RGB network's count under a 'cfa rggb' text, another
    cfa line; the Denoiser's odd-sized mosaic."""
    lut, _ = write_weights(tmp_path / "w.lut", 2, 2, cfa=True)
    with pytest.raises(GraphError, match="RGGB mosaic, whose width and height must be even"):
        unet_run(device, lut, noisy(9, 8), tmp_path)
    bad, _ = write_weights(tmp_path / "b.lut", 2, 2, text=lut_text(2, 2, True))  # RGB count
    with pytest.raises(GraphError, match="holds 509 values, but .* 2 scales of RGGB mosaics "
                       ".* has 554"):
        unet_run(device, bad, noisy(8, 8), tmp_path)
    other, _ = write_weights(tmp_path / "o.lut", 2, 2, cfa=True,
                             text=lut_text(2, 2) + "cfa grbg\n")
    with pytest.raises(GraphError, match="cfa grbg"):
        unet_run(device, other, noisy(8, 8), tmp_path)
    with pytest.raises(GraphError, match="a 9x8 mosaic: .* must be even"):
        Denoiser(device, lut)(noisy(9, 8)[..., 0], A, B)


def test_ensemble_phase_puts_red_where_the_flip_takes_it():
    """ensemble_phase against the flip of a labelled RGGB mosaic of another even size."""
    from vkgraph.apps.denoise import ENSEMBLES, ensemble_phase

    labels = np.tile(np.array([[0, 1], [1, 2]]), (3, 5))  # 6 x 10 photosites
    phases = set()
    for rot, mirror in ENSEMBLES[8]:
        x = np.rot90(labels, rot)
        x = x[:, ::-1] if mirror else x
        ry, rx = ensemble_phase(rot, mirror)
        assert x[ry, rx] == 0 and x[1 - ry, 1 - rx] == 2  # red there, blue opposite
        phases.add((ry, rx))
    assert phases == {(0, 0), (0, 1), (1, 0), (1, 1)}


def test_cfa_ensemble_is_the_mean_over_phase_kept_flips(device, tmp_path):
    """The Denoiser's ensemble with weights of RGGB mosaics: the mean over the 8 flips and
    rotations of the reference on each flipped mosaic brought back to RGGB phase by mirrored
    rows and columns, each result cropped and flipped back; not the plain network's."""
    from vkgraph.apps.denoise import ENSEMBLES

    lut, w = write_weights(tmp_path / "w.lut", 2, 2, cfa=True)
    M = ref.mosaic(noisy(22, 14)).astype(np.float32)[..., 0]
    want = np.zeros((14, 22, 3))
    for rot, mirror in ENSEMBLES[8]:
        x = np.rot90(M, rot)
        x = x[:, ::-1] if mirror else x
        # where red went, found by hand: a flip of rows or columns moves it one photosite
        lab = np.rot90(np.tile(np.array([[0, 1], [1, 2]]), (7, 11)), rot)
        lab = lab[:, ::-1] if mirror else lab
        ry, rx = (int(v) for v in np.argwhere(lab[:2, :2] == 0)[0])
        h, wd = x.shape
        xp = np.pad(x, ((ry, ry), (rx, rx)), mode="reflect")
        assert (np.argwhere(np.pad(lab, ((ry, ry), (rx, rx)), mode="reflect")[:2, :2] == 0)
                == [[0, 0]]).all()
        y = expected_cfa(np.repeat(xp[..., None], 3, 2), w, 2, 2)[ry:ry + h, rx:rx + wd]
        y = y[:, ::-1] if mirror else y
        want += np.rot90(y, -rot) / 8
    got = Denoiser(device, lut, ensemble=8)(M, A, B)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert np.abs(got - expected_cfa(np.repeat(M[..., None], 3, 2), w, 2, 2)).max() > 1e-3


def test_denoiser_runs_cfa_weights_whole_and_tiled(device, tmp_path):
    """The Denoiser on weights of RGGB mosaics: a mosaic (h, w) in, its full-resolution rgb
    out, equal to the reference's; tiled (max_pixels below the padded size) on the grid of
    whole cells with forward.reach's margin for mosaics, the same numbers."""
    lut, w = write_weights(tmp_path / "w.lut", 2, 3, cfa=True)
    M = ref.mosaic(noisy(200, 150)).astype(np.float32)
    whole = Denoiser(device, lut)
    assert (whole.module, whole.net, whole.cfa) == ("unet", (2, 3), True)
    out = whole(M[..., 0], A, B)  # red photosites' value in r: the mosaic itself
    assert out.shape == (150, 200, 3)
    np.testing.assert_allclose(out, expected_cfa(M, w, 2, 3), atol=1e-5)
    tiled = Denoiser(device, lut, max_pixels=15000)
    step = 8  # tiles start on whole cells of the network's grid: 2 * 2^(scales - 1)
    assert tiled.margin == -(-reach(3, cfa=True) // step) * step == 48
    cx, cy, _ = tiled.tiling(200, 150)
    assert cx % step == 0 and cy % step == 0 and cx < 200 and cy < 150
    assert np.array_equal(tiled(M, A, B), out)


def test_cfa_reach_covers_what_a_pixel_depends_on():
    """forward.reach with cfa (2 r + 1 for the cells' reach r): the reference's output at a
    photosite does not change when every photosite farther than it (either axis) changes,
    at photosites of every phase of the grid of 2 2^(S-1) pixels."""
    width, scales = 2, 3
    R = reach(scales, cfa=True)
    assert R == 2 * reach(scales) + 1
    w = random_weights(width, scales, cfa=True).astype(np.float64)
    X = ref.mosaic(noisy(160, 160))
    O = expected_cfa(X, w, width, scales)
    assert R < 72
    for y, x in [(72, 72), (73, 75), (78, 77), (79, 79), (75, 78)]:
        Y = ref.mosaic(noisy(160, 160, seed=9))
        Y[y - R:y + R + 1, x - R:x + R + 1] = X[y - R:y + R + 1, x - R:x + R + 1]
        got = expected_cfa(Y, w, width, scales)
        assert np.array_equal(got[y, x], O[y, x])
        assert np.abs(got - O).max() > 1e-3  # the rest changed


def test_raw_bayer_phases_run_as_rggb(device, tmp_path):
    """denoise_raw with weights of RGGB mosaics: the white-balanced mosaic brought to the RGGB
    phase by a mirrored column (reflect keeps the colours) gives, away from that column, the
    numbers of the same photosites read in RGGB phase; X-Trans is refused."""
    from vkgraph.apps.rawdenoise import bayer_red, denoise_raw, rggb_mosaic
    from vkgraph.pipeline.raw import RawImage, RawMeta

    assert [bayer_red(c) for c in (((0, 1), (1, 2)), ((1, 0), (2, 1)), ((1, 2), (0, 1)),
                                   ((2, 1), (1, 0)), ((0, 1), (2, 1)))] == [
        (0, 0), (0, 1), (1, 0), (1, 1), None]
    lut, w = write_weights(tmp_path / "w.lut", 2, 2, cfa=True)
    den = Denoiser(device, lut)
    eye = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))
    wb = (2.0, 1.0, 1.5)
    M = ref.mosaic(noisy(64, 40))[..., 0].astype(np.float32)  # RGGB, 64 x 40
    rggb = RawImage(M, RawMeta(((0, 1), (1, 2)), wb, eye))
    grbg = RawImage(np.ascontiguousarray(M[:, 1:]), RawMeta(((1, 0), (2, 1)), wb, eye))
    padded_m, origin = rggb_mosaic(grbg)
    assert origin == (0, 1) and padded_m.shape == (40, 64)
    gains = np.tile(np.array([[2.0, 1.0], [1.0, 1.5]], np.float32), (20, 32))
    np.testing.assert_array_equal(padded_m[:, 1:], (M * gains)[:, 1:])
    np.testing.assert_array_equal(padded_m[:, 0], padded_m[:, 2])  # reflected: same colours
    same, origin = rggb_mosaic(rggb)  # already RGGB and even: balanced, not padded
    assert origin == (0, 0)
    np.testing.assert_array_equal(same, M * gains)
    out1, _, ab = denoise_raw(den, None, rggb, noise=(A, B))
    out2, _, _ = denoise_raw(den, None, grbg, noise=(A, B))
    assert out1.shape == (40, 64, 3) and out2.shape == (40, 63, 3)
    r = reach(2, cfa=True)
    np.testing.assert_allclose(out2[:, r + 1:], out1[:, r + 2:], atol=1e-6)
    # the balanced profile's mean over r, g, b: a times the gains squared, b times the gains
    np.testing.assert_allclose(ab, (A * (4 + 1 + 2.25) / 3, B * (2 + 1 + 1.5) / 3), rtol=1e-6)
    xtrans = RawImage(np.zeros((12, 12), np.float32),
                      RawMeta(tuple(tuple(int(v) for v in row) for row in np.zeros((6, 6))),
                              wb, eye))
    with pytest.raises(GraphError, match="RGGB \\(Bayer\\) mosaics; .* X-Trans"):
        denoise_raw(den, None, xtrans, noise=(A, B))


def test_denoise_command_on_a_raw_file_with_cfa_weights(device, tmp_path, capsys):
    """`vkgraph denoise photo.dng --weights` of RGGB mosaics: the DNG (GBRG here) denoised and
    demosaiced by the network, its camera matrix applied, written as EXR: denoise_raw's
    numbers; a PNG with such weights is one clear error, nothing written; an ensemble runs."""
    from test_raw import scene, write

    from vkgraph.apps.rawdenoise import denoise_raw
    from vkgraph.pipeline.raw import read_raw

    lut, _ = write_weights(tmp_path / "raw.lut", 2, 2, cfa=True)
    write(tmp_path / "a.dng", scene(36, 50), ((1, 2), (0, 1)), noise=(A, B))
    code, out, err = run(capsys, tmp_path / "a.dng", "--weights", lut, "--noise", A, B)
    assert code == 0, err
    assert "50x36 Bayer" in out and "weights raw.lut" in out
    got = read_image(tmp_path / "a-denoised.exr")[..., :3]
    want, _, _ = denoise_raw(Denoiser(device, lut), None, read_raw(tmp_path / "a.dng"),
                             noise=(A, B))
    np.testing.assert_allclose(got, want, atol=1e-5)
    write_png(tmp_path / "p.png", noisy(20, 16))
    code, out, err = run(capsys, tmp_path / "p.png", "--weights", lut)
    assert code != 0 and "denoise camera raw files" in err and "Traceback" not in err
    code, out, err = run(capsys, tmp_path / "a.dng", "--weights", lut, "--ensemble", 2,
                         "--noise", A, B, "-o", tmp_path / "b.exr")
    assert code == 0, err
    flipped = read_image(tmp_path / "b.exr")[..., :3]
    assert flipped.shape == got.shape and 0 < np.abs(flipped - got).max() < 0.5


# ----------------------------------------------------------------- RGB cells (cells 1)


@pytest.mark.parametrize("size,width,scales,precise", [
    ((37, 21), 2, 3, 0),   # odd sizes: padded to 40 x 24 (20 x 12 cells)
    ((5, 3), 2, 2, 1),     # padded by more than the image, float64 kernels
])
def test_cells_output_matches_reference(device, tmp_path, size, width, scales, precise):
    """unet on weights whose .lut says 'cells rgb': any RGB image, the reference's result on
    it padded mirrored, alpha kept."""
    lut, w = write_weights(tmp_path / "w.lut", width, scales, cfa=ref.CELLS)
    X = noisy(*size)
    out = unet_run(device, lut, X, tmp_path, precise=precise)
    assert out.shape == (size[1], size[0], 4)
    err = np.abs(out[..., :3] - expected(X, w, width, scales, cfa=ref.CELLS)).max()
    assert err <= 1e-5, err


def test_denoiser_runs_cells_weights_whole_and_tiled(device, tmp_path):
    """The Denoiser on weights of RGB cells: the reference's result whole, and the same
    numbers in tiles on the grid of whole cells with reach's margin for cells."""
    lut, w = write_weights(tmp_path / "w.lut", 2, 3, cfa=ref.CELLS)
    X = noisy(250, 180)
    whole = Denoiser(device, lut)
    assert (whole.module, whole.net, whole.cells, whole.cfa) == ("unet", (2, 3), ref.CELLS,
                                                                 False)
    out = whole(X, A, B)
    np.testing.assert_allclose(out, expected(X, w, 2, 3, cfa=ref.CELLS), atol=1e-5)
    tiled = Denoiser(device, lut, max_pixels=15000)
    step = 8  # 2 * 2^(scales - 1)
    assert tiled.margin == -(-reach(3, ref.CELLS) // step) * step == 48
    cx, cy, _ = tiled.tiling(250, 180)
    assert cx % step == 0 and cy % step == 0 and cx < 250 and cy < 180
    assert np.array_equal(tiled(X, A, B), out)


# ------------------------------------------------------ mosaics of any pattern (cfa 2)


def test_denoiser_runs_mosaic_weights_whole_and_tiled(device, tmp_path):
    """The Denoiser on weights of mosaics of any pattern (the .lut says 'cfa any') and an
    X-Trans mosaic of odd size with its colours in alpha: the full-resolution rgb, finite, and
    the same numbers in tiles on the grid of whole cells with reach's margin (each photosite's
    base reads 2 photosites around it, well inside the margin)."""
    from vkgraph.modules.cnngenin.reference import xtrans

    lut, _ = write_weights(tmp_path / "w.lut", 2, 3, cfa=ref.MOSAIC)
    rgb = noisy(251, 181)
    c = xtrans(251, 181, (2, 5))
    X = np.concatenate([np.repeat(np.take_along_axis(rgb, c[..., None], -1), 3, -1),
                        c[..., None].astype(np.float32)], -1)
    whole = Denoiser(device, lut)
    assert (whole.cells, whole.any_pattern, whole.cfa) == (ref.MOSAIC, True, False)
    out = whole(X, A, B)
    assert out.shape == (181, 251, 3) and np.isfinite(out).all()
    tiled = Denoiser(device, lut, max_pixels=15000)
    cx, cy, _ = tiled.tiling(251, 181)
    assert cx < 251 and cy < 181
    assert np.array_equal(tiled(X, A, B), out)
