"""A trainable module, declared: `Trainable`, the record a trainable module's create_nodes
sets as `module.trainable`, and the hooks shared by the trainable modules (kpn-t, mlp-t).

The trainer hooks below, checkpoints (pipeline/checkpoint.py) and `vkgraph gradcheck`
(cli/gradcheck.py) read a trainable module through this record only: its loss history is
the output `hist` of node `lsum` (one float a frame, ring buffer of `hist_len`), the frame's
loss a (hi, lo) float pair in its output `cur`; the optimiser node `adam` holds the weights
`w`, moments `m`, `v` and in `stats[0]` the count of skipped (non-finite) updates; node `dw`
writes dE/dW of the frame to its output `dw`. A module imports the hook names, which makes
them its `losses`, `current_loss`, `stats`, `state` and `load_state` hooks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import GraphError


@dataclass
class Trainable:
    """The nodes and facts of a trainable module that tools outside it use."""

    adam: object  # Node: outputs w (fp32 master weights), m, v, stats (skipped updates)
    dw: object  # Node: output dw, dE/dW of this frame
    lsum: object  # Node: outputs hist (loss per frame, ring buffer), cur (loss as hi, lo)
    hist_len: int  # length of the loss history ring buffer
    used: np.ndarray  # bool mask of the weights the network uses (others stay 0)
    layout: tuple[int, int]  # (matrices, width): the weights are width x width matrices
    groups: list | None = None  # gradcheck's sampling groups: (name, start, end); None: layers


def trainable(module) -> Trainable:
    """The module's Trainable record (set by its create_nodes), or a GraphError."""
    record = getattr(module, "trainable", None)
    if record is None:
        raise GraphError(f"{module} is not a trainable module (its create_nodes sets no "
                         "Trainable)")
    return record


def losses(graph, module) -> np.ndarray:
    """The per-frame loss history of this run (frames 0 .. graph.frame)."""
    t = trainable(module)
    hist = graph.read(t.lsum, "hist")
    n = min(graph.frame + 1, t.hist_len)
    return hist[:n].astype(np.float64)


def current_loss(graph, module) -> float:
    """This frame's loss E (what dw is the gradient of), from its (hi, lo) float pair."""
    cur = graph.read(trainable(module).lsum, "cur").astype(np.float64)
    return float(cur[0] + cur[1])


def skipped(graph, module) -> int:
    """How many updates the optimiser skipped (non-finite loss or gradient)."""
    return int(graph.read(trainable(module).adam, "stats")[0])


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
