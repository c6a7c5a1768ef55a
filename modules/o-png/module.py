"""o-png: write the input as `<filename>.png` (sRGB 8-bit)."""

from __future__ import annotations

from vkgraph.pipeline.formats import output_path, write_png


def write_sink(graph, module, connector, data) -> None:
    write_png(output_path(module.param("filename"), "png", graph.frame), data)
