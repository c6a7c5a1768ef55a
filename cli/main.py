"""The `vkgraph` command: cli, gui, gradcheck, devices, shaders, modules, denoise, sweep.

Exit codes: 0 success, 1 runtime failure (device, I/O), 2 usage or graph error, 130 interrupt.
Bad input never shows a Python traceback (set VKGRAPH_DEBUG=1 to see one anyway).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from pathlib import Path

from vkgraph.pipeline.errors import (
    GraphError,
    RuntimeFailure,
    VkgraphError,
    clip,
    printable,
    shorten,
)

# shared with the subcommands (cli/common.py); main re-exports them
from .common import StopSignals, UsageError, integer, load_session, open_device  # noqa: F401

log = logging.getLogger("vkgraph")

WRITERS = ("o-pfm", "o-png", "o-jpg", "o-exr", "o-lut")


class ArgParser(argparse.ArgumentParser):
    def error(self, message):  # exit status 2 with one line, as for graph errors
        # main() prints "vkgraph: error: "; name the subcommand only ("cli: ...")
        command = self.prog.removeprefix("vkgraph").strip()
        raise UsageError(f"{command}: {message}" if command else message)


def number(lo: float, hi: float):
    """An argparse type: a finite number in lo..hi."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and lo <= value <= hi):
            raise argparse.ArgumentTypeError(f"expected a number {lo:g}..{hi:g}, got "
                                             f"'{clip(text, 40)}'")
        return value
    return parse


# gradcheck's smallest step: below it a weight near 1 does not change in fp32 (ulp 6e-8)
EPS_MIN = 1e-7


def add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-g", "--graph", required=True, metavar="FILE.cfg", help="graph to run")
    p.add_argument("--frames", type=integer(1), metavar="N",
                   help="number of frames, at least 1 (overrides the cfg's frames)")
    p.add_argument("--device", metavar="NAME", help="Vulkan device (substring of its name, or "
                   "its UUID; default: $VKGRAPH_DEVICE_UUID, $VKGRAPH_DEVICE, else a discrete "
                   "GPU, else the CPU driver)")
    p.add_argument("--device-id", type=integer(0), metavar="N", help="Vulkan device by index")
    p.add_argument("--lenient", action="store_true",
                   help="unknown cfg commands, modules and params are warnings, not errors")
    p.add_argument("--profile", action="store_true",
                   help="print per-node GPU times of the last frame")
    p.add_argument("--config", nargs="*", action="extend", default=[], metavar="LINE",
                   help="extra cfg lines, applied last (the arguments up to the next option; "
                   "repeatable)")


