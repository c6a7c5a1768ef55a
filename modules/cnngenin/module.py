"""cnngenin: training pairs (input, reference, noise profile) for kpn-t, as vkdt's module.

One node runs shaders/cnngenin/main.comp over the output size (the engine's default node:
its dispatch is the size of the first output, `imgo`). This file only sizes the outputs.
"""

from __future__ import annotations

from pipeline.errors import GraphError
from pipeline.module import Roi

TILE = 64  # vkdt's tile size with tiles=1


def modify_roi_out(graph, module) -> None:
    imgi = module.connector("imgi")
    refi = module.connector("refi")
    for c in (imgi, refi):
        if c.is_ssbo or c.nchan != 4:
            raise GraphError(f"{module}: input '{c.name}' is {c.chan}; cnngenin reads rgba "
                             "images")
    if (imgi.roi.wd, imgi.roi.ht) != (refi.roi.wd, refi.roi.ht):
        raise GraphError(f"{module}: input 'imgi' is {imgi.roi.wd}x{imgi.roi.ht} but 'refi' is "
                         f"{refi.roi.wd}x{refi.roi.ht}; a training pair needs equal sizes")
    if module.param("tiles"):
        out = Roi(TILE, TILE)
    else:
        out = Roi(imgi.roi.wd, imgi.roi.ht)
    module.connector("imgo").roi = Roi(out.wd, out.ht)
    module.connector("refo").roi = Roi(out.wd, out.ht)
    module.connector("noiseab").roi = Roi(2, 2)  # 4 floats: (noise a, noise b, 0, 0)
