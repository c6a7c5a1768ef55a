"""PSNR curve of an image-fit graph (graphs/fit-image*.cfg) as it trains: the PSNR (peak 1,
linear rgb) of mlp-t's `output` against the target every `--every` frames, the loss, and the
wall and GPU time per step, as a table and one JSON line.

    python bench/fit_curve.py [--cfg graphs/fit-image-hash.cfg] [--frames N] [--every 500]
                              [--batch B] [--config LINE ...] [--picture OUT.png]

`--frames` defaults to the graph's own frame count; `--config` lines are applied last (as in
`vkgraph cli`). The GPU time is the sum of one frame's dispatch timestamps, taken on a frame
that does not evaluate the image. `--picture` writes the result picture of graphs/README.md:
left the target as the network learns it (after the graph's transform), right the network's
output after the last frame, below the loss of every frame (log scale from the lowest to the
highest loss, dotted lines at powers of ten), sRGB PNG.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vkgraph.api import Session  # noqa: E402
from vkgraph.pipeline.cfg import apply_line, read_cfg  # noqa: E402
from vkgraph.pipeline.formats import read_image, srgb_to_linear, write_png  # noqa: E402
from vkgraph.pipeline.vk import Device  # noqa: E402

MLP = ("mlp-t", "01")
PLOT_HT, PLOT_MARGIN = 80, 2  # the loss plot's height and its empty rows above and below
BACKGROUND, GRID, CURVE = (24, 24, 24), (90, 90, 90), (120, 200, 255)  # sRGB 8-bit


def psnr(x: np.ndarray, ref: np.ndarray) -> float:
    mse = float(np.mean((x[..., :3].astype(np.float64) - ref[..., :3]) ** 2))
    return 10 * math.log10(1.0 / max(mse, 1e-20))


def learned_target(target: np.ndarray, xform: str) -> np.ndarray:
    """The target as the network learns it: the texel at T(uv) for each texel centre uv
    (mlp-t's transforms: identity, flip uv.yx, zoom uv/2 + 1/4)."""
    if xform == "identity":
        return target
    h, w = target.shape[:2]
    y, x = np.mgrid[0:h, 0:w]
    u, v = (x + 0.5) / w, (y + 0.5) / h
    if xform == "flip":
        u, v = v, u
    elif xform == "zoom":
        u, v = u / 2 + 0.25, v / 2 + 0.25
    else:
        raise SystemExit(f"--picture: unknown xform {xform}")
    ix = np.minimum((u * w).astype(int), w - 1)
    iy = np.minimum((v * h).astype(int), h - 1)
    return target[iy, ix]


def loss_plot(losses: np.ndarray, width: int) -> np.ndarray:
    """(PLOT_HT, width, 3) sRGB 8-bit: the losses over the frames on a log scale, each
    column the range of its frames' losses joined to the previous column."""
    img = np.empty((PLOT_HT, width, 3), np.uint8)
    img[:] = BACKGROUND
    ok = np.isfinite(losses) & (losses > 0)
    if not ok.any():
        return img
    lo, hi = np.log10(losses[ok].min()), np.log10(losses[ok].max())
    span = max(hi - lo, 1e-9)
    rows = PLOT_HT - 1 - 2 * PLOT_MARGIN

    def y_of(v):
        return int(round(PLOT_MARGIN + (hi - np.log10(v)) / span * rows))

    for k in range(int(np.ceil(lo)), int(np.floor(hi)) + 1):  # dotted lines at 10^k
        img[y_of(10.0 ** k), ::4] = GRID
    n, prev = len(losses), None
    for x in range(width):
        part = losses[x * n // width: max(x * n // width + 1, (x + 1) * n // width)]
        part = part[np.isfinite(part) & (part > 0)]
        if not len(part):
            continue
        top, bottom = y_of(part.max()), y_of(part.min())
        if prev is not None:
            top, bottom = min(top, prev), max(bottom, prev)
        img[top: bottom + 1, x] = CURVE
        prev = y_of(part[-1])
    return img


def picture(target: np.ndarray, out: np.ndarray, losses: np.ndarray) -> np.ndarray:
    """Linear float rgb: target | output above the loss plot (write_png encodes to sRGB)."""
    top = np.concatenate([target[..., :3], out[..., :3]], 1).astype(np.float64)
    plot = srgb_to_linear(loss_plot(losses, top.shape[1]) / 255.0)
    return np.concatenate([top, plot], 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cfg", default=str(ROOT / "graphs" / "fit-image-hash.cfg"))
    ap.add_argument("--frames", type=int)
    ap.add_argument("--every", type=int, default=500)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--device")
    ap.add_argument("--config", nargs="*", default=[])
    ap.add_argument("--picture", help="write the result picture (target | output, losses)")
    args = ap.parse_args()

    g = read_cfg(args.cfg)
    for name, inst in [k for k in g.modules if k[0] in ("display", "o-lut")]:
        g.remove_module(name, inst)
    tmp = tempfile.mkdtemp()  # a sink keeps mlp-t active; nothing is written with download off
    lines = [f"param:mlp-t:01:preview:{args.every}", "module:o-pfm:fit",
             f"param:o-pfm:fit:filename:{tmp}/fit", "connect:mlp-t:01:output:o-pfm:fit:input"]
    if args.batch:
        lines.append(f"param:mlp-t:01:batch:{args.batch}")
    for i, line in enumerate(lines + list(args.config)):
        apply_line(g, line, f"bench/fit_curve.py:{i + 1}")
    frames = args.frames or int(g.frames)
    g.frames = frames
    dev = Device.open(args.device)
    rows, gpu = [], []
    try:
        b = Session(g, dev, profile=True).prepare()
        m = g.modules[MLP]
        src = next(k for k in g.modules if k[0] in ("i-img", "i-pfm"))
        target = read_image(b.context.resolve(g.modules[src].param("filename")))
        current = m.cls.hook("current_loss")
        t_train, t0 = 0.0, time.perf_counter()
        for f in range(frames):
            t = time.perf_counter()
            b.run_frame(f, download=False)
            t_train += time.perf_counter() - t
            evaluated = f % args.every == 0 or f == frames - 1
            if not evaluated and len(gpu) < 20 and f > 5:
                gpu.append(b.gpu_span())  # first dispatch start to last end
            if evaluated:
                out = b.read(m.data["eval"], "output")
                rows.append({"frame": f, "psnr": round(psnr(out, target), 3),
                             "loss": current(b.context, m)})
                print(f"  frame {f:6d}: PSNR {rows[-1]['psnr']:6.2f} dB, loss "
                      f"{rows[-1]['loss']:.4g}", flush=True)
        wall = time.perf_counter() - t0
        name = dev.info.name
        if args.picture:
            history = m.cls.hook("losses")(b, m)
            shown = learned_target(target, str(m.param("xform")))
            write_png(args.picture, picture(shown, out, history))
            print(f"wrote {args.picture}: {len(history)} frames of losses")
    finally:
        dev.close()
    ms = t_train / frames * 1e3
    gpu_ms = float(np.median(gpu)) if gpu else float("nan")
    print(f"\n{Path(args.cfg).name} on {name}: {frames} frames in {wall:.1f} s, "
          f"{ms:.3f} ms/frame wall (preview frames included), GPU {gpu_ms:.3f} ms/step "
          f"(timestamps); target {target.shape[1]}x{target.shape[0]}")
    print("| frame | PSNR dB | loss |")
    print("|---|---|---|")
    for r in rows:
        print(f"| {r['frame']} | {r['psnr']:.2f} | {r['loss']:.4g} |")
    print(json.dumps({"cfg": Path(args.cfg).name, "device": name, "frames": frames,
                      "ms_per_frame": ms, "gpu_ms_per_step": gpu_ms, "curve": rows}))


if __name__ == "__main__":
    main()
