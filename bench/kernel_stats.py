"""What the driver says about each kernel a graph compiles: registers a thread, shared memory,
local memory (register spills), binary size, from VK_KHR_pipeline_executable_properties. One
table row per distinct kernel (shader, kernel, defines) of the cfg, as the build on this
device expands it.

    python bench/kernel_stats.py graphs/train-kpn.cfg [--device NAME] [--set LINE ...]

Why: a kernel whose workgroup needs all of an SM's registers (e.g. 512 threads x 128
registers on an NVIDIA SM) runs one workgroup per SM, so nothing else runs while it waits at
a barrier; and a kernel over the register limit spills to local memory. The figures are the
driver's own; the statistics' names and units are the driver's (NVIDIA: "Register Count",
"Shared Memory Size" in bytes, "Local Memory Size" in bytes, offset by 2^36 on driver 580:
printed here modulo 2^36). A device without the extension gets a message and exit status 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vkgraph.api import Session  # noqa: E402
from vkgraph.pipeline.cfg import apply_line, read_cfg  # noqa: E402
from vkgraph.pipeline.vk import Device  # noqa: E402

LOCAL_OFFSET = 1 << 36  # NVIDIA 580 reports local memory as 2^36 + bytes


def rows(build) -> list[tuple[str, str, dict]]:
    """(kernel name, defines, statistics) per distinct compiled kernel, in schedule order."""
    seen, out = set(), []
    for node in build.plan.schedule:
        if node.kernel is None or id(node) not in build.program.kernels:
            continue
        key = (node.shader, node.kernel, tuple(sorted((node.defines or {}).items())))
        if key in seen:
            continue
        seen.add(key)
        kernel, _ = build.program.kernels[id(node)]
        defines = " ".join(f"{k}={v}" for k, v in key[2])
        out.append((f"{node.shader}/{node.kernel}", defines, kernel.statistics()))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cfg", type=Path)
    ap.add_argument("--device")
    ap.add_argument("--set", action="append", default=[], metavar="LINE",
                    help="a cfg line applied first (e.g. param:kpn-t:01:levels:2)")
    args = ap.parse_args(argv)
    g = read_cfg(args.cfg)
    for line in args.set:
        apply_line(g, line, "--set")
    g.frames = 1
    os.environ["VKGRAPH_PIPELINE_STATS"] = "1"  # before the device opens: enables the extension
    dev = Device.open(args.device)
    try:
        print(f"device: {dev.info.summary()}")
        if not dev.pipeline_stats:
            print(f"{dev.info.name} has no VK_KHR_pipeline_executable_properties: no statistics")
            return 0
        table = rows(Session(g, dev).prepare())
        print("| kernel | defines | registers | shared bytes | local bytes | binary bytes |")
        print("|---|---|---|---|---|---|")
        for name, defines, st in table:
            local = st.get("Local Memory Size")
            local = int(local) % LOCAL_OFFSET if local is not None else "-"
            print(f"| {name} | {defines} | {st.get('Register Count', '-'):.0f} | "
                  f"{st.get('Shared Memory Size', 0):.0f} | {local} | "
                  f"{st.get('Binary Size', 0):.0f} |")
    finally:
        dev.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
