"""A raw file denoised: demosaic, then the RGB denoiser, then the camera matrix (behind
`vkgraph denoise photo.dng` and bench/raw_quality.py).

    dem = Demosaicer(device)
    rgb = dem(raw)                                     # balanced camera rgb (h, w, 3)
    out, profile = denoise_raw(den, dem, raw)          # linear Rec.709, NoiseProfile used

The demosaic graph is i-raw (handed the RawImage already read) -> demosaic -> o-array, one
build per mosaic size and pattern kept for later files. The chain: the mosaic is white-
balanced and demosaiced (modules/demosaic), denoised by pipeline/denoise.py's Denoiser with
the balanced noise profile (pipeline/camnoise.py: a scales with gain^2, b with gain; the mean
over r, g, b), then taken to linear Rec.709 by the camera matrix (3 x 3 per pixel on the
host). The denoiser sees white-balanced camera rgb, where the noise of the three channels is
independent (the matrix mixes them).
"""

from __future__ import annotations

import weakref

import numpy as np

from .camnoise import NoiseProfile, profile_for
from .denoise import HOST_MODULES
from .graph import Graph
from .raw import RawImage
from .registry import DEFAULT_DIR, Registry
from .runner import Build


class Demosaicer:
    """modules/demosaic on numpy mosaics, on one device."""

    def __init__(self, device):
        self.device = device
        self.registry = Registry([DEFAULT_DIR, HOST_MODULES])
        self.builds: dict[tuple, tuple[Build, Graph]] = {}

    def __call__(self, raw: RawImage, wb: bool = True, colour: bool = False) -> np.ndarray:
        """(h, w, 3) float32: balanced (wb) and demosaiced, in camera rgb or (colour) linear
        Rec.709."""
        ht, wd = raw.mosaic.shape
        key = (wd, ht, raw.meta, wb, colour)
        if key not in self.builds:
            g = Graph(self.registry)
            g.add_module("i-raw", "main").data["given"] = raw
            dem = g.add_module("demosaic", "main")
            dem.set_param("wb", int(wb))
            dem.set_param("colour", int(colour))
            g.add_module("o-array", "main")
            g.connect("i-raw", "main", "output", "demosaic", "main", "input")
            g.connect("demosaic", "main", "output", "o-array", "main", "input")
            self.builds[key] = (Build(g, self.device), g)
        build, g = self.builds[key]
        g.modules[("i-raw", "main")].data["given"] = raw
        build.run_frame(0)  # frame 0: the source uploads again
        return np.ascontiguousarray(g.modules[("o-array", "main")].data.pop("image")[..., :3])


_DEMOSAICERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def demosaicer_of(den) -> Demosaicer:
    """The Demosaicer on a Denoiser's device, made once per Denoiser."""
    if den not in _DEMOSAICERS:
        _DEMOSAICERS[den] = Demosaicer(den.device)
    return _DEMOSAICERS[den]


def to_rec709(rgb: np.ndarray, raw: RawImage) -> np.ndarray:
    """Balanced camera rgb -> linear Rec.709 with the raw's matrix."""
    m = np.asarray(raw.meta.rgb_cam, np.float32)
    return np.ascontiguousarray(np.asarray(rgb, np.float32)[..., :3] @ m.T)


def denoise_raw(den, dem: Demosaicer, raw: RawImage, noise=None
                ) -> tuple[np.ndarray, NoiseProfile, tuple[float, float]]:
    """(linear Rec.709 (h, w, 3), the raw's noise profile, the (a, b) the denoiser got)."""
    profile = profile_for(raw, noise)
    a, b = profile.balanced(raw.meta.wb).scalar()
    rgb = dem(raw, wb=True, colour=False)
    return to_rec709(den(rgb, a, b), raw), profile, (a, b)
