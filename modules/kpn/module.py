"""kpn: denoise an image with trained kpn-t weights (inference; README.md here).

The nodes are kpn-t's forward pass without the training parts: pyramid, features + MLP
(fwd's W16 variant, reading the lut's f16 weights directly), filter, reconstruction. They are
built by kpn-t's `forward_nodes`, so both modules run the same kernels on the same buffers
and kpn's output equals what kpn-t's `output` shows for the same weights and input.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from pipeline.errors import GraphError
from pipeline.module import Roi

_SHARED = "vkgraph_kpn_t_shared"
NW = 64 * 448  # 7 matrices of 64 x 64, the .lut kpn-t writes


def _kpn_t():
    """kpn-t's module code (its folder name has a dash, so it is loaded by path)."""
    mod = sys.modules.get(_SHARED)
    if mod is None:
        path = Path(__file__).resolve().parent.parent / "kpn-t" / "module.py"
        spec = importlib.util.spec_from_file_location(_SHARED, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules[_SHARED] = mod
    return mod


def modify_roi_out(graph, module) -> None:
    inp = module.connector("input").roi
    module.connector("output").roi = Roi(inp.wd, inp.ht)
    w = module.connector("w")
    if w.roi.wd * w.roi.ht != NW:
        raise GraphError(f"{module}: input 'w' holds {w.roi.wd}x{w.roi.ht} elements; kpn "
                         f"needs kpn-t's weights, 64x448 (a .lut written by kpn-t's w output)")


def create_nodes(graph, module) -> None:
    levels = max(1, min(12, int(module.param("levels"))))
    module.data["levels"] = levels
    _kpn_t().forward_nodes(graph, module, levels, False, "w")
