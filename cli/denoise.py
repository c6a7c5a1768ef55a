"""`vkgraph denoise`: denoise photographs with kpn and trained weights, file in, file out.

Each input (PNG/JPG sRGB, EXR/PFM linear; `read_image` makes all of them linear float) is
denoised by pipeline/denoise.py's Denoiser and written in the same format (PNG/JPG sRGB 8-bit,
EXR/PFM float), atomically. The noise profile is --noise A B, or estimated per image
(pipeline/noise.py) and printed. A file that fails is reported in one line and the others
still run: exit 1 if any failed, 2 for usage errors, 130 after Ctrl-C/SIGTERM (the current
file is finished first).

With --ray the files are spread over a Ray cluster (a local Ray instance without ADDRESS):
one worker (a Ray actor holding one Denoiser, so weights and kernels stay on its device) per
GPU, each on the Vulkan device of the GPU Ray gave it (pipeline/distributed.py), or one per
CPU on a cluster without GPUs; each file is one task on a free worker. Paths go to the
workers as absolute paths (a cluster of several machines needs them on shared storage);
outputs, their names and atomic writes are those of the plain run.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from collections import deque
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
  vkgraph denoise shots/*.exr --outdir clean/ --ray     # on every GPU (local Ray)

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
    p.add_argument("--device", metavar="NAME", help="Vulkan device (substring of its name, or "
                   "its UUID; default: $VKGRAPH_DEVICE_UUID, $VKGRAPH_DEVICE, else a discrete "
                   "GPU, else the CPU driver; not with --ray: each Ray worker uses its GPU)")
    p.add_argument("--device-id", type=integer(0), metavar="N", help="Vulkan device by index")
    from .sweep import add_ray_args

    add_ray_args(p)  # --ray [ADDRESS], --num-cpus, --num-gpus


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

    from .main import StopSignals, UsageError

    if args.noise is not None and not all(math.isfinite(v) and v >= 0 for v in args.noise):
        raise UsageError("denoise: --noise A B: expected two finite numbers >= 0")
    if args.ray is None and (args.num_cpus is not None or args.num_gpus is not None):
        raise UsageError("denoise: --num-cpus/--num-gpus size the local Ray instance of --ray")
    if args.ray is not None and (args.device is not None or args.device_id is not None):
        raise UsageError("denoise: --device picks this process's device; with --ray each "
                         "worker uses the GPU Ray gives it")
    if args.ray is not None:
        from vkgraph.pipeline.distributed import import_ray

        import_ray()  # a missing extra is said before anything is created
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
    with StopSignals() as stop:
        bar = tqdm(total=len(inputs), unit="file", file=sys.stderr, dynamic_ncols=True,
                   desc="denoise", disable=not (args.progress or sys.stderr.isatty()))
        try:
            run = run_on_ray if args.ray is not None else run_here
            failed, done = run(args, list(zip(inputs, outs, strict=True)), weights, bar, stop)
        finally:
            bar.close()
    if stop():
        print(f"vkgraph: interrupted after {done} of {len(inputs)} files", file=sys.stderr)
        return 130
    if failed:
        print(f"vkgraph: {failed} of {len(inputs)} files failed", file=sys.stderr)
        return 1
    return 0


def report(bar, src: Path, ok: bool, text: str) -> None:
    """A file's line: its result on stdout, or its error on stderr."""
    if ok:
        bar.write(text, file=sys.stdout)
    else:
        bar.write(f"vkgraph: error: {one_line(text)}", file=sys.stderr)
    bar.update(1)


def error_text(src: Path, e: Exception) -> str:
    msg = e.line() if isinstance(e, VkgraphError) else f"{e}"
    return msg if msg.startswith(str(src)) else f"{src}: {msg}"


FILE_ERRORS = (VkgraphError, OSError, ValueError, MemoryError)  # a file's, not the run's


def run_here(args, jobs, weights, bar, stop) -> tuple[int, int]:
    """Every file on this process's device; (failed, done)."""
    from vkgraph.pipeline.denoise import Denoiser

    from .main import open_device

    failed = done = 0
    device = open_device(args)
    try:
        den = Denoiser(device, weights, levels=args.levels)
        den.on_tile = tile_progress(bar)
        for src, dst in jobs:
            bar.set_postfix_str(src.name[:40], refresh=False)
            try:
                ok, text = True, denoise_file(den, src, dst, args.noise)
            except FILE_ERRORS as e:
                ok, text = False, error_text(src, e)
            failed += not ok
            done += 1
            report(bar, src, ok, text)
            if stop():
                break
    finally:
        device.close()
    return failed, done


