"""Denoising quality on real photographs: vkgraph's kpn against classical denoisers.

The held-out photographs (graphs/photos/held-out.txt: astronaut, camera, chelsea, coffee from
scikit-image's wheel; never trained on) are decoded to linear rgb (sRGB 8-bit -> linear float,
`read_image`; the grey `camera` becomes grey rgb) and get cnngenin's noise model at three
levels, std(x) = sqrt(a + 65535 x b) / 65535 per channel, Gaussian, from seeded generators
(graphs/images/make_scene.py add_noise; not clipped). Columns:

* noisy: the noisy input itself;
* blur: the best Gaussian blur, sigma searched per image against the clean image (an oracle,
  an upper bound for blurring);
* NL-means: scikit-image `denoise_nl_means` (fast mode, patch 5, distance 6, h = 0.8 sigma,
  as scikit-image's own example);
* BM3D: PyPI `bm3d`, `bm3d_rgb` (its opponent colour transform, 'np' profile);
* VST-BM3D: the same BM3D after the generalized Anscombe transform of the true (a, b), which
  makes the signal-dependent noise about unit white noise, then the exact unbiased inverse for
  this noise (bench/vst.py): the classical treatment of such noise, the strongest classical
  column;
* vkgraph: kpn with the given weights (default: what `vkgraph denoise` uses for an EXR on
  the device, with its ensemble: on a GPU graphs/weights/unet-photo.lut averaged over the
  image and its mirror; on a CPU driver kpn-photo-ctx.lut; unet for weights unet-t trained,
  vkgraph/apps/denoise.py), or weights
  trained first by `--train CFG` (the training time is reported), given the true (a, b)
  (or, with --estimate, the profile vkgraph/apps/noise.py estimates from the noisy image).

NL-means and BM3D get the true noise, but both assume one sigma for the whole image while this
noise depends on the signal: they get the RMS of the true per-pixel std over the image,
sigma = sqrt(mean((a + 65535 b max(x, 0)) / 65535^2)), which is exact because the variance
is linear in x. Metrics: PSNR and SSIM (skimage.metrics, data_range 1, over rgb, SSIM per
channel averaged) of the unclipped outputs in linear [0, 1] against the clean image.

The classical columns are slow (BM3D: ~20 s per 512x512 image on one core), so they are cached
in bench/quality-baselines.json, keyed by image, level, seed and method settings and checked
against a hash of the clean and noisy pixels; a GPU run then only runs vkgraph. Missing or
stale entries are computed (in parallel with --jobs) and written back.

    python bench/quality.py [--weights W.lut | --train CFG [--frames N]] [--json OUT]
    python bench/quality.py --baselines-only --jobs 2     # fill the cache, no GPU needed
    python bench/quality.py --write-noisy DIR             # the noisy inputs as PNG
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/vst.py

from vkgraph.apps import heldout  # noqa: E402

# the held-out set, noise model and PSNR are the package's (vkgraph sweep --metric psnr)
from vkgraph.apps.heldout import (  # noqa: E402, F401
    LEVELS,
    add_noise,
    load_clean,
    psnr,
    seed_of,
    training_files,
)
from vkgraph.pipeline.formats import atomic_write  # noqa: E402

HELD_OUT = ROOT / "graphs" / "photos" / "held-out.txt"
CACHE = Path(__file__).resolve().parent / "quality-baselines.json"
BLUR_SIGMAS = (0.3, 0.4, 0.5, 0.6, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0)
METHODS = {  # the settings string is part of the cache key: change it when the method changes
    "blur": "gaussian, sigma by oracle from " + ",".join(map(str, BLUR_SIGMAS)),
    "nlm": "skimage denoise_nl_means fast_mode patch_size 5 patch_distance 6 h 0.8 sigma",
    "bm3d": "bm3d_rgb profile np colorspace opp",
    "bm3d-vst": "bm3d_rgb profile np colorspace opp sigma 1 after the generalized Anscombe "
                "VST of the true a, b; exact unbiased inverse (Gauss-Hermite, 80 nodes)",
}
COLUMNS = ("noisy", "blur", "nlm", "bm3d", "bm3d-vst", "vkgraph")
TITLES = {"noisy": "noisy", "blur": "blur (oracle)", "nlm": "NL-means", "bm3d": "BM3D",
          "bm3d-vst": "VST-BM3D", "vkgraph": "vkgraph"}


# ------------------------------------------------------------------------------------------
# images and metrics


def photos() -> list[Path]:
    return heldout.photos(HELD_OUT)


def true_sigma(clean: np.ndarray, a: float, b: float) -> float:
    """RMS of the true per-pixel noise std: exact, since the variance is linear in x."""
    return float(math.sqrt(a + 65535.0 * b * float(np.mean(np.maximum(clean, 0.0)))) / 65535.0)


def ssim(x: np.ndarray, ref: np.ndarray) -> float:
    from skimage.metrics import structural_similarity

    return float(structural_similarity(np.asarray(x[..., :3], np.float64), ref[..., :3],
                                       data_range=1.0, channel_axis=-1))


def metrics(x: np.ndarray, ref: np.ndarray) -> dict:
    return {"psnr": round(psnr(x, ref), 4), "ssim": round(ssim(x, ref), 5)}


def fingerprint(clean: np.ndarray, noisy: np.ndarray) -> str:
    h = hashlib.sha256(np.ascontiguousarray(clean, np.float32).tobytes())
    h.update(np.ascontiguousarray(noisy, np.float32).tobytes())
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------------------
# classical baselines


def gaussian_blur(img: np.ndarray, sigma: float) -> np.ndarray:
    """Separable Gaussian, mirrored borders."""
    r = max(1, int(3 * sigma + 0.5))
    k = np.exp(-0.5 * (np.arange(-r, r + 1) / sigma) ** 2)
    k /= k.sum()
    out = img.astype(np.float64)
    for axis in (0, 1):
        pad = [(r, r) if a == axis else (0, 0) for a in range(out.ndim)]
        p = np.pad(out, pad, mode="symmetric")
        out = sum(k[i] * np.take(p, range(i, i + img.shape[axis]), axis=axis)
                  for i in range(2 * r + 1))
    return out


def best_blur(noisy: np.ndarray, clean: np.ndarray) -> dict:
    best = max((psnr(gaussian_blur(noisy, s), clean), s) for s in BLUR_SIGMAS)
    return {**metrics(gaussian_blur(noisy, best[1]), clean), "sigma": best[1]}


def nl_means(noisy: np.ndarray, sigma: float) -> np.ndarray:
    from skimage.restoration import denoise_nl_means

    return denoise_nl_means(noisy, h=0.8 * sigma, sigma=sigma, fast_mode=True, patch_size=5,
                            patch_distance=6, channel_axis=-1)


def bm3d_rgb(noisy: np.ndarray, sigma: float) -> np.ndarray:
    """CBM3D (the opponent colour space); an exactly grey image (a noise-free JPEG of a grey
    photo) goes through grey BM3D, as bm3d_rgb divides by the chroma's range, zero there."""
    import bm3d

    if np.array_equal(noisy[..., 0], noisy[..., 1]) and np.array_equal(noisy[..., 0],
                                                                        noisy[..., 2]):
        grey = np.asarray(bm3d.bm3d(noisy[..., 0], sigma, profile="np"))
        return np.repeat(grey.reshape(grey.shape[:2])[..., None], 3, axis=-1)
    return bm3d.bm3d_rgb(noisy, sigma, profile="np", colorspace="opp")


