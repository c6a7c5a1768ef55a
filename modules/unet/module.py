"""unet: denoise an image with the U-Net weights unet-t trained (inference; README.md here).

The nodes are unet-t's forward pass without the training parts (prep, a conv per layer, the
output O = X - s N), built by unet-t's `forward_nodes` (modules/unet-t/forward.py), so both
modules run the same kernels (shaders/unet-t/). The network's shape (width, scales) comes
from the weights' .lut text; the noise profile from the params `noise a`, `noise b`. Any
image size: the network runs at the size rounded up to multiples of 2^(scales - 1), prep
reading the input mirrored beyond its edges, and the output keeps the input's pixels.
Weights of RGGB mosaics (the .lut's line `cfa rggb`, unet-t's cfa 1) read a mosaic of even
size and write its full-resolution RGB: the network runs on the 2 x 2 cells, padded to a
multiple of 2^(scales - 1) cells with the cells mirrored (the colour phase kept). Weights of
RGB cells (the line `cells rgb`, unet-t's cells 1) read any RGB image, padded to whole cells;
weights of mosaics of any pattern (`cfa any`, cfa 2) any mosaic with its colours in alpha, the
same way.
"""

from __future__ import annotations

from vkgraph.modules.unet_t.forward import forward_nodes, network_of_text, padded
from vkgraph.modules.unet_t.net import RGGB
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.module import Roi


def network(graph, module) -> tuple[int, int, int]:
    """(width, scales, cfa) of the weights on `w`, from the .lut's text (unet-t's o-lut writes
    it; i-lut publishes it as the metadata "text"); GraphError where the text is missing or
    not a unet's, or the weights' count is not that network's."""
    w = module.connector("w")
    return network_of_text(graph.meta(module, "w").get("text"), w.roi.wd * w.roi.ht,
                           where=f"{module}: input 'w'")


def modify_roi_out(graph, module) -> None:
    inp = module.connector("input").roi
    module.data["net"] = network(graph, module)
    if module.data["net"][2] == RGGB and (inp.wd % 2 or inp.ht % 2):
        raise GraphError(f"{module}: the input is {inp.wd}x{inp.ht}; these weights (the .lut "
                         "says 'cfa rggb') read an RGGB mosaic, whose width and height must "
                         "be even (whole cells of 2 x 2 photosites)")
    module.connector("output").roi = Roi(inp.wd, inp.ht)


def create_nodes(graph, module) -> None:
    width, scales, cfa = module.data["net"]
    inp = module.connector("input").roi
    size = padded(inp.wd, inp.ht, scales, cfa)
    module.data["size"] = size  # the network's (padded) size, full resolution
    fwd = forward_nodes(graph, module, (width, scales), "w", size, noise="params",
                        precise=int(module.param("precise")) != 0, cfa=cfa,
                        fp32=int(module.param("fp32")) != 0)
    module.data["kernels"] = fwd["kernels"]  # coopmat, portable or cpu (vkgraph denoise's fallback)
