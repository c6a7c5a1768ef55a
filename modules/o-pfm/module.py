"""o-pfm: write the input as `<filename>.pfm` (rgb f32, as vkdt)."""

from __future__ import annotations

from vkgraph.pipeline.formats import output_path, write_pfm


def write_sink(graph, module, connector, data) -> None:
    write_pfm(output_path(module.param("filename"), "pfm", graph.frame), data)
