"""`vkgraph denoise` on phone-like JPEGs: the estimated noise level against the true one, and
classical denoisers with their own estimate.

The held-out photographs (graphs/photos/held-out.txt; never trained on) are made into JPEGs as
a camera makes them (vkgraph/apps/camera.py): cnngenin's noise, std(x) = sqrt(a + 65535 x b) /
65535, on the RGGB mosaic of the clean linear photo, bilinear demosaic, sRGB 8-bit, JPEG
("camera" rows); and with the same noise i.i.d. per pixel and channel before the JPEG
("white" rows); `--kinds clean` adds the photos with no noise at all, as JPEGs of quality 75,
85 and 95 ("kpn true" is then the network told there is no noise), and `--kinds demosaiced`
the same through the RGGB mosaic and a bilinear demosaic first, as a camera with that
demosaic would make them without noise. Three noise levels (vkgraph/apps/heldout.py's
LEVELS), seeds 20 + level index, JPEG quality 75, 85 or 95 (cycled over images and levels).
Columns, each the mean sRGB PSNR (8-bit, as the user sees it) against the clean photo:

* noisy: the JPEG itself;
* kpn est.: `vkgraph denoise` with no profile given: the shipped weights with the level
  vkgraph/apps/noise.py estimates from the JPEG (what the command prints);
* kpn true: the same weights given the true (a, b);
* NL-means, CBM3D: scikit-image `denoise_nl_means` (fast mode, patch 5, distance 6,
  h = 0.8 sigma) and PyPI `bm3d` `bm3d_rgb` on the sRGB image, sigma from
  `skimage.restoration.estimate_sigma` (averaged over channels), as a user without the true
  level would run them;
* OIDN: PyPI `pyoidn` (RT filter, LDR, quality high) on the linear image, where installed;
* est/true: the estimated std over the true std at x = 0.1 and x = 0.5 (geometric mean over
  the images).

The classical columns are cached in bench/photo-jpeg-baselines.json (keyed by image, kind,
level, seed, quality and method, checked against a hash of the pixels), as bench/quality.py
does; missing entries are computed (in parallel with --jobs).

    python bench/photo_jpeg.py [--levels low,mid] [--images astronaut,coffee] [--kinds camera]
    python bench/photo_jpeg.py --baselines-only --jobs 2    # fill the cache, no Vulkan device
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from quality import bm3d_rgb, fingerprint, load_cache, nl_means, save_cache  # noqa: E402

from vkgraph.apps import camera, heldout  # noqa: E402
from vkgraph.apps.noise import noise_profile  # noqa: E402
from vkgraph.pipeline.formats import to_srgb8  # noqa: E402

CACHE = Path(__file__).resolve().parent / "photo-jpeg-baselines.json"
WEIGHTS = ROOT / "graphs" / "weights" / "kpn-photo.lut"
QUALITIES = (75, 85, 95)
KINDS = {"camera": camera.camera_jpeg, "white": camera.white_jpeg}  # the noisy ones
NOISELESS = ("clean", "demosaiced")  # no noise: the JPEG alone, of QUALITIES[level index]
METHODS = {  # the settings string is part of the cache key: change it when the method changes
    "nlm": "srgb, estimate_sigma mean, denoise_nl_means fast patch 5 distance 6 h 0.8 sigma",
    "bm3d": "srgb, estimate_sigma mean, bm3d_rgb profile np colorspace opp",
    "oidn": "linear, pyoidn RT ldr quality high",
}
COLUMNS = ("noisy", "est", "true", "nlm", "bm3d", "oidn")
TITLES = {"noisy": "noisy JPEG", "est": "kpn est.", "true": "kpn true", "nlm": "NL-means",
          "bm3d": "CBM3D", "oidn": "OIDN"}


def seed_of(level_index: int) -> int:
    return 20 + level_index


def quality_of(image_index: int, level_index: int) -> int:
    return QUALITIES[(image_index + level_index) % len(QUALITIES)]


def case(path: Path, index: int, kind: str, li: int, crop: int | None) -> dict:
    """One test image: the clean photo, its noisy JPEG and how it was made (the NOISELESS
    kinds: no noise, the JPEG of the li-th quality, "demosaiced" through the mosaic and a
    bilinear demosaic first)."""
    level, a, b = heldout.LEVELS[li]
    clean = heldout.centre_crop(heldout.load_clean(path), crop)
    name = path.stem if crop is None else f"{path.stem} crop {crop}"
    if kind in NOISELESS:
        q = QUALITIES[li]
        src = clean if kind == "clean" else camera.demosaic(camera.mosaic(clean))
        return {"image": name, "kind": kind, "level": f"q{q}", "a": 0.0, "b": 0.0,
                "quality": q, "seed": 0, "clean": clean, "noisy": camera.jpeg(src, q)}
    q = quality_of(index, li)
    noisy = KINDS[kind](clean, a, b, seed_of(li), q)
    return {"image": name, "kind": kind, "level": level, "a": a, "b": b, "quality": q,
            "seed": seed_of(li), "clean": clean, "noisy": noisy}


def srgb_psnr(x: np.ndarray, clean: np.ndarray) -> float:
    """PSNR in dB of the 8-bit sRGB encodings (what a PNG/JPEG writer stores)."""
    d = to_srgb8(x[..., :3]).astype(np.float64) - to_srgb8(clean[..., :3]).astype(np.float64)
    return 10 * math.log10(255.0 ** 2 / max(float(np.mean(d * d)), 1e-12))


def srgb(x: np.ndarray) -> np.ndarray:
    return to_srgb8(x).astype(np.float64) / 255.0


def classical(method: str, noisy: np.ndarray) -> np.ndarray:
    """The method's output as linear rgb."""
    from vkgraph.pipeline.formats import srgb_to_linear

    if method == "oidn":
        import pyoidn

        return pyoidn.denoise(np.clip(noisy, 0, 1).astype(np.float32), quality="high")
    from skimage.restoration import estimate_sigma

    s = srgb(noisy)
    sigma = float(estimate_sigma(s, channel_axis=-1, average_sigmas=True))
    out = nl_means(s, sigma) if method == "nlm" else bm3d_rgb(s, max(sigma, 1e-4))
    return srgb_to_linear(np.clip(out, 0.0, 1.0))