def build_parser() -> argparse.ArgumentParser:
    p = ArgParser(prog="vkgraph", description="Node-graph image processing on Vulkan compute "
                  "shaders, with on-GPU training of small MLPs (vkdt-compatible .cfg files).")
    p.add_argument("-v", "--verbose", action="store_true", help="more log lines on stderr")
    p.add_argument("-q", "--quiet", action="store_true", help="only errors on stderr")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("--modules", action="append", default=[], metavar="DIR",
                   help="a folder of your own modules (<name>/ folders, kernels beside them "
                   "or in shaders/<name>/); repeatable, searched before $VKGRAPH_MODULES "
                   "and the shipped modules")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgParser)

    c = sub.add_parser("cli", help="run a graph in batch mode, writing files",
                       description="Run a graph like `vkdt cli`: display modules are replaced "
                       "by file writers. --format/--filename apply to the output slot that the "
                       "next --output closes (default slot: display 'main').")
    add_run_args(c)
    c.add_argument("--output", action="append", metavar="INST",
                   help="display instance to replace by a writer (closes the current slot)")
    c.add_argument("--format", action="append", choices=WRITERS,
                   help="writer module for the current slot (default o-jpg)")
    c.add_argument("--filename", action="append", metavar="NAME",
                   help="output file name without extension (default: the instance name)")
    c.add_argument("--last-frame-only", action="store_true",
                   help="write files only after the last frame")
    c.add_argument("--progress", action="store_true", help="show a progress bar")
    c.add_argument("--checkpoint", metavar="FILE", help="save the state of the trainable "
                   "modules (weights, Adam moments, frame counter) to FILE (.npz) at the end, "
                   "on Ctrl-C/SIGTERM and every --checkpoint-every frames")
    c.add_argument("--checkpoint-every", type=integer(0), default=0, metavar="N",
                   help="also save the checkpoint after every N frames")
    c.add_argument("--resume", metavar="FILE", help="continue the run saved in checkpoint "
                   "FILE (same graph; --frames may be larger)")
    c.add_argument("--losses", metavar="FILE.csv", help="write the loss of every frame of "
                   "every trainable module to FILE.csv at the end (frame,<module>,... rows; "
                   "also when interrupted or diverged)")

    g = sub.add_parser("gui", help="run a graph and show its display modules in a window")
    add_run_args(g)
    g.add_argument("--exit-after", type=integer(1), metavar="N", help="stop after N frames")
    g.add_argument("--screenshot", metavar="FILE.png", help="save the window at the end")

    d = sub.add_parser("gradcheck", help="finite-difference check of a trainable module")
    add_run_args(d)
    d.add_argument("--module", metavar="NAME:INST", help="module to check (default: the first "
                   "trainable module)")
    d.add_argument("--count", type=integer(1), default=64, metavar="N",
                   help="weights to check (seeded sample, stratified by layer)")
    d.add_argument("--all", action="store_true", help="check every used weight")
    d.add_argument("--eps", type=number(EPS_MIN, 1.0), default=None, metavar="H",
                   help=f"finite-difference step ({EPS_MIN:g}..1; default 1e-5)")
    d.add_argument("--seed", type=integer(0), default=1, metavar="N",
                   help="seed of the weight sample (an integer >= 0)")
    d.add_argument("--plain", action="store_true",
                   help="difference the plain fp32 forward instead of the double-float one "
                        "(shows fp32 rounding noise)")
    d.add_argument("--warmup", type=integer(0), default=0, metavar="N",
                   help="train N frames first (with the cfg's learning rate), then check")
    d.add_argument("--image", metavar="FILE.pfm", help="write a vis-style image of both")

    dv = sub.add_parser("devices", help="list Vulkan devices and their capabilities")
    dv.add_argument("--device", metavar="NAME", help="show which device this would pick")
    dv.add_argument("--device-id", type=integer(0), metavar="N")

    s = sub.add_parser("shaders", help="compile shaders")
    s.add_argument("--check", action="store_true",
                   help="compile every kernel in every variant, run nothing")

    from .denoise import add_parser
    add_parser(sub)
    from .sweep import add_parser as add_sweep
    add_sweep(sub)

    m = sub.add_parser("modules", help="list modules, or show one module's interface")
    m.add_argument("name", nargs="?", help="module name, e.g. kpn-t")
    return p


def output_slots(argv: list[str]) -> list[dict]:
    """vkdt's sequential scan: --format/--filename fill the current slot, --output closes it
    with an instance name; an unclosed slot with options is the 'main' display."""
    slots, cur = [], {}
    it = iter(argv)
    for a in it:
        if a == "--config":  # its cfg lines run up to the next option
            a = next(it, None)
            while a is not None and not a.startswith("-"):
                a = next(it, None)
            if a is None:
                break
        if a in ("--format", "--filename", "--output"):
            val = next(it, None)
            if a == "--output":
                cur["inst"] = val
                slots.append(cur)
                cur = {}
            else:
                cur[a[2:]] = val
        elif a.startswith(("--format=", "--filename=", "--output=")):
            key, val = a[2:].split("=", 1)
            if key == "output":
                cur["inst"] = val
                slots.append(cur)
                cur = {}
            else:
                cur[key] = val
    if cur or not slots:
        if not cur:
            cur["implicit"] = True  # nothing asked for: display:main if the graph has one
        cur.setdefault("inst", "main")
        slots.append(cur)
    return slots


