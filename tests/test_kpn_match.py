"""Arch 2's block matching (shaders/kpn-t/match.comp) against its float64 definition
(modules/kpn-t/reference.py: block_match): the first piece of the nonlocal taps that
bench/kpn_arch.py measured (nl64)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import load_script

from vkgraph.pipeline.testing import dispatch

ref = load_script("modules/kpn-t/reference.py", "kpn_t_reference_match")
BAND = 0.7
STRIDE = 64  # K's values a pixel in the kernels (56 used)


def level(h: int, w: int, seed: int) -> np.ndarray:
    """A level image with structure that repeats (stripes, a step) and noise, and a noise
    variance that varies (alpha)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    rgb = 0.4 + 0.2 * np.sin(x * 0.9)[..., None] * np.array([1.0, 0.8, 0.5])
    rgb = rgb + 0.15 * (y > h // 2)[..., None] + 0.02 * rng.standard_normal((h, w, 3))
    var = 1e-4 * (1 + rng.random((h, w)))
    return np.dstack([rgb, var]).astype(np.float32)


def run_match(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h, w = M.shape[:2]
    n = ref.NL_TAPS
    out = dispatch("kpn-t", "match", inputs={"fine": M}, push=[BAND],
                   outputs={"nltap": ((h * w * n // 4,), np.uint32),
                            "nldist": ((h * w * n,), np.float32)})
    idx = out["nltap"].view(np.uint8).reshape(h, w, n).astype(np.int64)
    return idx, out["nldist"].reshape(h, w, n)


@pytest.mark.parametrize("shape", [(19, 26), (8, 8), (3, 13)])
def test_match_equals_reference(shape):
    """Sizes that are not whole tiles and smaller than the search window (mirrored reach
    past both borders). The features agree to float32 rounding; an index may differ only
    where two offsets' distances tie within it."""
    M = level(*shape, seed=sum(shape))
    want_idx, want = ref.block_match(M.astype(np.float64), BAND)
    idx, got = run_match(M)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert np.all(np.diff(got, axis=-1) >= -1e-6)  # ascending
    offsets = ref.nl_offsets()
    assert idx.max() < len(offsets)
    # every index the kernel chose has the reference distance the kernel reported
    Y = M.astype(np.float64)[..., :3] @ ref.LUMA
    h, w = Y.shape
    mismatch = np.argwhere(idx != want_idx)
    for yy, xx, j in mismatch:
        dx, dy = offsets[idx[yy, xx, j]]
        d = np.mean([(Y[ref.mirror(yy + uy + dy, h), ref.mirror(xx + ux + dx, w)]
                      - Y[ref.mirror(yy + uy, h), ref.mirror(xx + ux, w)]) ** 2
                     for uy in range(-2, 3) for ux in range(-2, 3)])
        sigma = max(BAND * np.sqrt(M[yy, xx, 3]), ref.SIGMA_FLOOR)
        assert np.log2(1 + d / (2 * sigma ** 2)) == pytest.approx(want[yy, xx, j], rel=1e-4,
                                                                  abs=1e-5)
    assert len(mismatch) <= 0.01 * idx.size
    # each pixel's taps are distinct offsets
    assert all(len(set(t)) == ref.NL_TAPS for t in idx.reshape(-1, ref.NL_TAPS))


def test_match_finds_the_repeat():
    """A pattern of period 4 in x: the best matches of a pixel are the offsets by whole
    periods (distance 0 where the noise is absent), ahead of every other offset."""
    h, w = 16, 24
    x = np.arange(w)
    rgb = np.tile((0.2 + 0.5 * (x % 4 == 0) + 0.1 * (x % 4 == 1))[None, :, None], (h, 1, 3))
    M = np.dstack([rgb, np.full((h, w), 1e-4)]).astype(np.float32)
    idx, got = run_match(M)
    offsets = ref.nl_offsets()
    dx = offsets[idx[8, 12, :], 0]
    assert np.all(dx[:8] % 4 == 0)  # dy = -5..5 with dx in (-4, 0, 4): 30 zero-distance taps
    assert np.all(got[8, 12] == 0.0)


@pytest.mark.parametrize("shape", [(19, 26), (5, 7)])
def test_apply_nl_equals_reference(shape):
    """apply_nl.comp, arch 2's filter over the star and the matched taps, against the float64
    apply_ctx with the same matches (block_match's, packed as match.comp writes them)."""
    h, w = shape
    rng = np.random.default_rng(h * w)
    M = level(h, w, seed=h + w)
    idx, _ = ref.block_match(M.astype(np.float64), BAND)
    D = np.dstack([0.1 * rng.standard_normal((h, w, 3)), np.ones((h, w))]).astype(np.float32)
    K = rng.normal(0.0, 2.0, (h * w, STRIDE)).astype(np.float32)  # 56..63 unused
    packed = idx.astype(np.uint8).reshape(-1).view(np.uint32)
    out = dispatch("kpn-t", "apply_nl", inputs={"detail": D, "K": K.reshape(-1),
                                                "nltap": packed},
                   outputs={"filtered": (h, w, 4)})
    want = ref.apply_ctx(D.astype(np.float64), K[:, :ref.N_OUT_NL].astype(np.float64), idx)
    np.testing.assert_allclose(out["filtered"][..., :3], want, atol=2e-6)
    assert np.abs(want).max() > 1e-2


@pytest.mark.parametrize("shape", [(19, 26), (5, 7)])
def test_dapply_nl_equals_reference(shape):
    """dapply_nl.comp, the adjoint of arch 2's filter, against apply_ctx_backward with the
    same matches."""
    h, w = shape
    rng = np.random.default_rng(h * w + 1)
    M = level(h, w, seed=h + w + 1)
    idx, _ = ref.block_match(M.astype(np.float64), BAND)
    D = np.dstack([0.1 * rng.standard_normal((h, w, 3)), np.ones((h, w))]).astype(np.float32)
    G = np.dstack([rng.standard_normal((h, w, 3)), np.zeros((h, w))]).astype(np.float32)
    K = rng.normal(0.0, 2.0, (h * w, STRIDE)).astype(np.float32)
    packed = idx.astype(np.uint8).reshape(-1).view(np.uint32)
    out = dispatch("kpn-t", "dapply_nl", inputs={"detail": D, "K": K.reshape(-1),
                                                 "nltap": packed, "dI": G},
                   outputs={"dK": ((h * w * STRIDE,), np.float32)})
    want = ref.apply_ctx_backward(G[..., :3].astype(np.float64), D.astype(np.float64),
                                 K[:, :ref.N_OUT_NL].astype(np.float64), idx)
    got = out["dK"].reshape(h * w, STRIDE)
    np.testing.assert_allclose(got[:, :ref.N_OUT_NL], want, atol=2e-6 * np.abs(want).max())
    assert np.all(got[:, ref.N_OUT_NL:] == 0.0)  # K's unused values get no gradient
    assert np.abs(want[:, 15:27]).max() > 1e-3  # the matched taps get gradient
