"""demosaic: a raw mosaic (i-raw's output) to rgb: white balance, Malvar-He-Cutler for Bayer
or green then colour differences for X-Trans, then the camera matrix (README.md here)."""

from __future__ import annotations

import numpy as np

from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.module import Roi
from vkgraph.pipeline.raw import RawMeta

MIN_SIDE = 8  # reflected borders reach 2 photosites; smaller mosaics are refused


def raw_meta(graph, module) -> RawMeta:
    """The RawMeta its input carries (i-raw publishes it as "raw")."""
    meta = graph.meta(module, "input").get("raw")
    if not isinstance(meta, RawMeta):
        raise GraphError(f"{module}: its input carries no colour filter array; connect a raw "
                         f"mosaic (i-raw's output) to {module.name}:{module.inst}:input")
    return meta


def modify_roi_out(graph, module) -> None:
    inp = module.connector("input").roi
    raw_meta(graph, module)
    if min(inp.wd, inp.ht) < MIN_SIDE:
        raise GraphError(f"{module}: a {inp.wd}x{inp.ht} mosaic is too small to demosaic "
                         f"({MIN_SIDE}x{MIN_SIDE} at least)")
    module.connector("output").roi = Roi(inp.wd, inp.ht)


def push_values(meta: RawMeta, wb: bool, colour: bool) -> list:
    """The kernels' push constants (shaders/demosaic/cfa.glsl): the pattern packed 2 bits a
    photosite, its period, the gains, the colour matrix."""
    p = meta.period
    words = [0, 0, 0]
    for k, c in enumerate(np.asarray(meta.cfa).ravel()):
        words[k // 12] |= int(c) << (2 * (k % 12))
    gains = list(meta.wb) if wb else [1.0, 1.0, 1.0]
    matrix = np.asarray(meta.rgb_cam, np.float64) if colour else np.eye(3)
    return [*words, p] + [float(g) for g in gains] + [0.0] + [float(v) for v in matrix.ravel()]


def create_nodes(graph, module) -> None:
    meta = raw_meta(graph, module)
    roi = module.connector("output").roi
    size = (roi.wd, roi.ht)
    push = push_values(meta, bool(module.param("wb")), bool(module.param("colour")))
    mosaic = ("input", "read", "y", "f32", None)
    rgb = ("output", "write", "rgba", "f32", Roi(*size))
    if meta.period == 2:
        node = graph.add_node(module, "bayer", size, [mosaic, rgb], push=push)
    else:  # X-Trans: green everywhere first, then red and blue as colour differences
        green = graph.add_node(module, "xtrans_g", size,
                               [mosaic, ("g", "write", "y", "f32", Roi(*size))], push=push)
        node = graph.add_node(module, "xtrans", size,
                              [mosaic, ("g", "read", "y", "f32", None), rgb], push=push)
        graph.bind(module, "input", green, "input")
        graph.node_connect(green, "g", node, "g")
    graph.bind(module, "input", node, "input")
    graph.bind(module, "output", node, "output")