def replace_displays(graph, slots: list[dict], frames_hint: int, last_only: bool) -> None:
    """Replace each requested display by a writer; remove the other displays (vkdt cli)."""
    mains = [m for m in graph.modules.values()
             if m.inst == "main" and m.cls.is_sink and m.name != "display"
             and not m.name.startswith("i-")]
    requested = {s["inst"] for s in slots}
    for slot in slots:
        inst = slot["inst"]
        disp = graph.modules.get(("display", inst))
        if disp is None:
            if inst == "main" and (mains or slot.get("implicit")):
                continue  # the graph writes its own outputs
            have = [m.inst for m in graph.modules.values() if m.name == "display"]
            raise GraphError(f"--output {inst}: the graph has no display:{inst}"
                             + (f" (displays: {', '.join(have)})" if have else ""))
        fmt = slot.get("format") or "o-jpg"
        src = disp.connector("input").source
        graph.remove_module("display", inst)
        if src is None:
            continue
        writer = graph.add_module(fmt, inst)
        graph.connect(src[0].name, src[0].inst, src[1], fmt, inst, "input")
        name = slot.get("filename") or inst
        if frames_hint > 1 and not last_only:
            name += "_%04d"
        writer.set_param("filename", name)
    for m in list(graph.modules.values()):
        if m.name == "display" and m.inst not in requested:
            graph.remove_module("display", m.inst)


def cmd_cli(args, argv) -> int:
    from vkgraph.pipeline import checkpoint
    from vkgraph.pipeline.trainer import diverged, diverging

    from .progress import Progress, summaries

    session, apply_config = load_session(args)
    session.profile = args.profile
    graph = session.graph
    slots = output_slots(argv)
    frames = graph.frames
    for line in args.config:  # per-frame file names depend on the final frame count
        if line.startswith("frames:") and line[7:].strip().isdigit():
            frames = int(line[7:])
    if args.frames is not None:
        frames = args.frames
    replace_displays(graph, slots, frames, args.last_frame_only)
    apply_config()  # vkdt applies --config after display replacement
    if args.frames is not None:
        graph.frames = args.frames
    if args.checkpoint_every and not args.checkpoint:
        raise UsageError("--checkpoint-every needs --checkpoint FILE")
    for option, value in (("--checkpoint", args.checkpoint), ("--losses", args.losses)):
        if value and not Path(value).parent.is_dir():
            raise UsageError(f"{option} {value}: folder '{Path(value).parent}' does not exist")
    resume = None
    if args.resume:
        resume = checkpoint.Checkpoint(args.resume)
        resume.check_graph(graph)
    every = args.checkpoint_every

    def checkpoint_due(f: int) -> bool:
        """A periodic checkpoint follows frame f (it needs that frame's own state)."""
        return bool(args.checkpoint and every and (f + 1) % every == 0)

    def after_frame(build, f):
        if checkpoint_due(f) and f < build.frames - 1:
            checkpoint.save(args.checkpoint, build)

    with StopSignals() as stop:
        device = open_device(args)
        try:
            session.device = device
            bar = Progress(enabled=args.progress)
            try:
                build = session.prepare(restore=lambda b: checkpoint.prepare(
                    b, resume, saving=bool(args.checkpoint)))

                def each_frame(b, f):
                    bar.update(b, f)
                    after_frame(b, f)

                if args.losses and not any(m.cls.hook("losses") for m in build.active):
                    raise UsageError(f"--losses {args.losses}: the graph has no trainable "
                                     "module (no loss history)")
                watch = diverging(build)  # a trainer out of rollbacks ends the run
                session.run(build.frames - session.frame, every_frame_sinks=not
                            args.last_frame_only, on_frame=each_frame,
                            stop=lambda: stop() or watch(), sync=checkpoint_due)
            finally:
                bar.close()
            failed = [why for m in build.active if m.trainable is not None
                      for why in [diverged(build.context, m)] if why]
            saved = args.checkpoint
            if saved is None and build.interrupted and not failed and checkpoint.has_state(build):
                try:
                    checkpoint.check_supported(build)
                    saved = f"{Path(args.graph).stem}.ckpt.npz"
                except GraphError as e:
                    log.warning("no checkpoint: %s", e.line())
            if saved:
                checkpoint.save(saved, build)
            if args.losses:
                session.save_losses(args.losses)
            for line in summaries(build):
                print(line)
            if args.profile:
                from .progress import print_profile
                print_profile(build)
        finally:
            device.close()
    if failed:
        raise RuntimeFailure(failed[0])
    if build.interrupted:
        print(f"vkgraph: interrupted after frame {build.frame} of {build.frames}"
              + (f"; continue with --resume {saved}" if saved else ""), file=sys.stderr)
        return 130
    return 0


