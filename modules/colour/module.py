"""colour: linear rgb times a 3 x 3 matrix: a raw file's camera matrix (white-balanced camera
rgb -> linear Rec.709) when its mosaic is wired to `raw`, else the `matrix` param (README.md)."""

from __future__ import annotations

import numpy as np

from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.module import Roi
from vkgraph.pipeline.raw import RawMeta


def matrix(graph, module) -> np.ndarray:
    if module.connector("raw").source is None:
        return np.asarray(module.param("matrix"), np.float64).reshape(3, 3)
    meta = graph.meta(module, "raw").get("raw")
    if not isinstance(meta, RawMeta):
        raise GraphError(f"{module}: its input 'raw' carries no camera matrix; connect a raw "
                         f"mosaic (i-raw's output) or leave it open and set matrix")
    return np.asarray(meta.rgb_cam, np.float64)


def modify_roi_out(graph, module) -> None:
    inp = module.connector("input").roi
    matrix(graph, module)
    module.connector("output").roi = Roi(inp.wd, inp.ht)


def create_nodes(graph, module) -> None:
    roi = module.connector("output").roi
    node = graph.add_node(module, "main", (roi.wd, roi.ht), [
        ("input", "read", "rgba", "f32", None),
        ("output", "write", "rgba", "f32", Roi(roi.wd, roi.ht))],
        push=[float(v) for v in matrix(graph, module).ravel()])
    graph.bind(module, "input", node, "input")
    graph.bind(module, "output", node, "output")
