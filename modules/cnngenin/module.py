"""cnngenin: training pairs (input, reference, noise profile) for kpn-t, as vkdt's module,
with batches of tiles and training sets.

One node runs shaders/cnngenin/main.comp over the output size. The inputs are two rgba images
(vkdt's way) or two training sets from `i-set` (storage buffers: the `SET` variant of the
kernel cuts each tile from a randomly drawn image of the set). With `tiles 1` the outputs are
a grid of `batch` tiles of `tile` x `tile` pixels, each with its own draws.

`generate 6` (the camera pipeline) adds two nodes after main: `jpeg` (shaders/cnngenin/
jpeg.comp) encodes and decodes each tile as a 4:2:0 JPEG, one thread per 8x8 block, into
luma and chroma planes; `decode` upsamples and converts those to imgo.
"""

from __future__ import annotations

import math

from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.module import Roi, ssbo

MCU = 16  # a 4:2:0 JPEG's minimum coded unit


def grid(batch: int) -> tuple[int, int]:
    """(columns, rows) of the batch's tile grid: the factorisation of `batch` closest to a
    square, wider than high (16 -> 4 x 4, 8 -> 4 x 2, 7 -> 7 x 1)."""
    rows = max(r for r in range(1, math.isqrt(batch) + 1) if batch % r == 0)
    return batch // rows, rows


def set_mode(module) -> bool:
    return module.connector("imgi").is_ssbo


def modify_roi_out(graph, module) -> None:
    imgi = module.connector("imgi")
    refi = module.connector("refi")
    batch, tile, tiles = (int(module.param(p)) for p in ("batch", "tile", "tiles"))
    if imgi.is_ssbo != refi.is_ssbo:
        raise GraphError(f"{module}: 'imgi' and 'refi' must both be images or both be "
                         "training sets (i-set)")
    if imgi.is_ssbo:
        sizes = [c.source[0].data.get("sizes") if c.source else None for c in (imgi, refi)]
        if imgi.roi.wd != refi.roi.wd or (None not in sizes and sizes[0] != sizes[1]):
            raise GraphError(f"{module}: the sets on 'imgi' and 'refi' differ in size; a set "
                             "of pairs needs images of equal sizes in the same order")
        if not tiles:
            raise GraphError(f"{module}: a training set needs tiles 1 (its images differ "
                             "in size)")
    else:
        if int(module.param("zoom")) > 1:
            raise GraphError(f"{module}: zoom {module.param('zoom')} needs training sets "
                             "(i-set) on 'imgi' and 'refi'; an image is read as it is")
        if float(module.param("colour")) > 0:
            raise GraphError(f"{module}: colour {module.param('colour')} needs training sets "
                             "(i-set) on 'imgi' and 'refi'; an image keeps its colours")
        for c in (imgi, refi):
            if c.nchan != 4:
                raise GraphError(f"{module}: input '{c.name}' is {c.chan}; cnngenin reads "
                                 "rgba images or i-set training sets")
        if (imgi.roi.wd, imgi.roi.ht) != (refi.roi.wd, refi.roi.ht):
            raise GraphError(f"{module}: input 'imgi' is {imgi.roi.wd}x{imgi.roi.ht} but "
                             f"'refi' is {refi.roi.wd}x{refi.roi.ht}; a training pair needs "
                             "equal sizes")
    qlo, qhi = int(module.param("qlo")), int(module.param("qhi"))
    if qlo > qhi:
        raise GraphError(f"{module}: qlo {qlo} is above qhi {qhi}; the JPEG quality is drawn "
                         "from qlo..qhi")
    if tiles:
        cols, rows = grid(batch)
        out = Roi(cols * tile, rows * tile)
    else:
        if batch != 1:
            raise GraphError(f"{module}: batch {batch} needs tiles 1 (tiles 0 passes the "
                             "whole image)")
        out = Roi(imgi.roi.wd, imgi.roi.ht)
    module.connector("imgo").roi = Roi(out.wd, out.ht)
    module.connector("refo").roi = Roi(out.wd, out.ht)
    # per tile (noise a, noise b, tile size or 0 for the whole image, tile columns)
    module.connector("noiseab").roi = Roi(4, batch)


def jpeg_planes(module) -> tuple[int, int]:
    """generate 6: the size of the decoded luma plane, every tile (or the whole image with
    tiles 0) padded to whole MCUs."""
    out = module.connector("imgo").roi
    cw, ch = (int(module.param("tile")),) * 2 if int(module.param("tiles")) else (out.wd, out.ht)
    return out.wd // cw * mcus(cw) * MCU, out.ht // ch * mcus(ch) * MCU


def mcus(n: int) -> int:
    return -(-n // MCU)


def add_camera_pipeline(graph, module, main) -> None:
    """generate 6: main's noisy image (quality in alpha) through jpeg.comp's blocks and
    decode.comp's upsampling and colour conversion to the module's imgo."""
    out = module.connector("imgo")
    pw, ph = jpeg_planes(module)
    jpeg = graph.add_node(module, "jpeg", (pw // MCU, ph // MCU, 6), [
        ("noisy", "read", "rgba", "f32", None), ssbo("luma", "write", pw * ph),
        ssbo("chroma", "write", pw * ph // 2)])
    decode = graph.add_node(module, "decode", (out.roi.wd, out.roi.ht), [
        ssbo("luma", "read"), ssbo("chroma", "read"),
        ("imgo", "write", out.chan, out.format, Roi(out.roi.wd, out.roi.ht))])
    graph.node_connect(main, "imgo", jpeg, "noisy")
    graph.node_connect(jpeg, "luma", decode, "luma")
    graph.node_connect(jpeg, "chroma", decode, "chroma")
    graph.bind(module, "imgo", decode, "imgo")


def create_nodes(graph, module) -> None:
    camera = int(module.param("generate")) == 6
    conns = [(c.name, c.type, c.chan, "f32" if camera and c.name == "imgo" else c.format,
              c.roi) for c in module.connectors]
    out = module.connector("imgo").roi
    node = graph.add_node(module, "main", (out.wd, out.ht), conns,
                          defines={"SET": 1} if set_mode(module) else {})
    for c in module.connectors:
        if (c.is_output and not (camera and c.name == "imgo")) or c.source is not None:
            graph.bind(module, c.name, node, c.name)
    if camera:
        add_camera_pipeline(graph, module, node)
