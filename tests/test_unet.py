"""unet-t on the device against the float64 reference (modules/unet-t/reference.py): the
output, the loss and every weight gradient of one frame, on cnngenin's tiles and on a whole
image, in fp32 and with `precise` (float64 kernels); then training, the .lut and the errors.
Weights are put into adam's buffer after frame 0 with alpha 0 (adam then leaves them), so
frame 1 computes E and dE/dW for exactly those weights."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import noisy_training_graph

from vkgraph.modules.unet_t import reference as ref
from vkgraph.modules.unet_t.net import layers
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.runner import Build


def clean(w, h, seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([0.4 + 0.3 * np.sin(xx / 3.0 + c) * np.cos(yy / 5.0) for c in range(3)], -1)
    return (img + 0.05 * rng.random(img.shape)).astype(np.float32)


def unet_graph(tmp_path, R, width, scales, tiles=None, extra=""):
    """cnngenin's noise on R (tiles: (batch, tile) of its tile grid, or the whole image) ->
    unet-t -> o-lut."""
    grid = (f"param:cnngenin:01:batch:{tiles[0]}\nparam:cnngenin:01:tile:{tiles[1]}"
            if tiles else "param:cnngenin:01:tiles:0")
    return noisy_training_graph(tmp_path, R, "unet-t", "unet", f"""{grid}
        param:unet-t:01:width:{width}
        param:unet-t:01:scales:{scales}
        {extra}""")


def random_weights(width, scales, seed=5, cfa=False):
    """Weights of the init's size and random biases (so every ReLU sees both signs)."""
    rng = np.random.default_rng(seed)
    w = np.zeros(layers(width, scales, cfa)[-1].end)
    for L in layers(width, scales, cfa):
        bound = 1 / np.sqrt(L.cin * L.k * L.k)
        w[L.offset:L.offset + L.weights] = rng.uniform(-bound, bound, L.weights)
        w[L.offset + L.weights:L.end] = rng.uniform(-0.1, 0.1, L.cout)
    return w.astype(np.float32)


def one_frame(device, g, w, alpha=False):
    """(E, dw, O, X, R, noiseab) of frame 1 with the weights w (X with its alpha: the colours
    of a mosaic of any pattern)."""
    b = Build(g, device)
    b.run_frame(0, download=False)
    m = g.modules[("unet-t", "01")]
    b.buffer(m.trainable.adam, "w").upload(w)
    b.run_frame(1, download=False)
    E = m.cls.hook("current_loss")(b, m)
    dw = b.read(m.trainable.dw, "dw").ravel().astype(np.float64)
    O = b.read(m.backing["output"][0], "output")[..., :3].astype(np.float64)
    gen = g.modules[("cnngenin", "01")].nodes[0]
    X = b.read(gen, "imgo")[..., :4 if alpha else 3].astype(np.float64)
    R = b.read(gen, "refo")[..., :3].astype(np.float64)
    nab = b.read(gen, "noiseab").ravel().astype(np.float64)
    b.close()
    return E, dw, O, X, R, nab


def stacked(img, T, cols):
    """cnngenin's grid of T x T tiles (tile t at column t % cols, row t // cols) as the
    reference's vertical stack."""
    rows = img.shape[0] // T
    return np.concatenate([img[r * T:(r + 1) * T, c * T:(c + 1) * T]
                           for r in range(rows) for c in range(cols)])


