"""`vkgraph denoise`: denoise photographs with kpn and trained weights, file in, file out
(or with unet, for --weights that unet-t trained: their .lut's text says "unet denoiser").

Each input (PNG/JPEG/TIFF/WebP sRGB, EXR/PFM linear, float TIFF linear; `decode_image` makes
all of them linear float, upright) is denoised by vkgraph/apps/denoise.py's Denoiser and written
atomically in the format its output name says, like its input (`write_like`): EXIF (with
Orientation 1, as the pixels are upright now) and ICC profile carried, 16-bit and float
inputs written 16-bit/float where the format has it, JPEG at the input's quality. The noise
profile is --noise A B, or estimated per image
(vkgraph/apps/noise.py) and printed. A file that fails is reported in one line and the others
still run: exit 1 if any failed, 2 for usage errors, 130 after Ctrl-C/SIGTERM (the current
file is finished first).

With --ray the files are spread over a Ray cluster (a local Ray instance without ADDRESS):
one worker (a Ray actor holding one Denoiser, so weights and kernels stay on its device) per
GPU, each on the Vulkan device of the GPU Ray gave it (vkgraph/apps/distributed.py), or one per
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
from typing import NamedTuple

from vkgraph.pipeline.constants import IMAGE_WRITERS, JPG_QUALITY
from vkgraph.pipeline.errors import GraphError, VkgraphError, clip, printable

log = logging.getLogger("vkgraph")

ROOT = Path(__file__).resolve().parent.parent
WEIGHTS = ROOT / "graphs" / "weights" / "kpn-photo.lut"
# the default for linear float images (EXR, PFM) on a CPU, and the base of raw files (both
# devices give them mosaic U-Nets: GPU_WEIGHTS, CPU_WEIGHTS): the arch 1 weights (luma and
# chroma filtered apart), measured better there (bench/README.md: +0.8 dB on raw files,
# raw_quality.py; +1.2 to +1.5 dB on linear photographs, quality.py).
WEIGHTS_LINEAR = ROOT / "graphs" / "weights" / "kpn-photo-ctx.lut"
# the default for JPEGs: the U-Net on cells of 2 x 2 pixels (unet-t cells 1, width 24: a
# quarter of the pixel U-Net's multiply-adds, 48 s for 12 MP on 2 cores) trained on
# camera-pipeline JPEGs with misreported levels (graphs/train-unet-jpeg-cells.cfg): 1.1 to 2.8
# dB above CBM3D on phone-like JPEGs, within 0.13 dB of the true level's result with the
# estimate on white noise (bench/README.md, photo_jpeg.py). It replaced arch 1's JPEG weights
# (kpn-jpeg-ctx.lut, graphs/train-jpeg-ctx.cfg), which stay the better choice for clean JPEGs
# and i.i.d. noise (`--weights`). PNG, TIFF and WebP keep WEIGHTS.
WEIGHTS_JPEG = ROOT / "graphs" / "weights" / "unet-jpeg-cells.lut"
# on a GPU, better weights in their place (bench/README.md): for raw files the U-Net of RGGB
# mosaics (unet-t cfa 1, graphs/train-raw.cfg), which denoises and demosaics the mosaic at
# once, 1.9 to 7.8 dB above demosaicing first and then arch 2 (raw_quality.py); for EXR
# and PFM the U-Net (modules/unet-t, graphs/train-unet.cfg), +0.35 to +0.49 dB over arch 2
# on linear photographs with the estimated profile (quality.py --estimate); for JPEGs the
# U-Net trained on camera-pipeline JPEGs with misreported levels (graphs/train-unet-jpeg.cfg),
# +0.9 to +1.3 dB over arch 1's JPEG weights on phone-like JPEGs and +0.2 to +2.0 dB on white
# noise through JPEG (photo_jpeg.py). On a CPU they are many times slower (arch 2's block
# matching; the pixel U-Net's 100k multiply-adds a pixel), so CPU devices keep the others.
# Raw files of other patterns ("raw-other": X-Trans) get the U-Net of mosaics of any pattern
# (unet-t cfa 2, graphs/train-raw-xtrans.cfg, width 48), which denoises and demosaics the
# X-Trans mosaic at once: 2.6 to 8.2 dB above demosaicing first and then arch 2
# (raw_quality.py --pattern X-Trans).
GPU_WEIGHTS = {"raw": ROOT / "graphs" / "weights" / "unet-raw.lut",
               "raw-other": ROOT / "graphs" / "weights" / "unet-xtrans.lut",
               "linear": ROOT / "graphs" / "weights" / "unet-photo.lut",
               "jpeg": ROOT / "graphs" / "weights" / "unet-jpeg.lut"}
# --ensemble's default where the file's weights are these, on a GPU: the photo U-Net averages
# the image and its mirror (+0.07 dB on held-out photographs, past VST-BM3D at each noise
# level: modules/unet-t/README.md), two passes of 12 MP in less than 100 ms of an H100
GPU_ENSEMBLE = {GPU_WEIGHTS["linear"]: 2}
# on a CPU, the mosaic U-Net at width 24 (graphs/train-raw-w24.cfg: 0.57x the multiply-adds of
# unet-raw.lut) for Bayer raw files: it denoises and demosaics at once, far above demosaicing
# first (bench/README.md, raw_quality.py), and a 24 MP file fits two minutes on 2 cores; the
# same for X-Trans files with the U-Net of mosaics of any pattern at width 24
# (graphs/train-raw-xtrans-w24.cfg)
CPU_WEIGHTS = {"raw": ROOT / "graphs" / "weights" / "unet-raw-w24.lut",
               "raw-other": ROOT / "graphs" / "weights" / "unet-xtrans-w24.lut"}
JPEG_FORMATS = (".jpg", ".jpeg")
LINEAR_FORMATS = (".exr", ".pfm")
WRITERS = IMAGE_WRITERS  # an output's extension -> its format
QUALITY_FORMATS = ("jpg", "webp")  # the outputs --quality sets
METADATA_FORMATS = ("png", "jpg", "webp", "tiff")  # the outputs that keep EXIF and ICC
RAW_OUT = ".exr"  # a raw input's output format unless -o names another
CLIP = 200  # characters of a failed file's message
STRENGTH = (0.01, 100.0)  # --strength's range

EXAMPLE = """example:
  vkgraph denoise photo.jpg                      # writes photo-denoised.jpg
  vkgraph denoise raw/*.png --outdir clean/ --noise 1e6 100
  vkgraph denoise scan.tif -o scan.webp --quality 90
  vkgraph denoise shots/*.exr --outdir clean/ --ray     # on every GPU (local Ray)
  vkgraph denoise photo.dng -o photo.tif         # camera raw (LibRaw): 16-bit sRGB TIFF

--noise A B is the noise profile in cnngenin's units: Gaussian noise of
std(x) = sqrt(A + 65535 x B) / 65535 at linear intensity x in [0, 1]
(A: the constant part, B: the part that grows with the signal). Without it, (A, B) is
estimated from each image and printed. Camera raw files (DNG, NEF, CR2, ARW, RAF, ...;
`pip install 'vkgraph[raw]'`) are demosaiced, denoised and converted to linear Rec.709
with the camera's matrix; their noise profile is darktable's for the camera and ISO where
darktable's noiseprofiles.json is installed, else estimated from the mosaic (--noise A B:
the mosaic's, on [0, 1] between black and white level). They are written as EXR unless -o
names .pfm (linear) or .png/.jpg/.tif (sRGB; TIFF 16-bit).

--strength S multiplies the noise level used (estimated or given) by S: above 1 the
photo is treated as noisier than measured (smoother result), below 1 as cleaner
(more detail and more noise kept)."""


def add_parser(sub) -> None:
    """`vkgraph denoise` on the subcommand parsers of cli/main.py."""
    from .common import integer

    p = sub.add_parser(
        "denoise", help="denoise PNG/JPEG/TIFF/WebP/EXR/PFM photos and camera raw files with "
        "trained kpn weights",
        description="Denoise images with kpn and a .lut of kpn-t weights, or with unet and a\n"
        ".lut of unet-t weights (its text says 'unet denoiser'). Without -o or --outdir,\n"
        "IN.ext is written to IN-denoised.ext beside it, in the input's format.\n"
        "Inputs are never overwritten. An output keeps what its input carries where its\n"
        "format can: EXIF (the pixels turned upright, Orientation 1), the ICC profile,\n"
        "16 bits (PNG, TIFF; float TIFF stays float, EXR half stays half) and a JPEG's\n"
        f"quality (else {JPG_QUALITY}). A camera raw file (DNG, NEF, CR2, ARW, ...) is\n"
        "demosaiced, denoised and colour-converted; it is written as linear EXR unless -o\n"
        "names another format (PNG/JPEG/TIFF are sRGB, 16-bit where the format has it).",
        epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", metavar="IN", help="images to denoise")
    out = p.add_mutually_exclusive_group()
    out.add_argument("-o", "--output", metavar="OUT",
                     help="output file (one input only); its extension picks the format")
    out.add_argument("--outdir", metavar="DIR", help="write each output into DIR under the "
                     "input's file name (DIR is created)")
    p.add_argument("--weights", metavar="W.lut", help="kpn-t weights, or unet-t's (run by "
                   "unet; the .lut's text tells them apart) (default: the shipped "
                   f"{shown(CPU_WEIGHTS['raw'])} for Bayer raw files "
                   f"({shown(CPU_WEIGHTS['raw-other'])} for X-Trans), {shown(WEIGHTS_LINEAR)} "
                   f"for EXR and PFM, {shown(WEIGHTS_JPEG)} "
                   f"for JPEG, {shown(WEIGHTS)} for the rest; on a GPU "
                   f"{shown(GPU_WEIGHTS['raw'])} for Bayer raw files "
                   f"({shown(GPU_WEIGHTS['raw-other'])} for X-Trans), "
                   f"{shown(GPU_WEIGHTS['linear'])} for EXR and PFM, "
                   f"{shown(GPU_WEIGHTS['jpeg'])} for JPEG)")
    p.add_argument("--noise", nargs=2, type=float, metavar=("A", "B"),
                   help="noise profile in cnngenin's units (default: estimated per image)")
    p.add_argument("--quality", type=integer(1, 100), metavar="Q", help="JPEG/WebP output "
                   f"quality 1..100 (default: a JPEG input's own, else {JPG_QUALITY})")
    p.add_argument("--strength", type=strength, default=1.0, metavar="S",
                   help="multiply the noise level by S: more than 1 smooths more, less "
                   f"than 1 keeps more detail ({STRENGTH[0]:g}..{STRENGTH[1]:g}, default 1)")
    p.add_argument("--ensemble", type=int, choices=(1, 2, 4, 8), metavar="N",
                   help="average the denoiser over N flips and rotations of each image (1, 2, "
                   "4 or 8; N times the time; the photo U-Net gains 0.07 dB with 2 and 0.14 "
                   f"with 8; default 2 for {shown(GPU_WEIGHTS['linear']).name} on a GPU, "
                   "else 1)")
    p.add_argument("--levels", type=integer(1, 12), metavar="N", help="kpn's pyramid levels "
                   "(default: what the weights' .lut says, else 4; not with unet-t's weights)")
    p.add_argument("--progress", action="store_true",
                   help="show the progress bar also when stderr is not a terminal")
    p.add_argument("--device", metavar="NAME", help="Vulkan device (substring of its name, or "
                   "its UUID; default: $VKGRAPH_DEVICE_UUID, $VKGRAPH_DEVICE, else a discrete "
                   "GPU, else the CPU driver; not with --ray: each Ray worker uses its GPU)")
    p.add_argument("--device-id", type=integer(0), metavar="N", help="Vulkan device by index")
    from .sweep import add_ray_args

    add_ray_args(p)  # --ray [ADDRESS], --num-cpus, --num-gpus


def strength(text: str) -> float:
    """An argparse type: --strength's number, in STRENGTH."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not STRENGTH[0] <= value <= STRENGTH[1]:  # NaN fails too
        raise argparse.ArgumentTypeError(f"expected a number {STRENGTH[0]:g}..{STRENGTH[1]:g}"
                                         f", got '{clip(text, 40)}'")
    return value


def output_paths(inputs: list[Path], output: str | None, outdir: str | None) -> list[Path]:
    """Where each input's result goes; UsageError for -o with several inputs, an unknown
    format, an output that is an input, or two inputs that would write the same file."""
    from vkgraph.pipeline.constants import is_raw

    from .common import UsageError

    if output is not None and len(inputs) != 1:
        raise UsageError(f"denoise: -o takes one input, got {len(inputs)} (use "
                         "--outdir DIR for several)")
    if output is not None:
        outs = [Path(output)]
    elif outdir is not None:
        outs = [Path(outdir) / p.name for p in inputs]
    else:
        outs = [p.with_name(f"{p.stem}-denoised{p.suffix}") for p in inputs]
    outs = [o.with_suffix(RAW_OUT) if output is None and is_raw(p) else o
            for p, o in zip(inputs, outs, strict=True)]
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


def check_quality(quality: int | None, outs: list[Path]) -> None:
    """--quality sets JPEG and WebP outputs: given with none of them, it is a mistake."""
    from .common import UsageError

    if quality is not None and not any(WRITERS[p.suffix.lower()] in QUALITY_FORMATS
                                       for p in outs):
        raise UsageError("denoise: --quality sets JPEG and WebP outputs; none of the "
                         "outputs is one")


def one_line(text: str) -> str:
    text = printable(" ".join(str(text).split()))
    return text if len(text) <= CLIP else text[:CLIP - 3] + "..."


def cmd_denoise(args) -> int:
    from .common import UsageError

    if args.noise is not None and not all(math.isfinite(v) and v >= 0 for v in args.noise):
        raise UsageError("denoise: --noise A B: expected two finite numbers >= 0")
    if args.ray is None and (args.num_cpus is not None or args.num_gpus is not None):
        raise UsageError("denoise: --num-cpus/--num-gpus size the local Ray instance of --ray")
    if args.ray is not None and (args.device is not None or args.device_id is not None):
        raise UsageError("denoise: --device picks this process's device; with --ray each "
                         "worker uses the GPU Ray gives it")
    if args.ray is not None:
        from vkgraph.apps.distributed import import_ray

        import_ray()  # a missing extra is said before anything is created
    inputs = [Path(p) for p in args.inputs]
    outs = output_paths(inputs, args.output, args.outdir)
    start = Start(args, list(zip(inputs, outs, strict=True))) if args.ray is None else None
    try:
        return _denoise(args, inputs, outs, start)
    finally:
        if start is not None:
            start.close()


def _denoise(args, inputs: list[Path], outs: list[Path], start) -> int:
    """cmd_denoise once its start is under way (Start; None with --ray)."""
    from vkgraph.pipeline.raw import check_raw, is_raw

    from .common import StopSignals, UsageError

    if args.ray is not None:  # a raw file LibRaw cannot read (or vkgraph not use): exit 2
        for p in inputs:  # (run_here checks on its reader thread while the device opens)
            if is_raw(p):
                check_raw(p)
    check_quality(args.quality, outs)
    weights = Path(args.weights) if args.weights else None
    shipped = {default_weights(p, gpu) for p in inputs for gpu in (False, True)}
    if any(is_raw(p) for p in inputs):  # and those of other patterns than Bayer
        shipped |= {GPU_WEIGHTS["raw-other"], CPU_WEIGHTS["raw-other"]}
    for w in {weights} if weights else shipped:
        check_up_front(args, w)
    if args.outdir is not None:
        try:
            Path(args.outdir).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"denoise: --outdir {args.outdir}: cannot create it: "
                             f"{e.strerror or e}") from None
    with StopSignals() as stop:
        bar = files_bar(len(inputs), args.progress or sys.stderr.isatty())
        try:
            jobs = list(zip(inputs, outs, strict=True))
            if args.ray is not None:
                failed, done = run_on_ray(args, jobs, weights, bar, stop)
            else:
                failed, done = run_here(args, jobs, weights, bar, stop, start)
        finally:
            bar.close()
    if stop():
        print(f"vkgraph: interrupted after {done} of {len(inputs)} files", file=sys.stderr)
        return 130
    if failed:
        print(f"vkgraph: {failed} of {len(inputs)} files failed", file=sys.stderr)
        return 1
    return 0


def files_bar(total: int, shown: bool):
    """The files' progress bar: tqdm's where it is shown, else a NoBar (a run without a
    terminal skips importing tqdm: 60-150 ms of a one-photo run)."""
    if not shown:
        return NoBar()
    from tqdm import tqdm

    return tqdm(total=total, unit="file", file=sys.stderr, dynamic_ncols=True, desc="denoise")


class NoBar:
    """What run_here and report use of a tqdm bar, for a bar that is not shown: the files'
    lines still printed, the count and postfix dropped."""

    disable = True

    def write(self, text: str, file=None) -> None:
        print(text, file=file or sys.stdout, flush=True)

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


def shown(path: Path) -> Path:
    """A shipped file as the help shows it: relative to the package's root."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def default_weights(src: Path, gpu: bool = False, pattern=None) -> Path:
    """The shipped weights for an input without --weights: WEIGHTS_LINEAR for raw files and
    linear float images, WEIGHTS_JPEG for JPEGs, WEIGHTS for the rest, where GPU_WEIGHTS (on
    a GPU, `gpu`) or CPU_WEIGHTS have none for the kind (raw files get the mosaic U-Nets of
    both). pattern: a raw file's colour pattern where it is known (RawMeta.cfa): one that is
    not Bayer gets "raw-other" (a file whose pattern is not known is taken for Bayer)."""
    from vkgraph.pipeline.constants import is_raw

    suffix = src.suffix.lower()
    if is_raw(src):
        kind, w = "raw", WEIGHTS_LINEAR
        if pattern is not None:
            from vkgraph.apps.denoise import bayer_red

            kind = "raw" if bayer_red(pattern) is not None else "raw-other"
    elif suffix in LINEAR_FORMATS:
        kind, w = "linear", WEIGHTS_LINEAR
    elif suffix in JPEG_FORMATS:
        kind, w = "jpeg", WEIGHTS_JPEG
    else:
        kind, w = "", WEIGHTS
    return (GPU_WEIGHTS if gpu else CPU_WEIGHTS).get(kind, w)


def on_gpu(device) -> bool:
    """Whether default_weights may pick the GPU weights for this device (the Denoiser's
    own test: any but a CPU driver)."""
    from vkgraph.apps.denoise import on_gpu as gpu

    return gpu(device)


def default_ensemble(weights: Path, gpu: bool) -> int:
    """--ensemble's default for these weights: GPU_ENSEMBLE's on a GPU, else 1."""
    return GPU_ENSEMBLE.get(Path(weights).resolve(), 1) if gpu else 1


class Denoisers:
    """A Denoiser per weights file, made when a file first needs it: `weights` (--weights)
    for every file, else each file's default_weights."""

    def __init__(self, device, weights: Path | None, levels: int | None, on_tile=None,
                 ensemble: int | None = None):
        self.device, self.weights, self.levels, self.on_tile = device, weights, levels, on_tile
        self.ensemble = ensemble  # None: GPU_ENSEMBLE's for the weights on a GPU, else 1
        self.made = {}

    def ensemble_of(self, weights: Path) -> int:
        if self.ensemble is not None:
            return self.ensemble
        return default_ensemble(weights, on_gpu(self.device))

    def for_file(self, src: Path, read=None):
        """The Denoiser of the file; read: its read to come (ReadAhead), where a raw file's
        colour pattern is taken from."""
        from vkgraph.apps.denoise import Denoiser

        w = self.weights
        if w is None:
            from vkgraph.pipeline.raw import is_raw, read_raw

            gpu = on_gpu(self.device)
            pattern = None
            if is_raw(src):  # a raw file's pattern picks the weights
                raw = read.raw.result() if read is not None else read_raw(src)
                pattern = raw.meta.cfa
            w = default_weights(src, gpu, pattern)
        if w not in self.made:
            self.made[w] = Denoiser(self.device, w, levels=self.levels,
                                    ensemble=self.ensemble_of(w))
            self.made[w].on_tile = self.on_tile
            made = self.made[w]
            if made.module == "unet" and not made.cells and not on_gpu(self.device):
                log.warning("denoise: %s are unet-t's weights, made for a GPU: on this CPU "
                            "device they take about 4x the time of the CPU's defaults (a "
                            "512x512 JPEG: 6.2 s on 2 cores, unet-jpeg-cells.lut 1.8 s)", w.name)
        return self.made[w]


def check_up_front(args, weights: Path) -> None:
    """The weights, --levels and --noise checked once, before any input is decoded: a bad
    one is one line and exit 2, not the same error for every file."""
    from vkgraph.apps.denoise import check_weights
    from vkgraph.pipeline.registry import Registry

    if not weights.exists() and not args.weights:
        raise GraphError(f"denoise: weights '{weights}' do not exist (the shipped weights are "
                         "missing from this checkout; give --weights W.lut)")
    try:
        check_weights(weights, args.levels)
    except GraphError as e:
        raise GraphError(f"denoise: {e.line()}") from None
    if args.noise is not None:  # what kpn's (and unet's) params hold (a finite float32)
        params = {p.name: p for p in Registry().get("kpn").params}
        for name, value in zip(("noise a", "noise b"), args.noise, strict=True):
            params[name].check([value], "kpn", where="denoise: --noise")


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


class Start:
    """The device's start (open_device, on a thread) and the first photo's read (ReadAhead)
    begun as the command begins, before the weights and the options are checked (0.04 s on
    an H100 machine that the device's start, 0.15-0.17 s there, no longer waits for); run_here
    takes them (`taken`), else close() closes them."""

    def __init__(self, args, jobs):
        from concurrent.futures import ThreadPoolExecutor

        from .common import open_device

        self.pool = ThreadPoolExecutor(1, thread_name_prefix="vkgraph-open")
        self.device = self.pool.submit(open_device, args)
        self.reads = ReadAhead(jobs, args.noise, args.strength)
        self.taken = False

    def close(self) -> None:
        if not self.taken:
            self.reads.close()
            if self.device.exception() is None:  # (waits for it)
                self.device.result().close()
        self.pool.shutdown()


def run_here(args, jobs, weights, bar, stop, start: Start | None = None) -> tuple[int, int]:
    """Every file on this process's device; (failed, done). Each photo is read (decoded,
    its noise estimated) on a thread while the one before it is denoised and written, the
    first while the device opens and kpn's kernels are built (ReadAhead). Once the last
    photo is denoised, the device closes on a thread while it is written (freeing a 12 MP
    U-Net's buffers takes a GPU driver about as long as the encode and the write). start:
    the device's start and the reads, begun already (Start), else begun here."""
    import threading

    from .common import open_device

    failed = done = 0
    if start is not None:
        start.taken = True
    reads = start.reads if start is not None else ReadAhead(jobs, args.noise, args.strength)
    try:
        device = start.device.result() if start is not None else open_device(args)
        closing = threading.Thread(target=device.close, name="vkgraph-close")
        try:
            reads.checked.result()  # a raw file LibRaw cannot read (or vkgraph not use): exit 2
            dens = Denoisers(device, weights, args.levels, tile_progress(bar), args.ensemble)
            for k, (src, dst) in enumerate(jobs):
                bar.set_postfix_str(src.name[:40], refresh=False)
                read = reads.take(k)  # (and the next photo's read starts)
                last = closing.start if k == len(jobs) - 1 else None
                try:
                    ok, text = True, denoise_file(dens.for_file(src, read), src, dst,
                                                  args.noise, args.quality, args.strength,
                                                  read, last)
                except FILE_ERRORS as e:
                    ok, text = False, error_text(src, e)
                failed += not ok
                done += 1
                report(bar, src, ok, text)
                if stop():
                    break
        finally:
            if closing.ident is not None:  # started
                closing.join()
            device.close()  # (once closed, nothing)
    finally:
        reads.close()
    return failed, done


class ReadAhead:
    """read_photo (a RawRead for camera raw files) of the photos of `jobs` on one
    thread, a photo ahead: take(k) hands photo k's read (a Future) over and starts photo k +
    1's, so at most two decoded photos are held. Photo 0 starts at once, so that its
    decoding and noise estimate (12 MP: 0.3-0.6 s; a 24 MP raw file: 0.3-0.4 s) overlap the
    device's start and the build (decoders and numpy let go of the GIL). Before it the
    thread checks every raw file (`checked`, a Future: check_raw decodes each, so a broken
    one is exit 2 before any file is written; the last one checked stays decoded for its
    read). Files whose decoding takes the process's stdout and stderr (EXR:
    formats.captures_stdio; the main thread's lines would land in it) are read where they
    are denoised (None)."""

    def __init__(self, jobs, noise, strength: float):
        from concurrent.futures import ThreadPoolExecutor

        from vkgraph.pipeline.raw import check_raw, is_raw

        self.srcs = [src for src, _ in jobs]
        self.noise, self.strength = noise, strength
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="vkgraph-read")
        self.reads = {}
        raws = [p for p in self.srcs if is_raw(p)]
        self.checked = self.pool.submit(lambda: [check_raw(p) for p in raws])
        self._start(0)

    def _start(self, k: int) -> None:
        from vkgraph.pipeline.formats import captures_stdio
        from vkgraph.pipeline.raw import is_raw

        if k >= len(self.srcs) or k in self.reads:
            return
        src = self.srcs[k]
        if is_raw(src):
            self.reads[k] = RawRead(self.pool, src, self.noise)
        elif not captures_stdio(src):
            self.reads[k] = self.pool.submit(self._read, src)

    def _read(self, src: Path):
        """read_photo on the reader thread, holding formats.STDIO: the main thread's capture
        of the process's stdout (an EXR written) must not take in what this read prints."""
        from vkgraph.pipeline.formats import STDIO

        with STDIO:
            return read_photo(src, self.noise, self.strength)

    def take(self, k: int):
        self._start(k)
        read = self.reads.pop(k, None)
        self._start(k + 1)
        return read

    def close(self) -> None:
        """Drop the reads not taken (a stopped run); one under way is finished first."""
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.reads.clear()


def tile_progress(bar):
    """The Denoiser's on_tile for a large photo (denoised in tiles): a second bar under the
    files' one, or without a bar a line every HEARTBEAT_S seconds (cli/progress.py)."""
    from .progress import HEARTBEAT_S

    state = {"bar": None, "beat": 0.0}

    def on_tile(done: int, total: int) -> None:
        now = time.perf_counter()
        if done == 0:
            state["beat"] = now + HEARTBEAT_S
            if not bar.disable:
                from tqdm import tqdm

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

    def __init__(self, weights: str | None, levels: int | None, ensemble: int | None = None):
        from concurrent.futures import ThreadPoolExecutor

        from vkgraph.apps.distributed import open_worker_device

        self.device = self.dens = self.error = None
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="vkgraph-read")  # raw reads
        try:
            self.device, _ = open_worker_device()
            self.dens = Denoisers(self.device, Path(weights) if weights else None, levels,
                                  ensemble=ensemble)
            if weights:  # made now, so that ready() tells a bad one
                self.dens.for_file(Path(weights))
        except VkgraphError as e:  # told to the driver by ready(), not as a dead actor
            self.error = e.line()

    def ready(self) -> tuple[str | None, str]:
        """(error, "device name uuid") of this worker's setup."""
        info = self.device.info if self.device is not None else None
        return self.error, f"{info.name} {info.uuid}" if info else "no device"

    def denoise(self, src: str, dst: str, noise, quality: int | None = None,
                strength: float = 1.0) -> tuple[bool, str]:
        """(ok, the file's line or its error), paths as the driver gave them. A camera raw
        file is decoded once (a RawRead), for the weights its colour pattern picks on a GPU
        and for its denoising, on the worker's reader thread."""
        from vkgraph.pipeline.constants import is_raw

        src_path = Path(src)
        try:
            read = RawRead(self.pool, src_path, noise) if is_raw(src_path) else None
            return True, denoise_file(self.dens.for_file(src_path, read), src_path, Path(dst),
                                      noise, quality, strength, read)
        except FILE_ERRORS as e:
            return False, error_text(src_path, e)


def run_on_ray(args, jobs, weights, bar, stop) -> tuple[int, int]:
    """Every file as a task on a pool of DenoiseWorker actors, one per GPU of the cluster
    (else one per CPU); a failed file is reported and the others go on. (failed, done)."""
    from vkgraph.apps import distributed
    from vkgraph.pipeline.errors import RuntimeFailure

    ray = distributed.import_ray()
    started = distributed.connect(args.ray or None, args.num_cpus, args.num_gpus)
    actors = []
    try:
        gpus = distributed.cluster_gpus()
        slots = gpus or distributed.cluster_cpus()
        per = {"num_cpus": 1, "num_gpus": 1} if gpus else {"num_cpus": 1}
        worker = ray.remote(**per)(DenoiseWorker)
        actors = [worker.remote(str(weights.resolve()) if weights else None, args.levels,
                                args.ensemble)
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
                ref = a.denoise.remote(str(src.resolve()), str(dst.resolve()), args.noise,
                                       args.quality, args.strength)
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


def kept(meta, dst: Path, quality: int | None) -> str:
    """What of the input the output keeps, for the file's line."""
    from vkgraph.pipeline.formats import output_quality

    kind = WRITERS[dst.suffix.lower()]
    said = []
    if meta.orientation != 1:
        said.append(f"turned upright (EXIF orientation {meta.orientation})")
    if meta.exif and kind in METADATA_FORMATS:
        said.append("EXIF")
    if meta.icc and kind in METADATA_FORMATS:
        said.append("ICC profile")
    if meta.depth != "u8" and kind in ("png", "tiff"):
        said.append("float" if kind == "tiff" and meta.depth.startswith("f") else "16-bit")
    if kind in QUALITY_FORMATS:
        said.append(f"quality {output_quality(meta, quality)}")
    return f", {', '.join(said)}" if said else ""


class Photo(NamedTuple):
    """A photo read (read_photo): its samples, what the file carries, the noise profile
    (a, b) and how it came ("estimated", "given", with the strength)."""

    image: object  # float32 (h, w, 4) linear rgba, or None (an 8-bit photo: rgbx)
    rgbx: object  # (h, w, 4) uint8 sRGB of an 8-bit rgb photo (formats.rgbx8), else None
    meta: object  # formats.ImageMeta
    profile: tuple[float, float]
    how: str

    def linear(self):
        """The linear rgba (made from the 8-bit samples where it was not needed before)."""
        from vkgraph.pipeline.formats import linear_rgba

        return self.image if self.image is not None else linear_rgba(self.rgbx)


def read_photo(src: Path, noise, strength: float = 1.0) -> Photo:
    """A photo (not a camera raw file) decoded, and its noise profile (`noise`, else
    estimated) times `strength`. An 8-bit rgb photo keeps its 8-bit samples (`rgbx`) for
    the Denoiser's 8-bit path and is not made linear here (the estimate makes the rows it
    reads linear itself)."""
    from vkgraph.apps.noise import noise_profile
    from vkgraph.pipeline.formats import decode_pixels, linear_rgba, rgbx8

    pixels, meta = decode_pixels(src, finite=True)
    rgbx = rgbx8(pixels)
    image = linear_rgba(pixels) if rgbx is None else None
    (a, b), how = noise_profile(image if rgbx is None else rgbx, noise, strength,
                                jpeg=meta.format == "jpg")
    return Photo(image, rgbx, meta, (a, b), how)


class RawRead:
    """A camera raw file read on a pool's thread (ReadAhead): `raw`, a Future of its
    RawImage, then `profile`, one of its noise profile (`noise`, else darktable's for its
    camera, else estimated), so that the device can build for the mosaic while the
    profile is estimated."""

    def __init__(self, pool, src: Path, noise):
        from vkgraph.apps.camnoise import profile_for
        from vkgraph.pipeline.raw import read_raw

        self.raw = pool.submit(read_raw, src)
        self.profile = pool.submit(lambda: profile_for(self.raw.result(), noise))


def writes_8bit(dst: Path, meta=None) -> bool:
    """Whether write_like writes dst in 8-bit sRGB (JPEG, WebP; PNG and TIFF of an 8-bit
    input)."""
    kind = WRITERS[dst.suffix.lower()]
    return kind in QUALITY_FORMATS or (kind in ("png", "tiff")
                                       and (meta is None or meta.depth == "u8"))


def denoise_file(den, src: Path, dst: Path, noise, quality: int | None = None,
                 strength: float = 1.0, read=None, denoised=None) -> str:
    """Read, denoise and write one file; the line that reports it. read: read_photo's
    result to come (a Future, ReadAhead) while the Denoiser builds for the photo's size
    (from its header), else the photo is read here. denoised(): called once the device's
    work for the file is done, before the result is written (run_here closes the device
    then, after the last file)."""
    from vkgraph.pipeline.constants import is_raw
    from vkgraph.pipeline.formats import upright_size, write_like

    if is_raw(src):
        return denoise_raw_file(den, src, dst, noise, quality, strength, denoised, read)
    if den.cfa:
        raise GraphError(f"the weights {den.weights.name} denoise camera raw files (RGGB "
                         "mosaics: their .lut says 'cfa rggb'), and this is not one")
    t0 = time.perf_counter()
    if read is None:
        photo = read_photo(src, noise, strength)
    else:
        size = upright_size(src)
        if size is not None:  # a JPEG (8-bit) to an 8-bit file: the 8-bit path's build
            jpeg8 = src.suffix.lower() in JPEG_FORMATS and writes_8bit(dst)
            den.prepare(*size, "srgb8" if jpeg8 else "float")
        photo = read.result()
    meta, (a, b), how = photo.meta, photo.profile, photo.how
    ht, wd = (photo.rgbx if photo.image is None else photo.image).shape[:2]
    if photo.rgbx is not None and writes_8bit(dst, meta) and den.srgb8():
        out = den.srgb(photo.rgbx, a, b)  # 8 bits up and down, the sRGB curves on the device
    else:
        out = den(photo.linear(), a, b)
    if denoised is not None:
        denoised()
    write_like(dst, out, meta, quality)
    return (f"{src} -> {dst}: {wd}x{ht}, noise a {a:.4g} b {b:.4g} ({how}), weights "
            f"{weights_text(den)}{kept(meta, dst, quality)}, {time.perf_counter() - t0:.2f} s")


def weights_text(den) -> str:
    """The weights a report line names: the file, and the ensemble where it is more than 1."""
    return den.weights.name + (f" (ensemble {den.ensemble})" if den.ensemble > 1 else "")


def denoise_raw_file(den, src: Path, dst: Path, noise, quality: int | None = None,
                     strength: float = 1.0, denoised=None, read=None) -> str:
    """A camera raw file demosaiced, denoised and colour-converted (vkgraph/apps/rawdenoise.py),
    turned upright by the orientation the camera recorded, with the camera's EXIF (make,
    model, date, exposure) where the output format holds it: 16-bit where the output format
    has it; `strength` multiplies the level kpn gets. read: its RawRead to come
    (ReadAhead), else it is read here. On the device's path the build runs while the noise
    profile is estimated, and an EXR is written band by band as it is made (when upright)."""
    from vkgraph.apps.camnoise import profile_for
    from vkgraph.apps.rawdenoise import demosaicer_of, denoise_raw, on_device, prepare
    from vkgraph.pipeline.formats import ImageMeta, orient, write_like
    from vkgraph.pipeline.raw import exif_of, read_raw

    t0 = time.perf_counter()
    raw = read.raw.result() if read is not None else read_raw(src)
    if on_device(den, raw):
        prepare(den, raw)
    profile = read.profile.result() if read is not None else profile_for(raw, noise)
    ht, wd = raw.shape
    turn = raw.meta.orientation
    kind = WRITERS[dst.suffix.lower()]
    # (EXIF only where the output keeps it: making it imports Pillow, 0.02 s)
    exif = exif_of(raw.meta) if kind in METADATA_FORMATS else None
    meta = ImageMeta("raw", "u16", exif=exif, orientation=turn)
    if kind == "exr" and on_device(den, raw):
        from vkgraph.pipeline.exrstream import ExrStream

        # (orientations 5..8 swap rows and columns)
        with ExrStream(dst, *((ht, wd) if turn >= 5 else (wd, ht))) as exr:
            # upright, the file is written band by band while the device makes the next
            out, profile, _ = denoise_raw(den, demosaicer_of(den), raw, noise, strength,
                                          profile, exr.rows if turn == 1 else None,
                                          planar=turn == 1)
            if denoised is not None:
                denoised()
            exr.finish(out if turn == 1 else orient(out, turn))  # (upright: rows as made)
    else:
        out, profile, _ = denoise_raw(den, demosaicer_of(den), raw, noise, strength, profile)
        if denoised is not None:
            denoised()
        write_like(dst, orient(out, turn), meta, quality)
    a, b = profile.scalar()
    pattern = "Bayer" if raw.meta.period == 2 else "X-Trans"
    how = profile.source + (f", strength {strength:g}" if strength != 1.0 else "")
    return (f"{src} -> {dst}: {wd}x{ht} {pattern}, noise a {a:.4g} b {b:.4g} "
            f"({how}), weights {weights_text(den)}{kept(meta, dst, quality)}, "
            f"{time.perf_counter() - t0:.2f} s")
