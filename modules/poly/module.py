"""poly: the Slang autodiff tutorial's four polynomials of (x, y) on a grid, as an rgba image."""

from __future__ import annotations

from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.module import Roi


def modify_roi_out(graph, module) -> None:
    wd, ht = module.param("size")
    if wd < 1 or ht < 1:
        raise GraphError(f"{module}: size must be positive, got {wd}x{ht}")
    module.connector("output").roi = Roi(wd, ht)


def reference(wd: int, ht: int):
    """The image main.comp writes, in numpy (float64): (ht, wd, 4)."""
    import numpy as np

    y, x = np.mgrid[0:ht, 0:wd]
    x = (x + 0.5) / wd
    y = (y + 0.5) / ht
    return np.stack([(x + y) / (1 + y * y), 2 * x + y, 0.5 * x * x + 1.2 * y,
                     x + 0.5 * y * y], -1)
