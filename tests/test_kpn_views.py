"""kpn-t's view outputs on the device: `graph` (loss plot), `vis` (weights and gradients),
`debug` (predicted kernels), captured for every frame of a short training run and checked
against numpy renderings of what the kernels document (shaders/kpn-t/{graph,vis,debug}.comp),
from the buffers of the same run (losses, weights, gradients, kernels, detail)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from vkgraph.pipeline import trainer
from vkgraph.pipeline.formats import write_pfm
from vkgraph.pipeline.graph import Graph
from vkgraph.pipeline.registry import Registry
from vkgraph.pipeline.runner import Build
from vkgraph.pipeline.testing import CAPTURE, dispatch

ROOT = Path(__file__).resolve().parent.parent
SINKS = CAPTURE  # the `capture` sink
FRAMES = 3
W, H = 22, 19  # not multiples of 8: the debug view has partial blocks at both edges

X0, Y0, X1, Y1 = 60, 14, 492, 178  # pipeline/trainer.py GRAPH_PLOT
CURVE = (1.0, 0.55, 0.1)
SMOOTH = (0.35, 0.75, 1.0)  # the moving average, drawn over the raw curve
TEXT = (0.9, 0.9, 0.9)
TAPS = [(0, -2), (-2, -1), (-1, -1), (0, -1), (1, -1), (2, -1), (-1, 0), (0, 0), (1, 0),
        (-2, 1), (-1, 1), (0, 1), (1, 1), (2, 1), (0, 2)]


def font() -> dict[str, np.ndarray]:
    """The 5x7 glyphs of shaders/include/font.glsl as boolean (7, 5) arrays."""
    src = (ROOT / "shaders" / "include" / "font.glsl").read_text()
    words = re.findall(r"uvec2\(0x([0-9a-f]+)u, 0x([0-9a-f]+)u\)", src)
    assert len(words) == 64
    glyphs = {}
    for i, (a, b) in enumerate(words):
        bits = int(a, 16) | int(b, 16) << 32
        rows = [(bits >> (8 * r)) & 0x1F for r in range(7)]
        glyphs[chr(32 + i)] = np.array([[(row >> (4 - x)) & 1 for x in range(5)]
                                        for row in rows], bool)
    return glyphs


def text_mask(text: str) -> np.ndarray:
    """Ink of a label as the kernels draw it: glyphs every 6 pixels, 7 rows."""
    f = font()
    out = np.zeros((7, 6 * len(text) - 1), bool)
    for i, ch in enumerate(text.upper()):
        out[:, 6 * i:6 * i + 5] = f[ch]
    return out


def is_colour(img: np.ndarray, rgb) -> np.ndarray:
    return np.all(img[..., :3] == np.float32(rgb), axis=-1)


def run_views(device, tmp_path, apply=0, frames=FRAMES, levels=2, alpha=0.01):
    rng = np.random.default_rng(11)
    yy, xx = np.mgrid[0:H, 0:W]
    clean = np.stack([0.4 + 0.3 * np.sin(xx / 2.5 + c) * np.cos(yy / 3.5) for c in range(3)], -1)
    noisy = clean + 0.1 * rng.standard_normal(clean.shape)
    write_pfm(tmp_path / "x.pfm", noisy.astype(np.float32))
    write_pfm(tmp_path / "r.pfm", clean.astype(np.float32))
    registry = Registry([ROOT / "modules", SINKS])
    g = Graph(registry=registry)
    g.add_module("i-pfm", "main").set_param("filename", str(tmp_path / "x.pfm"))
    g.add_module("i-pfm", "ref").set_param("filename", str(tmp_path / "r.pfm"))
    k = g.add_module("kpn-t", "01")
    for name, value in (("levels", levels), ("init", 1), ("apply", apply), ("alpha", alpha)):
        k.set_param(name, value)
    g.connect("i-pfm", "main", "output", "kpn-t", "01", "input")
    g.connect("i-pfm", "ref", "output", "kpn-t", "01", "ref")
    for view in ("graph", "vis", "debug"):
        g.add_module("capture", view)
        g.connect("kpn-t", "01", view, "capture", view, "input")
    g.frames = frames
    captured = registry.get("capture").hooks.CAPTURED
    captured.clear()
    b = Build(g, device)
    m = g.modules[("kpn-t", "01")]
    fwd0 = next(n for n in m.nodes if n.kernel == "fwd")
    diff0 = next(n for n in m.nodes if n.kernel == "diff")
    state = []
    for f in range(frames):
        b.run_frame(f)
        state.append({
            "w": b.read(m.trainable.adam, "w").astype(np.float64),
            "dw": b.read(m.trainable.dw, "dw").astype(np.float64),
            "hist": m.cls.hook("losses")(b.context, m),
            "K": b.read(fwd0, "K").reshape(-1, 16).astype(np.float64),
            "D": b.read(diff0, "detail")[..., :3].astype(np.float64),
            "graph": captured[("graph", f)], "vis": captured[("vis", f)],
            "debug": captured[("debug", f)],
        })
    return state


@pytest.fixture(scope="module")
def views(device, tmp_path_factory):
    return run_views(device, tmp_path_factory.mktemp("views"))


def test_sizes(views):
    for s in views:
        assert s["graph"].shape == (200, 500, 4)
        assert s["vis"].shape == (256, 512, 4)
        assert s["debug"].shape == (H, W, 4)
        for key in ("graph", "vis", "debug"):
            assert np.all(np.isfinite(s[key])) and np.all(s[key][..., 3] == 1)


# -- graph ---------------------------------------------------------------------------------

def curve_rows(L: np.ndarray) -> np.ndarray:
    lmin, lmax = L.min(), L.max()
    if lmax == lmin:
        return np.full(L.shape, (Y0 + Y1 - 1) / 2)
    return Y0 + (lmax - L) * ((Y1 - 1 - Y0) / (lmax - lmin))


def test_graph_first_frame_is_one_point(views):
    img = views[0]["graph"]
    curve = is_colour(img, CURVE) | is_colour(img, SMOOTH)
    ys, xs = np.nonzero(curve)
    assert set(xs) == {X0}  # frame 0 of an axis 0..1 sits on the left end
    assert set(ys) == {int(round((Y0 + Y1 - 1) / 2))}  # min == max: the middle row


def test_graph_curve_follows_losses(views):
    s = views[-1]
    img, hist = s["graph"], s["hist"]
    assert len(hist) == FRAMES and np.all(hist > 0)
    L = np.log10(hist)
    # few frames: the moving average (one frame wide) stays within the raw curve's rows
    curve = is_colour(img, CURVE) | is_colour(img, SMOOTH)
    ys, xs = np.nonzero(curve)
    # only inside the plot area, every column drawn (a connected line), max on top, min at
    # the bottom
    assert xs.min() == X0 and xs.max() == X1 - 1 and ys.min() == Y0 and ys.max() == Y1 - 1
    assert np.all(curve[Y0:Y1, X0:X1].any(axis=0))
    assert curve.sum() == curve[Y0:Y1, X0:X1].sum()
    rows = curve_rows(L)
    for f in range(FRAMES):
        col = X0 + int(round(f * (X1 - X0 - 1) / (FRAMES - 1)))
        r = int(round(rows[f]))
        assert curve[max(r - 1, Y0):r + 2, col].any(), f"frame {f}: no curve near row {r}"
        # the column of frame f spans at most the rows of its neighbours' values
        span = rows[max(f - 1, 0):f + 2]
        on = np.nonzero(curve[:, col])[0]
        assert on.min() >= np.floor(span.min()) - 1 and on.max() <= np.ceil(span.max()) + 1
    # the line between frames 0 and 1 passes half-way at the middle column
    mid = X0 + (X1 - X0 - 1) // 4
    on = np.nonzero(curve[:, mid])[0]
    half = (rows[0] + rows[1]) / 2
    assert on.min() - 1 <= half <= on.max() + 1


def test_graph_labels(views):
    s = views[-1]
    img, hist = s["graph"], s["hist"]
    text = is_colour(img, TEXT)

    def label_at(string, x, y):
        mask = text_mask(string)
        got = text[y:y + 7, x:x + mask.shape[1]]
        np.testing.assert_array_equal(got, mask, err_msg=f"label {string!r} at ({x}, {y})")

    label_at("loss (log)", 4, 3)
    label_at("frame", (X0 + X1) // 2 - 14, Y1 + 4)
    label_at("0", X0, Y1 + 4)
    last = str(FRAMES - 1)
    label_at(last, X1 - 6 * len(last) + 1, Y1 + 4)
    top, bottom = f"{hist.max():.2E}", f"{hist.min():.2E}"
    label_at(top, X0 - 4 - 6 * len(top) + 1, Y0)
    label_at(bottom, X0 - 4 - 6 * len(bottom) + 1, Y1 - 7)
    now = f"{hist[-1]:.2E}"
    label_at(now, X1 - 6 * len(now) + 1, 3)
    # axes
    assert np.all(img[Y0:Y1 + 1, X0 - 1, :3] == np.float32(0.6))
    assert np.all(img[Y1, X0 - 1:X1, :3] == np.float32(0.6))


# -- vis -----------------------------------------------------------------------------------

USED = np.ones((7, 64, 64), bool)
USED[6, 16:] = False


def signed(v: np.ndarray, rms: float) -> np.ndarray:
    out = np.zeros(v.shape + (3,))
    s = v / (4 * rms)
    out[..., 0] = np.where(s < 0, np.minimum(-s, 1), 0)
    out[..., 1] = np.where(s > 0, np.minimum(s, 1), 0)
    out[v == 0] = (0, 1, 1)
    return out


def blocks(m: np.ndarray) -> np.ndarray:
    """(7, 64, 64) matrices side by side as a (64, 448) band."""
    return np.concatenate(list(m), axis=1)


@pytest.mark.parametrize("frame", [0, 1, 2])
def test_vis_weights_and_gradients(views, frame):
    s = views[frame]
    vis = s["vis"][..., :3].astype(np.float64)
    w = s["w"].reshape(7, 64, 64)
    g = s["dw"].reshape(7, 64, 64)  # this frame's gradient, at the weights shown above it
    rms_w = np.sqrt(np.sum(w[USED] ** 2) / USED.sum())
    np.testing.assert_allclose(vis[:64, :448], signed(blocks(w), rms_w), atol=2e-6)
    rms_g = np.sqrt(np.sum(g[USED] ** 2) / USED.sum())
    np.testing.assert_allclose(vis[64:128, :448], signed(blocks(g), rms_g), atol=2e-6)
    band = vis[64:128, :448]
    assert (band[..., 0] > 0).any() and (band[..., 1] > 0).any()
    assert np.all(band[16:64, 6 * 64:] == (0, 1, 1))  # unused rows: no gradient
    # signs at known positions: w[0, 0, 0], w[3, 5, 7], and the unused rows of matrix 6
    for layer, o, c in ((0, 0, 0), (3, 5, 7), (1, 63, 63)):
        px = vis[o, 64 * layer + c]
        v = w[layer, o, c]
        assert (px[0] > 0) == (v < 0) and (px[1] > 0) == (v > 0) and px[2] == (v == 0)
    assert np.all(vis[16:64, 6 * 64:7 * 64] == (0, 1, 1))
    assert np.all(vis[:128, 448:] == 0)


def test_vis_bars(views):
    s = views[-1]
    vis = s["vis"][..., :3]
    w = s["w"].reshape(7, 64, 64)
    g = s["dw"].reshape(7, 64, 64)
    n = USED.reshape(7, -1).sum(axis=1)
    rms_w = np.sqrt((w ** 2).reshape(7, -1).sum(axis=1) / n)
    rms_g = np.sqrt((g ** 2).reshape(7, -1).sum(axis=1) / n)
    frac_g = np.clip(1 + np.log10(rms_g / rms_g.max()) / 4, 0, 1)
    for layer in range(7):
        x = 64 * layer
        hw = int(np.all(vis[128:, x + 10] == np.float32((0.2, 0.8, 0.2)), axis=-1).sum())
        hg = int(np.all(vis[128:, x + 40] == np.float32((0.9, 0.2, 0.2)), axis=-1).sum())
        assert abs(hw - 128 * min(rms_w[layer] / 0.5, 1)) <= 1, layer
        assert abs(hg - 128 * frac_g[layer]) <= 1, layer
    assert frac_g.max() == 1  # the largest gradient RMS fills its bar
    assert np.all(vis[128:, 448:] == 0)


# -- debug ---------------------------------------------------------------------------------

def debug_reference(D: np.ndarray, K: np.ndarray, mode: int) -> np.ndarray:
    h, w = D.shape[:2]
    out = np.clip(0.05 + 0.5 * D, 0, 1)
    for cy in range(3, h, 8):
        for cx in range(3, w, 8):
            k = K[cx + cy * w, :15]
            if mode == 1:
                e = np.exp(k - k.max())
                n = e / e.sum()
            else:
                wk = np.where(np.isfinite(k) & (np.abs(k) < 10), k, 0.001)
                n = wk / max(wk.sum(), 0.001)
            for (dx, dy), nk in zip(TAPS, n, strict=True):
                y, x = cy + dy, cx + dx
                if 0 <= y < h and 0 <= x < w and y // 8 == cy // 8 and x // 8 == cx // 8:
                    tint = np.array((1, 1, 0) if nk >= 0 else (0.2, 0.4, 1))
                    t = min(4 * abs(nk), 1)
                    out[y, x] = out[y, x] * (1 - t) + tint * t
    return out


def test_debug_kernels(views):
    for s in views:
        got = s["debug"][..., :3]
        want = debug_reference(s["D"], s["K"], 0)
        np.testing.assert_allclose(got, want, atol=1e-5)
    # the last row of blocks has its centre (row 19) outside the 19 rows: background only
    s = views[-1]
    np.testing.assert_allclose(s["debug"][16:, :, :3], np.clip(0.05 + 0.5 * s["D"][16:], 0, 1),
                               atol=1e-6)
    assert not np.allclose(s["debug"][:16, :, :3], np.clip(0.05 + 0.5 * s["D"][:16], 0, 1))


def test_debug_softmax(device, tmp_path):
    s = run_views(device, tmp_path, apply=1, frames=1, levels=1)[0]
    np.testing.assert_allclose(s["debug"][..., :3], debug_reference(s["D"], s["K"], 1),
                               atol=1e-5)


def at(L: np.ndarray, t: float) -> float:
    i = int(t)
    return L[i] + (t - i) * (L[min(i + 1, len(L) - 1)] - L[i])


def column_spans(hist: np.ndarray, frame: int, ncols: int) -> np.ndarray:
    """What grange.comp computes per plot column: (lo, hi) of log10(loss), linear between
    frames, over the column's half-column either side (NaN where it shows nothing)."""
    L = np.log10(hist[:frame + 1].astype(np.float64))
    F = max(frame, 1)
    step = F / (ncols - 1)
    out = np.full((ncols, 2), np.nan)
    for c in range(ncols):
        a, b = max(c * step - step / 2, 0), min(c * step + step / 2, frame)
        if a > b:
            continue
        vals = [at(L, a), at(L, b), *L[int(np.ceil(a)):int(np.floor(b)) + 1]]
        out[c] = min(vals), max(vals)
    return out


