"""Recipe sweep for the photo denoiser: train kpn-t with variants of a training cfg, then
denoise the held-out photographs at three noise levels with each result; one table.

Each variant is `NAME=LINE;LINE;...` (cfg lines applied after the cfg, e.g.
`lr5e-3=param:kpn-t:01:alpha:0.005`); the first variant `base` is the cfg itself. The held-out
photographs (graphs/photos/held-out.txt) are never trained on; their noisy versions use
cnngenin's model in linear light at the levels of bench/quality.py, and kpn gets the true
noise profile. PSNR in dB (peak 1, linear rgb).

    python bench/kpn_sweep.py [--cfg graphs/train-photo.cfg] [--frames 5000]
                              [--variant NAME=LINES ...] [--json FILE] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vkgraph.pipeline.cfg import apply_line, read_cfg  # noqa: E402
from vkgraph.pipeline.datasets import image_set  # noqa: E402
from vkgraph.pipeline.formats import read_image, read_pfm, write_pfm  # noqa: E402
from vkgraph.pipeline.graph import Graph  # noqa: E402
from vkgraph.pipeline.runner import Build, run_graph  # noqa: E402
from vkgraph.pipeline.vk import Device  # noqa: E402

# (name, noise a, noise b) of cnngenin's model std(x) = sqrt(a + 65535 x b) / 65535
LEVELS = [("low", 2e5, 20.0), ("mid", 1e6, 100.0), ("high", 5e6, 400.0)]
HELD_OUT = ROOT / "graphs" / "photos" / "held-out.txt"


def psnr(x: np.ndarray, ref: np.ndarray) -> float:
    mse = float(np.mean((x[..., :3].astype(np.float64) - ref[..., :3]) ** 2))
    return 10 * np.log10(1.0 / max(mse, 1e-20))


def add_noise(img: np.ndarray, a: float, b: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = img[..., :3].astype(np.float64)
    std = np.sqrt(a + 65535.0 * np.maximum(x, 0.0) * b) / 65535.0
    return (x + std * rng.standard_normal(x.shape)).astype(np.float32)


def held_out() -> list[tuple[str, np.ndarray]]:
    return [(p.stem, read_image(p)[..., :3]) for p in image_set(str(HELD_OUT), Path)]


def train(device, cfg: Path, frames: int, lines: list[str], out: Path) -> tuple[Path, float, str]:
    g = read_cfg(cfg)
    for m in [m for m in g.modules.values() if m.name == "display"]:
        g.remove_module("display", m.inst)
    for line in [*lines, f"param:o-lut:w:filename:{out / 'w'}"]:
        apply_line(g, line, "sweep")
    t0 = time.perf_counter()
    b = run_graph(g, device, frames=frames, last_frame_only=True)
    secs = time.perf_counter() - t0
    m = g.modules[("kpn-t", "01")]
    return out / "w.lut", secs, m.cls.hook("summary")(b, m)


def denoise(device, lut: Path, noisy: np.ndarray, a: float, b: float,
            folder: Path) -> np.ndarray:
    """kpn on one image (apply and levels follow the .lut's text)."""
    write_pfm(folder / "noisy.pfm", noisy)
    g = Graph()
    for line in ["module:i-pfm:main", f"param:i-pfm:main:filename:{folder / 'noisy.pfm'}",
                 "module:i-lut:w", f"param:i-lut:w:filename:{lut}", "module:kpn:01",
                 "module:o-pfm:main", f"param:o-pfm:main:filename:{folder / 'out'}",
                 "connect:i-pfm:main:output:kpn:01:input", "connect:i-lut:w:output:kpn:01:w",
                 "connect:kpn:01:output:o-pfm:main:input", f"param:kpn:01:noise a:{a}",
                 f"param:kpn:01:noise b:{b}"]:
        apply_line(g, line, "sweep")
    build = Build(g, device)
    build.run_frame(0)
    return read_pfm(folder / "out.pfm")


def evaluate(device, lut: Path, photos, folder: Path) -> dict:
    rows = {}
    for name, clean in photos:
        for k, (level, a, b) in enumerate(LEVELS):
            noisy = add_noise(clean, a, b, seed=100 + k)
            out = denoise(device, lut, noisy, a, b, folder)
            rows[(name, level)] = (psnr(noisy, clean), psnr(out, clean))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cfg", type=Path, default=ROOT / "graphs" / "train-photo.cfg")
    ap.add_argument("--frames", type=int, default=5000)
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=LINE;LINE;... (cfg lines applied after the cfg)")
    ap.add_argument("--json", type=Path, help="write all numbers here")
    ap.add_argument("--keep", type=Path, help="copy each variant's weights here")
    ap.add_argument("--device", help="Vulkan device (substring of its name)")
    args = ap.parse_args()
    variants = [("base", [])]
    for v in args.variant:
        name, _, lines = v.partition("=")
        variants.append((name, [x for x in lines.split(";") if x]))
    dev = Device.open(args.device)
    photos = held_out()
    results = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            for name, lines in variants:
                frames = args.frames
                for x in lines:
                    if x.startswith("frames:"):
                        frames = int(x.split(":")[1])
                lut, secs, summary = train(dev, args.cfg, frames, lines, folder)
                rows = evaluate(dev, lut, photos, folder)
                if args.keep:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    shutil.copy(lut, args.keep / f"{name}.lut")
                per = {lv: float(np.mean([rows[(n, lv)][1] - rows[(n, lv)][0]
                                          for n, _ in photos])) for lv, _, _ in LEVELS}
                worst = min(o - i for i, o in rows.values())
                results.append({"variant": name, "lines": lines, "frames": frames,
                                "train_s": secs, "summary": summary, "gain_db": per,
                                "worst_gain_db": worst,
                                "rows": {f"{n}/{lv}": v for (n, lv), v in rows.items()}})
                print(f"{name}: {summary}; gain low {per['low']:+.2f} mid {per['mid']:+.2f} "
                      f"high {per['high']:+.2f} worst {worst:+.2f} ({secs:.0f} s)", flush=True)
    finally:
        devname = dev.info.name
        dev.close()
    print(f"\nkpn-t recipe sweep on {devname}: mean PSNR gain over the noisy input (dB) on "
          f"the held-out photos ({', '.join(n for n, _ in photos)})")
    print("| variant | frames | train s | low | mid | high | mean | worst |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        g = r["gain_db"]
        print(f"| {r['variant']} | {r['frames']} | {r['train_s']:.0f} | {g['low']:+.2f} | "
              f"{g['mid']:+.2f} | {g['high']:+.2f} | {np.mean(list(g.values())):+.2f} | "
              f"{r['worst_gain_db']:+.2f} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
