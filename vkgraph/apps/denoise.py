"""Denoise numpy images with kpn and a `.lut` of kpn-t weights (or unet and unet-t's), on
one device.

    den = Denoiser(device, "graphs/weights/kpn-photo.lut")
    out = den(noisy, a, b)        # (h, w, 3) float32, linear in, linear out

The graph is i-array (the image) and i-lut (the weights) -> kpn -> o-array (host modules,
pipeline/hostmods), run through a `vkgraph.Session` (fed and read through its host ports).
Weights whose .lut text says "unet denoiser" (unet-t wrote them) run through the module unet
instead of kpn (`module`); what follows holds for both, but for the tiles' margin (below).
One session per image size, kept and reused for later images of that size: the weights and
kernels stay on the device and only the image and the noise params are uploaded again.

An image whose buffers a storage buffer of the device cannot span (kpn's largest holds 16 tap
weights per pixel: 64 bytes, so about 2 megapixels on the CPU driver's 128 MiB; arch 1's 32:
128 bytes) is denoised in overlapping tiles, all of one size (so one build, whose buffers are
the run's device memory): each tile reaches at least MARGIN_PER_LEVEL[arch] * 2^depth pixels beyond
the part of it that is kept (or to the image's edge, where it then sees the image's own
border), and tiles start on multiples of 2^depth so that every tile's pyramid has the whole
image's sampling grid; depth is the pyramid's: the levels, one more for arch 1 and 2 (whose
features read the next coarser level's detail); arch 2's block matching reaches 7 pixels
further at every level, which 2 more pixels of margin at the coarsest level cover. The
margin covers what a pixel's result depends on, so tiles meet without seams (measured: see
tests/test_denoise.py). unet: tiles start on the network's grid of 2^(scales - 1) pixels
(unet pads each tile, as the whole image, mirrored to a multiple of it: a tile that ends at
the image's edge pads as the whole image does) and the margin is the U-Net's reach (unet-t's
forward.reach: every pixel the result at a kept pixel depends on, through every conv, down
and up; 23 pixels with 3 scales) rounded up to that grid, so a tile computes its kept
pixels from the same numbers in the same order as the whole image: tiled output equals the
untiled one (tests/test_unet_infer.py). Its buffers are many (every layer's activations, up
to `width` floats a pixel each), so unet's max_pixels is also what 3/4 of the device's
memory holds. The tile counts per axis are those that denoise the fewest pixels.
`on_tile(done, total)`, where set, is called before the first tile (done 0) and after each
tile (progress within a file).

8-bit sRGB photos (`srgb(pixels, a, b)`, on one pass of rgb weights; `srgb8()` says
whether a photo should take it: on a GPU; whole up to `limits["srgb8"]` pixels, else in
tiles of it as above): the graph is i-bytes
(the pixels as they lie in memory, one uint32 each) -> srgb-in (linear rgba) -> kpn or unet
-> srgb-out (packed 8-bit sRGB, and the count of non-finite pixels) -> o-array, so the 8
bits travel to and from the device instead of 32-bit floats (12 MP: 48 MB each way instead
of 192) and the sRGB curves run on the GPU. The curves are the host's own tables on the
device (shaders/include/srgb8.glsl): the same float32 input and the same codes as the host's
conversions (tests/test_srgb8.py).

A raw file's mosaic as the camera stored it (`raw16(values, black, scale, matrix, a, b)`, on
weights of RGGB mosaics): i-bytes (two 16-bit photosites a uint32) -> raw-in (levels and
white balance: the normalised mosaic as rgba) -> unet -> rgb-out (the camera matrix; three
floats a pixel, and the count of non-finite pixels) -> o-array: 48 MB up for 24 megapixels
instead of 384 of rgba floats, and 288 down instead of 384; in bands of whole rows of at most
`limits["raw16"]` photosites (tiling's `bands`: each band is final when it is done, and an EXR
writer streams it), the rgb pixel by pixel or, `planar`, as each row's r, g and b planes.

(a, b) is the image's noise profile in cnngenin's units, std(x) = sqrt(a + 65535 x b) / 65535;
it is always handed to kpn (`noise a`, `noise b`), and weights that do not use it ignore it.

`ensemble` n (1, 2, 4 or 8): the mean of kpn's results on n flips and rotations of the image
(1: the image; 2: and its mirror; 4: its four rotations; 8: and their mirrors), each undone
before the mean. The filter is not rotation-invariant, so the results differ and their mean
is cleaner (measured: +0.13 dB with 4, bench/README.md) for n times kpn's time.

unet-t's weights of RGGB mosaics (their .lut's text has the line `cfa rggb`; `cfa`) denoise
and demosaic at once: the image is a mosaic, (h, w) or channels of which each photosite's own
colour is read (red at even rows and columns), of even width and height, and the result is
its full-resolution rgb. Tiles then start on the network's grid of 2 * 2^(scales - 1) pixels
(whole cells: the colour phase stays), the margin is forward.reach's for mosaics, and each
flip or rotation of an ensemble, which moves red within the cells, is brought back to RGGB
(rggb_phase) and cropped after.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..api import Session
from ..pipeline.errors import GraphError
from ..pipeline.formats import by_rows, copied, copy_rows, non_finite, planar_rows, read_lut
from ..pipeline.graph import Graph
from ..pipeline.registry import DEFAULT_DIR, HOST_MODULES, Registry
from ..pipeline.runner import Build

log = logging.getLogger("vkgraph")

# ensemble n -> its (quarter turns, mirrored) of the image: 2 the image and its mirror, 4 the
# four rotations, 8 those and their mirrors
ENSEMBLES = {1: ((0, False),), 2: ((0, False), (0, True)),
             4: tuple((k, False) for k in range(4)),
             8: tuple((k, m) for m in (False, True) for k in range(4))}
KEEP_BUILDS = 2  # builds kept per Denoiser (a size and its rotation); older ones are closed
# tile margin in pixels of the coarsest level (see above), by arch
MARGIN_PER_LEVEL = {0: 4, 1: 4, 2: 6}
MEMORY_SHARE = 0.75  # of the device's memory, for unet's buffers (max_pixels)
# the most pixels srgb() runs at once: a GPU driver's time to allocate and free a build's
# memory grows with its bytes (a 12 MP photo's U-Net: 5.4 GiB, 174 ms to allocate and 134 to
# free on an H100), and the work of a tile is no faster than the same pixels in a whole image,
# so tiles of ~3 MP (1.1 GiB) take 0.3 s less from a 12 MP photo's command than one build
# (bench/README.md, denoise_wall.py)
SRGB8_TILE = 3 << 20
# the most photosites raw16() runs at once (tiles of it beyond), for the same reason
RAW16_TILE = 6 << 20
# a Denoiser's paths from the host to the network and back: kind -> (the source, the
# device's conversion after it, the one after the network); "float" uploads linear rgba
# floats and downloads the network's rgba
PATHS = {"float": ("i-array", None, None), "srgb8": ("i-bytes", "srgb-in", "srgb-out"),
         "raw16": ("i-bytes", "raw-in", "rgb-out")}


class Denoiser:
    """kpn (or unet, for unet-t's weights) with fixed weights on one device; call it with
    (image, a, b)."""

    def __init__(self, device, weights: str | Path, levels: int | None = None,
                 max_pixels: int | None = None, profile: bool = False, ensemble: int = 1):
        """levels: kpn's pyramid levels (default: what the .lut's text says, else kpn's
        default; given and contradicting the text, kpn refuses the weights; given with
        unet-t's weights, an error: a U-Net has none);
        max_pixels: the largest image run whole (default: what the device's storage buffers
        can span); larger ones are tiled; profile: GPU timestamps per node, each frame's sum
        in gpu_ms (bench);
        ensemble: flips and rotations averaged (ENSEMBLES)."""
        if ensemble not in ENSEMBLES:
            raise GraphError(f"ensemble {ensemble}: 1, 2, 4 or 8 flips and rotations")
        self.device = device
        self.weights = Path(weights)
        self.registry = Registry([DEFAULT_DIR, HOST_MODULES])
        from vkgraph.modules.unet_t.net import MOSAIC, RGB, RGGB

        info = unet_info(self.weights, levels)  # (width, scales, cfa) of unet-t's, else None
        self.net = info[:2] if info else None  # (width, scales)
        self.cells = info[2] if info else RGB  # what the network reads (unet-t's net.py)
        self.cfa = self.cells == RGGB  # weights of RGGB mosaics
        self.any_pattern = self.cells == MOSAIC  # of mosaics of any pattern, colours in alpha
        self.explicit_levels = levels is not None
        self.ensemble = ensemble
        if self.net is not None:
            from vkgraph.modules.unet_t.forward import bytes_per_pixel, reach

            self.module = "unet"
            self.levels, self.arch = None, 0
            # tiles' grid: 2^(scales - 1), unet's padding (of cells: twice that)
            self.depth = self.net[1] - 1 + int(self.cells > 0)
            step = 1 << self.depth
            self.margin = -(-reach(self.net[1], self.cells) // step) * step
            self.pad = step  # unet runs at the size padded to it (max_pixels counts those)
            largest, total = bytes_per_pixel(*self.net, cfa=self.cells)
            budget = int((getattr(getattr(device, "info", None), "memory_mib", 0) or 0)
                         * MEMORY_SHARE) << 20
            self.max_pixels = max_pixels or min(max_pixels_of(device, largest),
                                                budget // total if budget else 1 << 62)
        else:
            from vkgraph.modules.kpn_t.forward import arch_shape

            self.module = "kpn"
            self.levels, self.arch = weights_info(self.weights, levels, self.registry)
            self.depth = self.levels + int(self.arch > 0)  # the pyramid's (tiles' grid, margin)
            self.margin = MARGIN_PER_LEVEL[self.arch] << self.depth
            self.pad = 1
            # kpn's largest buffer: fwd's K, its f32 values a pixel (16; arch 1: 32, arch 2: 64)
            self.max_pixels = max_pixels or max_pixels_of(device, 4 * arch_shape(self.arch)[1])
        self.profile = profile
        self.gpu_ms: list[float] = []  # profile: each frame's node times summed, as it ends
        # (wd, ht, fp32, kind) -> ...
        self.sessions: dict[tuple[int, int, bool, str], Session] = {}
        self.on_tile = None  # on_tile(done, total) after each tile of a tiled image
        self.fp32 = False  # the fp32 kernels (after the f16 ones overflowed)
        # the largest image of a kind run whole (larger ones in tiles of it): 8-bit photos
        # (srgb()) and 16-bit mosaics (raw16()) in tiles of a few megapixels
        self.limits = {"srgb8": min(self.max_pixels, SRGB8_TILE),
                       "raw16": min(self.max_pixels, RAW16_TILE)}

    def pixels(self, wd: int, ht: int) -> int:
        """The pixels the module runs at for a wd x ht image (unet: its padded size)."""
        p = self.pad
        return -(-wd // p) * p * (-(-ht // p) * p)

    @property
    def builds(self) -> dict[tuple[int, int, bool, str], tuple[Build, Graph]]:
        """{(wd, ht, fp32, kind): (build, graph)} of the sessions kept, oldest first."""
        return {key: (s.build, s.graph) for key, s in self.sessions.items()}

    def _session(self, image: np.ndarray, kind: str = "float") -> Session:
        """The session of the image's size and kind (PATHS; made, or the kept one), fed the
        image: linear floats, else (h, w, 4) uint8 ("srgb8": 8-bit sRGB pixels; "raw16": a
        16-bit mosaic's bytes, two photosites a uint32)."""
        ht, wd = image.shape[:2]
        key = (wd, ht, self.fp32, kind)
        if key in self.sessions:
            self.sessions[key] = self.sessions.pop(key)  # the most recently used last
        else:
            while len(self.sessions) >= KEEP_BUILDS:  # free the device memory of the oldest
                self.sessions.pop(next(iter(self.sessions))).close()
            source, into, out = PATHS[kind]
            g = Graph(self.registry)
            g.add_module(source, "main")
            # the API rather than cfg lines: a weights path may hold a ':'
            g.add_module("i-lut", "w").set_param("filename", str(self.weights.resolve()))
            den = g.add_module(self.module, "01")
            if self.explicit_levels:  # else kpn takes the weights' own
                den.set_param("levels", self.levels)
            if self.fp32:
                den.set_param("fp32", 1)
            g.add_module("o-array", "main")
            g.connect("i-lut", "w", "output", self.module, "01", "w")
            first, last = (source, "main"), (self.module, "01")
            if into is not None:  # the device's conversions before and after the network
                g.add_module(into, "main")
                g.add_module(out, "main")
                g.add_module("o-array", "bad")
                g.connect(source, "main", "output", into, "main", "input")
                g.connect(out, "main", "bad", "o-array", "bad", "input")
                first = (into, "main")
                g.connect(self.module, "01", "output", out, "main", "input")
                last = (out, "main")
            g.connect(*first, "output", self.module, "01", "input")
            g.connect(*last, "output", "o-array", "main", "input")
            # every kernel of kpn and unet writes its outputs whole: they may share memory
            self.sessions[key] = Session(g, self.device, profile=self.profile, transient=True)
        session = self.sessions[key]
        session.feed(f"{PATHS[kind][0]}:main", image)
        return session

    def prepare(self, wd: int, ht: int, kind: str = "float") -> None:
        """Build now what the first call with a wd x ht image of this kind (PATHS) needs
        (its session: the whole image's, or its tiles'; "srgb8" where srgb8() allows it),
        fed zeros until the image comes: `vkgraph denoise` builds while the photo is still
        being decoded (the build is pipeline creation in the driver, which lets go of the
        GIL)."""
        if kind == "srgb8" and not self.srgb8():
            kind = "float"  # the build the command's call will want
        limit = self.limits.get(kind, self.max_pixels)
        if self.pixels(wd, ht) > limit:
            cx, cy, margin = self.tiling(wd, ht, limit, bands=kind == "raw16")
            step = 1 << self.depth
            wd, ht = tile_length(wd, cx, margin, step), tile_length(ht, cy, margin, step)
        if kind == "float":
            zeros = np.zeros((ht, wd, 4), np.float32)
        else:  # 8-bit pixels (h, w, 4); raw16's (h, w) photosites as (h, w / 2, 4) bytes
            zeros = np.zeros((ht, wd // 2 if kind == "raw16" else wd, 4), np.uint8)
        self._session(zeros, kind).prepare()

    def close(self) -> None:
        """Free the sessions' device memory (the device stays open)."""
        for session in self.sessions.values():
            session.close()
        self.sessions.clear()

    def srgb8(self) -> bool:
        """Whether an 8-bit sRGB photo should run in its 8 bits (srgb()), whatever its size:
        on a GPU, one pass (ensemble 1), rgb weights (not a mosaic's). A CPU driver runs the
        host's float path: the kernels' tables cost it 0.45 s a megapixel against the host's
        tables' few tens of ms (lavapipe indexes a constant array by copying it per thread)."""
        return self._one_rgb_pass() and on_gpu(self.device)

    def _one_rgb_pass(self) -> bool:
        """What srgb() needs of the weights and the ensemble."""
        return self.ensemble == 1 and not self.cfa

    def srgb(self, pixels: np.ndarray, a: float, b: float) -> np.ndarray:
        """The denoised (h, w, 4) uint8 sRGB (alpha 255) of 8-bit sRGB pixels (h, w, 4)
        uint8 (formats.rgbx8: alpha 255), with the noise profile
        (a, b) of their linear values: decoded, denoised and encoded on the device (module
        docstring). Non-finite values of the network are refused as __call__ refuses them
        (the fp32 kernels tried first where f16 ones overflowed)."""
        if pixels.dtype != np.uint8 or pixels.shape[2:] != (4,) or not self._one_rgb_pass():
            raise GraphError(f"srgb: expected (h, w, 4) uint8 pixels, one pass of rgb "
                             f"weights, got {pixels.dtype} {pixels.shape}")

        def run() -> tuple[np.ndarray, str | None]:
            out, bad = self._srgb_all(pixels, a, b)
            return out, f"{bad} pixels of non-finite values" if bad else None

        return self._finite(run)

    def _srgb_all(self, pixels: np.ndarray, a: float, b: float) -> tuple[np.ndarray, int]:
        """(the 8-bit result, its non-finite pixels) of the whole photo, or of its tiles of
        at most limits["srgb8"] put together."""
        bad = [0]

        def run(part: np.ndarray, a: float, b: float) -> np.ndarray:
            out, n = self._run_srgb8(part, a, b)
            bad[0] += n
            return out

        return self._denoise(pixels, a, b, run, self.limits["srgb8"]), bad[0]

    def _run_srgb8(self, pixels: np.ndarray, a: float, b: float) -> tuple[np.ndarray, int]:
        session = self._step(pixels, "srgb8", a, b)
        out = session.take("o-array:main").view(np.uint8).reshape(pixels.shape)
        return out, self._ended(session, int(session.take("o-array:bad")[0]))

    def _ended(self, session: Session, result):
        """result, after the frame of `session` whose outputs it took (their downloads waited
        for the frame) is timed in gpu_ms where the Denoiser profiles."""
        if self.profile:
            self.gpu_ms.append(sum(ms for _, ms in session.build.timings()))
        return result

    def _step(self, image: np.ndarray, kind: str, a: float, b: float,
              params: dict | None = None) -> Session:
        """The session of the image's kind, fed it, its noise params (and `params`, {(module,
        param): value} of the device's conversions, PATHS) set, and run."""
        session = self._session(image, kind)
        session.set(f"{self.module}:01", "noise a", float(a))
        session.set(f"{self.module}:01", "noise b", float(b))
        for (module, name), value in (params or {}).items():
            session.set(f"{module}:main", name, value)
        session.step(0)  # frame 0: the sources upload again, the params if they changed
        return session

    def raw16(self, values: np.ndarray, black, scale, matrix, a: float, b: float,
              rows=None, planar: bool = False) -> np.ndarray:
        """The denoised and demosaiced (h, w, 3) float32 rgb of an RGGB mosaic as stored,
        (h, w) uint16 of even size (weights of mosaics, `cfa`): on the device each
        photosite is made (code - black) * scale with the black and scale (2 x 2 each) of
        its place in its cell, the network runs, and its rgb is multiplied by `matrix` (3 x
        3) and downloaded as three floats a pixel (modules raw-in and rgb-out): 2 bytes a
        photosite up instead of rgba floats' 16, no host pass over the values. Whole up to
        limits["raw16"] photosites, else in tiles; non-finite results refused as
        __call__ refuses them. rows(out, stop), where given, is told as rows [0, stop) of
        the result become final (an fp32 retry starts again with another array). planar:
        the result is a view of (h, 3, w) memory, each row's r, g and b planes (rgb-out's
        `planar`: what an OpenEXR scanline holds, pipeline/exrstream.py)."""
        values = np.asarray(values)
        if (not self.cfa or values.dtype != np.uint16 or values.ndim != 2
                or values.shape[0] % 2 or values.shape[1] % 2 or self.ensemble != 1):
            raise GraphError(f"raw16: expected an RGGB mosaic of uint16 codes of even width "
                             f"and height and one pass of weights of mosaics, got "
                             f"{values.dtype} {values.shape} (ensemble {self.ensemble})")
        params = {("raw-in", "black"): [float(v) for v in np.ravel(black)],
                  ("raw-in", "scale"): [float(v) for v in np.ravel(scale)],
                  ("rgb-out", "matrix"): [float(v) for v in np.ravel(matrix)],
                  ("rgb-out", "planar"): int(planar)}
        bad = [0]

        def run(part: np.ndarray, a: float, b: float) -> np.ndarray:
            h, w = part.shape
            session = self._step(part.view(np.uint8).reshape(h, w // 2, 4), "raw16", a, b,
                                 params)
            bad[0] += int(session.take("o-array:bad")[0])
            out = self._ended(session, session.take("o-array:main"))
            return out.reshape(h, 3, w).transpose(0, 2, 1) if planar else out.reshape(h, w, 3)

        def whole() -> tuple[np.ndarray, str | None]:
            bad[0] = 0
            out = self._denoise(values, a, b, run, self.limits["raw16"], rows, bands=True)
            return out, f"{bad[0]} pixels of non-finite values" if bad[0] else None

        return self._finite(whole)

    def __call__(self, image: np.ndarray, a: float, b: float) -> np.ndarray:
        """The denoised rgb (h, w, 3) float32 of a linear float image (h, w, >= 3 or grey)
        (for an image run whole, a view of the rgba that the module's output downloads to)."""
        image = np.asarray(image, np.float32)
        if image.ndim == 2:
            image = image[:, :, None]
        if image.ndim != 3 or min(image.shape) < 1:
            raise GraphError(f"expected an image (h, w, channels), got shape {image.shape}")
        if self.cfa:
            if image.shape[0] % 2 or image.shape[1] % 2:
                raise GraphError(f"a {image.shape[1]}x{image.shape[0]} mosaic: the weights "
                                 f"{self.weights} are of RGGB mosaics, whose width and height "
                                 "must be even (whole 2 x 2 cells)")
            if image.shape[2] < 3:  # a mosaic: its upload repeats it into r, g and b, of
                image = image[:, :, :1]  # which each photosite's own colour is read

        def run() -> tuple[np.ndarray, str | None]:
            out = self._mean(image, a, b)
            if non_finite(out) is None:  # its min and max (12 MP: 10-20 ms)
                return out, None
            return out, f"{int((~np.isfinite(out)).sum())} non-finite values"

        return self._finite(run)

    def _finite(self, run) -> np.ndarray:
        """run() -> (a result, what in it is not finite, or None): its result, run again
        with the fp32 kernels where the f16 ones left something not finite; a GraphError
        saying what where that stays."""
        out, bad = run()
        if bad and not self.fp32 and self._f16():
            # f16 activations overflow with weights that grew large in training (kpn) or an
            # input far outside the trained range (unet): the same maths in fp32 (slower;
            # kept for this denoiser's later images too)
            log.warning("%s: the f16 kernels overflowed with the weights %s; running the "
                        "fp32 ones", self.module, self.weights)
            self.fp32 = True
            out, bad = run()
        if bad:
            raise GraphError(f"{self.module}'s output with the weights {self.weights} has "
                             f"{bad}")
        return out

    def _mean(self, image: np.ndarray, a: float, b: float) -> np.ndarray:
        """kpn's result, or the mean over the ensemble's flips and rotations (each undone).
        A flipped or rotated RGGB mosaic has another colour phase (where red is in its 2 x 2
        cells, ensemble_phase): it is brought back to RGGB (rggb_phase) and the result
        cropped before it is undone. The flips, the sum and the mean run in bands of rows on
        the host's threads, the sum in place (12 MP on one core: 0.43 s as whole-array
        copies, 0.24 s in place)."""
        if self.ensemble == 1:
            return self._denoise(image, a, b)
        out = None
        for rot, mirror in ENSEMBLES[self.ensemble]:
            x = np.rot90(image, rot)
            x = x[:, ::-1] if mirror else x
            if self.cfa:
                ry, rx = ensemble_phase(rot, mirror)
                h, w = x.shape[:2]
                x = rggb_phase(x, (ry, rx))
                y = self._denoise(contiguous(x), a, b)[ry:ry + h, rx:rx + w]
            else:
                y = self._denoise(contiguous(x), a, b)
            y = np.rot90(y[:, ::-1] if mirror else y, -rot)
            if out is None:
                out = copied(y)
            else:
                by_rows(lambda r0, r1, s=out, y=y: np.add(s[r0:r1], y[r0:r1], out=s[r0:r1]), out)
        out *= out.dtype.type(1 / self.ensemble)  # (exact: n is a power of two)
        return out

    def _f16(self) -> bool:
        """Whether the builds so far ran f16 kernels (kpn's MLP, unet's layers)."""
        key = "mlp" if self.module == "kpn" else "kernels"
        return any(s.module(f"{self.module}:01").data.get(key) in ("fused", "coopmat")
                   for s in self.sessions.values())

    def _denoise(self, image: np.ndarray, a: float, b: float, run=None,
                 limit: int | None = None, rows=None, bands: bool = False) -> np.ndarray:
        """run(image, a, b) (default _run: the float path) on the whole image where it holds
        at most `limit` pixels (default max_pixels), else on its tiles (_tiled; bands:
        tiling's). rows(out, stop), where given, is told as rows [0, stop) of the result
        `out` become final."""
        run, limit = run or self._run, limit or self.max_pixels
        ht, wd = image.shape[:2]
        if self.pixels(wd, ht) <= limit:
            out = run(image, a, b)
            if rows is not None:
                rows(out, ht)
            return out
        return self._tiled(image, a, b, run, limit, rows, bands)

    def _run(self, image: np.ndarray, a: float, b: float) -> np.ndarray:
        # a view: the rgba is the download's own
        session = self._step(image, "float", a, b)
        return self._ended(session, session.take("o-array:main")[..., :3])

    def tiling(self, wd: int, ht: int, limit: int | None = None, bands: bool = False
               ) -> tuple[int, int, int]:
        """(core x, core y, margin) of the tiles for an image too large to run whole: tiles
        keep runs of core pixels (the last one shorter) and are tile_length() long, at most
        `limit` (default max_pixels) in all (unet: padded); the counts per axis are those
        with the fewest pixels denoised. bands: tiles of whole rows where they fit (a band
        of rows is then final as each tile is done, which a writer streams, raw16), though
        a landscape photo's strips of whole columns would denoise a few % fewer pixels."""
        limit = limit or self.max_pixels
        step = 1 << self.depth
        margin = self.margin
        best = None
        for nx in range(1, -(-wd // step) + 1):
            cx = _ceil(_ceil(wd, nx), step) * step  # wd / nx up to a whole step
            lx = tile_length(wd, cx, margin, step)
            for ny in range(1, -(-ht // step) + 1):
                cy = _ceil(_ceil(ht, ny), step) * step
                ly = tile_length(ht, cy, margin, step)
                if self.pixels(lx, ly) <= limit:  # more rows only add pixels
                    cost = (-(-wd // cx) * lx * -(-ht // cy) * ly, nx * ny)
                    if best is None or cost < best[0]:
                        best = (cost, cx, cy)
                    break
            if bands and best is not None:
                break  # (nx = 1 fits)
        if best is None:
            what = (f"{self.depth} pyramid levels" if self.module == "kpn" else
                    f"a U-Net of {self.net[1]} scales")
            raise GraphError(f"cannot denoise a {wd}x{ht} image on this device: its buffers "
                             f"hold at most {limit} pixels, less than one tile of "
                             f"{2 * margin + step}^2 with {what}")
        return best[1], best[2], margin

    def _tiled(self, image: np.ndarray, a: float, b: float, run=None,
               limit: int | None = None, rows=None, bands: bool = False) -> np.ndarray:
        """run(tile, a, b) (default _run: the rgb of the float path) over the tiles of
        tiling(limit, bands), put together, a band of rows after another; the result has
        run's channels, dtype and layout (empty_as). rows(out, stop) after each band
        (_denoise)."""
        run = run or self._run
        ht, wd = image.shape[:2]
        cx, cy, margin = self.tiling(wd, ht, limit, bands)
        step = 1 << self.depth
        ys = spans(ht, cy, margin, tile_length(ht, cy, margin, step))
        xs = spans(wd, cx, margin, tile_length(wd, cx, margin, step))
        out = None
        if self.on_tile is not None:
            self.on_tile(0, len(ys) * len(xs))
        for k, ((y0, y1, ky0, ky1), (x0, x1, kx0, kx1)) in enumerate(
                (r, c) for r in ys for c in xs):
            res = run(contiguous(image[y0:y1, x0:x1]), a, b)
            if out is None:
                out = empty_as(res, ht, wd)
            copy_rows(out[ky0:ky1, kx0:kx1], res[ky0 - y0:ky1 - y0, kx0 - x0:kx1 - x0])
            if rows is not None and kx1 == wd:  # the band's last tile
                rows(out, ky1)
            if self.on_tile is not None:
                self.on_tile(k + 1, len(ys) * len(xs))
        return out


def on_gpu(device) -> bool:
    """Whether the device is a GPU (any but a CPU driver): what takes the GPU's weights
    (`vkgraph denoise`'s defaults) and paths (srgb8)."""
    return getattr(getattr(device, "info", None), "type", "") != "CPU"


def empty_as(like: np.ndarray, ht: int, wd: int) -> np.ndarray:
    """An empty (ht, wd, c) array of like's channels and dtype, laid out as `like`: pixel
    by pixel, or (an (h, w, c) view of (h, c, w) memory, raw16's planar result) a row's
    channel planes one after another."""
    c = like.shape[2]
    if c > 1 and planar_rows(like):
        return np.empty((ht, c, wd), like.dtype).transpose(0, 2, 1)
    return np.empty((ht, wd, c), like.dtype)


def check_weights(weights: Path, levels: int | None = None, registry=None) -> int | None:
    """kpn's pyramid levels for these weights (weights_info); None for unet-t's
    (unet_info)."""
    if unet_info(weights, levels) is not None:
        return None
    return weights_info(weights, levels, registry)[0]


RGGB = ((0, 1), (1, 2))  # colour indices (r 0, g 1, b 2) of a 2 x 2 cell, red first


def bayer_red(cfa) -> tuple[int, int] | None:
    """(row, column) of red in a 2 x 2 Bayer pattern (green on the other diagonal, blue
    opposite red); None for any other pattern (X-Trans, or a 2 x 2 that is not Bayer)."""
    c = np.asarray(cfa)
    if c.shape != (2, 2) or np.count_nonzero(c == 0) != 1:
        return None
    ry, rx = (int(v) for v in np.argwhere(c == 0)[0])
    ok = c[1 - ry, 1 - rx] == 2 and c[ry, 1 - rx] == 1 and c[1 - ry, rx] == 1
    return (ry, rx) if ok else None


def contiguous(x: np.ndarray) -> np.ndarray:
    """x itself where it is C-contiguous, else a copy made in bands of rows on the host's
    threads (copied): a flipped 12 MP photo took 77 ms on one core."""
    return x if x.flags.c_contiguous else copied(x)


def ensemble_phase(rot: int, mirror: bool) -> tuple[int, int]:
    """(row, column) of red in the 2 x 2 cells of an RGGB mosaic of even size after
    np.rot90(., rot) and then (mirror) a left-right flip: the same for every even size, so a
    2 x 2 cell shows it."""
    cell = np.rot90(np.array(RGGB), rot)
    return bayer_red(cell[:, ::-1] if mirror else cell)


def rggb_phase(mosaic: np.ndarray, red: tuple[int, int]) -> np.ndarray:
    """A Bayer mosaic (h, w[, channels]) whose red is at `red` (row, column) in its cells,
    brought to the RGGB phase and to an even size by mirrored rows and columns in front of
    and after it (numpy's "reflect": row -1 is row 1, of the same colours); it starts at
    `red` in the result. The mosaic itself where it already is so."""
    pad = rggb_padding(*mosaic.shape[:2], red) + ((0, 0),) * (mosaic.ndim - 2)
    return np.pad(mosaic, pad, mode="reflect") if any(map(any, pad)) else mosaic


def rggb_padding(h: int, w: int, red: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    """((rows before, after), (columns before, after)) that rggb_phase mirrors around an h x w
    mosaic whose red is at `red`: red to the front, then an even size."""
    top, left = red
    return (top, (h + top) % 2), (left, (w + left) % 2)


def unet_info(weights: Path, levels: int | None = None) -> tuple[int, int, int] | None:
    """(width, scales, cfa) of unet-t's weights (their .lut's text says "unet denoiser"; cfa:
    unet-t's net.RGB, RGGB (of mosaics, the line `cfa rggb`), MOSAIC (of mosaics of any
    pattern, `cfa any`) or CELLS (`cells rgb`)), checked
    as unet would at the first image: the text's shape, the weights' count, finite values;
    None for other weights (kpn's). A given
    `levels` is an error: a U-Net has no pyramid. GraphError, once, before any image is
    read."""
    from vkgraph.modules.unet_t.forward import is_unet_text, network_of_text

    if not weights.exists():
        raise GraphError(f"weights '{weights}' do not exist")
    data, info, text = read_lut(weights, finite=True)
    if not is_unet_text(text):
        return None
    width, scales, cfa = network_of_text(text, data.size, where=str(weights))
    if levels is not None:
        raise GraphError(f"levels {levels}: these are unet-t's weights (a U-Net of {scales} "
                         "scales), which have no pyramid levels; leave levels out",
                         where=str(weights))
    return width, scales, cfa


def weights_info(weights: Path, levels: int | None = None, registry=None) -> tuple[int, int]:
    """(kpn's pyramid levels, arch) for these weights, after checking what kpn would refuse
    at the first image: a missing, unreadable or non-finite .lut, one not of kpn-t's size,
    levels outside kpn's range (given, or from the .lut's text, said so) and a given `levels`
    the text contradicts. GraphError, once, before any image is read."""
    from vkgraph.modules.kpn_t.forward import NW, WIDTH
    from vkgraph.modules.kpn_t.module import trained_with

    if not weights.exists():
        raise GraphError(f"weights '{weights}' do not exist")
    data, info, text = read_lut(weights, finite=True)
    if data.size != NW:
        raise GraphError(f"holds {info.wd}x{info.ht}x{info.channels} elements; kpn needs "
                         f"kpn-t's weights, {WIDTH}x{NW // WIDTH} (a .lut written by kpn-t's "
                         "w output)",
                         where=str(weights))
    kpn = (registry or Registry([DEFAULT_DIR])).get("kpn")
    decl = next(p for p in kpn.params if p.name == "levels")
    said = trained_with(text) if text else {"levels": None, "arch": 0}
    trained = said["levels"]
    if trained is not None:
        decl.check([trained], "kpn", where=f"{weights}: the .lut's text says {trained} "
                   "pyramid levels")
    if levels is not None:
        decl.check([levels], "kpn")
        if trained is not None and levels != trained:
            raise GraphError(f"the weights were trained with {trained} pyramid levels (says "
                             f"the .lut's text), not {levels}", where=str(weights))
    return levels or trained or decl.default[0], said["arch"]


def _ceil(n: int, d: int) -> int:
    return -(-n // d)


def tile_length(n: int, core: int, margin: int, step: int) -> int:
    """The length of every tile along an axis of n pixels (n when one tile spans it): core +
    2 margin + n mod step, so that the last tile, which ends at n, starts on the grid too."""
    return min(n, core + 2 * margin + n % step)


def max_pixels_of(device, bytes_per_pixel: int) -> int:
    """The most pixels of `bytes_per_pixel` that one storage buffer of the device can span
    (unbounded where the device does not say)."""
    span = int(getattr(getattr(device, "info", None), "max_storage_range", 0) or 0)
    return span // bytes_per_pixel if span else 1 << 62


def spans(n: int, core: int, margin: int, length: int) -> list[tuple[int, int, int, int]]:
    """Tiles of `length` (tile_length()) along one axis of n pixels: (start, stop) of each
    tile and (start, stop) of the part it keeps. The kept parts are consecutive runs of
    `core` pixels (the last one shorter); a tile starts `margin` pixels before its kept part,
    or at 0, or at n - length (then it ends at the image's edge and sees the same edge as
    the whole image), and reaches at least `margin` beyond it or to n. With core and margin
    multiples of 2^levels every tile starts on the whole image's pyramid grid."""
    out = []
    for k0 in range(0, n, core):
        s = max(0, min(k0 - margin, n - length))
        out.append((s, s + length, k0, min(n, k0 + core)))
    return out
