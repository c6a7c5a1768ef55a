"""A raw file denoised: demosaic, then the RGB denoiser, then the camera matrix (behind
`vkgraph denoise photo.dng` and bench/raw_quality.py).

    dem = Demosaicer(device)
    rgb = dem(raw)                                     # balanced camera rgb (h, w, 3)
    out, profile = denoise_raw(den, dem, raw)          # linear Rec.709, NoiseProfile used

The demosaic graph is i-raw (fed the RawImage already read) -> demosaic -> o-array, one
session per mosaic size and pattern kept for later files. The chain: the mosaic is white-
balanced and demosaiced (modules/demosaic), denoised by vkgraph/apps/denoise.py's Denoiser with
the balanced noise profile (vkgraph/apps/camnoise.py: a scales with gain^2, b with gain; the mean
over r, g, b), then taken to linear Rec.709 by the camera matrix (3 x 3 per pixel on the
host). The denoiser sees white-balanced camera rgb, where the noise of the three channels is
independent (the matrix mixes them).

Weights of RGGB mosaics (unet-t's `cfa 1`, the Denoiser's `cfa`) take the mosaic itself and
demosaic as they denoise: the mosaic is white-balanced on the host (each photosite times its
colour's multiplier, as demosaic's `wb` does), brought to the RGGB phase and to an even size
by mirrored rows and columns (numpy's "reflect": row -1 is row 1, of the same colours), run,
and the result cropped back before the camera matrix. Bayer patterns only: X-Trans is an
error with those weights. Where the raw keeps its photosites as stored (read_raw's
`values`) and one pass is run, the stored codes go to the device instead, brought to RGGB
the same way, and the levels, white balance and camera matrix are applied there
(Denoiser.raw16: an eighth of the upload, no host pass over the values).

Weights of mosaics of any pattern (unet-t's `cfa 2`, the Denoiser's `any_pattern`) take the
mosaic of any pattern, X-Trans included, as it is: each photosite white-balanced, its value in
r, g and b and its colour in alpha (any_mosaic); they demosaic as they denoise, any size and
phase (the colours travel with the values through padding, flips and tiles).
"""

from __future__ import annotations

import weakref

import numpy as np

from ..api import Session
from ..pipeline.errors import GraphError
from ..pipeline.formats import PART, in_parts
from ..pipeline.graph import Graph
from ..pipeline.raw import RawImage
from ..pipeline.registry import DEFAULT_DIR, HOST_MODULES, Registry
from .camnoise import NoiseProfile, profile_for
from .denoise import bayer_red, max_pixels_of, rggb_padding, rggb_phase, spans, tile_length


