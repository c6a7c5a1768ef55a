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
* decode (file read, JPEG decode, orientation, sRGB -> linear) and its EXIF/ICC read;
* noise estimate (vkgraph/apps/noise.py);
* feed (Session.feed's checks), build (nodes, buffers, recording), shader SPIR-V (from the
  VKGRAPH_CACHE compile cache when warm), pipelines (vkCreateComputePipelines);
* upload (sources into staging and onto the device), device run (submit to fence: the GPU's
  time, excluded from the host sum), download (sinks to host arrays), result (the rest of
  the Denoiser's call: channels, finite check);
* sRGB encode (linear float -> 8/16-bit), image encode (Pillow/tifffile/...), atomic write
  (finite check, write, fsync, rename), other (the rest of the file's work).

`first` is the first run (what one command pays: tables, kernels and caches made once a
process), `min` the smallest of the runs. The run's wall is measured around run_here, and
"command" adds the import. No GPU is needed: --device llvmpipe (the CPU driver) works, with a
long device run.

    python bench/denoise_wall.py IN.jpg [--repeat 3] [--device NAME] [--out OUT.jpg]
        [-- more `vkgraph denoise` options]
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
    ("vkgraph.pipeline.formats", "decode_image", "decode"),
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", help="Vulkan device (as `vkgraph denoise --device`)")
    ap.add_argument("--out", type=Path, help="the output (default: a temp file of the "
                    "input's extension)")
    ap.add_argument("more", nargs="*", help="more `vkgraph denoise` options (after --)")
    args = ap.parse_args()

    t0 = time.perf_counter()
    import vkgraph.cli.denoise as cli_denoise
    from vkgraph.cli.main import build_parser
    t_import = time.perf_counter() - t0

    stages = Stages()
    stages.install()
    runs, walls = [], []
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / f"out{args.input.suffix}"
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
