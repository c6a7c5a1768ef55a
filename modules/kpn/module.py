"""kpn: denoise an image with trained kpn-t weights (inference; README.md here).

The nodes are kpn-t's forward pass without the training parts: pyramid, features + MLP
(fwd's W16 variant, reading the lut's f16 weights directly; on a CPU driver fwd_cpu, after
w32 converts them to f32), filter, reconstruction. They are
built by kpn-t's `forward_nodes`, so both modules run the same kernels on the same buffers
and kpn's output equals what kpn-t's `output` shows for the same weights and input.
"""

from __future__ import annotations

import math

import numpy as np

from vkgraph.modules.kpn_t.forward import NW, WIDTH, forward_nodes
from vkgraph.modules.kpn_t.module import trained_with
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.module import Roi


def weights_text(graph, module) -> str | None:
    """The trailing text of the weights' .lut (the metadata i-lut publishes), or None."""
    return graph.meta(module, "w").get("text")


_APPLY_WORDS = {0: "plain taps", 1: "softmax taps", 2: "softmax taps and a sigmoid band gain"}


def variant(graph, module) -> tuple[int, int]:
    """Match kpn to its weights and return (`feat`, `arch`). The .lut's text (kpn-t writes it)
    says how the weights were trained: `apply` and `levels` left at their defaults take the
    text's values; set to something else, they are an error (the weights would give
    garbage)."""
    text = weights_text(graph, module)
    if text is None:
        return 0, 0
    said = trained_with(text)
    for name, words in (("apply", lambda v: f"apply {v} ({_APPLY_WORDS[v]})"),
                        ("levels", lambda v: f"{v} pyramid levels")):
        value, want = int(module.param(name)), said[name]
        if want is None or value == want:
            continue
        if value != module.param_decl(name).default[0]:
            raise GraphError(f"{module}: the weights were trained with {words(want)}, says the "
                             f".lut's text, but {name} is {value}; set "
                             f"param:{module.name}:{module.inst}:{name}:{want}")
        module.set_param(name, want)
    return said["feat"], said["arch"]


def modify_roi_out(graph, module) -> None:
    inp = module.connector("input").roi
    module.connector("output").roi = Roi(inp.wd, inp.ht)
    w = module.connector("w")
    if w.roi.wd * w.roi.ht != NW:
        raise GraphError(f"{module}: input 'w' holds {w.roi.wd}x{w.roi.ht} elements; kpn "
                         f"needs kpn-t's weights, {WIDTH}x{NW // WIDTH} (a .lut written by "
                         "kpn-t's w output)")
    variant(graph, module)


def create_nodes(graph, module) -> None:
    levels = int(module.param("levels"))  # 1..12 (modules/kpn-t/ranges)
    module.data["levels"] = levels
    feat, arch = variant(graph, module)  # arch 1 without feat: forward_nodes refuses it
    n = forward_nodes(graph, module, levels, False, "w",
                      noise="params" if feat else None,
                      fp32=int(module.param("fp32")) != 0, arch=arch)
    module.data["mlp"] = n["variant"]  # which MLP kernels run (the f16 ones may overflow)
    if module.connector("ref").source is None:
        return
    # optional reference: squared errors of input and output for the PSNR summary
    w, h = n["sizes"][0]
    groups = math.ceil(w / 8) * math.ceil(h / 8)
    node = graph.add_node(module, "psnr", (w, h), [
        ("input", "read", "rgba", "f32", None), ("output", "read", "rgba", "f32", None),
        ("ref", "read", "rgba", "f32", None), ("part", "write", "ssbo", "f32", Roi(2 * groups, 1))],
        shader="kpn", keep=True)
    graph.bind(module, "input", node, "input")
    graph.node_connect(n["up"][0], "output", node, "output")
    graph.bind(module, "ref", node, "ref")
    module.data["psnr"] = node


def psnr(graph, module) -> tuple[float, float] | None:
    """(PSNR of the input, PSNR of the output) against `ref` in dB, peak 1; None without ref."""
    node = module.data.get("psnr")
    if node is None:
        return None
    part = graph.read(node, "part").astype(np.float64).reshape(-1, 2).sum(axis=0)
    w, h = module.connector("input").roi.wd, module.connector("input").roi.ht
    mse = part / (3.0 * w * h)
    return tuple(float(10 * np.log10(1.0 / max(m, 1e-20))) for m in mse)


def summary(graph, module) -> str | None:
    values = psnr(graph, module)
    if values is None:
        return None
    return f"{module}: PSNR against ref: input {values[0]:.2f} dB, output {values[1]:.2f} dB"
