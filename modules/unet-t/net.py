"""unet-t's network shape (README.md, "The network"): its layers, in the order of the weights,
with the scale each reads and writes and where its inputs come from. module.py builds the
kernels from it; reference.py computes the same network in float64."""

from __future__ import annotations

from typing import NamedTuple

KSIZE = {"conv3": 3, "down": 2, "up": 2, "conv1": 1}

# What the network reads (unet-t's params cfa and cells; the `cfa` argument here and in
# forward.py and reference.py): RGB pixels; an RGGB mosaic on cells of 2 x 2 photosites
# (README.md, "Bayer mosaics"); or RGB on cells of 2 x 2 pixels (README.md, "Cells": a
# quarter of the multiply-adds). Either cell network is a truthy `cfa`: it runs at half
# resolution. MOSAIC reads a mosaic of any colour filter array (X-Trans's 6 x 6, a Bayer one
# in any phase) on cells of 2 x 2 photosites, each photosite's colour told by its alpha
# (README.md, "Mosaics of any pattern").
RGB, RGGB, CELLS, MOSAIC = 0, 1, 2, 3
# the planes of F: the values of a pixel or cell (MOSAIC: each photosite's value in its colour's
# plane, then its colour as 0/1 planes), and sigma
CIN = {RGB: 4, RGGB: 5, CELLS: 13, MOSAIC: 25}


class Layer(NamedTuple):
    """A layer: W[co][ci][ky][kx] at [offset, offset + cout cin k^2), then its bias (cout
    values). `kind` conv3, down, up or conv1; `cina` of its cin input channels come from
    input `a` (a layer's name, or "F" the network's input), the rest from input `b` (a
    concatenation's second part: the skip) or none; `scale_in`, `scale_out` the scales k of
    its input and output (the image halves from k to k + 1); `relu` whether its output is
    relu'd."""

    name: str
    kind: str
    cin: int
    cout: int
    k: int
    offset: int
    cina: int = 0
    a: str = ""
    b: str = ""
    scale_in: int = 0
    scale_out: int = 0
    relu: bool = True

    @property
    def weights(self) -> int:
        return self.cout * self.cin * self.k * self.k

    @property
    def end(self) -> int:
        return self.offset + self.weights + self.cout


def layers(width: int, scales: int, cfa: int = RGB) -> list[Layer]:
    """The layers of a U-Net of `scales` scales and `width` channels at the finest (width << k
    at scale k), contiguous from offset 0. `cfa` RGB, RGGB, CELLS or MOSAIC: the network of
    RGGB mosaics (README.md, "Bayer mosaics") reads 5 planes per cell of 2 x 2 photosites (R,
    G1, G2, B, sigma), that of RGB cells 13 (the 4 pixels' r, g, b, and sigma) and that of
    mosaics of any pattern 25 (the 4 photosites' values in their colours' planes, their
    colours as 12 planes of 0 and 1, and sigma) instead of 4; each writes 12 (each pixel's r,
    g, b) instead of 3."""
    if cfa not in CIN:
        raise ValueError(f"cfa {cfa!r}: RGB (0), RGGB (1), CELLS (2) or MOSAIC (3)")
    if width < 1 or scales < 2:
        raise ValueError(f"width {width}, scales {scales}: a U-Net needs width >= 1 and "
                         "scales >= 2")
    out: list[Layer] = []

    def add(name, kind, cin, cout, a, k_in, k_out, b="", cina=None, relu=True):
        off = out[-1].end if out else 0
        out.append(Layer(name, kind, cin, cout, KSIZE[kind], off, cin if cina is None else cina,
                         a, b, k_in, k_out, relu))

    ws = [width << k for k in range(scales)]
    prev = "F"
    for k in range(scales):
        cin = CIN[cfa] if k == 0 else ws[k - 1]
        add(f"enc{k}a", "conv3", cin, ws[k], prev, k, k)
        add(f"enc{k}", "conv3", ws[k], ws[k], f"enc{k}a", k, k)
        if k < scales - 1:
            add(f"down{k}", "down", ws[k], ws[k], f"enc{k}", k, k + 1, relu=False)
            prev = f"down{k}"
    g = f"enc{scales - 1}"
    for k in range(scales - 2, -1, -1):
        add(f"up{k}", "up", ws[k + 1], ws[k], g, k + 1, k, relu=False)
        add(f"dec{k}a", "conv3", 2 * ws[k], ws[k], f"up{k}", k, k, b=f"enc{k}", cina=ws[k])
        add(f"dec{k}", "conv3", ws[k], ws[k], f"dec{k}a", k, k)
        g = f"dec{k}"
    add("out", "conv1", ws[0], 12 if cfa else 3, g, 0, 0, relu=False)
    return out


def n_params(width: int, scales: int, cfa: int = RGB) -> int:
    return layers(width, scales, cfa)[-1].end
