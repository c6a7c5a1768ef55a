"""What the host modules that take an array (i-array, i-bytes: pipeline/hostmods/) share:
the array a program handed over (`vkgraph.Session.feed` calls their `give`) held in the
module's data, and the output's size from it."""

from __future__ import annotations

import numpy as np

from .errors import GraphError
from .module import Roi


def hold(module, image: np.ndarray) -> bool:
    """Keep `image` for the next frames; True where the graph's sizes change with it (the
    first image, or one of another size: the graph is built again)."""
    old = module.data.get("image")
    module.data["image"] = image
    return old is None or old.shape[:2] != image.shape[:2]


def held(module) -> np.ndarray:
    """The image held; a GraphError before any was given."""
    image = module.data.get("image")
    if image is None:
        raise GraphError(f"{module}: no image given (Session.feed)")
    return image


def held_roi(graph, module) -> None:
    """modify_roi_out of such a module: its output is the held image's size."""
    ht, wd = held(module).shape[:2]
    module.connector("output").roi = Roi(wd, ht)