def cmd_devices(args) -> int:
    from vkgraph.pipeline.vk import choose, list_devices

    infos = list_devices()
    chosen = choose(infos, args.device, args.device_id) if infos else None
    for d in infos:
        mark = "*" if chosen is d else " "
        print(f"{mark} {d.index}: {d.name} ({d.type}, Vulkan {d.api})")
        print(f"    uuid: {d.uuid}")
        print(f"    fp16 arithmetic: {'yes' if d.fp16 else 'no'}, 16-bit storage: "
              f"{'yes' if d.storage16 else 'no'}, float atomics: "
              f"{'yes' if d.float_atomics else 'no'}, 64-bit integer atomics: "
              f"{'yes' if d.int64_atomics else 'no'}")
        print(f"    subgroup size: {d.subgroup_size}, shared memory: {d.shared_memory} bytes, "
              f"device memory: {d.memory_mib} MiB, largest storage buffer: "
              f"{d.max_storage_range >> 20} MiB")
        print(f"    cooperative matrix: {', '.join(d.coopmat) if d.coopmat else 'no'}")
        if d.coopmat2:
            print(f"    cooperative matrix 2: {', '.join(d.coopmat2)}")
        if d.coopvec:
            print("    cooperative vector: yes")
    if chosen is not None:
        print(f"* = used by default ({chosen.name})")
    return 0


def shader_folders() -> list[Path]:
    """Every kernel folder: the shipped shaders/<name>/, then those of the user's module
    folders (<dir>/<name>/ and <dir>/shaders/<name>/ holding .comp files)."""
    from vkgraph.pipeline.kernels import SHADERS, user_kernel_roots
    from vkgraph.pipeline.registry import user_dirs

    folders = sorted(p for p in SHADERS.iterdir() if p.is_dir() and p.name != "include")
    for root in user_kernel_roots(user_dirs()):
        if root.is_dir():
            folders += sorted(p for p in root.iterdir() if p.is_dir() and any(p.glob("*.comp")))
    return folders


def shader_variants():
    """Every (kernel file, defines, module name) to compile: each kernel plain, plus the extra
    variants a folder lists in `variants` (lines `kernel: NAME=VALUE ...`). A kernel gets the
    params block (`params.gen`) of the module named like its folder, or of the module a
    variant names after `@` (`nmap@kpn: FROM_PARAMS=1`: kpn runs that kernel)."""
    for folder in shader_folders():
        extra = {}
        vfile = folder / "variants"
        if vfile.exists():
            for line in vfile.read_text().splitlines():
                if not line.strip() or line.startswith("#"):
                    continue
                kernel, _, defs = line.partition(":")
                kernel, _, module = kernel.strip().partition("@")
                d = dict(tok.split("=", 1) for tok in defs.split())
                extra.setdefault(kernel, []).append((d, module or folder.name))
        for comp in sorted(folder.glob("*.comp")):
            yield comp, {}, folder.name
            for d, module in extra.get(comp.stem, []):
                yield comp, d, module


def cmd_shaders(args) -> int:
    from vkgraph.pipeline.errors import GraphError
    from vkgraph.pipeline.kernels import compile_kernel, shader_headers
    from vkgraph.pipeline.registry import Registry
    from vkgraph.pipeline.vk import ShaderCompileError

    if not args.check:
        raise UsageError("shaders: nothing to do (use --check)")
    reg = Registry()
    failed = 0
    n = 0
    for path, defines, module in shader_variants():
        n += 1
        try:
            cls = reg.get(module) if module in reg else None
            params = cls.params if cls is not None else []
            where = str(cls.folder / "params") if cls is not None else "params"
            compile_kernel(path, defines, params, where, shader_headers(reg, path.parent.name))
            log.debug("ok %s %s (params of %s)", path, defines, module)
        except (ShaderCompileError, GraphError) as e:
            failed += 1
            print(e.line(), file=sys.stderr)
    print(f"{n - failed}/{n} kernel variants compile")
    return 1 if failed else 0


