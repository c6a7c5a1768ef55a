"""Denoise numpy images with kpn and a `.lut` of kpn-t weights, on one device.

    den = Denoiser(device, "graphs/weights/kpn-photo.lut")
    out = den(noisy, a, b)        # (h, w, 3) float32, linear in, linear out

The graph is i-array (the image) and i-lut (the weights) -> kpn -> o-array (host modules,
pipeline/hostmods). One build per image size, kept and reused for later images of that size:
the weights and kernels stay on the device and only the image and the noise params are
uploaded again.

An image whose buffers a storage buffer of the device cannot span (kpn's largest holds 16 tap
weights per pixel: 64 bytes, so about 2 megapixels on the CPU driver's 128 MiB) is denoised in
overlapping tiles of one size (one build): the image is mirror-padded, each tile reaches
MARGIN_PER_LEVEL * 2^levels pixels beyond the part of it that is kept, and tiles start on
multiples of 2^levels so that every tile's pyramid has the whole image's sampling grid. The
margin covers what a pixel's result depends on, so tiles meet without seams (measured: see
tests/test_denoise.py).

(a, b) is the image's noise profile in cnngenin's units, std(x) = sqrt(a + 65535 x b) / 65535;
it is always handed to kpn (`noise a`, `noise b`), and weights that do not use it ignore it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .cfg import apply_line
from .errors import GraphError
from .formats import read_lut
from .graph import Graph
from .registry import DEFAULT_DIR, Registry
from .runner import Build

HOST_MODULES = Path(__file__).resolve().parent / "hostmods"
BYTES_PER_PIXEL = 64  # kpn's largest buffer: 16 f32 tap weights per pixel (fwd's K)
MARGIN_PER_LEVEL = 4  # tile margin: 4 pixels of the coarsest filtered level (exact, see above)


class Denoiser:
    """kpn with fixed weights on one device; call it with (image, a, b)."""

    def __init__(self, device, weights: str | Path, levels: int | None = None,
                 max_pixels: int | None = None, profile: bool = False):
        """levels: kpn's pyramid levels (default: what the .lut's text says, else kpn's
        default; given and contradicting the text, kpn refuses the weights);
        max_pixels: the largest image run whole (default: what the device's storage buffers
        can span); larger ones are tiled; profile: GPU timestamps per node (bench)."""
        self.device = device
        self.weights = Path(weights)
        self.registry = Registry([DEFAULT_DIR, HOST_MODULES])
        self.levels = check_weights(self.weights, levels, self.registry)
        self.explicit_levels = levels is not None
        if max_pixels is None:
            span = int(getattr(getattr(device, "info", None), "max_storage_range", 0) or 0)
            max_pixels = span // BYTES_PER_PIXEL if span else 1 << 62
        self.max_pixels = max_pixels
        self.profile = profile
        self.builds: dict[tuple[int, int], tuple[Build, Graph]] = {}

    def _build(self, image: np.ndarray) -> tuple[Build, Graph]:
        ht, wd = image.shape[:2]
        key = (wd, ht)
        if key not in self.builds:
            g = Graph(self.registry)
            g.add_module("i-array", "main").data["image"] = image
            # the API rather than cfg lines: a weights path may hold a ':'
            g.add_module("i-lut", "w").set_param("filename", str(self.weights.resolve()))
            kpn = g.add_module("kpn", "01")
            if self.explicit_levels:  # else kpn takes the weights' own
                kpn.set_param("levels", self.levels)
            g.add_module("o-array", "main")
            g.connect("i-array", "main", "output", "kpn", "01", "input")
            g.connect("i-lut", "w", "output", "kpn", "01", "w")
            g.connect("kpn", "01", "output", "o-array", "main", "input")
            self.builds[key] = (Build(g, self.device, profile=self.profile), g)
        return self.builds[key]

    def __call__(self, image: np.ndarray, a: float, b: float) -> np.ndarray:
        """The denoised rgb (h, w, 3) float32 of a linear float image (h, w, >= 3 or grey)."""
        image = np.asarray(image, np.float32)
        if image.ndim == 2:
            image = image[:, :, None]
        if image.ndim != 3 or min(image.shape) < 1:
            raise GraphError(f"expected an image (h, w, channels), got shape {image.shape}")
        ht, wd = image.shape[:2]
        if wd * ht <= self.max_pixels:
            return self._run(image, a, b)
        return self._tiled(image, a, b)

    def _run(self, image: np.ndarray, a: float, b: float) -> np.ndarray:
        build, g = self._build(image)
        g.modules[("i-array", "main")].data["image"] = image
        for name, value in (("noise a", a), ("noise b", b)):
            apply_line(g, f"param:kpn:01:{name}:{float(value)!r}", "denoise")
        build.run_frame(0)  # frame 0: the sources upload again, the params if they changed
        return np.ascontiguousarray(g.modules[("o-array", "main")].data.pop("image")[..., :3])

    def tiling(self, wd: int, ht: int) -> tuple[int, int]:
        """(core, margin) of the tiles for an image too large to run whole: each tile keeps
        core x core pixels and reaches margin pixels beyond them (less at the image's edges),
        at most max_pixels in all."""
        step = 1 << self.levels
        margin = MARGIN_PER_LEVEL * step
        core = (int(np.sqrt(self.max_pixels)) - 2 * margin) // step * step
        if core < step:
            raise GraphError(f"cannot denoise a {wd}x{ht} image on this device: its buffers "
                             f"hold at most {self.max_pixels} pixels, less than one tile of "
                             f"{2 * margin + step}^2 with {self.levels} levels")
        return core, margin

    def _tiled(self, image: np.ndarray, a: float, b: float) -> np.ndarray:
        ht, wd = image.shape[:2]
        core, margin = self.tiling(wd, ht)
        out = np.empty((ht, wd, 3), np.float32)
        for y0, y1, ky0, ky1 in spans(ht, core, margin):
            for x0, x1, kx0, kx1 in spans(wd, core, margin):
                res = self._run(np.ascontiguousarray(image[y0:y1, x0:x1]), a, b)
                out[ky0:ky1, kx0:kx1] = res[ky0 - y0:ky1 - y0, kx0 - x0:kx1 - x0]
        return out


def check_weights(weights: Path, levels: int | None = None, registry=None) -> int:
    """kpn's pyramid levels for these weights, after checking what kpn would refuse at the
    first image: a missing, unreadable or non-finite .lut, one not of kpn-t's size, levels
    outside kpn's range (given, or from the .lut's text, said so) and a given `levels` the
    text contradicts. GraphError, once, before any image is read."""
    from vkgraph.modules.kpn.module import NW
    from vkgraph.modules.kpn_t.module import trained_with

    if not weights.exists():
        raise GraphError(f"weights '{weights}' do not exist")
    data, info, text = read_lut(weights, finite=True)
    if data.size != NW:
        raise GraphError(f"holds {info.wd}x{info.ht}x{info.channels} elements; kpn needs "
                         "kpn-t's weights, 64x448 (a .lut written by kpn-t's w output)",
                         where=str(weights))
    kpn = (registry or Registry([DEFAULT_DIR])).get("kpn")
    decl = next(p for p in kpn.params if p.name == "levels")
    trained = trained_with(text)["levels"] if text else None
    if trained is not None:
        decl.check([trained], "kpn", where=f"{weights}: the .lut's text says {trained} "
                   "pyramid levels")
    if levels is not None:
        decl.check([levels], "kpn")
        if trained is not None and levels != trained:
            raise GraphError(f"the weights were trained with {trained} pyramid levels (says "
                             f"the .lut's text), not {levels}", where=str(weights))
    return levels or trained or decl.default[0]


def spans(n: int, core: int, margin: int) -> list[tuple[int, int, int, int]]:
    """Tiles along one axis of n pixels: (start, stop) of each tile and (start, stop) of the
    part it keeps. The kept parts are consecutive runs of `core` pixels (the last one
    shorter); a tile reaches `margin` pixels beyond its kept part, clipped to the image, so
    the tiles at the edges see the same edge as the whole image. With core and margin
    multiples of 2^levels every tile starts on the whole image's pyramid grid."""
    out = []
    for k0 in range(0, n, core):
        k1 = min(n, k0 + core)
        out.append((max(0, k0 - margin), min(n, k1 + margin), k0, k1))
    return out
