"""o-jpg: write the input as `<filename>.jpg` (sRGB 8-bit, param quality)."""

from __future__ import annotations

from vkgraph.pipeline.formats import output_path, write_jpg


def write_sink(graph, module, connector, data) -> None:
    write_jpg(output_path(module.param("filename"), "jpg", graph.frame), data,
              quality=module.param("quality"))