def cmd_modules(args) -> int:
    from vkgraph.pipeline.registry import Registry

    reg = Registry()
    if not args.name:  # a broken module is reported and the others still listed
        broken = []
        for name in reg.names():
            try:
                cls = reg.get(name)
            except VkgraphError as e:
                broken.append(e.line())
                continue
            first = next((ln.lstrip("# ").strip() for ln in cls.readme().splitlines()
                          if ln.strip() and not ln.startswith("#")), "")
            print(f"{name:10s} {first[:88]}")
        for line in broken:
            print(f"vkgraph: error: {line}", file=sys.stderr)
        return 2 if broken else 0
    cls = reg.get(args.name, where="modules")
    print(f"module {cls.name} ({cls.folder})\n\nconnectors:")
    for i, c in enumerate(cls.connectors):
        opt = " (optional)" if c.name in getattr(cls, "optional", ()) else ""
        print(f"  {i}: {c.name}:{c.type}:{c.chan}:{c.format}{opt}")
    print("params:")
    for p in cls.params:
        default = p.default if p.type == "string" else ":".join(str(v) for v in p.default)
        print(f"  {p.name}:{p.type}:{p.count}:{default}  ({p.range_text()})")
    if cls.readme():
        print("\n" + cls.readme())
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):  # a name the terminal cannot show is escaped
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    parser = build_parser()
    debug = os.environ.get("VKGRAPH_DEBUG", "") not in ("", "0")
    try:
        args = parser.parse_args(argv)
        level = logging.DEBUG if args.verbose else logging.ERROR if args.quiet else logging.INFO
        logging.basicConfig(level=level, format="vkgraph: %(message)s", stream=sys.stderr)
        if args.version:
            from vkgraph import __version__
            print(f"vkgraph {__version__}")
            return 0
        from vkgraph.pipeline import folders  # (registry's, without numpy: see denoise)
        folders.USER_DIRS[:] = [Path(d).expanduser() for d in args.modules]
        for d in folders.user_dirs():
            if not d.is_dir():
                from vkgraph.pipeline.formats import path_kind

                kind = path_kind(d)
                raise UsageError(f"module folder '{clip(printable(str(d)), 200)}' "
                                 + (f"is {kind}, not a folder" if kind else "does not exist")
                                 + f" (--modules or ${folders.ENV})")
        if args.command is None:
            parser.print_help()
            return 2
        if args.command == "cli":
            return cmd_cli(args, argv)
        if args.command == "gui":
            from .gui import cmd_gui
            return cmd_gui(args)
        if args.command == "gradcheck":
            from .gradcheck import cmd_gradcheck
            return cmd_gradcheck(args)
        if args.command == "devices":
            return cmd_devices(args)
        if args.command == "shaders":
            return cmd_shaders(args)
        if args.command == "denoise":
            from .denoise import cmd_denoise
            return cmd_denoise(args)
        if args.command == "sweep":
            from .sweep import cmd_sweep
            return cmd_sweep(args)
        return cmd_modules(args)
    except VkgraphError as e:
        if debug:
            raise
        print(f"vkgraph: error: {e.line()}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("vkgraph: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader of our output went away (`vkgraph modules | head -1`): it has what it
        # wanted; point stdout at /dev/null so the final flush cannot fail again
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except OSError as e:  # the machine refused a file operation we did not expect to fail
        if debug:
            raise
        name = f"{e.filename}: " if e.filename is not None else ""
        print(f"vkgraph: error: {shorten(printable(name + (e.strerror or str(e))))}",
              file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - a bug of ours: one line, not a wall of text
        if debug:
            raise
        print(f"vkgraph: internal error: {shorten(printable(f'{type(e).__name__}: {e}'))} (set "
              "VKGRAPH_DEBUG=1 for the traceback and please report it)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
