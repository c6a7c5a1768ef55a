"""`vkgraph denoise` of a 12-megapixel JPEG on the CPU, against OIDN on the same file; one table.

The photo is a held-out photograph (scikit-image's astronaut, graphs/photos/held-out.txt)
tiled to W x H (default 4000 x 3000), with cnngenin's noise at the "mid" level of
bench/quality.py (a 1e6, b 100), written as an sRGB JPEG (quality 95). Each denoiser runs in a
child process of its own, one after the other, on the whole file (read, denoise, write):

* vkgraph: `python -m vkgraph denoise IN -o OUT --device llvmpipe` (the CPU driver; the
  noise profile estimated, as a user runs it), with kpn's `cpu` MLP kernels;
* OIDN: PyPI `pyoidn` (optional: the row says so when it is missing), its RT filter on the
  decoded linear image, LDR, quality "high".

Columns: wall seconds of the child (start to exit: Python start, file I/O, pipeline
compilation included) and per megapixel, the CPU seconds it used (user + system, all its
threads: on a machine shared with other work the wall time depends on the load, this much
less), its peak resident memory (wait4), and PSNR in sRGB (the 8-bit output against the clean
photo as an 8-bit PNG holds it). The load average is printed with the table.

    nice python bench/denoise_cpu.py [--size 4000x3000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import quality  # noqa: E402  (bench/quality.py: the held-out photos, the noise model)

from vkgraph.pipeline import formats  # noqa: E402

_, A, B = quality.LEVELS[1]  # the "mid" level

OIDN = """
import sys, numpy as np, pyoidn
from vkgraph.pipeline import formats
img = formats.read_image(sys.argv[1])[..., :3]
out = pyoidn.denoise(np.ascontiguousarray(img, np.float32), quality="high")
formats.write_jpg(sys.argv[2], out, quality=95)
"""


def child(cmd: list[str]) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak RSS MiB, stderr) of one child process run to its end."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])}... failed ({p.returncode}): {err[-400:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, err


def srgb8(path: Path) -> np.ndarray:
    """An image file as the 8-bit sRGB values a viewer shows, as float64."""
    from PIL import Image

    return np.asarray(Image.open(path).convert("RGB"), np.float64)


def psnr8(x: np.ndarray, ref: np.ndarray) -> float:
    mse = float(np.mean((x - ref) ** 2))
    return 10 * np.log10(255.0 ** 2 / max(mse, 1e-20))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="4000x3000")
    ap.add_argument("--keep", type=Path, help="write the files here (default: a temp folder)")
    ap.add_argument("--device", default="llvmpipe", help="Vulkan device for vkgraph")
    args = ap.parse_args()
    wd, ht = (int(v) for v in args.size.split("x"))
    mp = wd * ht / 1e6
    photo = quality.load_clean(quality.photos()[0])
    reps = (-(-ht // photo.shape[0]), -(-wd // photo.shape[1]), 1)
    clean = np.tile(photo, reps)[:ht, :wd]
    noisy = quality.add_noise(clean, A, B, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        d = args.keep or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        src = d / "noisy.jpg"
        formats.write_jpg(src, noisy.astype(np.float32), quality=95)
        formats.write_png(d / "clean.png", clean.astype(np.float32))
        ref = srgb8(d / "clean.png")
        rows = [("noisy input (JPEG q95)", None, None, None, psnr8(srgb8(src), ref))]
        out = d / "vkgraph.jpg"
        wall, cpu, rss, _ = child([sys.executable, "-m", "vkgraph", "denoise", str(src),
                                   "-o", str(out), "--device", args.device])
        rows.append((f"vkgraph denoise (--device {args.device})", wall, cpu, rss,
                     psnr8(srgb8(out), ref)))
        try:
            import pyoidn  # noqa: F401
        except ImportError:
            rows.append(("OIDN (pyoidn not installed)", None, None, None, None))
        else:
            out = d / "oidn.jpg"
            wall, cpu, rss, _ = child([sys.executable, "-c", OIDN, str(src), str(out)])
            rows.append(("OIDN (pyoidn, RT, high)", wall, cpu, rss, psnr8(srgb8(out), ref)))
    load = os.getloadavg()[0]
    print(f"denoise a {wd}x{ht} ({mp:.1f} MP) JPEG, mid noise, on {os.cpu_count()} CPU cores "
          f"(load average {load:.1f} at the end)")
    print("| denoiser | wall s | s/MP | CPU s | CPU s/MP | peak RSS MiB | PSNR sRGB dB |")
    print("|---|---|---|---|---|---|---|")
    for name, wall, cpu, rss, db in rows:
        cells = [f"{wall:.1f}" if wall else "-", f"{wall / mp:.2f}" if wall else "-",
                 f"{cpu:.1f}" if cpu else "-", f"{cpu / mp:.2f}" if cpu else "-",
                 f"{rss:.0f}" if rss else "-", f"{db:.2f}" if db is not None else "-"]
        print(f"| {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
