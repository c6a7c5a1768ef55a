"""bench/fit_image.py's PyTorch hash grid (its own code) against mlp-t's float64 reference
(modules/mlp-t/reference.py): the level layout, the encoding of points (cell edges, the
hashed levels, 2-D and 3-D) and the table gradient autograd derives from it. CPU only; skipped
without torch."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import load_script

torch = pytest.importorskip("torch")


bench = load_script("bench/fit_image.py", "bench_fit_image")
ref = load_script("modules/mlp-t/reference.py", "mlp_reference_fit")

# fit-image-hash.cfg's table (levels 0-6 dense, 7 hashed), one with most levels hashed, 3-D
CASES = [dict(levels=8, features=2, log2size=16, baseres=16, perlevel=1.5, dims=2),
         dict(levels=5, features=3, log2size=8, baseres=3, perlevel=2.0, dims=2),
         dict(levels=4, features=2, log2size=10, baseres=4, perlevel=1.7, dims=3)]


def points(dims: int, n: int = 300) -> np.ndarray:
    """Random points, the first ones on cell edges, at 0 and just below 1 in every dimension."""
    x = np.random.default_rng(5).random((n, dims)).astype(np.float32)
    edges = np.array([0.0, 0.5, 1.0 - 2.0 ** -24, 1 / 16, 1 / 3], np.float32)
    grid = np.stack(np.meshgrid(*[edges] * dims, indexing="ij"), -1).reshape(-1, dims)
    x[: len(grid)] = grid
    return x


def spec_of(case: dict) -> dict:
    return {"enc": 3, **case}


@pytest.mark.parametrize("case", CASES, ids=["fit-image-hash", "hashed", "3d"])
def test_layout_matches_reference(case):
    lay = bench.HashLayout(**case)
    want = ref.table_layout(spec_of(case))
    assert lay.res == want["res"]
    assert lay.dense == [bool(d) for d in want["dense"]]
    assert lay.sizes == [int(s) for s in want["sizes"]]
    assert lay.offsets == [int(o) for o in want["offsets"]]
    assert lay.entries * lay.features == want["floats"]


@pytest.mark.parametrize("case", CASES, ids=["fit-image-hash", "hashed", "3d"])
def test_encoding_and_gradient_match_reference(case):
    lay = bench.HashLayout(**case)
    if case["levels"] == 8:
        assert lay.dense == [True] * 7 + [False]  # the shipped graph: only the finest hashed
    else:
        assert not all(lay.dense)
    rng = np.random.default_rng(1)
    table = rng.uniform(-1, 1, (lay.entries, lay.features)).astype(np.float32)
    x = points(case["dims"])
    encode = bench.hash_encoder(torch, lay, torch.device("cpu"))
    t = torch.tensor(table, requires_grad=True)
    got = encode(t, torch.from_numpy(x))
    want = ref.encode_table(spec_of(case), table.ravel().astype(np.float64), x)
    assert got.shape == want.shape == (len(x), case["levels"] * case["features"])
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=0, atol=2e-6)
    # the backward: autograd's scatter against the reference's dE/dT for E = sum(c * h_0)
    c = rng.standard_normal(want.shape)
    (got * torch.from_numpy(c).float()).sum().backward()
    dT = ref.table_grad(spec_of(case), x, c, table.size)
    np.testing.assert_allclose(t.grad.numpy().ravel(), dT, rtol=0, atol=2e-5)
    assert np.abs(dT).max() > 0.1  # not vacuous


def test_peer_fit_reads_the_table_after_the_weights():
    """peer_fit splits mlp-t's param vector as the engine stores it: matrices, then the
    table's entries (F floats each), rows of padding after."""
    mlp = load_script("modules/mlp-t/module.py", "mlp_t_module_fit")
    table = mlp.table_of(3, 2, 8, 2, 16, 16, 1.5)

    class A:
        layers, width, dims = 4, 64, 2

        def fans(self, layer):
            return [(16, 64), (64, 64), (64, 64), (64, 3)][layer]

    a = A()
    a.table = table
    start = a.layers * a.width * a.width
    p0 = np.arange(start + table.used + 40, dtype=np.float32)
    params = dict(alpha=1e-3, talpha=1e-2, levels=8, features=2, log2size=16, baseres=16,
                  perlevel=1.5)
    fit = bench.peer_fit("hash", p0, a, params, 65536)
    assert fit["label"] == "hash 2^16" and fit["tlr"] == 1e-2 and fit["lr"] == 1e-3
    assert fit["table0"].shape == (table.used // 2, 2)
    assert fit["table0"][0, 0] == start and fit["table0"][-1, -1] == start + table.used - 1
    assert [w.shape for w in fit["ws0"]] == [(64, 16), (64, 64), (64, 64), (3, 64)]
    assert list(table.sizes) == fit["layout"].sizes  # the engine's layout is ours
