"""`vkgraph denoise` and vkgraph/apps/denoise.py: files in every format, output names, the
result against kpn-t's float64 reference forward pass, bad input (usage errors, a missing
weights file, a broken image among good ones) and the interrupt."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_kpn_gpu import conditioned_weights
from test_kpn_infer import ref

from vkgraph.apps.denoise import Denoiser
from vkgraph.cli.main import main
from vkgraph.modules.kpn_t import module as kpn_t
from vkgraph.modules.kpn_t.forward import band_noise
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.formats import (
    read_image,
    read_lut,
    read_pfm,
    write_exr,
    write_jpg,
    write_lut,
    write_pfm,
    write_png,
)

H, W = 40, 48


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """kpn-t-shaped weights (64x448 f16 ssbo), plain taps: Xavier with a positive last layer,
    so the taps' sum stays well above the plain filter's 0.001 floor (near it the division
    amplifies the device's rounding: a GPU's differs from the CPU driver's)."""
    d = tmp_path_factory.mktemp("w")
    w = conditioned_weights()
    path = d / "w.lut"
    write_lut(path, w.astype(np.float16).ravel(), 1, "f16", 64, 448, ssbo=True,
              text="lut contains weights for\nplain kernel weight activation")
    return path


def picture(seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:H, 0:W]
    clean = np.stack([0.4 + 0.3 * np.sin(xx / 4.0 + c) * np.cos(yy / 5.0) for c in range(3)], -1)
    return np.clip(clean + 0.05 * rng.standard_normal(clean.shape), 0, 1).astype(np.float32)


def run(capsys, *args):
    code = main(["denoise", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def expected(image: np.ndarray, lut) -> np.ndarray:
    Wl = read_lut(lut)[0].astype(np.float64).reshape(7, 64, 64)
    return ref.forward(image.astype(np.float64), image.astype(np.float64), Wl, levels=4)[1]


def test_one_png_default_name(tmp_path, capsys, weights):
    write_png(tmp_path / "p.png", picture())
    code, out, err = run(capsys, tmp_path / "p.png", "--weights", weights)
    assert code == 0, err
    result = read_image(tmp_path / "p-denoised.png")
    assert result.shape == (H, W, 4)
    assert "(estimated)" in out and "p-denoised.png" in out
    # 8-bit sRGB of kpn's result on the decoded input: within one code value
    want = expected(read_image(tmp_path / "p.png")[..., :3], weights)
    from vkgraph.pipeline.formats import linear_to_srgb
    assert np.abs(linear_to_srgb(result[..., :3]) - linear_to_srgb(want)).max() <= 1 / 255 + 1e-6


def test_many_formats_outdir(tmp_path, capsys, weights):
    img = picture(2)
    write_png(tmp_path / "a.png", img)
    write_jpg(tmp_path / "b.jpg", img)
    write_exr(tmp_path / "c.exr", img)
    write_pfm(tmp_path / "d.pfm", img)
    write_pfm(tmp_path / "e.pfm", img[:32])  # another size: a second build
    files = [tmp_path / n for n in ("a.png", "b.jpg", "c.exr", "d.pfm", "e.pfm")]
    code, out, err = run(capsys, *files, "--outdir", tmp_path / "out", "--weights", weights,
                         "--noise", "1e6", "100")
    assert code == 0, err
    assert out.count("(given)") == 5
    # each output keeps its input's format
    assert (tmp_path / "out" / "a.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "out" / "b.jpg").read_bytes()[:2] == b"\xff\xd8"
    assert (tmp_path / "out" / "c.exr").read_bytes()[:4] == b"\x76\x2f\x31\x01"
    pfm = read_pfm(tmp_path / "out" / "d.pfm")
    assert np.abs(pfm - expected(img, weights)).max() <= 1e-4  # float out: kpn's own values
    exr = read_image(tmp_path / "out" / "c.exr")[..., :3]
    assert np.abs(exr - pfm).max() == 0
    assert read_pfm(tmp_path / "out" / "e.pfm").shape == (32, W, 3)


def test_usage_errors(tmp_path, capsys, weights):
    write_png(tmp_path / "a.png", picture())
    write_png(tmp_path / "b.png", picture(3))
    code, _, err = run(capsys, tmp_path / "a.png", tmp_path / "b.png", "-o",
                       tmp_path / "x.png", "--weights", weights)
    assert code == 2 and "-o takes one input" in err
    code, _, err = run(capsys, tmp_path / "a.png", "-o", tmp_path / "a.png", "--weights",
                       weights)
    assert code == 2 and "is an input" in err
    code, _, err = run(capsys, tmp_path / "a.png", "--outdir", tmp_path, "--weights", weights)
    assert code == 2 and "is an input" in err
    code, _, err = run(capsys, tmp_path / "a.png", "-o", tmp_path / "x.bmp", "--weights",
                       weights)
    assert code == 2 and "cannot write" in err
    code, _, err = run(capsys, tmp_path / "a.png", "-o", tmp_path / "x.png", "--quality", "80",
                       "--weights", weights)
    assert code == 2 and "--quality sets JPEG and WebP outputs" in err
    for q in ("0", "101", "9.5"):
        code, _, err = run(capsys, tmp_path / "a.png", "-o", tmp_path / "x.jpg", "--quality",
                           q, "--weights", weights)
        assert code == 2 and "--quality" in err, q
    code, _, err = run(capsys, tmp_path / "a.png", "--noise", "-1", "0", "--weights", weights)
    assert code == 2 and "--noise" in err
    code, _, err = run(capsys, tmp_path / "a.png", "--weights", tmp_path / "none.lut")
    assert code == 2 and "none.lut" in err and "do not exist" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "b.png"]
    assert "Traceback" not in err


def test_broken_input_among_good_ones(tmp_path, capsys, weights):
    write_png(tmp_path / "a.png", picture())
    (tmp_path / "bad.png").write_bytes(b"\x89PNG" + b"x" * 500)
    write_pfm(tmp_path / "c.pfm", picture(4))
    missing = tmp_path / ("m" * 300 + ".png")
    code, out, err = run(capsys, tmp_path / "a.png", tmp_path / "bad.png", missing,
                         tmp_path / "c.pfm", "--outdir", tmp_path / "o", "--weights", weights)
    assert code == 1
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["a.png", "c.pfm"]
    errors = [ln for ln in err.splitlines() if ln.startswith("vkgraph: error:")]
    assert len(errors) == 2 and "bad.png" in errors[0]
    assert all(len(ln) <= len("vkgraph: error: ") + 200 for ln in errors)
    assert "2 of 4 files failed" in err


def test_interrupt_finishes_the_current_file(tmp_path, capsys, weights, monkeypatch):
    import vkgraph.cli.main

    # a signal came
    monkeypatch.setattr(vkgraph.cli.main.StopSignals, "__call__", lambda self: True)
    for n in "ab":
        write_png(tmp_path / f"{n}.png", picture())
    code, _, err = run(capsys, tmp_path / "a.png", tmp_path / "b.png", "--outdir",
                       tmp_path / "o", "--weights", weights)
    assert code == 130 and "interrupted after 1 of 2" in err
    assert [p.name for p in (tmp_path / "o").iterdir()] == ["a.png"]


def test_denoiser_builds_per_size_and_noise_params(device, weights):
    den = Denoiser(device, weights)
    assert den.levels == 4
    img = picture()
    first = den(img, 2e5, 20)
    again = den(img, 1e6, 100.5)
    assert len(den.builds) == 1
    g = den.builds[(W, H, False, "float")][1]
    kpn = g.modules[("kpn", "01")]
    assert (kpn.param("noise a"), kpn.param("noise b")) == (1e6, 100.5)
    np.testing.assert_array_equal(first, again)  # these weights do not read the profile
    den(img[:20, :30], 0, 0)
    assert len(den.builds) == 2
    with pytest.raises(GraphError, match="do not exist"):
        Denoiser(device, weights.parent / "nothing.lut")
    # weights with noise-normalised features read the profile: a new (a, b) on the same
    # build changes the result
    feat = weights.parent / "feat.lut"
    lut_text = kpn_t.lut_text  # what kpn-t writes
    write_lut(feat, read_lut(weights)[0].ravel(), 1, "f16", 64, 448, ssbo=True,
              text=lut_text(1, 0, 1, 2))
    den = Denoiser(device, feat)
    assert den.levels == 2  # from the .lut's text, as kpn takes it (and apply 1)
    low, high = den(img, 2e5, 20), den(img, 5e6, 400)
    kpn = den.builds[(W, H, False, "float")][1].modules[("kpn", "01")]
    assert (kpn.param("levels"), kpn.param("apply")) == (2, 1)
    assert len(den.builds) == 1 and np.abs(low - high).max() > 1e-3
    bands = band_noise(2)
    Wl = read_lut(feat)[0].astype(np.float64).reshape(7, 64, 64)
    want = ref.forward(img.astype(np.float64), img.astype(np.float64), Wl, levels=2,
                       apply_mode="softmax", noise=(5e6, 400), bands=bands)[1]
    assert np.abs(high - want).max() <= 1e-4  # the profile reaches kpn's features
    np.testing.assert_array_equal(den(img, 2e5, 20), low)
    odd = weights.parent / "w:1 #x.lut"  # cfg syntax in the path does no harm
    odd.write_bytes(weights.read_bytes())
    np.testing.assert_array_equal(Denoiser(device, odd)(img, 2e5, 20), first)


def test_profiled_denoiser_times_each_frame(device, weights):
    """profile=True: each frame's node times, summed, in gpu_ms as it ends (an ensemble of 2:
    two frames; bench/kpn_infer.py reads them); without it, nothing is timed."""
    img = picture()
    den = Denoiser(device, weights, profile=True, ensemble=2)
    den(img, 2e5, 20)
    assert len(den.gpu_ms) == 2 and all(ms > 0 for ms in den.gpu_ms)
    plain = Denoiser(device, weights)
    plain(img, 2e5, 20)
    assert plain.gpu_ms == []


def test_denoiser_keeps_two_builds_and_frees_the_others(device, weights):
    """A folder of many sizes: the oldest build is closed (its buffers leave the device),
    a size met again builds anew with the same result, and close() frees the rest."""
    den = Denoiser(device, weights)
    img = picture()
    first = den(img, 2e5, 20)
    oldest = den.builds[(W, H, False, "float")][0]
    owned = list(oldest._owned)
    assert owned and all(any(c is o for c in device.children) for o in owned)
    den(img[:20, :30], 2e5, 20)
    den(img[:24, :28], 2e5, 20)
    assert list(den.builds) == [(30, 20, False, "float"), (28, 24, False, "float")]
    assert oldest.closed and not oldest._owned
    assert not any(c is o for c in device.children for o in owned)
    with pytest.raises(GraphError, match="closed"):
        oldest.run_frame(0)
    den(img[:20, :30], 2e5, 20)  # used again: now the most recent
    np.testing.assert_array_equal(den(img, 2e5, 20), first)
    assert list(den.builds) == [(30, 20, False, "float"), (W, H, False, "float")]
    made = [c for build, _ in den.builds.values() for c in build._owned]
    den.close()
    assert not den.builds and made
    assert not any(c is o for c in device.children for o in made)


def test_denoiser_reruns_in_fp32_when_the_f16_kernels_overflow(device, weights, monkeypatch,
                                                               caplog):
    """A non-finite output of the f16 MLP kernels (weights grown large in training: measured on
    the H100, tests/test_kpn_coopmat.py) is computed again with kpn's fp32 kernels, said once,
    and later images keep them; non-finite even then is an error, never an image."""
    img = picture()
    want = Denoiser(device, weights)(img, 2e5, 20)
    run = Denoiser._run

    def f16_overflows(self, image, a, b):  # what the H100's fused kernels gave
        out = run(self, image, a, b)
        return out if self.fp32 else np.full_like(out, np.nan)

    monkeypatch.setattr(Denoiser, "_run", f16_overflows)
    monkeypatch.setattr(Denoiser, "_f16", lambda self: True)
    den = Denoiser(device, weights)
    with caplog.at_level("WARNING", logger="vkgraph"):
        got = den(img, 2e5, 20)
    np.testing.assert_array_equal(got, want)
    assert [r.getMessage() for r in caplog.records if "overflowed" in r.getMessage()] == [
        f"kpn: the f16 kernels overflowed with the weights {weights}; running the fp32 ones"]
    assert den.builds[(W, H, True, "float")][1].modules[("kpn", "01")].param("fp32") == 1
    np.testing.assert_array_equal(den(img, 2e5, 20), want)  # fp32 from now on
    monkeypatch.setattr(Denoiser, "_run", lambda self, image, a, b: np.full(
        image.shape[:2] + (3,), np.inf, np.float32))
    with pytest.raises(GraphError, match=r"non-finite values"):
        Denoiser(device, weights)(img, 2e5, 20)


@pytest.fixture(scope="module")
def ctx_weights(tmp_path_factory):
    """arch 1 weights (the .lut's text says so): the conditioned ones, W_6's rows 16..31
    (the chroma kernel and gain) drawn like the rest."""
    d = tmp_path_factory.mktemp("w1")
    w = conditioned_weights().reshape(7, 64, 64)
    w[6, 16:32] = np.random.default_rng(5).uniform(-1, 1, (16, 64)) * np.sqrt(6.0 / 128.0)
    path = d / "w1.lut"
    write_lut(path, w.astype(np.float16).ravel(), 1, "f16", 64, 448, ssbo=True,
              text="lut contains weights for\nsoftmax kernel weight activation\nsigmoid alpha "
              "blending activation\nnoise-normalised features\nchroma and context features")
    return path


@pytest.fixture(scope="module")
def nl_weights(tmp_path_factory):
    """arch 2 weights: W_6's rows 0..55 (two 27-tap kernels and gains) drawn."""
    d = tmp_path_factory.mktemp("w2")
    w = conditioned_weights().reshape(7, 64, 64)
    w[6, :56] = np.random.default_rng(6).uniform(-1, 1, (56, 64)) * np.sqrt(6.0 / 128.0)
    path = d / "w2.lut"
    write_lut(path, w.astype(np.float16).ravel(), 1, "f16", 64, 448, ssbo=True,
              text="lut contains weights for\nsoftmax kernel weight activation\nsigmoid alpha "
              "blending activation\nnoise-normalised features\nchroma and context features\n"
              "nonlocal taps")
    return path


@pytest.mark.parametrize("arch,most,tiling", [(1, 1600, (8, 8, 16)), (2, 2900, (4, 52, 24))])
def test_ctx_tiles_equal_the_whole_image(device, ctx_weights, nl_weights, arch, most, tiling):
    """arch 1's and 2's features read one level deeper: their tiles take the grid and margin
    of one more level (levels 1 here tile as levels 2 of arch 0), arch 2's margin is larger
    by its block matching's reach, and tiles meet without seams."""
    weights = ctx_weights if arch == 1 else nl_weights
    img = np.concatenate([picture(6), picture(7)], axis=1)[:, :60]
    img = np.concatenate([img, img[:12, ::-1]], axis=0)  # 52 x 60
    whole = Denoiser(device, weights, levels=1)(img, 1e6, 100)
    tiled = Denoiser(device, weights, levels=1, max_pixels=most)
    assert (tiled.arch, tiled.depth) == (arch, 2)
    assert tiled.tiling(60, 52) == tiling
    out = tiled(img, 1e6, 100)
    assert np.abs(out - whole).max() <= 1e-6


def test_ensemble_is_the_mean_over_flips_and_rotations(device, weights):
    """ensemble n: kpn on the image's flips and rotations, each undone, averaged."""
    img = picture(3)[:, :40]
    one = Denoiser(device, weights)
    runs = [np.rot90(one(np.ascontiguousarray(np.rot90(img, k)), 1e6, 100), -k) for k in range(4)]
    mirror = one(np.ascontiguousarray(img[:, ::-1]), 1e6, 100)[:, ::-1]
    np.testing.assert_allclose(Denoiser(device, weights, ensemble=4)(img, 1e6, 100),
                               np.mean(runs, axis=0), atol=1e-6)
    np.testing.assert_allclose(Denoiser(device, weights, ensemble=2)(img, 1e6, 100),
                               (runs[0] + mirror) / 2, atol=1e-6)
    assert np.abs(runs[1] - runs[0]).max() > 1e-4  # the filter is not rotation-invariant
    with pytest.raises(GraphError, match="ensemble 3"):
        Denoiser(device, weights, ensemble=3)


def test_tiles_equal_the_whole_image(device, weights):
    """An image larger than the device's buffers is denoised in tiles; with the margin of
    vkgraph/apps/denoise.py each tile sees everything its kept pixels depend on and starts on the
    pyramid's grid, so the result is the whole image's (here forced with max_pixels)."""
    from vkgraph.apps.denoise import spans

    img = np.concatenate([picture(6), picture(7)], axis=1)[:, :60]
    img = np.concatenate([img, img[:12, ::-1]], axis=0)  # 52 x 60
    whole = Denoiser(device, weights, levels=2)(img, 1e6, 100)
    tiled = Denoiser(device, weights, levels=2, max_pixels=1600)  # < 60 * 52
    # keep 8 x 8, reach 16 beyond (or to the edge): every tile 40 x 40
    assert tiled.tiling(60, 52) == (8, 8, 16)
    assert spans(60, 8, 16, 40)[2:6] == [(0, 40, 16, 24), (8, 48, 24, 32), (16, 56, 32, 40),
                                         (20, 60, 40, 48)]
    seen = []
    tiled.on_tile = lambda done, total: seen.append((done, total))
    out = tiled(img, 1e6, 100)
    assert seen == [(k, 56) for k in range(57)]  # 8 columns x 7 rows
    assert len(tiled.builds) == 1  # one tile size: one build, one set of buffers
    assert np.abs(out - whole).max() <= 1e-6
    with pytest.raises(GraphError, match="less than one tile"):
        Denoiser(device, weights, levels=2, max_pixels=35 * 35)(img, 0, 0)


def test_strength_range(tmp_path, capsys, weights):
    write_png(tmp_path / "a.png", picture())
    for bad in ("0", "-1", "nan", "1000", "x"):
        code, _, err = run(capsys, tmp_path / "a.png", "--strength", bad, "--weights", weights)
        assert code == 2 and "--strength" in err and "0.01..100" in err, (bad, err)
        assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png"]


def test_strength_multiplies_the_level_kpn_gets(tmp_path, capsys, weights, monkeypatch):
    """--strength S: kpn gets S times the given or estimated (a, b), and the line says so;
    a JPEG (by its bytes, whatever its name) is estimated at the JPEG scale."""
    from vkgraph.apps import noise

    seen = []
    call, srgb = Denoiser.__call__, Denoiser.srgb  # the float and the 8-bit path
    monkeypatch.setattr(Denoiser, "__call__",
                        lambda self, img, a, b: seen.append((a, b)) or call(self, img, a, b))
    monkeypatch.setattr(Denoiser, "srgb",
                        lambda self, px, a, b: seen.append((a, b)) or srgb(self, px, a, b))
    write_png(tmp_path / "a.png", picture())
    write_jpg(tmp_path / "b.jpg", picture(5))
    (tmp_path / "c.png").write_bytes((tmp_path / "b.jpg").read_bytes())  # a JPEG named .png
    code, out, err = run(capsys, tmp_path / "a.png", "--noise", "1e6", "100", "--strength",
                         "2", "-o", tmp_path / "x.png", "--weights", weights)
    assert code == 0, err
    assert seen == [(2e6, 200.0)] and "noise a 2e+06 b 200 (given, strength 2)" in out
    code, out, err = run(capsys, tmp_path / "b.jpg", tmp_path / "c.png", "--strength", "0.5",
                         "--outdir", tmp_path / "o", "--weights", weights)
    assert code == 0, err
    a, b = noise.estimate_noise(read_image(tmp_path / "b.jpg"), jpeg=True)
    assert seen[1:] == [(0.5 * a, 0.5 * b)] * 2 and a + b > 0
    assert out.count("(estimated, strength 0.5)") == 2


@pytest.mark.parametrize("n,core,margin,step", [(60, 8, 16, 4), (1001, 96, 32, 8), (37, 16, 8, 4),
                                                (4000, 1008, 64, 16), (3000, 1504, 64, 16)])
def test_tile_spans_cover_with_their_margin(n, core, margin, step):
    """Every tile is tile_length() long and starts on the pyramid's grid; the kept parts tile
    the axis; each tile reaches margin beyond its kept part or to the image's edge."""
    from vkgraph.apps.denoise import spans, tile_length

    length = tile_length(n, core, margin, step)
    tiles = spans(n, core, margin, length)
    assert [k0 for _, _, k0, _ in tiles] == list(range(0, n, core))
    assert tiles[-1][3] == n
    for s, e, k0, k1 in tiles:
        assert e - s == length and s % step == 0 and 0 <= s and e <= n
        assert s == 0 or s <= k0 - margin
        assert e == n or e >= k1 + margin


def test_tile_progress_lines_without_a_bar(monkeypatch, caplog):
    """`vkgraph denoise` without a bar: a line every HEARTBEAT_S seconds while a photo's
    tiles run (here every tile: the period set to 0), none for the last tile."""
    from types import SimpleNamespace

    from vkgraph.cli import denoise, progress

    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.0)
    on_tile = denoise.tile_progress(SimpleNamespace(disable=True))
    with caplog.at_level("INFO", logger="vkgraph"):
        for done in range(4):
            on_tile(done, 3)
    assert [r.getMessage() for r in caplog.records] == ["denoise: tile 1 of 3",
                                                        "denoise: tile 2 of 3"]
    monkeypatch.setattr(progress, "HEARTBEAT_S", 10.0)
    on_tile = denoise.tile_progress(SimpleNamespace(disable=True))
    caplog.clear()
    with caplog.at_level("INFO", logger="vkgraph"):
        for done in range(4):
            on_tile(done, 3)
    assert not caplog.records  # a photo done within 10 s says nothing


def test_ensemble_option(device, tmp_path, capsys, weights):
    """--ensemble N: what Denoiser(ensemble=N) gives; another N is exit 2, nothing written."""
    write_png(tmp_path / "a.png", picture())
    code, _, err = run(capsys, tmp_path / "a.png", "--ensemble", "3", "--weights", weights)
    assert code == 2 and "--ensemble" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png"]
    code, out, err = run(capsys, tmp_path / "a.png", "--ensemble", "4", "--noise", "1e6", "100",
                         "-o", tmp_path / "b.exr", "--weights", weights)
    assert code == 0, err
    got = read_image(tmp_path / "b.exr")[..., :3]
    want = Denoiser(device, weights, ensemble=4)(read_image(tmp_path / "a.png"), 1e6, 100)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_default_ensemble_is_two_for_the_photo_unet_on_a_gpu(monkeypatch):
    """Without --ensemble the photo U-Net averages the image and its mirror on a GPU; other
    weights, and any weights on a CPU, run once; --ensemble N is N for every weights file."""
    from vkgraph.cli import denoise as cli_denoise

    photo = cli_denoise.GPU_WEIGHTS["linear"]
    jpeg = cli_denoise.GPU_WEIGHTS["jpeg"]
    for gpu, want in ((True, (2, 1)), (False, (1, 1))):
        monkeypatch.setattr(cli_denoise, "on_gpu", lambda device, gpu=gpu: gpu)
        dens = cli_denoise.Denoisers(None, None, None)
        assert (dens.ensemble_of(photo), dens.ensemble_of(jpeg)) == want
        assert dens.ensemble_of(Path(str(photo.parent) + "/../weights/" + photo.name)) == want[0]
        assert cli_denoise.Denoisers(None, None, None, ensemble=4).ensemble_of(photo) == 4


def test_default_weights_by_kind_of_file(tmp_path, capsys, monkeypatch, weights, ctx_weights):
    """Without --weights: on a CPU Bayer raw files get the U-Net of RGGB mosaics at width 24,
    other raw files, EXR and PFM the arch 1 weights, JPEGs the U-Net on cells trained on
    JPEGs, the other display-referred formats the arch 0 ones; on a GPU raw files get the
    U-Net of RGGB mosaics, EXR and PFM the U-Net and JPEGs the U-Net trained on JPEGs; each
    file's line names the weights it used."""
    from vkgraph.cli import denoise as cli_denoise

    gpu = {s: cli_denoise.default_weights(Path(f"x{s}"), gpu=True).name
           for s in (".dng", ".exr", ".pfm", ".jpg", ".png")}
    # X-Trans raw files get the U-Net of mosaics of any pattern (width 48; on a CPU width 24)
    from vkgraph.apps import dng

    assert cli_denoise.default_weights(Path("x.raf"), True, dng.XTRANS).name == \
        "unet-xtrans.lut"
    assert cli_denoise.default_weights(Path("x.raf"), True, dng.BAYER["GBRG"]).name == \
        "unet-raw.lut"
    assert cli_denoise.default_weights(Path("x.raf"), False, dng.XTRANS).name == \
        "unet-xtrans-w24.lut"
    assert gpu == {".dng": "unet-raw.lut", ".exr": "unet-photo.lut",
                   ".pfm": "unet-photo.lut", ".jpg": "unet-jpeg.lut",
                   ".png": "kpn-photo.lut"}
    # on a CPU, JPEGs get the U-Net on cells (a quarter of the pixel U-Net's work)
    assert cli_denoise.default_weights(Path("x.jpg")).name == "unet-jpeg-cells.lut"
    # and Bayer raw files the mosaic U-Net at width 24 (a pattern not known is taken for Bayer)
    assert cli_denoise.default_weights(Path("x.nef"), False, dng.BAYER["GRBG"]).name == \
        cli_denoise.default_weights(Path("x.dng")).name == "unet-raw-w24.lut"
    monkeypatch.setattr(cli_denoise, "WEIGHTS", weights)
    monkeypatch.setattr(cli_denoise, "WEIGHTS_LINEAR", ctx_weights)
    jpeg_weights = tmp_path / "jpeg.lut"
    jpeg_weights.write_bytes(ctx_weights.read_bytes())
    monkeypatch.setattr(cli_denoise, "WEIGHTS_JPEG", jpeg_weights)
    assert cli_denoise.default_weights(Path("x.DNG"), False, dng.BAYER["BGGR"]).name == \
        "unet-raw-w24.lut"
    assert cli_denoise.default_weights(Path("x.exr")) == ctx_weights
    assert cli_denoise.default_weights(Path("x.jpeg")) == jpeg_weights
    assert cli_denoise.default_weights(Path("x.JPG")) == jpeg_weights
    assert cli_denoise.default_weights(Path("x.webp")) == weights
    shipped = cli_denoise.ROOT / "graphs" / "weights"
    assert all((shipped / n).exists() for n in ("kpn-photo.lut", "kpn-photo-ctx.lut",
                                                  "kpn-jpeg-ctx.lut", "kpn-photo-nl.lut",
                                                  "kpn-jpeg-nl.lut", "unet-jpeg.lut",
                                                  "unet-photo.lut", "unet-raw.lut",
                                                  "unet-jpeg-cells.lut", "unet-raw-w24.lut",
                                                  "unet-xtrans.lut", "unet-xtrans-w24.lut"))

    write_png(tmp_path / "a.png", picture())
    write_pfm(tmp_path / "b.pfm", picture())
    write_jpg(tmp_path / "c.jpg", picture(), 95)
    # the command with the CPU's choice on any device (a GPU's is the dict above)
    monkeypatch.setattr(cli_denoise, "on_gpu", lambda device: False)
    code, out, err = run(capsys, tmp_path / "a.png", tmp_path / "b.pfm", tmp_path / "c.jpg",
                         "--noise", "1e6", "100", "--outdir", tmp_path / "o")
    assert code == 0, err
    lines = {line.split(" -> ")[0]: line for line in out.splitlines() if " -> " in line}
    assert f"weights {weights.name}" in lines[str(tmp_path / "a.png")]
    assert f"weights {ctx_weights.name}" in lines[str(tmp_path / "b.pfm")]
    assert f"weights {jpeg_weights.name}" in lines[str(tmp_path / "c.jpg")]


def test_prepare_builds_what_the_call_runs(device, weights, tmp_path):
    """Denoiser.prepare(wd, ht) (the command builds while the photo decodes) makes the
    session of that size, or of its tiles; the call then builds nothing more and gives the
    same result. upright_size tells the size from the header, EXIF orientation applied."""
    from PIL import Image

    from vkgraph.pipeline.formats import decode_image, upright_size

    img = picture()
    want = Denoiser(device, weights)(img, 1e6, 100)
    den = Denoiser(device, weights)
    den.prepare(W, H)
    session = den.sessions[(W, H, False, "float")]
    np.testing.assert_array_equal(den(img, 1e6, 100), want)
    assert list(den.sessions.values()) == [session]
    tiled = Denoiser(device, weights, levels=2, max_pixels=1600)
    tiled.prepare(60, 52)
    assert list(tiled.sessions) == [(40, 40, False, "float")]  # its tiles' size (the test above)
    exif = Image.Exif()
    exif[0x0112] = 6  # turned a quarter: the upright image is 30 wide, 50 high
    Image.new("RGB", (50, 30)).save(tmp_path / "o.jpg", exif=exif.tobytes())
    assert upright_size(tmp_path / "o.jpg") == (30, 50)
    assert decode_image(tmp_path / "o.jpg")[0].shape[:2] == (50, 30)
    (tmp_path / "bad.jpg").write_bytes(b"not an image")
    assert upright_size(tmp_path / "bad.jpg") is None


def test_reader_thread_leaves_exr_and_holds_stdio(tmp_path, monkeypatch):
    """`vkgraph denoise` reads photos on a thread while the main thread works. OpenEXR's
    decoder takes the process's stdout and stderr (formats._quietly), so a line the main
    thread logged meanwhile turned a good EXR into an error ("cannot decode OpenEXR file:
    vkgraph: kpn:01: cpu MLP kernels", one suite run in four with Ray's test before it):
    EXR files are read on the main thread, and the reader holds formats.STDIO, which the
    capture waits for."""
    from vkgraph.cli import denoise as cli_denoise
    from vkgraph.pipeline import formats

    write_exr(tmp_path / "a.exr", picture())
    write_png(tmp_path / "b.png", picture())
    assert formats.captures_stdio(tmp_path / "a.exr")
    assert not formats.captures_stdio(tmp_path / "b.png")
    held = []

    def read_photo(src, noise, strength):
        held.append(formats.STDIO._is_owned())
        return src

    monkeypatch.setattr(cli_denoise, "read_photo", read_photo)
    reads = cli_denoise.ReadAhead([(tmp_path / "a.exr", None), (tmp_path / "b.png", None)],
                                  None, 1.0)
    try:
        assert reads.take(0) is None  # the EXR: read where it is denoised
        assert reads.take(1).result() == tmp_path / "b.png" and held == [True]
    finally:
        reads.close()


def test_capture_waits_for_stdio():
    """While a thread holds formats.STDIO, another thread's _quietly waits for it."""
    import threading

    from vkgraph.pipeline import formats

    done = threading.Event()
    with formats.STDIO:
        t = threading.Thread(target=lambda: (formats._quietly(lambda: None), done.set()))
        t.start()
        assert not done.wait(0.3)
    t.join(10)
    assert done.is_set()