def cache_key(c: dict, method: str) -> str:
    return (f"{c['image']}|{c['kind']}|{c['level']}|seed {c['seed']}|q {c['quality']}|"
            f"{METHODS[method]}")


def baseline(task: tuple) -> tuple[str, dict]:
    path, index, kind, li, crop, method = task
    c = case(Path(path), index, kind, li, crop)
    t0 = time.perf_counter()
    value = srgb_psnr(classical(method, c["noisy"]), c["clean"])
    return cache_key(c, method), {"psnr": round(value, 4), "input": fingerprint(
        c["clean"], c["noisy"]), "seconds": round(time.perf_counter() - t0, 2)}


def has_oidn() -> bool:
    try:
        import pyoidn  # noqa: F401
    except ImportError:
        return False
    return True


def fill_baselines(cases: list[tuple], cache_path: Path, jobs: int) -> dict:
    """The classical entries of every case, from the cache or computed and saved."""
    cache = load_cache(cache_path)
    methods = [m for m in METHODS if m != "oidn" or has_oidn()]
    todo = []
    for task in cases:
        c = case(*task)
        fp = fingerprint(c["clean"], c["noisy"])
        for m in methods:
            rec = cache.get(cache_key(c, m))
            if rec is None or rec.get("input") != fp:
                todo.append((str(task[0]), *task[1:], m))
    if todo:
        print(f"computing {len(todo)} baseline entries with {jobs} processes", file=sys.stderr)
        todo.sort(key=lambda t: t[-1] != "bm3d")  # the longest first
        pool = ProcessPoolExecutor(max_workers=jobs) if jobs > 1 else None
        try:
            for key, rec in (pool.map if pool else map)(baseline, todo):
                cache[key] = rec
                print(f"  {key}: {rec['psnr']:.2f} dB ({rec['seconds']} s)", file=sys.stderr)
                save_cache(cache_path, cache)
        finally:
            if pool is not None:
                pool.shutdown(cancel_futures=True)
    return cache


def std_ratio(ea: float, eb: float, a: float, b: float) -> float:
    """Geometric mean over x = 0.1 and 0.5 of the estimated std over the true one."""
    r = [camera.noise_std(x, ea, eb) / camera.noise_std(x, a, b) for x in (0.1, 0.5)]
    return float(math.sqrt(r[0] * r[1]))


def run_kpn(cases: list[tuple], device_name: str | None, weights: Path,
            strength: float) -> dict:
    """{(image, kind, level): {"est", "true", "ratio"}} of the shipped weights."""
    from vkgraph.apps.denoise import Denoiser
    from vkgraph.pipeline.vk import Device

    out = {}
    dev = Device.open(device_name)
    try:
        den = Denoiser(dev, weights)
        for task in cases:
            c = case(*task)
            (ea, eb), _ = noise_profile(c["noisy"], None, strength, jpeg=True)
            r = out[(c["image"], c["kind"], c["level"])] = {
                "est": srgb_psnr(den(c["noisy"], ea, eb), c["clean"]),
                "true": srgb_psnr(den(c["noisy"], c["a"], c["b"]), c["clean"])}
            if c["a"] > 0 or c["b"] > 0:  # (a clean photo has no true std to compare with)
                r["ratio"] = std_ratio(ea, eb, c["a"], c["b"])
            print(f"  {c['image']} {c['kind']} {c['level']} q {c['quality']}: est "
                  f"{out[(c['image'], c['kind'], c['level'])]['est']:.2f} dB", file=sys.stderr)
    finally:
        dev.close()
    return out


