"""Hooks shared by the trainable modules (kpn-t, mlp-t): both keep a loss history in the
output `hist` of the node module.data["lsum"] (one float a frame, ring buffer of length
module.data["hist_len"]) and the frame's loss as a (hi, lo) float pair in its output `cur`.
A module imports these names, which makes them its `losses` and `current_loss` hooks."""

from __future__ import annotations

import numpy as np


def losses(graph, module) -> np.ndarray:
    """The per-frame loss history of this run (frames 0 .. graph.frame)."""
    hist = graph.read(module.data["lsum"], "hist")
    n = min(graph.frame + 1, module.data["hist_len"])
    return hist[:n].astype(np.float64)


def current_loss(graph, module) -> float:
    """This frame's loss E (what dw is the gradient of), from its (hi, lo) float pair."""
    cur = graph.read(module.data["lsum"], "cur").astype(np.float64)
    return float(cur[0] + cur[1])