def tile_progress(bar):
    """The Denoiser's on_tile for a large photo (denoised in tiles): a second bar under the
    files' one, or without a bar a line every HEARTBEAT_S seconds (cli/progress.py)."""
    from tqdm import tqdm

    from .progress import HEARTBEAT_S

    state = {"bar": None, "beat": 0.0}

    def on_tile(done: int, total: int) -> None:
        now = time.perf_counter()
        if done == 0:
            state["beat"] = now + HEARTBEAT_S
            if not bar.disable:
                state["bar"] = tqdm(total=total, unit="tile", desc="  tiles", leave=False,
                                    file=sys.stderr, dynamic_ncols=True)
            return
        if state["bar"] is not None:
            state["bar"].update(done - state["bar"].n)
            if done == total:
                state["bar"].close()
                state["bar"] = None
        elif now >= state["beat"] and done < total:
            state["beat"] = now + HEARTBEAT_S
            log.info("denoise: tile %d of %d", done, total)

    return on_tile


class DenoiseWorker:
    """A Ray actor: the Vulkan device of the GPU Ray gave it and one Denoiser on it."""

    def __init__(self, weights: str, levels: int | None):
        from vkgraph.pipeline.denoise import Denoiser
        from vkgraph.pipeline.distributed import open_worker_device

        self.device = self.den = self.error = None
        try:
            self.device, _ = open_worker_device()
            self.den = Denoiser(self.device, Path(weights), levels=levels)
        except VkgraphError as e:  # told to the driver by ready(), not as a dead actor
            self.error = e.line()

    def ready(self) -> tuple[str | None, str]:
        """(error, "device name uuid") of this worker's setup."""
        info = self.device.info if self.device is not None else None
        return self.error, f"{info.name} {info.uuid}" if info else "no device"

    def denoise(self, src: str, dst: str, noise) -> tuple[bool, str]:
        """(ok, the file's line or its error), paths as the driver gave them."""
        try:
            return True, denoise_file(self.den, Path(src), Path(dst), noise)
        except FILE_ERRORS as e:
            return False, error_text(Path(src), e)


def run_on_ray(args, jobs, weights, bar, stop) -> tuple[int, int]:
    """Every file as a task on a pool of DenoiseWorker actors, one per GPU of the cluster
    (else one per CPU); a failed file is reported and the others go on. (failed, done)."""
    from vkgraph.pipeline import distributed
    from vkgraph.pipeline.errors import RuntimeFailure

    ray = distributed.import_ray()
    started = distributed.connect(args.ray or None, args.num_cpus, args.num_gpus)
    actors = []
    try:
        gpus = distributed.cluster_gpus()
        slots = gpus or distributed.cluster_cpus()
        per = {"num_cpus": 1, "num_gpus": 1} if gpus else {"num_cpus": 1}
        worker = ray.remote(**per)(DenoiseWorker)
        actors = [worker.remote(str(weights.resolve()), args.levels)
                  for _ in range(max(1, min(len(jobs), slots)))]
        where = {}
        for a, (error, device) in zip(actors, ray.get([a.ready.remote() for a in actors]),
                                      strict=True):
            if error is not None:
                raise RuntimeFailure(f"denoise: a Ray worker cannot start: {error}")
            where[a] = device
        log.info("denoise: %d Ray workers on %s", len(actors),
                 ", ".join(sorted(set(where.values()))))
        todo = deque(jobs)
        idle, running = list(actors), {}
        failed = done = 0
        while running or (todo and idle and not stop()):
            while idle and todo and not stop():
                a = idle.pop()
                src, dst = todo.popleft()
                ref = a.denoise.remote(str(src.resolve()), str(dst.resolve()), args.noise)
                running[ref] = (a, src, dst)
            [ref], _ = ray.wait(list(running), num_returns=1)
            a, src, dst = running.pop(ref)
            try:
                ok, text = ray.get(ref)
                idle.append(a)
                # the worker saw absolute paths; the lines name the files as given
                text = text.replace(str(src.resolve()), str(src)).replace(
                    str(dst.resolve()), str(dst))
                if ok:
                    text += f" [{where[a]}]"
            except ray.exceptions.RayError as e:  # the worker died (idle no more)
                ok, text = False, (f"{src}: the Ray worker on {where[a]} failed: "
                                   f"{type(e).__name__}")
            failed += not ok
            done += 1
            report(bar, src, ok, text)
            if not idle and not running and todo:
                for src, _ in todo:
                    report(bar, src, False, f"{src}: not denoised: no Ray worker left")
                failed += len(todo)
                done += len(todo)
                todo.clear()
        return failed, done
    finally:
        for a in actors:
            ray.kill(a)
        if started:
            ray.shutdown()


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
