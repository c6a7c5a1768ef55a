"""The held-out evaluation of the photo denoiser: PSNR of kpn on photographs training never
sees, at three noise levels (what bench/quality.py reports and `vkgraph sweep --metric psnr`
ranks trials by).

The held-out photographs (graphs/photos/held-out.txt: astronaut, camera, chelsea, coffee from
scikit-image's wheel, the `photos` extra) are decoded to linear rgb and get cnngenin's noise
model at each level, std(x) = sqrt(a + 65535 x b) / 65535 per channel, Gaussian, from seeded
generators (graphs/images/make_scene.py add_noise); kpn gets the true (a, b). PSNR in dB with
peak 1 over linear rgb, of the unclipped output against the clean photograph.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import math
from pathlib import Path

import numpy as np

from ..pipeline.datasets import image_set, resolve_name
from ..pipeline.errors import GraphError
from ..pipeline.formats import read_image

# (name, noise a, noise b) of cnngenin's model std(x) = sqrt(a + 65535 x b) / 65535
LEVELS = [("low", 2e5, 20.0), ("mid", 1e6, 100.0), ("high", 5e6, 400.0)]


def _data() -> Path:
    from vkgraph import DATA

    return DATA


def held_out_list() -> Path:
    return _data() / "graphs" / "photos" / "held-out.txt"


def seed_of(level_index: int) -> int:
    return 10 + level_index


def photos(listing: Path | None = None) -> list[Path]:
    """The held-out photographs (a .txt list of images; default: the shipped one)."""
    listing = listing or held_out_list()
    return image_set(str(listing), lambda name: listing.parent / name)


def load_clean(path: Path) -> np.ndarray:
    """Linear float64 rgb (h, w, 3)."""
    return read_image(path)[..., :3].astype(np.float64)


@functools.cache
def _make_scene():
    spec = importlib.util.spec_from_file_location(
        "vkgraph_make_scene", _data() / "graphs" / "images" / "make_scene.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def add_noise(img: np.ndarray, a: float, b: float, seed: int) -> np.ndarray:
    return _make_scene().add_noise(img, a, b, seed)


def psnr(x: np.ndarray, ref: np.ndarray) -> float:
    mse = float(np.mean((np.asarray(x[..., :3], np.float64) - ref[..., :3]) ** 2))
    return 10 * math.log10(1.0 / max(mse, 1e-20))


def centre_crop(img: np.ndarray, size: int | None) -> np.ndarray:
    if size is None:
        return img
    ht, wd = img.shape[:2]
    y, x = max(0, (ht - size) // 2), max(0, (wd - size) // 2)
    return img[y:y + size, x:x + size]


def evaluate(device, weights: Path, crop: int | None = None,
             listing: Path | None = None) -> dict:
    """Denoise every held-out photograph at every level with `weights` on `device`:
    {"psnr": mean output PSNR, "gain": mean gain over the noisy input, "per_level": {level:
    mean output PSNR}} in dB. crop: evaluate a centred crop of crop x crop pixels of each
    photograph (quick checks; the figures are then not comparable to full ones)."""
    from .denoise import Denoiser

    den = Denoiser(device, weights)
    out, gain = {}, []
    for path in photos(listing):
        clean = centre_crop(load_clean(path), crop)
        for li, (level, a, b) in enumerate(LEVELS):
            noisy = add_noise(clean, a, b, seed_of(li))
            value = psnr(den(noisy, a, b), clean)
            out.setdefault(level, []).append(value)
            gain.append(value - psnr(noisy, clean))
    per = {level: float(np.mean(v)) for level, v in out.items()}
    return {"psnr": float(np.mean([v for vs in out.values() for v in vs])),
            "gain": float(np.mean(gain)), "per_level": per}


def training_files(g, cfg: Path) -> list[Path]:
    """The image files a graph's sources read: i-set's training sets, i-pfm's and i-img's
    files (resolved as a build would: absolute, next to the cfg, the working directory)."""
    def near(name: str) -> Path:
        path = Path(name).expanduser()
        if path.is_absolute() or (cfg.resolve().parent / path).exists():
            return cfg.resolve().parent / path
        return Path.cwd() / path

    out = []
    for m in g.modules.values():
        if m.name == "i-set":
            out += image_set(m.param("filename"), near)
        elif m.name in ("i-pfm", "i-img") and "%" not in m.param("filename"):
            out.append(resolve_name(m.param("filename"), near))
    return out


def reads_held_out(files: list[Path], held: list[Path]) -> tuple[Path, Path] | None:
    """(training file, held-out photograph) of the first training file with the same bytes
    as a held-out photograph (any name), else None: evaluating such weights on the held-out
    set would not be honest."""
    def digest(p: Path) -> str:
        return hashlib.sha256(p.read_bytes()).hexdigest()

    by_size: dict[int, list[tuple[Path, str]]] = {}
    for p in held:
        by_size.setdefault(p.stat().st_size, []).append((p, digest(p)))
    for f in files:
        for p, d in by_size.get(f.stat().st_size if f.is_file() else -1, []):
            if digest(f) == d:
                return f, p
    return None


def check_graph(g, cfg: Path) -> None:
    """GraphError when the training graph reads a held-out photograph."""
    hit = reads_held_out(training_files(g, cfg), photos())
    if hit is not None:
        raise GraphError(f"{cfg}: reads {hit[0]}, which is the held-out photograph "
                         f"{hit[1].name}: its held-out PSNR would not be honest")