def bm3d_vst(noisy: np.ndarray, a: float, b: float) -> np.ndarray:
    """BM3D on the variance-stabilised image (unit noise), then the exact unbiased inverse."""
    import vst

    return vst.inverse(bm3d_rgb(vst.forward(noisy, a, b), 1.0), a, b)


def case(path: Path, level_index: int) -> tuple[np.ndarray, np.ndarray, str, float, float]:
    """(clean, noisy, level name, a, b) of one image and level."""
    level, a, b = LEVELS[level_index]
    clean = load_clean(path)
    return clean, add_noise(clean, a, b, seed_of(level_index)), level, a, b


def baseline(task: tuple[str, str, int]) -> tuple[str, dict]:
    """One cache entry: (key, record). task = (image path, method, level index)."""
    path, method, li = task
    clean, noisy, level, a, b = case(Path(path), li)
    sigma = true_sigma(clean, a, b)
    t0 = time.perf_counter()
    if method == "blur":
        rec = best_blur(noisy, clean)
    elif method == "nlm":
        rec = metrics(nl_means(noisy, sigma), clean)
    elif method == "bm3d-vst":
        rec = metrics(bm3d_vst(noisy, a, b), clean)
    else:
        rec = metrics(bm3d_rgb(noisy, sigma), clean)
    rec.update(sigma=round(sigma, 7) if method != "blur" else rec["sigma"],
               seconds=round(time.perf_counter() - t0, 2), input=fingerprint(clean, noisy))
    if method == "bm3d-vst":
        rec["sigma"] = 1.0  # unit noise after the transform
    return cache_key(Path(path).stem, level, seed_of(li), method), rec


