"""Where the wall time of `vkgraph denoise IN -o OUT` goes, stage by stage; one table.

The bench runs the command's own loop (cli/denoise.py `run_here`: device open, Denoiser,
decode, estimate, denoise, encode, write, device close) --repeat times in one process, with
timers wrapped around the functions it calls. Each stage's time excludes the stages it
calls (so the stages add up to the run); a stage run on another thread (decoding while the
device starts) counts on that thread, so the stages may add up to more than the wall:

* import: what `vkgraph denoise` imports before it runs (cli/main.py, cli/denoise.py; tqdm
  only where the bar is shown, not here), in this fresh process; modules imported later
  count in the stage that imports them;
* open device, weights check (`Denoiser(...)`), close device;
* decode (file read, JPEG decode, orientation) and its EXIF/ICC read; sRGB decode (the
  samples made linear floats on the host: for the noise estimate, or for the float path);
* noise estimate (vkgraph/apps/noise.py);
* feed (Session.feed's checks), build (nodes, buffers, recording), shader SPIR-V (from the
  VKGRAPH_CACHE compile cache when warm), pipelines (vkCreateComputePipelines);
* upload (sources into staging and onto the device), device run (submit to fence: the GPU's
  time, excluded from the host sum), download (sinks to host arrays), result (the rest of
  the Denoiser's call: channels, finite check; an 8-bit photo's sRGB curves run on the
  device, in the device run);
* sRGB encode (linear float -> 8/16-bit, on the host: none for an 8-bit photo written in 8
  bits), image encode (Pillow/tifffile/...), atomic write
  (finite check, write, fsync, rename), other (the rest of the file's work).

`first` is the first run (what one command pays: tables, kernels and caches made once a
process), `min` the smallest of the runs. The run's wall is measured around run_here, and
"command" adds the import. No GPU is needed: --device llvmpipe (the CPU driver) works, with a
long device run.

    python bench/denoise_wall.py IN.jpg [--repeat 3] [--device NAME] [--out OUT.jpg]
        [--commands N [--base DIR]] [-- more `vkgraph denoise` options]
    python bench/denoise_wall.py --make photo12.jpg      # the 12 MP test photo, then exit

--commands N times the whole command instead, as a user runs it: `python -m vkgraph denoise
IN -o OUT` N times in fresh processes (OUT of IN's type; EXR for a camera raw file;
interpreter start, import and exit included), with
--base DIR (another checkout, e.g. `git worktree add DIR <commit>`) run in turn with each,
from its own folder; one line per run and the medians. --make writes the benchmark's 12 MP
JPEG: scikit-image's astronaut resized to 4000x3000 (bicubic), Gaussian noise of std 6/255
(seed 0), quality 90, EXIF Orientation 6 (so the photo is 3000x4000 upright).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# (module, attribute, stage); a class's method as "Class.method"
STAGES = [
    ("vkgraph.cli.denoise", "denoise_file", "other"),
    ("vkgraph.cli.common", "open_device", "open device"),
    ("vkgraph.pipeline.vk.device", "Device.close", "close device"),
    ("vkgraph.apps.denoise", "Denoiser.__init__", "weights check"),
    ("vkgraph.pipeline.formats", "decode_pixels", "decode"),
    ("vkgraph.pipeline.formats", "linear_rgba", "sRGB decode"),
    ("vkgraph.pipeline.formats", "_exif_upright", "EXIF read"),
    ("vkgraph.apps.noise", "noise_profile", "noise estimate"),
    ("vkgraph.api", "Session.feed", "feed"),
    ("vkgraph.pipeline.runner", "Build.__init__", "build"),
    ("vkgraph.pipeline.recording", "kernel_spirv", "shader SPIR-V"),
    ("vkgraph.pipeline.vk.kernel", "Kernel.__init__", "pipelines"),
    ("vkgraph.pipeline.transfers", "Transfers.upload_sources", "upload"),
    ("vkgraph.pipeline.runner", "Build.run_frame", "device run"),
    ("vkgraph.pipeline.transfers", "Transfers.download_sinks", "download"),
    ("vkgraph.apps.denoise", "Denoiser.__call__", "result"),
    ("vkgraph.apps.denoise", "Denoiser.srgb", "result (8-bit)"),
    ("vkgraph.pipeline.formats", "srgb_samples", "sRGB encode"),
    ("vkgraph.pipeline.formats", "_pillow_bytes", "image encode"),
    ("vkgraph.pipeline.formats", "atomic_write", "atomic write"),
]
DEVICE_STAGES = ("device run",)  # the GPU's own time: not host work


class Stages:
    """Exclusive wall time per stage of the current run, per thread."""

    def __init__(self):
        self.run: dict[str, float] = {}
        self.local = threading.local()
        self.lock = threading.Lock()

    def wrap(self, fn, stage: str):
        def timed(*args, **kwargs):
            stack = self.local.__dict__.setdefault("stack", [])
            stack.append(0.0)  # time spent in the stages this call makes
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = time.perf_counter() - t0
                inner = stack.pop()
                if stack:
                    stack[-1] += dt
                with self.lock:
                    self.run[stage] = self.run.get(stage, 0.0) + dt - inner
        return timed

    def install(self) -> None:
        import importlib

        for module, attr, stage in STAGES:
            owner = importlib.import_module(module)
            *path, name = attr.split(".")
            for part in path:
                owner = getattr(owner, part)
            setattr(owner, name, self.wrap(getattr(owner, name), stage))


def make_photo(path: Path) -> None:
    """The 12 MP test JPEG (the module docstring's --make)."""
    import numpy as np
    from PIL import Image
    from skimage import data

    im = Image.fromarray(data.astronaut()).resize((4000, 3000), Image.BICUBIC)
    noisy = np.asarray(im, np.float32) + np.random.default_rng(0).normal(0, 6, (3000, 4000, 3))
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: the stored image turned 90 degrees
    Image.fromarray(np.clip(np.round(noisy), 0, 255).astype(np.uint8)).save(
        path, quality=90, exif=exif)


def commands(args) -> None:
    """--commands: the whole command in fresh processes, this checkout and --base in turn."""
    import statistics
    import subprocess

    trees = [("this", ROOT)] + ([("base", args.base.resolve())] if args.base else [])
    walls: dict[str, list[float]] = {name: [] for name, _ in trees}
    with tempfile.TemporaryDirectory() as tmp:
        src = args.input.resolve()
        suffix = out_suffix(src)
        for k in range(args.commands):
            for name, root in trees:
                out = Path(tmp) / f"{name}{suffix}"
                argv = [sys.executable, "-m", "vkgraph", "denoise", str(src), "-o", str(out),
                        *args.more] + (["--device", args.device] if args.device else [])
                others = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                          if p and Path(p).resolve() != ROOT]
                env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), *others]))
                t = time.perf_counter()
                done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True)
                walls[name].append(time.perf_counter() - t)
                if done.returncode:
                    sys.exit(f"{name}: exit {done.returncode}: {done.stderr.strip()}")
                print(f"run {k + 1} {name}: {walls[name][-1]:.2f} s", flush=True)
    for name, ts in walls.items():
        print(f"{name}: median {statistics.median(ts):.2f} s, min {min(ts):.2f}, "
              f"max {max(ts):.2f} ({len(ts)} runs)")


