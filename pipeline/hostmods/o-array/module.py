"""o-array: a sink that keeps what reaches it in `module.data["image"]` for the host
program, instead of writing a file."""

from __future__ import annotations


def write_sink(graph, module, connector, data) -> None:
    module.data["image"] = data