def moving_average(hist: np.ndarray, frame: int, ncols: int) -> np.ndarray:
    """What grange.comp computes as the smoothed curve: per column, the mean of log10(loss)
    over the frames within W/2 of the column's centre, W = max(1, F / 10) (every column shows
    frames here)."""
    L = np.log10(hist[:frame + 1].astype(np.float64))
    F = max(frame, 1)
    step, half = F / (ncols - 1), 0.5 * max(1.0, F / 10)
    out = np.empty(ncols)
    for c in range(ncols):
        tc = c * step
        out[c] = L[max(0, int(np.ceil(tc - half))):int(np.floor(min(tc + half, frame))) + 1].mean()
    return out


def loss_plot(hist: np.ndarray, frame: int) -> np.ndarray:
    """kpn-t's loss plot of `hist` (the whole ring buffer) at `frame`: the scaffold's `grange`
    then `graph` kernel, as loss_plot wires them, one dispatch each."""
    x0, y0, x1, y1 = trainer.GRAPH_PLOT
    wd, ht = trainer.GRAPH_SIZE
    common = {"frame": frame, "frames": hist.size}
    cols = dispatch("kpn-t", "grange", {"hist": hist}, shader="trainer", size=(256, 1),
                    local=(256, 1, 1), outputs={"cols": (trainer.GRAPH_COLS,)},
                    push=[hist.size, x1 - x0], **common)["cols"]
    return dispatch("kpn-t", "graph", {"cols": cols}, shader="trainer", size=(wd, ht),
                    outputs={"plot": (ht, wd, 4)}, push=[hist.size, x0, y0, x1, y1],
                    **common)["plot"]


