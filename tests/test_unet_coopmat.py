"""unet-t's cooperative-matrix layer kernels (conv_cm, convb_cm, convw_cm: f16 operands, f32
sums) against the float64 reference (modules/unet-t/reference.py): one frame's output, loss
and every weight gradient, on cnngenin's tiles and on a whole image, RGB and RGGB mosaics.
On the GPU machine (VK_KHR_cooperative_matrix) the real kernels run; on any other device (the
CPU driver) the same sources run through the plain-GLSL emulation of the cooperative-matrix
operations (CM_EMULATE in shaders/include/mlp_coopmat.glsl), which checks their indexing,
padding and layouts everywhere.

Tolerances: f16 rounding of the operands (2^-11 relative) is the source of the differences.
The output and the loss are checked against the reference as the fp32 kernels are, with
looser bounds. The weight gradients two ways:
  * random weights and biases, as test_unet's: each layer's largest error within 0.1 of the
    gradient's largest entry. f16 rounding flips the ReLUs whose input is rounding-sized, and
    a flip changes its pixel's term of the sums over the pixels, whose terms' signs vary:
    one term of P is ~1 / sqrt(P) of such a sum (measured up to 1.6e-2 on RGB, 5.7e-2 on
    RGGB mosaics through the emulation), a bound only for gross errors;
  * biases of 3, where every ReLU is on, and weights that f16 holds exactly: no flips, so
    each layer's gradient within 5e-3 of its own norm (measured <= 2e-3; <= 9.3e-4 on RGGB
    mosaics, whose layers differ only in their first and last layer's channels, 5 and 12,
    and are not repeated here: every layer's kernels compile again for them on the CPU
    driver): an indexing error in any layer fails this.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pytest
from test_unet import (
    CELLS,
    CFA,
    MOSAIC,
    clean,
    one_frame,
    random_weights,
    reference_of,
    unet_graph,
)

from vkgraph.apps.denoise import Denoiser
from vkgraph.modules.unet_t import reference as ref
from vkgraph.modules.unet_t.forward import gscale, kernels
from vkgraph.modules.unet_t.module import lut_text
from vkgraph.modules.unet_t.net import layers
from vkgraph.pipeline.formats import write_lut
from vkgraph.pipeline.variants import cm_capable


@pytest.fixture
def coopmat(device, monkeypatch):
    """The cooperative-matrix kernels: the device's, else emulated."""
    monkeypatch.setenv("VKGRAPH_UNET_KERNELS", "coopmat")
    if not cm_capable(SimpleNamespace(capabilities=device.info)):
        monkeypatch.setenv("VKGRAPH_COOPMAT_EMULATE", "1")
    return device


def errors(device, tmp_path, width, scales, size, tiles, cfa=False, bias=None):
    extra = "param:unet-t:01:alpha:0" + {ref.RGB: "", ref.RGGB: f"\n{CFA}",
                                         ref.CELLS: f"\n{CELLS}",
                                         ref.MOSAIC: f"\n{MOSAIC}"}[int(cfa)]
    g = unet_graph(tmp_path, clean(*size), width, scales, tiles, extra)
    g.frames = 2
    w = random_weights(width, scales, cfa=cfa)
    if bias is not None:
        for L in layers(width, scales, cfa):
            w[L.offset + L.weights:L.end] = bias
        w = w.astype(np.float16).astype(np.float32)  # the kernels' f16 weights, exactly
    E, dw, O, X, R, nab = one_frame(device, g, w, alpha=cfa == ref.MOSAIC)
    Eref, dwref, Oref, view = reference_of(X, R, nab, w.astype(np.float64), width, scales, cfa)
    scale = np.abs(dwref).max()
    dws = {L.name: np.abs(dw[L.offset:L.end] - dwref[L.offset:L.end]).max() / scale
           for L in layers(width, scales, cfa)}
    if bias is not None:  # relative to the layer's own gradient
        dws = {L.name: np.linalg.norm(dw[L.offset:L.end] - dwref[L.offset:L.end])
               / np.linalg.norm(dwref[L.offset:L.end]) for L in layers(width, scales, cfa)}
    return abs(E - Eref) / Eref, np.abs(view(O) - Oref).max(), dws


# One network for every test (the kernels are compiled per layer, and the CPU driver takes
# about a second to build each emulated one): 9, 18 and 36 channels, partial fragments in
# blocks of 16, 32 and 64 rows
NET = (9, 3)


def test_frame_matches_reference(coopmat, tmp_path):
    """Random weights on a 2x2 grid of 16-pixel tiles."""
    e, o, dws = errors(coopmat, tmp_path, *NET, (32, 32), (4, 16))
    assert e <= 1e-3
    assert o <= 2e-3
    for name, d in dws.items():
        assert d <= 0.1, name