def cache_key(image: str, level: str, seed: int, method: str) -> str:
    return f"{image}|{level}|seed {seed}|{METHODS[method]}"


def load_cache(path: Path) -> dict:
    if not path.exists():
        return {}
    return json.loads(path.read_text())


def save_cache(path: Path, cache: dict) -> None:
    atomic_write(path, (json.dumps(dict(sorted(cache.items())), indent=1) + "\n").encode())


def fill_baselines(cache_path: Path, jobs: int) -> dict:
    """Every classical entry, from the cache where its input fingerprint matches, computed
    (jobs processes) and saved otherwise."""
    cache = load_cache(cache_path)
    todo = []
    for path in photos():
        for li in range(len(LEVELS)):
            clean, noisy, level, _, _ = case(path, li)
            fp = fingerprint(clean, noisy)
            for method in METHODS:
                rec = cache.get(cache_key(path.stem, level, seed_of(li), method))
                if rec is None or rec.get("input") != fp:
                    todo.append((str(path), method, li))
    if todo:
        print(f"computing {len(todo)} baseline entries with {jobs} processes "
              f"(cache: {cache_path})", file=sys.stderr)
        # BM3D first: the longest tasks start early
        todo.sort(key=lambda t: not t[1].startswith("bm3d"))
        pool = ProcessPoolExecutor(max_workers=jobs) if jobs > 1 else None
        try:
            for key, rec in (pool.map if pool else map)(baseline, todo):
                cache[key] = rec
                print(f"  {key}: {rec['psnr']:.2f} dB ({rec['seconds']} s)", file=sys.stderr)
                save_cache(cache_path, cache)  # partial progress survives an interrupt
        finally:
            if pool is not None:
                pool.shutdown(cancel_futures=True)
    return cache


# ------------------------------------------------------------------------------------------
# vkgraph


def check_held_out(files: list[Path]) -> None:
    """Refuse a training cfg that reads a held-out photograph (same bytes, any name)."""
    hit = heldout.reads_held_out(files, photos())
    if hit is not None:
        raise SystemExit(f"quality.py: the training cfg reads {hit[0]}, which is the "
                         f"held-out photograph {hit[1].name}: its numbers would not be "
                         "honest")


def train(device, cfg: Path, frames: int | None, folder: Path,
          lines: tuple[str, ...] = ()) -> tuple[Path, float, str]:
    """Run a training cfg (displays dropped, `lines` applied after it, its o-lut writing into
    `folder`); the weights, the wall time of the run (build included) and kpn-t's summary
    line."""
    from vkgraph.api import run_graph
    from vkgraph.pipeline.cfg import apply_line, read_cfg

    g = read_cfg(cfg)
    for n, line in enumerate(lines, 1):
        apply_line(g, line, f"line {n}")
    for m in [m for m in g.modules.values() if m.name == "display"]:
        g.remove_module("display", m.inst)
    luts = [m for m in g.modules.values() if m.name == "o-lut"]
    if not luts:
        raise SystemExit(f"{cfg}: no o-lut module writes the weights")
    for m in luts:
        m.set_param("filename", str(folder / m.inst))
    check_held_out(training_files(g, cfg))
    t0 = time.perf_counter()
    b = run_graph(g, device, frames=frames, last_frame_only=True)
    seconds = time.perf_counter() - t0
    lines = [m.cls.hook("summary")(b.context, m) for m in g.modules.values()
             if m.name in ("kpn-t", "unet-t") and m.cls.hook("summary")]
    return folder / f"{luts[0].inst}.lut", seconds, "; ".join(x for x in lines if x)


