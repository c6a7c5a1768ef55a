"""Recipe sweep for the photo denoiser: train kpn-t with variants of a training cfg, then
denoise the held-out photographs at three noise levels with each result; one table.

Each variant is `NAME=LINE;LINE;...` (cfg lines applied after the cfg, e.g.
`lr5e-3=param:kpn-t:01:alpha:0.005`; `frames:N` sets that variant's frame count); the first
variant `base` is the cfg itself. Training and evaluation are bench/quality.py's: the
held-out photographs (graphs/photos/held-out.txt, never trained on) with cnngenin's noise
model at its three levels, kpn given the true noise profile, PSNR in dB (peak 1, linear rgb).

    python bench/kpn_sweep.py [--cfg graphs/train-photo.cfg] [--frames 5000]
                              [--variant NAME=LINES ...] [--json FILE] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import quality  # noqa: E402  (bench/quality.py: the held-out set, noise, training, kpn)

from vkgraph.pipeline.vk import Device  # noqa: E402


def noisy_psnr() -> dict:
    """{(image, level): PSNR of the noisy input}."""
    out = {}
    for path in quality.photos():
        for li in range(len(quality.LEVELS)):
            clean, noisy, level, _, _ = quality.case(path, li)
            out[(path.stem, level)] = quality.psnr(noisy, clean)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cfg", type=Path, default=quality.ROOT / "graphs" / "train-photo.cfg")
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
    base = noisy_psnr()
    levels = [name for name, _, _ in quality.LEVELS]
    dev = Device.open(args.device)
    results = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, lines in variants:
                frames = next((int(x.split(":")[1]) for x in lines if x.startswith("frames:")),
                              args.frames)
                lines = [x for x in lines if not x.startswith("frames:")]
                lut, secs, summary = quality.train(dev, args.cfg, frames, Path(tmp),
                                                   tuple(lines))
                if args.keep:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    shutil.copy(lut, args.keep / f"{name}.lut")
                rows, _, _ = quality.run_vkgraph(dev, lut, None, False)
                gain = {k: rows[k]["psnr"] - base[k] for k in rows}
                per = {lv: float(np.mean([g for (_, level), g in gain.items() if level == lv]))
                       for lv in levels}
                results.append({"variant": name, "lines": lines, "frames": frames,
                                "train_s": secs, "summary": summary, "gain_db": per,
                                "worst_gain_db": min(gain.values()),
                                "rows": {f"{i}/{lv}": rows[(i, lv)]["psnr"]
                                         for i, lv in rows}})
                print(f"{name}: {summary}; gain " + " ".join(f"{lv} {per[lv]:+.2f}"
                      for lv in levels) + f" worst {min(gain.values()):+.2f} ({secs:.0f} s)",
                      flush=True)
    finally:
        devname = dev.info.name
        dev.close()
    print(f"\nkpn-t recipe sweep on {devname}: mean PSNR gain over the noisy input (dB) on "
          "the held-out photos")
    print("| variant | frames | train s | " + " | ".join(levels) + " | mean | worst |")
    print("|---" * (len(levels) + 5) + "|")
    for r in results:
        g = r["gain_db"]
        print(f"| {r['variant']} | {r['frames']} | {r['train_s']:.0f} | "
              + " | ".join(f"{g[lv]:+.2f}" for lv in levels)
              + f" | {np.mean(list(g.values())):+.2f} | {r['worst_gain_db']:+.2f} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