def reference_of(X, R, nab, w, width, scales, cfa=False, l2=False):
    T, cols = int(nab[2]), max(int(nab[3]), 1)
    if T:
        n = (X.shape[0] // T) * cols
        Xs, Rs, th = stacked(X, T, cols), stacked(R, T, cols), T
    else:
        n, Xs, Rs, th = 1, X, R, X.shape[0]
    a, b = nab[0:4 * n:4], nab[1:4 * n:4]
    O, _ = ref.forward(w, Xs, a, b, th, width, scales, cfa)
    E, dw = ref.backward(w, Xs, Rs, a, b, th, width, scales, cfa, l2)
    return E, dw, O, (lambda img: stacked(img, T, cols)) if T else (lambda img: img)


@pytest.mark.parametrize("width,scales,size,tiles,precise", [
    (2, 2, (32, 32), (4, 16), 0),   # a 2x2 grid of 16-pixel tiles
    (3, 3, (24, 16), None, 0),      # the whole image, wider than high
    (2, 3, (32, 32), (4, 16), 1),   # float64 kernels
    (2, 2, (64, 48), None, 0),      # weight gradients summed in 3 runs of pixels (wsum)
])
def test_frame_matches_reference(device, tmp_path, width, scales, size, tiles, precise):
    g = unet_graph(tmp_path, clean(*size), width, scales, tiles,
                   f"param:unet-t:01:alpha:0\nparam:unet-t:01:precise:{precise}")
    g.frames = 2
    w = random_weights(width, scales)
    E, dw, O, X, R, nab = one_frame(device, g, w)
    Eref, dwref, Oref, view = reference_of(X, R, nab, w.astype(np.float64), width, scales)
    tol = 1e-9 if precise else 1e-5
    assert abs(E - Eref) <= tol * Eref
    assert np.abs(view(O) - Oref).max() <= (1e-6 if precise else 1e-5)
    scale = np.abs(dwref).max()
    assert scale > 0
    # every layer's weights and bias: fp32 sums over the pixels against float64 (precise:
    # float64 sums, stored as fp32 in dw)
    for L in layers(width, scales):
        d, r = dw[L.offset:L.end], dwref[L.offset:L.end]
        assert np.abs(d - r).max() <= (1e-6 if precise else 2e-4) * scale, L.name


@pytest.mark.parametrize("width,size,tiles", [
    (32, (96, 80), None),       # the shipped width: 128 channels at scale 2
    (3, (32, 32), (4, 16)),     # 16-pixel tiles: taps outside a pixel's tile read zero
])
def test_cpu_kernels_match_reference(device, tmp_path, monkeypatch, width, size, tiles):
    """VKGRAPH_UNET_KERNELS=cpu on a CPU driver: every layer's forward runs conv_cpu (no
    shared memory, a pixel's output channels in one SIMD lane), and the frame's output
    and loss are the reference's; the backward stays the portable kernels'."""
    from vkgraph.modules.unet_t import forward

    monkeypatch.setenv("VKGRAPH_UNET_KERNELS", "cpu")
    chosen = []
    real = forward.kernels
    monkeypatch.setattr(forward, "kernels", lambda *a, **k: chosen.append(real(*a, **k))
                        or chosen[-1])
    g = unet_graph(tmp_path, clean(*size), width, 3, tiles, "param:unet-t:01:alpha:0")
    g.frames = 2
    w = random_weights(width, 3)
    E, dw, O, X, R, nab = one_frame(device, g, w)
    if chosen != ["cpu"]:
        pytest.skip("not a CPU driver with 8-lane subgroups: the cpu kernels do not run")
    Eref, _, Oref, view = reference_of(X, R, nab, w.astype(np.float64), width, 3)
    assert abs(E - Eref) <= 1e-5 * Eref
    assert np.abs(view(O) - Oref).max() <= 1e-5


@pytest.mark.parametrize("precise", [0, 1])
@pytest.mark.parametrize("cfa", [False, True])
def test_l2_frame_matches_reference(device, tmp_path, cfa, precise):
    """loss 1 (the squared error): the loss, the output and every weight's gradient of a
    frame against the reference's, on a grid of tiles, RGB and RGGB mosaics."""
    width, scales = 2, 2
    g = unet_graph(tmp_path, clean(32, 32), width, scales, (4, 16),
                   f"param:unet-t:01:alpha:0\nparam:unet-t:01:precise:{precise}\n"
                   f"param:unet-t:01:loss:1" + ("\nparam:unet-t:01:cfa:1\n"
                                                "param:cnngenin:01:generate:4" if cfa else ""))
    g.frames = 2
    w = random_weights(width, scales, cfa=cfa)
    E, dw, O, X, R, nab = one_frame(device, g, w)
    Eref, dwref, Oref, view = reference_of(X, R, nab, w.astype(np.float64), width, scales,
                                           cfa, l2=True)
    E1, _, _, _ = reference_of(X, R, nab, w.astype(np.float64), width, scales, cfa)
    assert abs(Eref - E1) > 1e-3 * Eref  # (the squared error is not the L1 loss)
    tol = 1e-9 if precise else 1e-5
    assert abs(E - Eref) <= tol * Eref
    assert np.abs(view(O) - Oref).max() <= (1e-6 if precise else 1e-5)
    scale = np.abs(dwref).max()
    for L in layers(width, scales, cfa):
        d, r = dw[L.offset:L.end], dwref[L.offset:L.end]
        assert np.abs(d - r).max() <= (1e-6 if precise else 2e-4) * scale, L.name


@pytest.mark.parametrize("block", ["64,4,8", "16,2,2"])
def test_block_shapes_match_reference(device, tmp_path, monkeypatch, block):
    """The layer kernels with other block shapes ($VKGRAPH_UNET_BLOCK: wider and narrower
    blocks, more and fewer sums a thread; layers of 5 to 20 channels, so blocks of 8 to 32
    rows): the reference's frame, as with the default shape."""
    monkeypatch.setenv("VKGRAPH_UNET_BLOCK", block)
    g = unet_graph(tmp_path, clean(32, 32), 5, 2, (4, 16), "param:unet-t:01:alpha:0")
    g.frames = 2
    w = random_weights(5, 2)
    E, dw, O, X, R, nab = one_frame(device, g, w)
    Eref, dwref, Oref, view = reference_of(X, R, nab, w.astype(np.float64), 5, 2)
    assert abs(E - Eref) <= 1e-5 * Eref
    assert np.abs(view(O) - Oref).max() <= 1e-5
    assert np.abs(dw - dwref).max() <= 2e-4 * np.abs(dwref).max()


@pytest.mark.parametrize("block,match", [("64,4", "three integers"), ("48,4,4", "powers"),
                                         ("32,4,64", "RN at most TN"),
                                         ("1024,1,1", "at most 1024")])
def test_bad_block_shapes_are_errors(monkeypatch, block, match):
    from vkgraph.modules.unet_t.forward import block_of

    monkeypatch.setenv("VKGRAPH_UNET_BLOCK", block)
    with pytest.raises(GraphError, match=match):
        block_of(32)


def test_training_denoises_and_writes_lut(device, tmp_path):
    """120 frames of fresh noise: the output ends closer to the clean tiles than the noisy
    input is (the loss of the identity, on the same frame), and o-lut writes the weights and
    the text that rebuilds the network."""
    g = unet_graph(tmp_path, clean(64, 64), 4, 2, (4, 32),
                   "param:unet-t:01:alpha:0.003\nparam:unet-t:01:schedule:0")
    g.frames = 120
    b = Build(g, device)
    m = g.modules[("unet-t", "01")]
    gen = g.modules[("cnngenin", "01")].nodes[0]
    ratio = []
    for f in range(g.frames):
        b.run_frame(f, download=f == g.frames - 1)
        if f in (1, g.frames - 1):
            X, R = b.read(gen, "imgo")[..., :3], b.read(gen, "refo")[..., :3]
            identity = np.abs(X.astype(np.float64) - R).sum(-1).mean()
            ratio.append(m.cls.hook("current_loss")(b, m) / identity)
    assert np.isfinite(m.cls.hook("losses")(b, m)).all()
    b.close()
    assert ratio[0] > 0.97 and ratio[1] < 0.92, ratio
    from vkgraph.pipeline.formats import read_lut

    w, _, text = read_lut(tmp_path / "unet.lut")
    assert w.size == layers(4, 2)[-1].end and np.isfinite(w).all()
    assert "unet" in text and "width 4" in text and "scales 2" in text


def test_loss_plot_view(device, tmp_path):
    """unet-t's output `graph` (the scaffold's loss plot) is drawn when a display reads it:
    a 500 x 200 picture with the plot's frame and a curve, not a blank."""
    g = unet_graph(tmp_path, clean(32, 32), 2, 2, (4, 16),
                   "module:display:hist\nconnect:unet-t:01:graph:display:hist:input")
    g.frames = 6
    b = Build(g, device)
    for f in range(g.frames):
        b.run_frame(f, download=False)
    m = g.modules[("unet-t", "01")]
    kernels = {n.kernel for n in m.nodes}
    assert {"grange", "graph"} <= kernels
    img = b.read(m.backing["graph"][0], "plot")
    b.close()
    assert img.shape == (200, 500, 4) and np.isfinite(img).all()
    assert len(np.unique(img[..., :3].reshape(-1, 3), axis=0)) > 3


@pytest.mark.parametrize("size,tiles,extra,match", [
    ((31, 32), None, "", "multiples of 2"),
    ((48, 48), (4, 10), "param:unet-t:01:scales:3", "multiple of 4"),
])
def test_bad_sizes_are_errors(device, tmp_path, size, tiles, extra, match):
    g = unet_graph(tmp_path, clean(*size), 2, 2, tiles, extra)
    g.frames = 1
    with pytest.raises(GraphError, match=match):
        Build(g, device)


# ----------------------------------------------------------------- RGGB mosaics (cfa 1)

CFA = "param:cnngenin:01:generate:4\nparam:unet-t:01:cfa:1"  # noise, then the mosaic


def check_cell_frame(device, tmp_path, extra, cfa, width, scales, size, tiles, precise):
    """One frame of a network on cells (`extra` its params, `cfa` its net.py mode) against
    the reference: the loss, the full-resolution output and every layer's gradient, with the
    tolerances of test_frame_matches_reference. Returns the frame's input X (with its alpha,
    the colours, for a mosaic of any pattern)."""
    g = unet_graph(tmp_path, clean(*size), width, scales, tiles,
                   f"{extra}\nparam:unet-t:01:alpha:0\nparam:unet-t:01:precise:{precise}")
    g.frames = 2
    w = random_weights(width, scales, cfa=cfa)
    E, dw, O, X, R, nab = one_frame(device, g, w, alpha=cfa == ref.MOSAIC)
    Eref, dwref, Oref, view = reference_of(X, R, nab, w.astype(np.float64), width, scales,
                                           cfa=cfa)
    assert Oref.shape == view(R).shape  # full resolution
    tol = 1e-9 if precise else 1e-5
    assert abs(E - Eref) <= tol * Eref
    assert np.abs(view(O) - Oref).max() <= (1e-6 if precise else 1e-5)
    scale = np.abs(dwref).max()
    assert scale > 0
    for L in layers(width, scales, cfa):
        d, r = dw[L.offset:L.end], dwref[L.offset:L.end]
        assert np.abs(r).max() > 0, L.name
        assert np.abs(d - r).max() <= (1e-6 if precise else 2e-4) * scale, L.name
    return X


@pytest.mark.parametrize("width,scales,size,tiles,precise", [
    (2, 2, (32, 32), (4, 16), 0),   # a 2x2 grid of 16-pixel tiles (8 cells a side)
    (3, 3, (24, 16), None, 0),      # the whole image, 12 x 8 cells
    (2, 3, (32, 32), (4, 16), 1),   # float64 kernels
])
def test_cfa_frame_matches_reference(device, tmp_path, width, scales, size, tiles, precise):
    """cfa 1 on cnngenin's noisy RGGB mosaics (generate 4): the loss, the full-resolution
    output and every layer's gradient against the reference's cfa network, with the
    tolerances of test_frame_matches_reference."""
    X = check_cell_frame(device, tmp_path, CFA, ref.RGGB, width, scales, size, tiles, precise)
    assert np.array_equal(X, ref.mosaic(X))  # the input is a mosaic


def hand_made_features(device, tmp_path, extra: str, planes: int):
    """(M, F, O): prep's F (planes x 4 x 4, float64 kernels) and the output of unet-t with
    `extra` params on a hand-made 8 x 8 image M whose values all differ (each channel
    another), exact in half precision (cnngenin's outputs); cnngenin's generate 0 without
    tiles: a = b = 0, so sigma = 0 and s = 1e-5."""
    yy, xx = np.mgrid[0:8, 0:8]
    M = np.stack([(8 * yy + xx) / 256, (8 * yy + xx) / 256 + 0.25, (8 * yy + xx) / 256 + 0.5],
                 -1).astype(np.float32)
    g = unet_graph(tmp_path, M, 2, 2, None, "param:cnngenin:01:generate:0\n"
                   f"{extra}\nparam:unet-t:01:precise:1")
    g.frames = 1
    b = Build(g, device)
    b.run_frame(0, download=True)
    m = g.modules[("unet-t", "01")]
    prep = next(n for n in m.nodes if n.kernel == "prep")
    F = b.read(prep, "F").ravel().view(np.float64).reshape(planes, 4, 4)
    O = b.read(m.backing["output"][0], "output")
    b.close()
    return M, F, O


def test_cfa_packs_the_cells(device, tmp_path):
    """prep's F on a hand-made 8 x 8 mosaic whose photosites all differ (each channel holds
    another value: only the photosite's own colour may be read): planes R = M(2x, 2y).r,
    G1 = M(2x+1, 2y).g, G2 = M(2x, 2y+1).g, B = M(2x+1, 2y+1).b over s, then sigma / s
    (cnngenin's generate 0 without tiles: a = b = 0, so sigma = 0 and s = 1e-5), float64
    kernels; the output is full resolution with alpha 1, and the .lut's text says cfa."""
    M, F, O = hand_made_features(device, tmp_path, "param:unet-t:01:cfa:1", 5)
    s = 1e-5
    want = np.stack([M[0::2, 0::2, 0], M[0::2, 1::2, 1], M[1::2, 0::2, 1], M[1::2, 1::2, 2],
                     np.zeros((4, 4))]).astype(np.float64) / s
    assert np.allclose(F, want, rtol=1e-12, atol=0)
    assert O.shape == (8, 8, 4) and np.array_equal(O[..., 3], np.ones((8, 8), np.float32))
    from vkgraph.pipeline.formats import read_lut

    _, _, text = read_lut(tmp_path / "unet.lut")
    assert "cfa rggb" in text.splitlines()


def test_rgb_lut_text_has_no_cfa_line(device, tmp_path):
    from vkgraph.modules.unet_t.module import lut_text

    assert "cfa" not in lut_text(4, 3) and lut_text(4, 3, True) == lut_text(4, 3) + "cfa rggb\n"


@pytest.mark.parametrize("size,tiles,extra,match", [
    ((30, 31), None, "", "even width and height"),
    ((36, 36), None, "param:unet-t:01:scales:3", "cells' width and height must be multiples"
     " of 4"),
    ((40, 40), (4, 10), "", "they must be even and tile/2"),
    ((48, 48), (4, 12), "param:unet-t:01:scales:3", "tile/2 .* a multiple of 4"),
])
def test_cfa_bad_sizes_are_errors(device, tmp_path, size, tiles, extra, match):
    g = unet_graph(tmp_path, clean(*size), 2, 2, tiles, f"{CFA}\n{extra}")
    g.frames = 1
    with pytest.raises(GraphError, match=match):
        Build(g, device)


def test_cfa_out_of_range_is_an_error(device, tmp_path):
    with pytest.raises(GraphError, match="param .cfa. of unet-t:01 is 3, not one of 0, 1, 2"):
        g = unet_graph(tmp_path, clean(16, 16), 2, 2, None, "param:unet-t:01:cfa:3")
        g.frames = 1
        Build(g, device)


# ----------------------------------------------------------------- RGB cells (cells 1)

CELLS = "param:unet-t:01:cells:1"


@pytest.mark.parametrize("width,scales,size,tiles,precise", [
    (2, 2, (32, 32), (4, 16), 0),   # a 2x2 grid of 16-pixel tiles (8 cells a side)
    (3, 3, (24, 16), None, 0),      # the whole image, 12 x 8 cells
    (2, 3, (32, 32), (4, 16), 1),   # float64 kernels
])
def test_cells_frame_matches_reference(device, tmp_path, width, scales, size, tiles, precise):
    """cells 1 on cnngenin's noisy RGB: the loss, the output and every layer's gradient
    against the reference's network of cells, with the tolerances of
    test_frame_matches_reference."""
    check_cell_frame(device, tmp_path, CELLS, ref.CELLS, width, scales, size, tiles, precise)


def test_cells_pack_the_pixels(device, tmp_path):
    """prep's F on a hand-made 8 x 8 image whose values all differ: plane 3 (2 dy + dx) + c
    of cell (x, y) is pixel (2x + dx, 2y + dy)'s channel c over s, then sigma / s (generate
    0, no tiles: s = 1e-5, sigma 0); the output keeps the input's alpha; the .lut's text says
    cells."""
    M, F, O = hand_made_features(device, tmp_path, CELLS, 13)
    assert O.shape == (8, 8, 4) and np.array_equal(O[..., 3], np.ones((8, 8), np.float32))
    want = [M[dy::2, dx::2, c] for dy in (0, 1) for dx in (0, 1) for c in range(3)]
    assert np.allclose(F, np.stack(want + [np.zeros((4, 4))]) / 1e-5, rtol=1e-12, atol=0)
    from vkgraph.pipeline.formats import read_lut

    _, _, text = read_lut(tmp_path / "unet.lut")
    assert "cells rgb" in text.splitlines() and "cfa rggb" not in text.splitlines()


def test_cells_and_cfa_together_are_an_error(device, tmp_path):
    g = unet_graph(tmp_path, clean(16, 16), 2, 2, None, f"{CFA}\n{CELLS}")
    g.frames = 1
    with pytest.raises(GraphError, match="cfa 1 and cells 1"):
        Build(g, device)


# ------------------------------------------------------ mosaics of any pattern (cfa 2)

MOSAIC = "param:cnngenin:01:generate:4\nparam:cnngenin:01:pattern:1\nparam:unet-t:01:cfa:2"


@pytest.mark.parametrize("width,scales,size,tiles,precise", [
    (2, 2, (32, 32), (4, 16), 0),   # a 2x2 grid of 16-pixel tiles, each its X-Trans phase
    (3, 3, (24, 16), None, 0),      # the whole image, 12 x 8 cells
    (2, 3, (32, 32), (4, 16), 1),   # float64 kernels
])
def test_mosaic_frame_matches_reference(device, tmp_path, width, scales, size, tiles, precise):
    """cfa 2 on cnngenin's noisy X-Trans mosaics (generate 4, pattern 1: the colours in
    alpha): check_cell_frame against the reference's network of mosaics of any pattern."""
    X = check_cell_frame(device, tmp_path, MOSAIC, ref.MOSAIC, width, scales, size, tiles,
                         precise)
    assert set(np.unique(X[..., 3])) == {0.0, 1.0, 2.0}


def test_mosaic_lut_text_and_cells_together(device, tmp_path):
    """The .lut of cfa 2 says `cfa any`; cfa 2 with cells 1 is an error."""
    from vkgraph.modules.unet_t.module import lut_text

    assert lut_text(4, 3, ref.MOSAIC) == lut_text(4, 3) + "cfa any\n"
    g = unet_graph(tmp_path, clean(16, 16), 2, 2, None, f"{MOSAIC}\n{CELLS}")
    g.frames = 1
    with pytest.raises(GraphError, match="cfa 2 and cells 1"):
        Build(g, device)
