"""srgb-out: linear rgba -> packed 8-bit sRGB, one uint a pixel (README.md), and the count of
pixels whose colour was not finite."""

from __future__ import annotations

from vkgraph.pipeline.module import CLEAR, Roi


def modify_roi_out(graph, module) -> None:
    inp = module.connector("input").roi
    module.connector("output").roi = Roi(inp.wd, inp.ht)
    module.connector("bad").roi = Roi(1, 1)


def create_nodes(graph, module) -> None:
    roi = module.connector("output").roi
    node = graph.add_node(module, "main", (roi.wd, roi.ht), [
        ("input", "read", "rgba", "f32", None),
        ("output", "write", "ssbo", "ui32", Roi(roi.wd, roi.ht)),
        ("bad", "write", "ssbo", "ui32", Roi(1, 1))])
    node.connector("bad").flags |= CLEAR  # a count: zeroed before every frame
    for name in ("input", "output", "bad"):
        graph.bind(module, name, node, name)
