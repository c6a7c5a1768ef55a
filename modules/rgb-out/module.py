"""rgb-out: rgba times a 3 x 3 matrix, packed as three floats a pixel (README.md), and the
count of pixels whose colour is not finite."""

from __future__ import annotations

from vkgraph.pipeline.module import CLEAR, Roi


def modify_roi_out(graph, module) -> None:
    inp = module.connector("input").roi
    module.connector("output").roi = Roi(3 * inp.wd, inp.ht)  # floats
    module.connector("bad").roi = Roi(1, 1)


def create_nodes(graph, module) -> None:
    inp = module.connector("input").roi
    node = graph.add_node(module, "main", (inp.wd, inp.ht), [
        ("input", "read", "rgba", "f32", None),
        ("output", "write", "ssbo", "f32", module.connector("output").roi),
        ("bad", "write", "ssbo", "ui32", Roi(1, 1))])
    node.connector("bad").flags |= CLEAR  # a count: zeroed before every frame
    for name in ("input", "output", "bad"):
        graph.bind(module, name, node, name)
