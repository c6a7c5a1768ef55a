"""bench/fit_curve.py's result picture (graphs/README.md): target | output above the loss
plot, in the layout and colours of the shipped pictures; no device needed."""

from __future__ import annotations

import numpy as np
from conftest import load_script


def load():
    return load_script("bench/fit_curve.py", "bench_fit_curve")


def test_picture_layout_and_loss_plot(tmp_path):
    fc = load()
    rng = np.random.default_rng(0)
    target, out = rng.random((32, 40, 4)), rng.random((32, 40, 4))
    losses = 0.5 * np.exp(-np.arange(1000) / 200.0)  # 0.5 .. 3.4e-3: lines at 0.1 and 0.01
    pic = fc.picture(target, out, losses)
    assert pic.shape == (32 + fc.PLOT_HT, 80, 3)
    from vkgraph.pipeline.formats import read_image, to_srgb8, write_png

    write_png(tmp_path / "p.png", pic)
    back = to_srgb8(read_image(tmp_path / "p.png")[..., :3])
    np.testing.assert_array_equal(back[:32, :40], to_srgb8(target[..., :3]))
    plot = back[32:]
    colours = {tuple(c) for c in plot.reshape(-1, 3)}
    assert colours == {fc.BACKGROUND, fc.GRID, fc.CURVE}
    # the curve falls from the top margin (first loss) to the bottom margin (last loss)
    rows = [np.flatnonzero((plot[:, x] == fc.CURVE).all(1)) for x in (0, 79)]
    assert rows[0].min() == fc.PLOT_MARGIN and rows[1].max() == fc.PLOT_HT - 1 - fc.PLOT_MARGIN
    grid_rows = sorted({int(y) for y in np.nonzero((plot == fc.GRID).all(2))[0]})
    assert len(grid_rows) == 2  # 10^-1 and 10^-2
    decades = np.log10(0.5) - np.log10(losses[-1])
    want = fc.PLOT_MARGIN + (np.log10(0.5) + 1) / decades * (fc.PLOT_HT - 1 - 2 * fc.PLOT_MARGIN)
    assert abs(grid_rows[0] - want) <= 0.5


def test_learned_target_transforms():
    fc = load()
    t = np.arange(16 * 16 * 3, dtype=float).reshape(16, 16, 3)
    assert fc.learned_target(t, "identity") is t
    np.testing.assert_array_equal(fc.learned_target(t, "flip"), t.transpose(1, 0, 2))
    np.testing.assert_array_equal(fc.learned_target(t, "zoom")[::2, ::2], t[4:12, 4:12])