def test_graph_long_history():
    """250000 frames of history, plotted at frame 249999: every column draws the min..max
    envelope of its 579 frames and, over it, the moving average over 25000 frames; the
    labels show the extremes and the frame count."""
    frames = 250000
    f = np.arange(frames)
    hist = (10.0 ** (0.5 - 2.0 * f / frames + 0.3 * np.sin(f / 3000.0))).astype(np.float32)
    img = loss_plot(hist, frames - 1)
    spans = column_spans(hist, frames - 1, X1 - X0)
    lmin, lmax = np.nanmin(spans[:, 0]), np.nanmax(spans[:, 1])
    scale = (Y1 - 1 - Y0) / (lmax - lmin)
    curve = is_colour(img, CURVE)
    smooth = is_colour(img, SMOOTH)
    avg = Y0 + (lmax - moving_average(hist, frames - 1, X1 - X0)) * scale
    for c in range(X1 - X0):
        on = np.nonzero(curve[:, X0 + c] | smooth[:, X0 + c])[0]
        line = np.nonzero(smooth[:, X0 + c])[0]
        top = Y0 + (lmax - spans[c, 1]) * scale
        bottom = Y0 + (lmax - spans[c, 0]) * scale
        ends = [avg[c], avg[min(c + 1, X1 - X0 - 1)]]  # the line runs to the next column
        assert line.size and abs(line.min() - min(ends)) <= 1.5, c
        assert abs(line.max() - max(ends)) <= 1.5, c
        assert abs(on.min() - min(top, line.min())) <= 1, c
        assert abs(on.max() - max(bottom, line.max())) <= 1, c
        raw = np.nonzero(curve[:, X0 + c])[0]  # what the line leaves of the raw envelope
        assert raw.size == 0 or (raw.min() >= top - 1 and raw.max() <= bottom + 1), c
    text = is_colour(img, TEXT)
    for string, x, y in ((str(frames - 1), X1 - 6 * 6 + 1, Y1 + 4),
                         (f"{10 ** lmax:.2E}", X0 - 4 - 47, Y0),
                         (f"{10 ** lmin:.2E}", X0 - 4 - 47, Y1 - 7)):
        mask = text_mask(string)
        np.testing.assert_array_equal(text[y:y + 7, x:x + mask.shape[1]], mask, err_msg=string)
