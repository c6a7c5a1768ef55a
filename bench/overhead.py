"""Host time per frame of a trivial graph (record once, submit many): target
<= 50 us per frame on the GPU.

A 64x64 image through one `exposure` node, 1000 frames, no downloads. Per frame: wall time,
time waiting for the device, and host time = wall - wait (param checks, the frame uniform,
submit, fence handling). Two rows per Vulkan device found (or the one named with --device):
frames one at a time (`run_frame`: submit, wait) and back to back (`run_frame(f,
wait=False)`: at most two in flight, one wait at the end; `run_frames` also puts 8 frames in
a submission where it can, which this does not measure).

    python bench/overhead.py [--frames 1000] [--device NAME]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vkgraph.api import Session  # noqa: E402
from vkgraph.pipeline.cfg import apply_line  # noqa: E402
from vkgraph.pipeline.formats import write_pfm  # noqa: E402
from vkgraph.pipeline.graph import Graph  # noqa: E402
from vkgraph.pipeline.vk import Device, list_devices  # noqa: E402


def trivial_graph(folder: Path) -> Graph:
    write_pfm(folder / "in.pfm", np.random.default_rng(0).random((64, 64, 3)).astype(np.float32))
    g = Graph()
    for line in ["module:i-pfm:main", f"param:i-pfm:main:filename:{folder / 'in.pfm'}",
                 "module:exposure:01", "module:o-pfm:main",
                 f"param:o-pfm:main:filename:{folder / 'out'}",
                 "connect:i-pfm:main:output:exposure:01:input",
                 "connect:exposure:01:output:o-pfm:main:input"]:
        apply_line(g, line, "overhead")
    return g


def measure(index: int, frames: int, folder: Path, in_flight: bool
            ) -> tuple[str, float, float, float]:
    dev = Device.open(index=index)
    try:
        g = trivial_graph(folder)
        g.frames = frames
        b = Session(g, dev).prepare()
        for f in range(20):  # warm up
            b.run_frame(f, download=False)
        b.program.wait_seconds = 0.0
        t0 = time.perf_counter()
        for f in range(frames):
            b.run_frame(f, download=False, wait=not in_flight)
        b.program.finish()
        wall = (time.perf_counter() - t0) / frames
        wait = b.program.wait_seconds / frames
        return dev.info.name, wall * 1e6, wait * 1e6, (wall - wait) * 1e6
    finally:
        dev.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=1000)
    ap.add_argument("--device", help="only this device (substring of its name)")
    args = ap.parse_args()
    infos = [d for d in list_devices()
             if not args.device or args.device.lower() in d.name.lower()]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for d in infos:
            for in_flight in (False, True):
                rows.append((measure(d.index, args.frames, Path(tmp), in_flight),
                             "back to back" if in_flight else "one at a time"))
    print(f"trivial graph (64x64 exposure), {args.frames} frames, no downloads")
    print("| device | frames | wall us/frame | device wait us/frame | host us/frame | "
          "target host |")
    print("|---|---|---|---|---|---|")
    for (name, wall, wait, host), mode in rows:
        print(f"| {name} | {mode} | {wall:.1f} | {wait:.1f} | {host:.1f} | <= 50 |")


if __name__ == "__main__":
    main()
