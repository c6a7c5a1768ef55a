"""raw-in: a 2 x 2 mosaic's 16-bit photosites, two a uint, to its normalised and
white-balanced values as rgba (README.md)."""

from __future__ import annotations

from vkgraph.pipeline.module import Roi


def modify_roi_out(graph, module) -> None:
    inp = module.connector("input").roi  # words: two photosites each
    module.connector("output").roi = Roi(2 * inp.wd, inp.ht)


def create_nodes(graph, module) -> None:
    roi = module.connector("output").roi
    node = graph.add_node(module, "main", (roi.wd, roi.ht), [
        ("input", "read", "ssbo", "ui32", module.connector("input").roi),
        ("output", "write", "rgba", "f32", Roi(roi.wd, roi.ht))])
    for name in ("input", "output"):
        graph.bind(module, name, node, name)
