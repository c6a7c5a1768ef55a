"""`vkgraph denoise`: denoise photographs with kpn and trained weights, file in, file out.

Each input (PNG/JPG sRGB, EXR/PFM linear; `read_image` makes all of them linear float) is
denoised by pipeline/denoise.py's Denoiser and written in the same format (PNG/JPG sRGB 8-bit,
EXR/PFM float), atomically. The noise profile is --noise A B, or estimated per image
(pipeline/noise.py) and printed. A file that fails is reported in one line and the others
still run: exit 1 if any failed, 2 for usage errors, 130 after Ctrl-C/SIGTERM (the current
file is finished first).
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from pathlib import Path

from vkgraph.pipeline.errors import GraphError, VkgraphError, clip, printable

log = logging.getLogger("vkgraph")

ROOT = Path(__file__).resolve().parent.parent
WEIGHTS = ROOT / "graphs" / "weights" / "kpn-photo.lut"
WRITERS = {".png": "png", ".jpg": "jpg", ".jpeg": "jpg", ".exr": "exr", ".pfm": "pfm"}
JPG_QUALITY = 95
CLIP = 200  # characters of a failed file's message

EXAMPLE = """example:
  vkgraph denoise photo.jpg                      # writes photo-denoised.jpg
  vkgraph denoise raw/*.png --outdir clean/ --noise 1e6 100

--noise A B is the noise profile in cnngenin's units: Gaussian noise of
std(x) = sqrt(A + 65535 x B) / 65535 at linear intensity x in [0, 1]
(A: the constant part, B: the part that grows with the signal). Without it, (A, B) is
estimated from each image and printed."""


def add_parser(sub) -> None:
    """`vkgraph denoise` on the subcommand parsers of cli/main.py."""
    from .main import integer

    p = sub.add_parser(
        "denoise", help="denoise PNG/JPG/EXR/PFM photos with trained kpn weights",
        description="Denoise images with kpn and a .lut of kpn-t weights. Each output has\n"
        "the input's format (PNG/JPG: sRGB 8-bit, EXR/PFM: linear float). Without -o or\n"
        "--outdir, IN.ext is written to IN-denoised.ext beside it. Inputs are never\n"
        "overwritten.", epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", metavar="IN", help="images to denoise")
    out = p.add_mutually_exclusive_group()
    out.add_argument("-o", "--output", metavar="OUT",
                     help="output file (one input only); its extension picks the format")
    out.add_argument("--outdir", metavar="DIR", help="write each output into DIR under the "
                     "input's file name (DIR is created)")
    p.add_argument("--weights", metavar="W.lut", help="kpn-t weights (default: the shipped "
                   f"{WEIGHTS.relative_to(ROOT)})")
    p.add_argument("--noise", nargs=2, type=float, metavar=("A", "B"),
                   help="noise profile in cnngenin's units (default: estimated per image)")
    p.add_argument("--levels", type=integer(1, 12), metavar="N", help="kpn's pyramid levels "
                   "(default: what the weights' .lut says, else 4)")
    p.add_argument("--progress", action="store_true",
                   help="show the progress bar also when stderr is not a terminal")
    p.add_argument("--device", metavar="NAME", help="Vulkan device (substring of its name; "
                   "default: $VKGRAPH_DEVICE, else a discrete GPU, else the CPU driver)")
    p.add_argument("--device-id", type=integer(0), metavar="N", help="Vulkan device by index")


def output_paths(inputs: list[Path], output: str | None, outdir: str | None) -> list[Path]:
    """Where each input's result goes; UsageError for -o with several inputs, an unknown
    format, an output that is an input, or two inputs that would write the same file."""
    from .main import UsageError

    if output is not None and len(inputs) != 1:
        raise UsageError(f"denoise: -o takes one input, got {len(inputs)} (use "
                         "--outdir DIR for several)")
    if output is not None:
        outs = [Path(output)]
    elif outdir is not None:
        outs = [Path(outdir) / p.name for p in inputs]
    else:
        outs = [p.with_name(f"{p.stem}-denoised{p.suffix}") for p in inputs]
    for out in outs:
        if out.suffix.lower() not in WRITERS:
            raise UsageError(f"denoise: cannot write '{clip(printable(str(out)), CLIP)}': "
                             f"expected one of {', '.join(WRITERS)}")
    ins = {p.resolve() for p in inputs}
    seen = set()
    for out in outs:
        key = out.resolve()
        if key in ins:
            raise UsageError(f"denoise: output '{clip(printable(str(out)), CLIP)}' is an "
                             "input; it would be overwritten (use -o or --outdir)")
        if key in seen:
            raise UsageError(f"denoise: two inputs would both write "
                             f"'{clip(printable(str(out)), CLIP)}' (same file name)")
        seen.add(key)
    return outs


def write(path: Path, image) -> None:
    from vkgraph.pipeline import formats

    kind = WRITERS[path.suffix.lower()]
    if kind == "png":
        formats.write_png(path, image)
    elif kind == "jpg":
        formats.write_jpg(path, image, quality=JPG_QUALITY)
    elif kind == "exr":
        formats.write_exr(path, image)
    else:
        formats.write_pfm(path, image)


def one_line(text: str) -> str:
    text = printable(" ".join(str(text).split()))
    return text if len(text) <= CLIP else text[:CLIP - 3] + "..."


def cmd_denoise(args) -> int:
    from tqdm import tqdm

    from vkgraph.pipeline.denoise import Denoiser

    from .main import StopSignals, UsageError, open_device

    if args.noise is not None and not all(math.isfinite(v) and v >= 0 for v in args.noise):
        raise UsageError("denoise: --noise A B: expected two finite numbers >= 0")
    inputs = [Path(p) for p in args.inputs]
    outs = output_paths(inputs, args.output, args.outdir)
    weights = Path(args.weights) if args.weights else WEIGHTS
    if not weights.is_file():
        hint = "" if args.weights else (" (the shipped weights are missing from this "
                                        "checkout; give --weights W.lut)")
        raise GraphError(f"denoise: weights '{weights}' do not exist{hint}")
    if args.outdir is not None:
        try:
            Path(args.outdir).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"denoise: --outdir {args.outdir}: cannot create it: "
                             f"{e.strerror or e}") from None
    failed = 0
    done = 0
    with StopSignals() as stop:
        device = open_device(args)
        try:
            den = Denoiser(device, weights, levels=args.levels)
            bar = tqdm(total=len(inputs), unit="file", file=sys.stderr, dynamic_ncols=True,
                       desc="denoise", disable=not (args.progress or sys.stderr.isatty()))
            try:
                for src, dst in zip(inputs, outs, strict=True):
                    bar.set_postfix_str(src.name[:40], refresh=False)
                    try:
                        line = denoise_file(den, src, dst, args.noise)
                        bar.write(line, file=sys.stdout)
                    except (VkgraphError, OSError, ValueError, MemoryError) as e:
                        failed += 1
                        msg = e.line() if isinstance(e, VkgraphError) else f"{e}"
                        if not msg.startswith(str(src)):
                            msg = f"{src}: {msg}"
                        bar.write(f"vkgraph: error: {one_line(msg)}", file=sys.stderr)
                    done += 1
                    bar.update(1)
                    if stop():
                        break
            finally:
                bar.close()
        finally:
            device.close()
    if stop():
        print(f"vkgraph: interrupted after {done} of {len(inputs)} files", file=sys.stderr)
        return 130
    if failed:
        print(f"vkgraph: {failed} of {len(inputs)} files failed", file=sys.stderr)
        return 1
    return 0


def denoise_file(den, src: Path, dst: Path, noise) -> str:
    """Read, denoise and write one file; the line that reports it."""
    from vkgraph.pipeline.formats import read_image
    from vkgraph.pipeline.noise import estimate_noise

    t0 = time.perf_counter()
    image = read_image(src, finite=True)
    if noise is None:
        a, b = estimate_noise(image)
        how = "estimated"
    else:
        a, b = noise
        how = "given"
    out = den(image, a, b)
    write(dst, out)
    ht, wd = image.shape[:2]
    return (f"{src} -> {dst}: {wd}x{ht}, noise a {a:.4g} b {b:.4g} ({how}), "
            f"{time.perf_counter() - t0:.2f} s")
