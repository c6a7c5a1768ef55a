"""Denoising quality: PSNR of kpn after training against classical baselines, same run.

Trains kpn-t (graphs/train-kpn.cfg: random 64x64 tiles of scene.pfm with cnngenin's synthetic
noise) for N frames, then denoises the held-out scenes scene-b and scene-c with noise of the
same model at three levels and prints one table: PSNR of the noisy input, of kpn, of the best
Gaussian blur (sigma searched per image against the clean image: an oracle, so an upper bound
for blurring), and of NL-means where scikit-image provides it (sigma from the true noise).

    python bench/quality.py [--frames 2000] [--device NAME]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.cfg import apply_line, read_cfg  # noqa: E402
from pipeline.formats import read_pfm, write_pfm  # noqa: E402
from pipeline.graph import Graph  # noqa: E402
from pipeline.runner import Build, run_graph  # noqa: E402
from pipeline.vk import Device  # noqa: E402

# (name, noise a, noise b) of cnngenin's model std(x) = sqrt(a + 65535 x b) / 65535
LEVELS = [("low", 2e5, 20.0), ("mid", 1e6, 100.0), ("high", 5e6, 400.0)]
HELD_OUT = ["scene-b.pfm", "scene-c.pfm"]


def psnr(x: np.ndarray, ref: np.ndarray) -> float:
    mse = float(np.mean((x[..., :3].astype(np.float64) - ref[..., :3]) ** 2))
    return 10 * np.log10(1.0 / max(mse, 1e-20))


def gaussian_blur(img: np.ndarray, sigma: float) -> np.ndarray:
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


def best_blur(noisy: np.ndarray, clean: np.ndarray) -> float:
    return max(psnr(gaussian_blur(noisy, s), clean)
               for s in (0.3, 0.4, 0.5, 0.6, 0.75, 1.0, 1.5, 2.0))


def nl_means(noisy: np.ndarray, clean: np.ndarray, a: float, b: float) -> float | None:
    try:
        from skimage.restoration import denoise_nl_means
    except ImportError:
        return None
    sigma = float(np.sqrt(a + 65535 * np.mean(np.maximum(clean, 0)) * b) / 65535)
    out = denoise_nl_means(noisy, h=0.8 * sigma, sigma=sigma, fast_mode=True,
                           patch_size=5, patch_distance=6, channel_axis=-1)
    return psnr(out, clean)


def add_noise(img, a, b, seed):
    spec = importlib.util.spec_from_file_location("make_scene",
                                                  ROOT / "graphs" / "images" / "make_scene.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.add_noise(img, a, b, seed)


def train(device, frames: int, folder: Path, extra: list[str]) -> Path:
    g = read_cfg(ROOT / "graphs" / "train-kpn.cfg")
    for m in [m for m in g.modules.values() if m.name == "display"]:
        g.remove_module("display", m.inst)
    for line in [f"param:o-lut:w:filename:{folder / 'mlp-w'}", *extra]:
        apply_line(g, line, "quality")
    t0 = time.perf_counter()
    b = run_graph(g, device, frames=frames, last_frame_only=True)
    m = g.modules[("kpn-t", "01")]
    print(m.cls.hook("summary")(b, m), f"({time.perf_counter() - t0:.1f} s)")
    return folder / "mlp-w.lut"


def denoise(device, lut: Path, noisy: np.ndarray, folder: Path, apply: int) -> np.ndarray:
    write_pfm(folder / "noisy.pfm", noisy)
    g = Graph()
    for line in ["module:i-pfm:main", f"param:i-pfm:main:filename:{folder / 'noisy.pfm'}",
                 "module:i-lut:w", f"param:i-lut:w:filename:{lut}", "module:kpn:01",
                 "module:o-pfm:main", f"param:o-pfm:main:filename:{folder / 'out'}",
                 "connect:i-pfm:main:output:kpn:01:input", "connect:i-lut:w:output:kpn:01:w",
                 "connect:kpn:01:output:o-pfm:main:input", f"param:kpn:01:apply:{apply}"]:
        apply_line(g, line, "quality")
    b = Build(g, device)
    b.run_frame(0)
    return read_pfm(folder / "out.pfm")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=2000)
    ap.add_argument("--device", help="Vulkan device (substring of its name)")
    ap.add_argument("--apply", type=int, default=0, help="kpn-t filter: 0 plain, 1 softmax")
    ap.add_argument("--alpha", type=float, help="learning rate (default: the cfg's)")
    ap.add_argument("--noise", type=float, help="cnngenin noise scale (default: the cfg's)")
    args = ap.parse_args()
    dev = Device.open(args.device)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            extra = [f"param:kpn-t:01:apply:{args.apply}"]
            if args.alpha is not None:
                extra.append(f"param:kpn-t:01:alpha:{args.alpha}")
            if args.noise is not None:
                extra.append(f"param:cnngenin:01:noise:{args.noise}")
            lut = train(dev, args.frames, folder, extra)
            for name in HELD_OUT:
                clean = read_pfm(ROOT / "graphs" / "images" / name)
                for i, (level, a, b) in enumerate(LEVELS):
                    noisy = add_noise(clean, a, b, seed=10 + i)
                    out = denoise(dev, lut, noisy, folder, args.apply)
                    rows.append((name, level, psnr(noisy, clean), psnr(out, clean),
                                 best_blur(noisy, clean), nl_means(noisy, clean, a, b)))
    finally:
        name = dev.info.name
        dev.close()
    print(f"\nkpn after {args.frames} training frames on {name} (apply {args.apply}); "
          "PSNR in dB (peak 1)")
    print("| image | noise | noisy | kpn | best Gaussian blur | NL-means |")
    print("|---|---|---|---|---|---|")
    for img, level, n, k, bl, nl in rows:
        nls = f"{nl:.2f}" if nl is not None else "n/a (no scikit-image)"
        print(f"| {img} | {level} | {n:.2f} | {k:.2f} | {bl:.2f} | {nls} |")


if __name__ == "__main__":
    main()