def run_vkgraph(device, weights: Path, levels: int | None,
                estimate: bool, ensemble: int = 1) -> tuple[dict, dict, int]:
    """{(image, level): metrics} of kpn, {(image, level): seconds} of each denoise and the
    pyramid levels kpn ran with (levels, else what the .lut says; None for unet)."""
    from vkgraph.apps.denoise import Denoiser
    from vkgraph.apps.noise import estimate_noise

    den = Denoiser(device, weights, levels=levels, ensemble=ensemble)
    out, seconds = {}, {}
    for path in photos():
        for li in range(len(LEVELS)):
            clean, noisy, level, a, b = case(path, li)
            if estimate:
                a, b = estimate_noise(noisy)
            t0 = time.perf_counter()
            result = den(noisy.astype(np.float32), a, b)
            seconds[(path.stem, level)] = time.perf_counter() - t0
            out[(path.stem, level)] = {**metrics(result, clean), "a": a, "b": b}
    return out, seconds, den.levels


# ------------------------------------------------------------------------------------------
# the table


def table_rows(results: dict) -> list[tuple[str, str, dict]]:
    """Per image and level, then a mean row per level: (image, level, {column: metrics})."""
    rows = [(img, level, cols) for (img, level), cols in results.items()]
    for level, _, _ in LEVELS:
        cells = [cols for (_, lv), cols in results.items() if lv == level]
        mean = {}
        for c in COLUMNS:
            have = [cell[c] for cell in cells if c in cell]
            if have and len(have) == len(cells):
                mean[c] = {k: float(np.mean([h[k] for h in have])) for k in ("psnr", "ssim")}
        rows.append(("**mean**", level, mean))
    return rows


