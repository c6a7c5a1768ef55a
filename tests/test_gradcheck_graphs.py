"""`vkgraph gradcheck` on every shipped graph with a trainable module, at its own settings
but small batches and tiles (CPU driver), default eps: it passes with at least 90% of the
sampled weights compared (not excluded next to a kink). The table encodings' graphs failed
before the step ladder: their table entries start at 1e-4, so a step of 1e-5 crossed the
leaky-ReLU kinks of the first layer's pre-activations (~1e-5)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MLP = ["param:mlp-t:01:batch:64"]
# train-kpn and train-photo draw new noise every frame; the check needs a static input
KPN = ["param:cnngenin:01:generate:0", "param:cnngenin:01:batch:1",
       "param:cnngenin:01:tile:32"]
# train-raw (unet-t cfa 1) reads RGGB mosaics, and cnngenin's mosaic changes every frame with
# tiles (crops, flips, exposures) too: the static patch (generate 0) goes through a second
# cnngenin without tiles that only mosaics it (generate 3, the same every frame; a = b = 0 as
# generate 0's), which feeds unet-t
RAW = KPN + ["module:cnngenin:mosaic", "param:cnngenin:mosaic:tiles:0",
             "param:cnngenin:mosaic:generate:3",
             "connect:cnngenin:01:imgo:cnngenin:mosaic:imgi",
             "connect:cnngenin:01:refo:cnngenin:mosaic:refi",
             "connect:cnngenin:mosaic:imgo:unet-t:01:input",
             "connect:cnngenin:mosaic:refo:unet-t:01:ref",
             "connect:cnngenin:mosaic:noiseab:unet-t:01:noiseab"]
# train-raw-xtrans (unet-t cfa 2) reads X-Trans mosaics with their colours: as RAW, the second
# cnngenin making the X-Trans mosaic (pattern 1; without tiles at phase 0, the same every frame)
XTRANS = RAW + ["param:cnngenin:mosaic:pattern:1"]
GRAPHS = {
    "fit-poly": [],
    "fit-image-hash": MLP,
    "fit-image-permuto": MLP,
    "fit-image-tri": MLP,
    "fit-image": MLP,
    "fit-image-flip": MLP,
    "fit-image-zoom": MLP,
    "gradcheck-mlp": MLP,
    "fit-array": ["param:mlp-t:01:batch:16"],
    "gradcheck-kpn": [],
    "train-kpn": KPN,
    "train-photo": KPN,
    "train-photo-ctx": KPN,
    "train-photo-nl": KPN,
    "train-unet": KPN,
    "train-raw": RAW,
    "train-raw-w24": RAW,
    "train-unet-jpeg-cells": KPN,  # unet-t cells 1: the static patch's 2 x 2 cells
    "train-raw-xtrans": XTRANS,
    "train-raw-xtrans-w24": XTRANS,
}
# a larger step where the default one falls to the loss's rounding: train-raw-xtrans (width 48)
# has gradients near 1e-11 at its deepest layers, whose differences at 1e-5 (about 1e-16 on a
# loss of 7e-4) are as small as the double-float loss's rounding: 1.7% off there, 0.06% at
# 1e-4 (the kinks stay far: none excluded)
EPS = {"train-raw-xtrans": "1e-4"}
# about 90 s of the loop's 140 on the CPU driver (2 cores); the rest takes about 45 s
SLOW = {"fit-image", "fit-image-flip", "fit-image-zoom", "gradcheck-kpn", "train-kpn",
        "train-photo", "train-photo-ctx", "train-photo-nl", "train-unet", "train-raw",
        "train-unet-jpeg-cells", "train-raw-w24", "train-raw-xtrans", "train-raw-xtrans-w24"}
SUMMARY = re.compile(r"checked (\d+) weights .*: (\d+) compared, (\d+) excluded")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                                  for n in GRAPHS])
def test_gradcheck_passes_on_shipped_graph(name, capsys):
    from vkgraph.cli.main import main

    config = GRAPHS[name]
    rc = main(["gradcheck", "-g", str(ROOT / "graphs" / f"{name}.cfg"), "--count", "12",
               *(["--eps", EPS[name]] if name in EPS else []),
               *(["--config", *config] if config else [])])
    out = capsys.readouterr().out
    assert rc == 0 and "PASS" in out, out
    checked, compared, excluded = map(int, SUMMARY.search(out).groups())
    assert checked == 12 and compared + excluded == checked
    assert compared >= 0.9 * checked, out
    if name in ("fit-image-hash", "fit-image-permuto"):  # the table levels were checked
        rows = [ln.split() for ln in out.splitlines() if ln[:7].strip().isdigit()]
        assert sum(r[1].startswith("t") and float(r[4]) != 0 for r in rows) >= 4


def test_gradcheck_passes_on_train_raw_at_width_4(capsys):
    """train-raw.cfg's check (RAW) at width 4: quick on the CPU driver; the input unet-t
    reads is a mosaic."""
    from vkgraph.cli.main import main

    rc = main(["gradcheck", "-g", str(ROOT / "graphs" / "train-raw.cfg"), "--count", "12",
               "--config", *RAW, "param:unet-t:01:width:4"])
    out = capsys.readouterr().out
    assert rc == 0 and "PASS" in out, out
    checked, compared, excluded = map(int, SUMMARY.search(out).groups())
    assert checked == 12 and compared >= 0.9 * checked, out


def test_gradcheck_passes_on_train_unet_with_the_squared_error(capsys):
    """train-unet.cfg with unet-t's `loss 1` (the squared error) at width 4."""
    from vkgraph.cli.main import main

    rc = main(["gradcheck", "-g", str(ROOT / "graphs" / "train-unet.cfg"), "--count", "8",
               "--config", *KPN, "param:unet-t:01:width:4", "param:unet-t:01:loss:1"])
    out = capsys.readouterr().out
    assert rc == 0 and "PASS" in out, out
    checked, compared, excluded = map(int, SUMMARY.search(out).groups())
    assert checked == 8 and compared >= 0.85 * checked, out


