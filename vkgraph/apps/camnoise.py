"""The noise profile of a raw file: per colour (a, b) of cnngenin's model on the normalised
mosaic, std(x) = sqrt(a + 65535 x b) / 65535, from (in this order)

1. `--noise A B` (the same for every colour), when the user gives it;
2. darktable's per-camera profiles (`noiseprofiles.json`: Poisson-Gaussian fits per camera
   and ISO, variance a_dt x + b_dt on the raw data normalised by black and white levels, per
   r, g, b) where darktable is installed or $VKGRAPH_NOISEPROFILES names the file; they
   convert as b = a_dt 65535, a = b_dt 65535^2; between two profiled ISOs a and b are
   interpolated linearly in ISO, outside the profiled range the nearest ISO's is taken;
3. estimated from the mosaic itself: each position of the CFA pattern gives a sub-image of
   one colour (a Bayer mosaic four, X-Trans 36), and vkgraph/apps/noise.py's estimator (flat
   patches of each, the lower envelope of their variance over intensity) fits one (a, b) to
   all of them together, as it does to the three channels of an rgb image: the photosites
   share one sensor, so one fit over all colours sees the widest range of intensities
   (darktable's per-colour fits of a camera differ little), and a per-colour fit would rest
   on a fraction of the data.

After white balance a photosite of gain g has x' = g x and variance g^2 (alpha + beta x) =
g^2 alpha + g beta x': a scales with g^2 and b with g (`balanced`). The RGB denoiser takes one
(a, b) for all channels: `scalar` is the mean of the balanced profile over r, g, b.
Demosaicing keeps each photosite's value (its variance unchanged) and interpolates the
missing colours from several photosites (less variance), so the photosites' profile is the
upper one the demosaiced image has; it is what the denoiser gets.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..pipeline.errors import GraphError
from ..pipeline.formats import read_bounded
from ..pipeline.raw import RawImage
from .noise import estimate_noise

log = logging.getLogger("vkgraph")

SCALE = 65535.0
JSON_MAX = 64 << 20  # darktable's file is ~4 MB
PLACES = ("/usr/share/darktable/noiseprofiles.json",
          "/usr/local/share/darktable/noiseprofiles.json",
          "/app/share/darktable/noiseprofiles.json",  # flatpak
          "/opt/homebrew/share/darktable/noiseprofiles.json",
          "/Applications/darktable.app/Contents/Resources/share/darktable/noiseprofiles.json")


@dataclass(frozen=True)
class NoiseProfile:
    a: tuple[float, float, float]  # per r, g, b, cnngenin's units
    b: tuple[float, float, float]
    source: str  # "darktable: <camera> ISO <n>", "estimated" or "given"

    def balanced(self, gains) -> NoiseProfile:
        """The profile after white balance with these gains (r, g, b)."""
        g = np.asarray(gains, np.float64)
        return NoiseProfile(tuple(float(v) for v in np.asarray(self.a) * g * g),
                            tuple(float(v) for v in np.asarray(self.b) * g), self.source)

    def scalar(self) -> tuple[float, float]:
        """One (a, b) for all channels: the mean over r, g, b."""
        return float(np.mean(self.a)), float(np.mean(self.b))


def profiles_file() -> Path | None:
    """$VKGRAPH_NOISEPROFILES, else darktable's file in the usual places, else None."""
    env = os.environ.get("VKGRAPH_NOISEPROFILES")
    if env:
        return Path(env)
    return next((Path(p) for p in PLACES if Path(p).is_file()), None)


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def load_profiles(path: Path) -> list:
    """The file's `noiseprofiles` list; GraphError naming the file when it is not darktable's
    format."""
    try:
        data = json.loads(read_bounded(path, JSON_MAX, "noise profile file"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise GraphError(f"not a JSON noise profile file: {e}", where=str(path)) from None
    entries = data.get("noiseprofiles") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise GraphError("no 'noiseprofiles' list (expected darktable's noiseprofiles.json)",
                         where=str(path))
    return entries


def _channels(entry: dict, key: str) -> np.ndarray | None:
    v = entry.get(key)
    if not isinstance(v, list) or len(v) < 3:
        return None
    try:
        arr = np.array(v[:3], np.float64)
    except (TypeError, ValueError):
        return None
    return arr if np.all(np.isfinite(arr)) and np.all(arr >= 0) else None


def lookup(entries: list, make: str, model: str, iso: float) -> NoiseProfile | None:
    """The camera's profile at this ISO (module docstring), or None when the file has no
    usable profile of this make and model. Names match ignoring case, spaces and
    punctuation; darktable's model may or may not repeat the make."""
    if not (make and model and iso > 0):
        return None
    mk, md = _key(make), _key(model)
    points = []
    for maker in entries:
        if not isinstance(maker, dict) or _key(str(maker.get("maker", ""))) != mk:
            continue
        for m in maker.get("models") or []:
            name = _key(str(m.get("model", ""))) if isinstance(m, dict) else ""
            if name not in (md, mk + md) and md not in (name, mk + name):
                continue
            for p in m.get("profiles") or []:
                if not isinstance(p, dict) or p.get("skip"):
                    continue
                a_dt, b_dt = _channels(p, "a"), _channels(p, "b")
                p_iso = p.get("iso")
                if a_dt is None or b_dt is None or not isinstance(p_iso, (int, float)):
                    continue
                points.append((float(p_iso), a_dt, b_dt))
    if not points:
        return None
    points.sort(key=lambda t: t[0])
    isos = np.array([t[0] for t in points])
    k = int(np.searchsorted(isos, iso))
    if k == 0 or k == len(points) or isos[k] == iso:
        k = min(k, len(points) - 1)
        _, a_dt, b_dt = points[k]
    else:
        (i0, a0, b0), (i1, a1, b1) = points[k - 1], points[k]
        t = (iso - i0) / (i1 - i0)
        a_dt, b_dt = (1 - t) * a0 + t * a1, (1 - t) * b0 + t * b1
    return NoiseProfile(tuple(float(v) for v in b_dt * SCALE * SCALE),
                        tuple(float(v) for v in a_dt * SCALE),
                        f"darktable: {make} {model} ISO {iso:g}")


def estimate(raw: RawImage) -> NoiseProfile:
    """(a, b) estimated from the mosaic's own sub-images (module docstring), the same for
    every colour."""
    p = raw.meta.period
    ht, wd = (s // p * p for s in raw.mosaic.shape)
    # each CFA position's sub-image is a plain image of one colour; stacked top to bottom
    # they form one grey image for the estimator (the few blocks across a seam only add
    # variance, which its lower envelope ignores)
    planes = [raw.mosaic[y:ht:p, x:wd:p] for y in range(p) for x in range(p)]
    a, b = estimate_noise(np.concatenate(planes, axis=0))
    return NoiseProfile((a,) * 3, (b,) * 3, "estimated")


def profile_for(raw: RawImage, given=None) -> NoiseProfile:
    """--noise A B when given, else darktable's profile of the camera, else estimated."""
    if given is not None:
        a, b = (float(v) for v in given)
        return NoiseProfile((a,) * 3, (b,) * 3, "given")
    path = profiles_file()
    if path is not None:
        try:
            found = lookup(load_profiles(path), raw.meta.make, raw.meta.model, raw.meta.iso)
        except GraphError as e:
            log.warning("%s; estimating the noise instead", e.line())
            found = None
        if found is not None:
            return found
    return estimate(raw)