def table(rows: dict) -> str:
    """rows: {(image, kind, level): {column: PSNR, "ratio": ...}} -> a markdown table of the
    means per kind and level."""
    cols = [c for c in COLUMNS if all(c in r for r in rows.values())]
    head = "| noise | level | " + " | ".join(TITLES[c] for c in cols) + " | est/true std |"
    lines = [head, "|---|---|" + "---|" * (len(cols) + 1)]
    groups: dict = {}
    for (_, kind, level), r in rows.items():
        groups.setdefault((kind, level), []).append(r)
    for (kind, level), rs in groups.items():
        vals = [f"{np.mean([r[c] for r in rs]):.2f}" for c in cols]
        ratio = (f"{math.exp(np.mean([math.log(r['ratio']) for r in rs])):.2f}"
                 if all("ratio" in r for r in rs) else "-")
        lines.append(f"| {kind} | {level} | " + " | ".join(vals) + f" | {ratio} |")
    return "\n".join(lines)


def verdicts(rows: dict) -> list[str]:
    """The smallest gain of kpn est. over its input, and per group its margin over CBM3D and
    its distance to kpn true."""
    if not all("est" in r for r in rows.values()):
        return []
    gain = {k: r["est"] - r["noisy"] for k, r in rows.items()}
    worst = min(gain, key=gain.get)
    out = [f"smallest gain of kpn est. over its input: {gain[worst]:+.2f} dB ({', '.join(worst)})"]
    groups: dict = {}
    for (_, kind, level), r in rows.items():
        groups.setdefault((kind, level), []).append(r)
    for (kind, level), rs in groups.items():
        parts = [f"minus kpn true {np.mean([r['est'] - r['true'] for r in rs]):+.2f}"]
        if all("bm3d" in r for r in rs):
            parts.append(f"minus CBM3D {np.mean([r['est'] - r['bm3d'] for r in rs]):+.2f}")
        out.append(f"{kind} {level}: kpn est. " + ", ".join(parts) + " dB")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", help="comma-separated subset of low,mid,high")
    ap.add_argument("--images", help="comma-separated subset of the held-out photos (stems)")
    ap.add_argument("--kinds", default="camera,white",
                    help="camera, white, clean and/or demosaiced (the last two without noise; "
                    "levels are then qualities)")
    ap.add_argument("--crop", type=int, help="centred crop of each photo (quick runs; not "
                    "comparable to full ones)")
    ap.add_argument("--weights", type=Path, default=WEIGHTS, help="kpn weights")
    ap.add_argument("--strength", type=float, default=1.0,
                    help="multiplier of the estimated level (vkgraph denoise --strength)")
    ap.add_argument("--device", help="Vulkan device (substring of its name)")
    ap.add_argument("--baselines", type=Path, default=CACHE, help="the baseline cache")
    ap.add_argument("--baselines-only", action="store_true", help="no kpn columns")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", type=Path, metavar="OUT", help="write every number to OUT")
    args = ap.parse_args(argv)
    names = [name for name, _, _ in heldout.LEVELS]
    levels = args.levels.split(",") if args.levels else names
    kinds = args.kinds.split(",")
    photos = heldout.photos(ROOT / "graphs" / "photos" / "held-out.txt")
    images = args.images.split(",") if args.images else [p.stem for p in photos]
    for bad, known, what in ((levels, names, "level"), (kinds, [*KINDS, *NOISELESS], "kind"),
                             (images, [p.stem for p in photos], "image")):
        unknown = sorted(set(bad) - set(known))
        if unknown:
            ap.error(f"unknown {what} {', '.join(unknown)}: expected {', '.join(known)}")
    cases = [(p, i, kind, names.index(lv), args.crop) for i, p in enumerate(photos)
             if p.stem in images for kind in kinds for lv in levels]
    cache = fill_baselines(cases, args.baselines, args.jobs)
    rows = {}
    for task in cases:
        c = case(*task)
        r = {"noisy": srgb_psnr(c["noisy"], c["clean"])}
        for m in METHODS:
            rec = cache.get(cache_key(c, m))
            if rec is not None and rec.get("input") == fingerprint(c["clean"], c["noisy"]):
                r[m] = rec["psnr"]
        rows[(c["image"], c["kind"], c["level"])] = r
    if not args.baselines_only:
        for key, r in run_kpn(cases, args.device, args.weights, args.strength).items():
            rows[key].update(r)
    print(table(rows))
    for line in verdicts(rows):
        print(line)
    if args.json is not None:
        args.json.write_text(json.dumps({" ".join(k): r for k, r in rows.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