def out_suffix(src: Path) -> str:
    """The output's extension for the input src: its own, EXR for a camera raw file (the
    command's default)."""
    from vkgraph.cli.denoise import RAW_OUT
    from vkgraph.pipeline.raw import is_raw

    return RAW_OUT if is_raw(src) else src.suffix


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input", type=Path, nargs="?")
    ap.add_argument("--make", type=Path, metavar="OUT.jpg", help="write the 12 MP test JPEG")
    ap.add_argument("--commands", type=int, metavar="N", help="time N whole commands")
    ap.add_argument("--base", type=Path, metavar="DIR", help="with --commands: another "
                    "checkout, run in turn")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", help="Vulkan device (as `vkgraph denoise --device`)")
    ap.add_argument("--out", type=Path, help="the output (default: a temp file of the "
                    "input's extension, EXR for a camera raw file)")
    ap.add_argument("more", nargs="*", help="more `vkgraph denoise` options (after --)")
    argv = sys.argv[1:]  # what follows `--` is the command's (argparse would not take it
    cut = argv.index("--") if "--" in argv else len(argv)  # after IN and an option)
    args = ap.parse_args(argv[:cut])
    args.more += argv[cut + 1:]
    if args.make:
        make_photo(args.make)
        return
    if args.input is None:
        ap.error("give IN (or --make OUT.jpg)")
    if args.commands:
        commands(args)
        return

    t0 = time.perf_counter()
    import vkgraph.cli.denoise as cli_denoise
    from vkgraph.cli.main import build_parser
    t_import = time.perf_counter() - t0

    stages = Stages()
    stages.install()
    runs, walls = [], []
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / f"out{out_suffix(args.input)}"
        argv = ["denoise", str(args.input), "-o", str(out), *args.more]
        if args.device:
            argv += ["--device", args.device]
        cmd = build_parser().parse_args(argv)
        bar = cli_denoise.files_bar(1, False)  # as without a terminal
        for _ in range(args.repeat):
            stages.run = {}
            t = time.perf_counter()
            failed, _ = cli_denoise.run_here(cmd, [(args.input, out)], None, bar,
                                             lambda: False)
            walls.append(time.perf_counter() - t)
            if failed:
                sys.exit(f"{args.input}: the denoise failed (see above)")
            runs.append(stages.run)
        size = out.stat().st_size
        digest = hashlib.sha256(out.read_bytes()).hexdigest()[:16]
    names = [s for _, _, s in STAGES if any(s in r for r in runs)]
    print(f"{args.input}: {size} bytes written, sha256 {digest}; {args.repeat} runs; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print("| stage | first ms | min ms |")
    print("|---|---|---|")
    print(f"| import | {t_import * 1e3:.0f} | {t_import * 1e3:.0f} |")
    for name in sorted(names, key=lambda s: -runs[0].get(s, 0.0)):
        ts = [r.get(name, 0.0) * 1e3 for r in runs]
        print(f"| {name} | {ts[0]:.0f} | {min(ts):.0f} |")
    host = [sum(v for k, v in r.items() if k not in DEVICE_STAGES) * 1e3 for r in runs]
    print(f"| host stages, summed (import included) | {host[0] + t_import * 1e3:.0f} | "
          f"{min(host) + t_import * 1e3:.0f} |")
    dev = [sum(r.get(k, 0.0) for k in DEVICE_STAGES) * 1e3 for r in runs]
    wall = [w * 1e3 for w in walls]
    print(f"| run wall | {wall[0]:.0f} | {min(wall):.0f} |")
    print(f"| run wall without the device run | {wall[0] - dev[0]:.0f} | "
          f"{min(w - d for w, d in zip(wall, dev, strict=True)):.0f} |")
    print(f"| command (import + run wall without the device run) | "
          f"{t_import * 1e3 + wall[0] - dev[0]:.0f} | "
          f"{t_import * 1e3 + min(w - d for w, d in zip(wall, dev, strict=True)):.0f} |")


if __name__ == "__main__":
    main()
