"""Hooks shared by the trainable modules (kpn-t, mlp-t): both keep a loss history in the
output `hist` of the node module.data["lsum"] (one float a frame, ring buffer of length
module.data["hist_len"]) and the frame's loss as a (hi, lo) float pair in its output `cur`;
their optimiser node module.data["adam"] holds the weights `w`, moments `m`, `v` and in
`stats[0]` the count of skipped (non-finite) updates. A module imports these names, which
makes them its `losses`, `current_loss`, `stats`, `state` and `load_state` hooks."""

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


def skipped(graph, module) -> int:
    """How many updates the optimiser skipped (non-finite loss or gradient)."""
    return int(graph.read(module.data["adam"], "stats")[0])


def stats(graph, module) -> dict:
    out = {"loss": current_loss(graph, module)}
    n = skipped(graph, module)
    if n:
        out["skipped"] = n
    return out


# persistent buffers the engine cannot know about: read before they are written each frame
# (the pending gradient and loss are feedback buffers, which the engine saves itself)
STATE = (("adam", "w"), ("adam", "m"), ("adam", "v"), ("adam", "stats"), ("lsum", "hist"))


def state(graph, module) -> dict:
    """Checkpoint: fp32 weights, optimiser moments, stats and the loss history."""
    from .checkpoint import trainer_state

    return trainer_state(graph, module, STATE)


def load_state(graph, module, arrays) -> None:
    from .checkpoint import load_trainer_state

    load_trainer_state(graph, module, arrays, STATE)