def markdown(results: dict) -> str:
    cols = [c for c in COLUMNS if any(c in cell for cell in results.values())]
    head = "| image | noise | " + " | ".join(TITLES[c] for c in cols) + " |"
    lines = [head, "|---|---|" + "---|" * len(cols)]
    for img, level, cells in table_rows(results):
        vals = [f"{cells[c]['psnr']:.2f} / {cells[c]['ssim']:.3f}" if c in cells else "-"
                for c in cols]
        lines.append(f"| {img} | {level} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def margins(results: dict) -> list[str]:
    """The smallest PSNR margin of vkgraph over the noisy input, and its mean margin over
    NL-means, BM3D and VST-BM3D per level."""
    if not all("vkgraph" in c for c in results.values()):
        return []
    gain = {k: c["vkgraph"]["psnr"] - c["noisy"]["psnr"] for k, c in results.items()}
    worst = min(gain, key=gain.get)
    out = [f"smallest margin of vkgraph over the noisy input: {gain[worst]:+.2f} dB "
           f"({worst[0]}, {worst[1]})"]
    for level, _, _ in LEVELS:
        cells = [c for (_, lv), c in results.items() if lv == level]
        parts = [f"{TITLES[m]} {np.mean([c['vkgraph']['psnr'] - c[m]['psnr'] for c in cells]):+.2f}"
                 for m in ("nlm", "bm3d", "bm3d-vst") if all(m in c for c in cells)]
        out.append(f"{level}: mean PSNR of vkgraph minus " + ", ".join(parts) + " dB")
    return out


def collect(cache: dict) -> dict:
    """{(image, level): {column: metrics}} with the noisy input and the cached baselines."""
    results = {}
    for path in photos():
        for li in range(len(LEVELS)):
            clean, noisy, level, _, _ = case(path, li)
            cells = {"noisy": metrics(noisy, clean)}
            for method in METHODS:
                rec = cache.get(cache_key(path.stem, level, seed_of(li), method))
                if rec is not None:
                    cells[method] = rec
            results[(path.stem, level)] = cells
    return results


def write_noisy(folder: Path) -> None:
    from vkgraph.pipeline.formats import write_png

    folder.mkdir(parents=True, exist_ok=True)
    for path in photos():
        for li in range(len(LEVELS)):
            _, noisy, level, a, b = case(path, li)
            out = folder / f"{path.stem}-{level}.png"
            write_png(out, noisy)
            print(f"{out}: --noise {a:g} {b:g}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--weights", type=Path,
                     help="kpn weights, or unet-t's (default: `vkgraph denoise`'s for an EXR "
                     "on the device)")
    src.add_argument("--train", type=Path, metavar="CFG",
                     help="train with this cfg first (its o-lut output is the weights)")
    ap.add_argument("--frames", type=int, help="with --train: frames (default: the cfg's)")
    ap.add_argument("--levels", type=int,
                    help="with --weights: kpn's levels (default: what the .lut says, else 4)")
    ap.add_argument("--estimate", action="store_true",
                    help="give kpn the estimated noise profile instead of the true one")
    ap.add_argument("--ensemble", type=int, choices=(1, 2, 4, 8),
                    help="kpn averaged over this many flips and rotations (Denoiser; default: "
                    "`vkgraph denoise`'s for the weights on the device)")
    ap.add_argument("--device", help="Vulkan device (substring of its name)")
    ap.add_argument("--baselines", type=Path, default=CACHE, help="the baseline cache (JSON)")
    ap.add_argument("--baselines-only", action="store_true",
                    help="only fill the baseline cache and print its table (no device)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="processes for missing baseline entries")
    ap.add_argument("--json", type=Path, metavar="OUT", help="write every number to OUT")
    ap.add_argument("--write-noisy", type=Path, metavar="DIR",
                    help="only write the noisy held-out photos as PNG (IMAGE-LEVEL.png, sRGB "
                    "8-bit) into DIR, e.g. to try `vkgraph denoise` on them")
    args = ap.parse_args(argv)
    if args.write_noisy is not None:
        write_noisy(args.write_noisy)
        return 0
    if args.frames is not None and args.train is None:
        ap.error("--frames needs --train CFG")
    cache = fill_baselines(args.baselines, args.jobs)
    results = collect(cache)
    info: dict = {"noise_levels": LEVELS, "seeds": [seed_of(i) for i in range(len(LEVELS))],
                  "metrics": "PSNR (dB, peak 1) and SSIM (data_range 1) in linear [0, 1]"}
    if not args.baselines_only:
        from vkgraph.cli.denoise import default_ensemble, default_weights, on_gpu
        from vkgraph.pipeline.vk import Device

        if args.weights is not None and args.train is None and not args.weights.exists():
            ap.error(f"weights {args.weights} do not exist (give --weights or --train CFG)")
        dev = Device.open(args.device)
        try:
            info["device"] = dev.info.name
            # the command's defaults: the weights for an EXR on this device, their ensemble
            weights = args.weights or default_weights(Path("x.exr"), on_gpu(dev))
            with tempfile.TemporaryDirectory() as tmp:
                if args.train is not None:
                    weights, secs, summary = train(dev, args.train, args.frames, Path(tmp))
                    info.update(train_cfg=str(args.train), train_seconds=round(secs, 2),
                                train_summary=summary)
                    print(f"training: {summary} ({secs:.1f} s on {dev.info.name})")
                else:
                    info["weights"] = str(weights)
                ensemble = args.ensemble or default_ensemble(weights, on_gpu(dev))
                info["ensemble"] = ensemble
                vk, seconds, info["kpn_levels"] = run_vkgraph(dev, weights, args.levels,
                                                              args.estimate, ensemble)
                print(f"vkgraph: {Path(weights).name}, ensemble {ensemble}, on {dev.info.name}")
        finally:
            dev.close()
        for k, m in vk.items():
            results[k]["vkgraph"] = m
        info["denoise_seconds"] = {f"{k[0]}|{k[1]}": round(s, 4) for k, s in seconds.items()}
        info["noise_given"] = "estimated" if args.estimate else "true"
    print()
    print(markdown(results))
    for line in margins(results):
        print(line)
    if args.json:
        payload = {**info, "results": [{"image": k[0], "level": k[1], **v}
                                       for k, v in results.items()]}
        atomic_write(args.json, (json.dumps(payload, indent=1) + "\n").encode())
    return 0


if __name__ == "__main__":
    from vkgraph.pipeline.errors import VkgraphError

    try:
        sys.exit(main())
    except VkgraphError as e:  # bad input or device failure: one line, as vkgraph prints it
        print(f"quality.py: error: {e.line()}", file=sys.stderr)
        sys.exit(e.exit_code)
