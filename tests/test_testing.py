"""pipeline/testing.py: one kernel in one call, against numpy (kpn-t's pyramid kernels against
modules/kpn-t/reference.py, exposure's main with its params), and its errors."""

from __future__ import annotations

import numpy as np
import pytest

from vkgraph.modules.kpn_t import reference as ref
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.testing import dispatch


def image(w: int, h: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-0.2, 1.3, (h, w, 4)).astype(np.float32)


@pytest.mark.parametrize("w,h", [(13, 9), (16, 16)])
def test_kpn_t_sub_and_up_match_reference(w, h):
    M = image(w, h)
    (cw, ch) = ref.level_sizes(w, h, 1)[1]
    coarse = dispatch("kpn-t", "sub", {"fine": M}, size=(cw, ch),
                      outputs={"coarse": (ch, cw, 4)})["coarse"]
    np.testing.assert_allclose(coarse, ref.sub(M.astype(np.float64)), rtol=0, atol=2e-6)
    filtered = image(w, h, 1)
    out = dispatch("kpn-t", "up", {"filtered": filtered, "coarse": coarse},
                   outputs={"output": (h, w, 4)})["output"]
    want = ref.up(coarse.astype(np.float64), w, h)[..., :3] + filtered[..., :3]
    np.testing.assert_allclose(out[..., :3], want, rtol=0, atol=2e-6)


def test_exposure_main_with_params():
    x = image(11, 7)
    out = dispatch("exposure", inputs={"input": x}, params={"exposure": 1.5, "black": 0.1})
    want = x.copy()
    want[..., :3] = (x[..., :3] - 0.1) * 2 ** 1.5
    np.testing.assert_allclose(out["output"], want, rtol=1e-6, atol=1e-6)
    with pytest.raises(GraphError, match="exposure"):
        dispatch("exposure", inputs={"input": x}, params={"exposure": float("nan")})
    with pytest.raises(GraphError, match="no array for connector"):
        dispatch("kpn-t", "sub", {}, size=(4, 4), bindings=["fine", "coarse"])
