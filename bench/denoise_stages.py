"""Host stages of `vkgraph denoise IN.jpg` in one process, timed one by one; one table.

The calls are those of cli/denoise.py (`run_here`, `denoise_file`), in its order:

* import: the modules `vkgraph denoise` imports before it opens the device (cli/main.py,
  cli/denoise.py and what they import at the top), in this fresh process;
* open: `open_device` (the Vulkan instance and device), once;
* weights: `Denoiser(device, WEIGHTS)` (the weights checked);
* decode: `formats.decode_image(IN, finite=True)`;
* noise: `noise.noise_profile` (the estimate, jpeg=True for a JPEG);
* build: the graph build of the first denoise (`Denoiser._build` for the size kpn runs: the
  whole image, or one tile of a tiled one); with --denoise, the first denoise call (build and
  run) and a second one (run only) instead;
* encode: `formats.write_like(OUT, result, meta)` (without --denoise the decoded image stands
  in for the result: same size, same dtype).

Each stage after import runs --repeat times (the build on a fresh Denoiser each time); the
table gives the wall seconds of the first run (what the command pays: module imports, tables
and kernels made once a process), the smallest of all runs, and the CPU seconds of the first
(all threads; less dependent on other work on a shared machine). The estimate and a hash of
the output are printed, so that two trees can be compared. Lazily imported modules count in
the stage that first imports them (as in the command).

    python bench/denoise_stages.py IN.jpg [--device llvmpipe] [--repeat 3] [--out OUT.jpg]
        [--denoise]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input", type=Path)
    ap.add_argument("--device", default="llvmpipe")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, help="the output (default: a temp file)")
    ap.add_argument("--denoise", action="store_true", help="run kpn too (slow on the CPU)")
    args = ap.parse_args()

    t0, c0 = time.perf_counter(), time.process_time()
    import vkgraph.cli.denoise as cli_denoise  # noqa: F401
    import vkgraph.cli.main  # noqa: F401
    t_import, c_import = time.perf_counter() - t0, time.process_time() - c0

    from vkgraph.apps.denoise import Denoiser
    from vkgraph.apps.noise import noise_profile
    from vkgraph.cli.denoise import WEIGHTS
    from vkgraph.cli.main import open_device
    from vkgraph.pipeline.formats import decode_image, write_like

    times: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}

    def timed(name, fn):
        t, c = time.perf_counter(), time.process_time()
        r = fn()
        times.setdefault(name, []).append(time.perf_counter() - t)
        cpu.setdefault(name, []).append(time.process_time() - c)
        return r

    dev_args = argparse.Namespace(device=args.device, device_id=None)
    device = timed("open", lambda: open_device(dev_args))
    try:
        den = None
        for _ in range(args.repeat):
            den = timed("weights", lambda: Denoiser(device, WEIGHTS))
        for _ in range(args.repeat):
            image, meta = timed("decode", lambda: decode_image(args.input, finite=True))
        for _ in range(args.repeat):
            (a, b), how = timed("noise", lambda: noise_profile(image, None, 1.0,
                                                               jpeg=meta.format == "jpg"))
        ht, wd = image.shape[:2]
        if args.denoise:
            out = timed("denoise 1 (build)", lambda: den(image, a, b))
            out = timed("denoise 2", lambda: den(image, a, b))
        else:
            if wd * ht <= den.max_pixels:
                part = image
            else:
                cx, cy, margin = den.tiling(wd, ht)
                from vkgraph.apps.denoise import tile_length
                step = 1 << den.levels
                part = image[:tile_length(ht, cy, margin, step), :tile_length(wd, cx, margin,
                                                                                step)]
            for _ in range(args.repeat):
                timed("build", functools.partial(Denoiser(device, WEIGHTS)._build, part))
            out = image[:, :, :3].copy()
        with tempfile.TemporaryDirectory() as tmp:
            dst = args.out or Path(tmp) / f"out{args.input.suffix}"
            for _ in range(args.repeat):
                timed("encode", lambda: write_like(dst, out, meta))
            digest = hashlib.sha256(dst.read_bytes()).hexdigest()[:16]
    finally:
        device.close()
    print(f"{args.input}: {wd}x{ht}, {device.info.name if hasattr(device, 'info') else ''}; "
          f"noise a {a:.6g} b {b:.6g} ({how}); output sha256 {digest}; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print("| stage | first s | min s | CPU first s |")
    print("|---|---|---|---|")
    print(f"| import | {t_import:.3f} | {t_import:.3f} | {c_import:.3f} |")
    for name, ts in times.items():
        print(f"| {name} | {ts[0]:.3f} | {min(ts):.3f} | {cpu[name][0]:.3f} |")
    first = t_import + sum(ts[0] for ts in times.values())
    least = t_import + sum(min(ts) for ts in times.values())
    print(f"| sum | {first:.3f} | {least:.3f} | "
          f"{c_import + sum(c[0] for c in cpu.values()):.3f} |")


if __name__ == "__main__":
    main()