def test_every_relu_on_matches_closely(coopmat, tmp_path):
    """The whole image, wider than high (convw sums 3 runs of pixels at the finest scale)."""
    e, o, dws = errors(coopmat, tmp_path, *NET, (64, 48), None, bias=3.0)
    assert e <= 1e-4
    assert o <= 1e-4
    for name, d in dws.items():
        assert d <= 5e-3, name


@pytest.mark.coopmat
def test_cfa_on_the_device(device, coopmat, tmp_path):
    """RGGB mosaics (5 channels in, 12 out) on the device's own cooperative matrices, both
    ways (on the CPU driver every layer's kernels would compile again, for this alone)."""
    if "VKGRAPH_COOPMAT_EMULATE" in os.environ:
        pytest.skip(f"{device.info.name} has no cooperative matrices")
    e, o, dws = errors(coopmat, tmp_path, *NET, (32, 32), (4, 16), cfa=True)
    assert e <= 1e-3 and o <= 2e-3 and max(dws.values()) <= 0.1
    e, o, dws = errors(coopmat, tmp_path, *NET, (32, 32), (4, 16), cfa=True, bias=3.0)
    assert e <= 1e-4 and o <= 1e-4 and max(dws.values()) <= 5e-3


@pytest.mark.coopmat
@pytest.mark.parametrize("cfa,all_on", [(ref.CELLS, 5e-3), (ref.MOSAIC, 2e-2)])
def test_cells_on_the_device(device, coopmat, tmp_path, cfa, all_on):
    """RGB cells (13 channels in, 12 out) and mosaics of any pattern (X-Trans at each tile's
    phase: 25 in, 12 out) on the device's own cooperative matrices, as
    test_cfa_on_the_device. With every ReLU on, the mosaic's layers up to scale 1 come within
    2e-2 of their gradients (1.4e-2 on an H100) rather than 5e-3: 12 of its 25 input planes
    are the photosites' colours, 0 or 1 over a whole phase of the pattern, so their weights'
    gradients are sums of dE/dY (rounded to f16) whose terms cancel more than against
    varying values."""
    if "VKGRAPH_COOPMAT_EMULATE" in os.environ:
        pytest.skip(f"{device.info.name} has no cooperative matrices")
    e, o, dws = errors(coopmat, tmp_path, *NET, (32, 32), (4, 16), cfa=cfa)
    assert e <= 1e-3 and o <= 2e-3 and max(dws.values()) <= 0.1
    e, o, dws = errors(coopmat, tmp_path, *NET, (32, 32), (4, 16), cfa=cfa, bias=3.0)
    assert e <= 1e-4 and o <= 1e-4 and max(dws.values()) <= all_on


def test_portable_where_asked_or_precise(coopmat, monkeypatch):
    graph = SimpleNamespace(capabilities=coopmat.info)  # what kernels() reads of a build
    assert kernels(graph) == "coopmat"
    assert kernels(graph, precise=True) == "portable"
    monkeypatch.setenv("VKGRAPH_UNET_KERNELS", "portable")
    assert kernels(graph) == "portable"


def test_gscale_is_a_power_of_two_above_the_pixels():
    for pixels in (1, 2, 1000, 1024, 1025, 262144):
        s = float(gscale(pixels))
        assert s == 2.0 ** round(np.log2(s)) and 16 * pixels <= s < 32 * pixels


def test_denoise_reruns_in_fp32_past_f16(coopmat, monkeypatch, caplog, tmp_path):
    """An input far outside the trained range (HDR values to 1000 with no noise: the network
    reads them divided by the floor of the noise scale, 1e-5, past f16's 65504) overflows the
    f16 kernels; the Denoiser says so and runs the image again with the fp32 ones, which give
    the portable kernels' result."""
    weights = tmp_path / "w.lut"
    w = random_weights(*NET)
    write_lut(weights, w, 1, "f32", w.size, 1, ssbo=True, text=lut_text(*NET))
    img = clean(16, 16) * 1000
    den = Denoiser(coopmat, weights)
    with caplog.at_level("WARNING", logger="vkgraph"):
        got = den(img, 0.0, 0.0)
    assert den.fp32 and np.isfinite(got).all()
    assert any("unet: the f16 kernels overflowed" in r.getMessage() for r in caplog.records)
    monkeypatch.setenv("VKGRAPH_UNET_KERNELS", "portable")
    np.testing.assert_array_equal(got, Denoiser(coopmat, weights)(img, 0.0, 0.0))


def test_inference_matches_reference(coopmat, tmp_path):
    """unet (inference: the image one tile) on the cooperative-matrix kernels: the 3x3 layers
    from a staged window (conv3_cm), the up layers a product a tap (UP_SPLIT), on an image
    whose blocks of 32 x 8 pixels are partial at the right and bottom and whose blocks of
    channels (9, 18, 36) are partial too."""
    from test_unet_infer import expected, unet_run, write_weights

    lut, w = write_weights(tmp_path / "w.lut", *NET)
    X = clean(70, 37)
    out = unet_run(coopmat, lut, X, tmp_path)
    want = expected(X, w, *NET)
    err, change = np.abs(out[..., :3] - want).max(), np.abs(want - X[..., :3]).max()
    assert change > 1e-3  # the network changes the image
    assert err <= 0.01 * change