class Demosaicer:
    """modules/demosaic on numpy mosaics, on one device. A mosaic whose rgba output a storage
    buffer of the device cannot span (16 bytes a pixel: 8 megapixels on the CPU driver's
    128 MiB) runs in bands of rows that start on the pattern's grid and reach REACH rows
    (rounded up to whole patterns) beyond the rows they keep, so the bands give exactly the
    whole mosaic's result."""

    REACH = 4  # 5 x 5 neighbourhoods, of X-Trans's green plane made from 5 x 5 ones

    def __init__(self, device, max_pixels: int | None = None):
        self.device = device
        self.registry = Registry([DEFAULT_DIR, HOST_MODULES])
        # a session per mosaic size and use; the metadata (pattern, white balance) is
        # recorded into its build, and i-raw's host port builds it again for other metadata
        self.sessions: dict[tuple, Session] = {}
        self.max_pixels = max_pixels or max_pixels_of(device, 16)

    def __call__(self, raw: RawImage, wb: bool = True, colour: bool = False) -> np.ndarray:
        """(h, w, 3) float32: balanced (wb) and demosaiced, in camera rgb or (colour) linear
        Rec.709."""
        ht, wd = raw.shape
        if ht * wd <= self.max_pixels:
            return self._run(raw, wb, colour)
        p = raw.meta.period
        margin = -(-self.REACH // p) * p
        rows = (self.max_pixels // wd - 2 * margin - (p - 1)) // p * p
        if rows < p:
            raise GraphError(f"cannot demosaic a {wd}x{ht} mosaic on this device: its "
                             f"buffers hold {self.max_pixels} pixels, less than "
                             f"{p + 2 * margin + p - 1} rows of {wd}")
        out = np.empty((ht, wd, 3), np.float32)
        # bands of one length (one build), on the pattern's grid (denoise.py's tiles)
        for y0, y1, k0, k1 in spans(ht, rows, margin, tile_length(ht, rows, margin, p)):
            band = RawImage(np.ascontiguousarray(raw.mosaic[y0:y1]), raw.meta)
            out[k0:k1] = self._run(band, wb, colour)[k0 - y0:k1 - y0]
        return out

    def _run(self, raw: RawImage, wb: bool, colour: bool) -> np.ndarray:
        ht, wd = raw.shape
        key = (wd, ht, wb, colour)
        if key not in self.sessions:
            g = Graph(self.registry)
            g.add_module("i-raw", "main")
            dem = g.add_module("demosaic", "main")
            dem.set_param("wb", int(wb))
            dem.set_param("colour", int(colour))
            g.add_module("o-array", "main")
            g.connect("i-raw", "main", "output", "demosaic", "main", "input")
            g.connect("demosaic", "main", "output", "o-array", "main", "input")
            self.sessions[key] = Session(g, self.device)
        session = self.sessions[key]
        session.feed("i-raw:main", raw)
        session.step(0)  # frame 0: the source uploads again
        return np.ascontiguousarray(session.take("o-array:main")[..., :3])


_DEMOSAICERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def demosaicer_of(den) -> Demosaicer:
    """The Demosaicer on a Denoiser's device, made once per Denoiser."""
    if den not in _DEMOSAICERS:
        _DEMOSAICERS[den] = Demosaicer(den.device)
    return _DEMOSAICERS[den]


def to_rec709(rgb: np.ndarray, raw: RawImage) -> np.ndarray:
    """Balanced camera rgb (h, w, >= 3) -> linear Rec.709 (h, w, 3) with the raw's matrix:
    each output channel the sum of the three inputs times its row, in bands of rows on the
    host's threads (formats.in_parts; a 24 MP image: 0.67 -> 0.11 s on 2 cores against one
    matrix product)."""
    m = np.asarray(raw.meta.rgb_cam, np.float32)
    x = np.asarray(rgb, np.float32)
    out = np.empty(x.shape[:2] + (3,), np.float32)

    def rows(r0: int, r1: int) -> None:
        band = x[r0:r1]
        for c in range(3):
            o = out[r0:r1, :, c]
            np.multiply(band[..., 0], m[c, 0], out=o)
            o += band[..., 1] * m[c, 1]
            o += band[..., 2] * m[c, 2]

    in_parts(rows, x.shape[0], max(1, PART // max(1, x.shape[1])))
    return out


def bayer_of(raw: RawImage) -> tuple[int, int]:
    """(row, column) of red in the raw's 2 x 2 cells; GraphError for a pattern that is not
    Bayer or a mosaic without a whole cell."""
    red = bayer_red(raw.meta.cfa)
    if red is None:
        kind = "X-Trans" if raw.meta.period == 6 else "not a Bayer one"
        raise GraphError(f"these weights denoise RGGB (Bayer) mosaics; this file's colour "
                         f"pattern is {kind}", hint="weights of mosaics of any pattern read "
                         "it: unet-t's cfa 2, such as graphs/weights/unet-xtrans.lut")
    ht, wd = raw.shape
    if min(ht, wd) < 2:
        raise GraphError(f"a {wd}x{ht} mosaic holds no whole 2 x 2 Bayer cell")
    return red


def balanced(raw: RawImage) -> np.ndarray:
    """(h, w) float32: the mosaic white-balanced, each photosite times its colour's
    multiplier (as demosaic's `wb` does), place by place of the pattern's period."""
    p = raw.meta.period
    cfa = np.asarray(raw.meta.cfa)
    gains = np.asarray(raw.meta.wb, np.float32)
    mosaic = np.asarray(raw.mosaic, np.float32)
    out = np.empty_like(mosaic)
    for dy in range(p):
        for dx in range(p):
            np.multiply(mosaic[dy::p, dx::p], gains[cfa[dy, dx]], out=out[dy::p, dx::p])
    return out


def rggb_mosaic(raw: RawImage) -> tuple[np.ndarray, tuple[int, int]]:
    """(the white-balanced mosaic in RGGB phase and of even size, (top, left): where the
    raw's own mosaic starts in it). GraphError for a pattern that is not Bayer."""
    red = bayer_of(raw)
    return rggb_phase(balanced(raw), red), red


def any_mosaic(raw: RawImage) -> np.ndarray:
    """(h, w, 4) float32: the white-balanced mosaic as weights of mosaics of any pattern read
    it, each photosite's value in r, g and b and its colour (0 r, 1 g, 2 b) in alpha."""
    ht, wd = raw.shape
    p = raw.meta.period
    out = np.empty((ht, wd, 4), np.float32)
    out[..., :3] = balanced(raw)[..., None]
    out[..., 3] = np.tile(np.asarray(raw.meta.cfa, np.float32),
                          (-(-ht // p), -(-wd // p)))[:ht, :wd]
    return out


def on_device(den, raw: RawImage) -> bool:
    """Whether denoise_raw takes the stored codes to the device (raw16): weights of
    mosaics, one pass, a raw that keeps its codes."""
    return den.cfa and raw.values is not None and den.ensemble == 1


def prepare(den, raw: RawImage) -> None:
    """Build what raw16 will run for this raw (Denoiser.prepare: the size rggb_phase brings
    it to), before its noise profile is known."""
    ht, wd = raw.shape
    rows, cols = rggb_padding(ht, wd, bayer_of(raw))
    den.prepare(wd + sum(cols), ht + sum(rows), "raw16")


def raw16(den, raw: RawImage, a: float, b: float, rows=None, planar: bool = False
          ) -> np.ndarray:
    """Linear Rec.709 (h, w, 3) of a Bayer raw whose stored codes it keeps (`values`), by
    the Denoiser's raw16 path: the codes brought to the RGGB phase and an even size as
    rggb_mosaic brings the mosaic, each place of the cell given the black level and the
    factor (its colour's white-balance multiplier over white - black) of the photosite it
    came from; the device's rgb cropped back. planar: Denoiser.raw16's."""
    red = bayer_of(raw)
    ht, wd = raw.values.shape
    top, left = red
    black = np.asarray(raw.black, np.float64)
    cfa = np.asarray(raw.meta.cfa)
    gains = np.asarray(raw.meta.wb, np.float64)
    # place (dy, dx) of an RGGB cell holds photosites of place ((dy - top) % 2, (dx - left)
    # % 2) of the raw's own cells (mirrored rows and columns keep their places)
    blk = np.empty((2, 2))
    scale = np.empty((2, 2))
    for dy in range(2):
        for dx in range(2):
            y, x = (dy - top) % 2, (dx - left) % 2
            blk[dy, dx] = black[y, x]
            scale[dy, dx] = gains[cfa[y, x]] / (raw.white - black[y, x])
    codes = rggb_phase(raw.values, red)
    told = None
    if rows is not None:  # the rows of the raw's own image, cropped as the result is
        def told(out, stop):
            rows(out[top:top + ht, left:left + wd], min(ht, stop - top))
    out = den.raw16(codes, blk, scale, raw.meta.rgb_cam, a, b, told, planar)
    return out[top:top + ht, left:left + wd]


def denoise_raw(den, dem: Demosaicer, raw: RawImage, noise=None, strength: float = 1.0,
                profile: NoiseProfile | None = None, rows=None, planar: bool = False
                ) -> tuple[np.ndarray, NoiseProfile, tuple[float, float]]:
    """(linear Rec.709 (h, w, 3), the raw's noise profile, the (a, b) the denoiser got:
    the white-balanced profile times `strength`). The profile: `profile` where the caller
    has it, else profile_for(raw, noise). With weights of RGGB mosaics (`den.cfa`) or of
    mosaics of any pattern (`den.any_pattern`) the denoiser demosaics too (module docstring); else
    demosaic, then the denoiser. rows(out,
    stop): told as rows of the result become final, where the device's path (on_device)
    makes it in bands (a writer may begin with them); planar: there, a result laid out as
    an OpenEXR scanline holds it (Denoiser.raw16's `planar`)."""
    profile = profile or profile_for(raw, noise)
    a, b = (strength * v for v in profile.balanced(raw.meta.wb).scalar())
    if on_device(den, raw):
        return raw16(den, raw, a, b, rows, planar), profile, (a, b)
    if den.cfa:
        mosaic, (top, left) = rggb_mosaic(raw)
        ht, wd = raw.shape
        rgb = den(mosaic, a, b)[top:top + ht, left:left + wd]
    elif den.any_pattern:
        rgb = den(any_mosaic(raw), a, b)
    else:
        rgb = den(dem(raw, wb=True, colour=False), a, b)
    return to_rec709(rgb, raw), profile, (a, b)