class KinkedProbe:
    """E(w) = w + 0.5 max(w - 1e-9, 0) on weight 0: slope 1 at w = 0, a kink 1e-9 away."""

    def __init__(self):
        self.w = 0.0

    def set(self, j, value):
        self.w = float(value)

    def forward_loss(self):
        return self.w + 0.5 * max(self.w - 1e-9, 0.0)


def test_a_kink_closer_than_every_step_is_excluded_not_compared():
    """The central quotients of every step agree on the mean of both slopes (1.25), so
    comparing two steps alone took 1.25 for the derivative 1; the one-sided quotients
    differ at every step, so the weight is excluded."""
    import numpy as np

    from vkgraph.cli.gradcheck import run_differences

    numeric, kinks = run_differences(KinkedProbe(), np.zeros(1, np.float32), np.array([0]),
                                     1e-5, 0.0)
    assert kinks[0] and numeric[0] > 1.2


def test_many_kinks_need_a_smaller_step():
    """E = sum of leaky ReLUs with kinks every 1e-7 above w = 0 (as the first layer's
    pre-activations near 0 that a table entry at its start moves): the quotients at 1e-5
    and 5e-6 are biased, a step below the nearest kink gives the
    slope at w."""
    import numpy as np

    from vkgraph.cli.gradcheck import run_differences

    offsets = 1e-7 * (np.arange(200) + 0.5)

    class Dense(KinkedProbe):
        def forward_loss(self):
            z = self.w - offsets
            return float(np.sum(np.where(z > 0, z, 0.01 * z)))

    numeric, kinks = run_differences(Dense(), np.zeros(1, np.float32), np.array([0]), 1e-5, 0.0)
    exact = np.sum(np.where(-offsets > 0, 1.0, 0.01))
    assert not kinks[0] and abs(numeric[0] - exact) <= 1e-3 * exact