def test_training_frame_with_windows_matches_reference(coopmat, tmp_path, monkeypatch):
    """cnngenin's tiles of 64 pixels hold whole blocks of conv3_cm at both scales of a
    2-scale network (32 x 16 pixels at 64 and 32): its 3x3 layers run from windows that read
    zero outside their tile, and the frame (loss, output, every gradient) is the
    reference's; the weight and input gradients here by gathering (convw_cm and convb_cm,
    VKGRAPH_UNET_WGRAD=gather and VKGRAPH_UNET_DGRAD=gather), the next tests' from windows."""
    from vkgraph.modules.unet_t import forward

    monkeypatch.setenv("VKGRAPH_UNET_WGRAD", "gather")
    monkeypatch.setenv("VKGRAPH_UNET_DGRAD", "gather")
    made = []
    real = forward.cm_conv3
    monkeypatch.setattr(forward, "cm_conv3", lambda *a, **k: made.append(a[2]) or real(*a, **k))
    e, o, dws = errors(coopmat, tmp_path, 9, 2, (128, 64), (2, 64), bias=3.0)
    assert made == [9, 9, 18, 18, 9, 9]  # every 3x3 layer (their output channels)
    assert e <= 1e-4 and o <= 1e-4
    for name, d in dws.items():
        assert d <= 5e-3, name


def test_window_fits_where_blocks_lie_in_tiles():
    from vkgraph.modules.unet_t.forward import window_fits

    assert window_fits(0, 2, 128) and window_fits(128, 2, 128)  # 32 x 8 blocks in 32
    assert not window_fits(64, 2, 128)  # 16 pixels a tile at scale 2
    assert window_fits(64, 1, 32) and window_fits(96, 0, 32)  # 32 x 16 blocks
    assert not window_fits(16, 0, 32) and not window_fits(48, 0, 32)
    assert window_fits(128, 1, 64, cfa=True) and not window_fits(128, 2, 64, cfa=True)
    assert not window_fits(None, 0, 32) and not window_fits(130, 1, 32)


def test_weight_gradients_from_windows_match_reference(coopmat, tmp_path, monkeypatch):
    """The default: the 3x3 layers' weight gradients from staged windows (convw3_cm, a warp
    a tap) on the tiles of the window test above: every gradient the reference's."""
    from vkgraph.modules.unet_t import module as unet_module

    made = []
    real = unet_module.cm_convw3
    monkeypatch.setattr(unet_module, "cm_convw3",
                        lambda *a, **k: made.append(a[2].name) or real(*a, **k))
    monkeypatch.delenv("VKGRAPH_UNET_WGRAD", raising=False)
    e, o, dws = errors(coopmat, tmp_path, 9, 2, (128, 64), (2, 64), bias=3.0)
    assert sorted(made) == ["dec0", "dec0a", "enc0", "enc0a", "enc1", "enc1a"]
    assert e <= 1e-4 and o <= 1e-4
    for name, d in dws.items():
        assert d <= 5e-3, name


@pytest.mark.parametrize("cfa", [False, True])
def test_input_gradients_from_windows_match_reference(coopmat, tmp_path, monkeypatch, cfa):
    """The default: the 3x3 layers' input gradients from staged windows of dY
    (convb3_cm, conv3.glsl with the taps flipped) on the tiles of the window tests above, a
    skip's gradient read twice among them: every gradient the reference's. With cfa the
    network's pixels are cells of 2 x 2 photosites: the tiles hold whole blocks at scale 0
    only (32 cells), and the layers at scale 1 gather."""
    from vkgraph.modules.unet_t import module as unet_module

    made = []
    real = unet_module.cm_conv3
    monkeypatch.setattr(unet_module, "cm_conv3",
                        lambda *a, **k: made.append((a[2], a[5])) or real(*a, **k))
    monkeypatch.delenv("VKGRAPH_UNET_DGRAD", raising=False)
    e, o, dws = errors(coopmat, tmp_path, 9, 2, (128, 64), (2, 64), cfa=cfa, bias=3.0)
    assert made and all(kernel == "convb3_cm" for _, kernel in made)
    # every 3x3 layer but the first (its input is the features): enc0 (read twice: by down0
    # and the skip), enc1a, enc1, dec0a (its input split: up0 to dA, enc0 to dB), dec0; with
    # cfa those of scale 0: enc0, dec0a, dec0
    assert sorted(c for c, _ in made) == ([9, 9, 18] if cfa else [9, 9, 9, 18, 18])
    assert e <= 1e-4 and o <= 1e-4
    for name, d in dws.items():
        assert d <= 5e-3, name
