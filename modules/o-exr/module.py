"""o-exr: write the input as `<filename>.exr` (linear rgb, half for f16 inputs, else float)."""

from __future__ import annotations

from vkgraph.pipeline.formats import output_path, write_exr


def write_sink(graph, module, connector, data) -> None:
    write_exr(output_path(module.param("filename"), "exr", graph.frame), data,
              half=connector.format == "f16")
