"""`vkgraph sweep`: train a graph with params drawn from a search space, one Ray Tune trial a
run, one GPU a trial; a table of the results (vkgraph/apps/sweep.py has the space format)."""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

from vkgraph.pipeline.errors import GraphError

EXAMPLE = """space file (JSON or YAML): keys are cfg lines without their value, or `frames`:
  {"frames": 2000,
   "param:kpn-t:01:alpha":    {"loguniform": [1e-4, 1e-2]},
   "param:kpn-t:01:schedule": {"grid": [0, 1]},
   "param:kpn-t:01:loss":     {"choice": [0, 2]},
   "param:cnngenin:01:batch": {"randint": [4, 16]},
   "param:kpn-t:01:gradclip": {"uniform": [0.5, 2.0]},
   "param:kpn-t:01:beta1":    0.9}
grid: every value, crossed with the other grids; choice/uniform/loguniform/randint (both
ends included): drawn per trial. Trials = grid points x --samples.

examples:
  vkgraph sweep -g graphs/train-kpn.cfg --space space.json --samples 2 --frames 200
  vkgraph sweep -g train-photo.cfg --space space.yaml --metric psnr --scheduler asha \\
                --ray auto --out sweeps/photo

Each trial reports its loss (the mean per-frame loss of the last K frames) every
--report-every K frames; ASHA stops the trials whose loss is in the worst 3/4 at each of
its rungs (frames grace, 4 grace, 16 grace, ...). --out gets sweep.csv and sweep.json (one
row per trial, best first), weights/<trial>.lut and Ray Tune's own records (ray/)."""


def add_parser(sub) -> None:
    """`vkgraph sweep` on the subcommand parsers of cli/main.py."""
    from vkgraph.pipeline.constants import METRICS

    from .common import integer

    p = sub.add_parser(
        "sweep", help="train a graph over a search space of params on Ray Tune",
        description="Train a graph once per point of a search space, each trial on its own\n"
        "GPU (one CPU each on a cluster without GPUs), through Ray Tune; write a table of\n"
        "the results and print it best first. Needs Ray: pip install 'vkgraph[ray]'.",
        epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-g", "--graph", required=True, metavar="FILE.cfg",
                   help="the training graph (one trainable module: kpn-t, mlp-t)")
    p.add_argument("--space", required=True, metavar="SPACE", help="the search space "
                   "(.json, .yaml or .yml)")
    p.add_argument("--samples", type=integer(1, 1 << 20), default=1, metavar="N",
                   help="trials per grid point, with fresh draws of the random keys "
                   "(default 1)")
    p.add_argument("--metric", choices=sorted(METRICS), default="loss",
                   help="what ranks the trials: loss (the final mean loss, default), "
                   "best_loss, or psnr (kpn-t: PSNR of the trained weights on the held-out "
                   "photographs, needs scikit-image)")
    p.add_argument("--frames", type=integer(1), metavar="N",
                   help="frames of every trial (default: the cfg's; or the space's `frames`)")
    p.add_argument("--report-every", type=integer(1), metavar="K",
                   help="report the loss to Tune every K frames (default: 1/20 of the frames)")
    p.add_argument("--scheduler", choices=("fifo", "asha"), default="fifo",
                   help="fifo: every trial runs to the end; asha: stop the worse trials early "
                   "(on the loss)")
    p.add_argument("--grace", type=integer(1), metavar="N",
                   help="asha: frames every trial runs before it can be stopped (default: "
                   "1/16 of the frames, at least K)")
    p.add_argument("--seed", type=integer(0), metavar="N", help="seed of the random draws")
    p.add_argument("--eval-crop", type=integer(16), metavar="S", help="psnr: evaluate a "
                   "centred SxS crop of each held-out photograph (quick checks only)")
    p.add_argument("--out", default="sweep", metavar="DIR",
                   help="folder for the tables, weights and Tune's records (default: sweep)")
    add_ray_args(p)


def add_ray_args(p) -> None:
    """--ray [ADDRESS], --num-cpus, --num-gpus (sweep, denoise)."""
    from .common import integer

    p.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                   help="the Ray cluster to join (host:port, ray://host:port, auto); "
                   "without ADDRESS: $RAY_ADDRESS, a cluster `ray start` runs on this "
                   "machine, else a new local Ray instance")
    p.add_argument("--num-cpus", type=integer(1), metavar="N",
                   help="CPUs of a local Ray instance (default: all)")
    p.add_argument("--num-gpus", type=integer(0), metavar="N",
                   help="GPUs of a local Ray instance (default: all)")


def trial_name(trial) -> str:
    """t00000, t00001, ...: Tune's trial counter (the weights are <name>.lut)."""
    return "t" + str(trial.trial_id).rsplit("_", 1)[-1]


def short_names(keys: list[str]) -> dict[str, str]:
    """Column titles: a param's own name where that is unique, else the whole key."""
    last = [k.rsplit(":", 1)[-1] for k in keys]
    return {k: s if last.count(s) == 1 else k for k, s in zip(keys, last, strict=True)}


def fmt(value, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if math.isfinite(value) else str(value)
    return str(value)


def summary(rows: list[dict], keys: list[str], metric: str) -> list[str]:
    names = short_names(keys)
    head = (["#", "trial", "status"] + [names[k] for k in keys]
            + ["frames", "loss", "best loss"] + (["psnr"] if metric == "psnr" else [])
            + ["s", "device uuid"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, r in enumerate(rows, 1):
        cells = ([str(i), r["trial"], r["status"]] + [fmt(r.get(k)) for k in keys]
                 + [fmt(r.get("frame")), fmt(r.get("loss")), fmt(r.get("best_loss"))]
                 + ([fmt(r.get("psnr"), 5)] if metric == "psnr" else [])
                 + [fmt(r.get("seconds"), 3), r.get("device_uuid") or "-"])
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def check_graph(path: Path, metric: str) -> None:
    """Refuse, before Ray starts, a graph a trial could not train or evaluate."""
    from vkgraph.apps import heldout
    from vkgraph.apps.sweep import prepare
    from vkgraph.pipeline.cfg import read_cfg

    g = read_cfg(path)
    module = prepare(g, Path("check.lut"))
    if metric == "psnr":
        if module.name != "kpn-t":
            raise GraphError(f"--metric psnr evaluates kpn-t weights on held-out photos; "
                             f"{path} trains {module}")
        heldout.check_graph(g, path)


def cmd_sweep(args) -> int:
    from vkgraph.api import graph_path
    from vkgraph.apps import distributed
    from vkgraph.apps.sweep import Space, rows, run_trial, write_tables

    from .common import UsageError

    ray = distributed.import_ray()  # a missing extra is the first thing to say
    path = graph_path(args.graph).resolve()
    space = Space.load(args.space)
    space.check(path)
    if args.frames is not None and space.dim("frames") is not None:
        raise UsageError("sweep: --frames and the space's `frames` both set the frames; "
                         "give one")
    check_graph(path, args.metric)
    if args.metric == "psnr":
        from vkgraph.apps.heldout import photos

        photos()  # the held-out set must exist (scikit-image) before any trial trains
    from vkgraph.pipeline.cfg import read_cfg

    default_frames = args.frames or max(1, int(read_cfg(path).frames))
    max_frames = space.frames(default_frames)
    every = args.report_every or max(1, max_frames // 20)
    out = Path(args.out).resolve()
    try:
        (out / "weights").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"sweep: --out {args.out}: cannot create it: {e.strerror or e}") \
            from None

    # Tune's own console output (a banner, per-trial tables) would bury the lines printed
    # here; the older reporter honours verbose=0
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    from ray.tune.search import BasicVariantGenerator

    # Tune logs each failed trial's traceback and a summary of them; the lines printed here
    # (progress_lines, the table, one error line a failed trial) say the same in one line
    logging.getLogger("ray.tune").setLevel(logging.CRITICAL)
    old_term = signal.getsignal(signal.SIGTERM)
    sigterm_as_sigint()  # `kill` ends the sweep like Ctrl-C: the finished trials' table
    started = False
    try:
        started = distributed.connect(args.ray or None, args.num_cpus, args.num_gpus)
        gpus = distributed.cluster_gpus()
        resources = {"cpu": 1, "gpu": 1} if gpus else {"cpu": 1}
        if args.scheduler == "asha":
            grace = args.grace or max(every, max_frames // 16)
            scheduler = ASHAScheduler(time_attr="frame", metric="loss", mode="min",
                                      max_t=max_frames, grace_period=min(grace, max_frames))
        else:
            scheduler = FIFOScheduler()
        spec = {"graph": str(path), "weights": str(out / "weights"), "frames": args.frames,
                "report_every": every, "metric": args.metric, "eval_crop": args.eval_crop}
        n = space.trials(args.samples)
        where = (f"{gpus} GPUs" if gpus else f"{distributed.cluster_cpus()} CPUs (no GPUs: "
                 "one CPU a trial)")
        print(f"sweep: {n} trials of {path.name} on {where}, loss reported every {every} "
              f"frames, {args.scheduler} scheduler", file=sys.stderr, flush=True)
        tuner = tune.Tuner(
            tune.with_resources(tune.with_parameters(run_trial, spec=spec), resources),
            param_space={d.key: d.tune() for d in space.dims},
            tune_config=tune.TuneConfig(
                num_samples=args.samples, scheduler=scheduler,
                search_alg=BasicVariantGenerator(random_state=args.seed),
                trial_name_creator=trial_name, trial_dirname_creator=trial_name),
            run_config=tune.RunConfig(name="tune", storage_path=str(out / "ray"), verbose=0,
                                      callbacks=[progress_lines(n)]))
        t0 = time.perf_counter()
        results = tuner.fit()
        wall = time.perf_counter() - t0
    finally:
        if started:
            ray.shutdown()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, old_term)
    table = rows(results, space.keys, args.metric)
    meta = {"graph": str(path), "space": str(Path(args.space).resolve()),
            "metric": args.metric, "scheduler": args.scheduler, "samples": args.samples,
            "report_every": every, "frames": max_frames, "gpus": gpus,
            "wall_s": round(wall, 3)}
    csv_path, json_path = write_tables(out, table, meta)
    count = {s: sum(r["status"] == s for r in table)
             for s in ("done", "stopped", "error", "not run")}
    print(f"\nsweep of {path.name}: {len(table)} trials ({count['done']} done, "
          f"{count['stopped']} stopped early, {count['error']} failed"
          + (f", {count['not run']} not run" if count["not run"] else "")
          + f") in {wall:.1f} s on {where}; best first by {args.metric}:")
    for line in summary(table, space.keys, args.metric):
        print(line)
    for r in table:
        if r["status"] == "error":
            print(f"vkgraph: error: trial {r['trial']} failed: {r['error']}", file=sys.stderr)
    if table and table[0]["status"] == "done":
        print(f"best: {table[0]['trial']}, weights {table[0]['weights']}")
    print(f"table: {csv_path}, {json_path}")
    if count["not run"]:
        print(f"vkgraph: sweep interrupted: {count['not run']} trials did not run",
              file=sys.stderr)
        return 130
    return 1 if count["error"] or not count["done"] else 0


def sigterm_as_sigint() -> None:
    """SIGTERM raises SIGINT: whatever handles Ctrl-C at that moment handles it (Tune's
    handler during the trials: it stops them and returns the results; else
    KeyboardInterrupt, exit 130)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: signal.raise_signal(signal.SIGINT))


def progress_lines(total: int):
    """A Tune callback that prints one line as each trial ends (Tune itself stays quiet)."""
    from ray import tune

    class Lines(tune.Callback):
        def __init__(self):
            self.ended = 0

        def _line(self, trial, what: str) -> None:
            self.ended += 1
            m = trial.last_result or {}
            parts = [f"frame {m['frame']}" if "frame" in m else None,
                     f"loss {m['loss']:.4g}" if isinstance(m.get("loss"), float) else None,
                     f"psnr {m['psnr']:.2f}" if isinstance(m.get("psnr"), float) else None,
                     f"{m['seconds']:.1f} s" if "seconds" in m else None,
                     m.get("device_uuid")]
            parts = [p for p in parts if p]
            print(f"sweep: [{self.ended}/{total}] {trial_name(trial)} {what}"
                  + (": " + ", ".join(parts) if parts else ""), file=sys.stderr, flush=True)

        def on_trial_complete(self, iteration, trials, trial, **info):
            self._line(trial, "done" if (trial.last_result or {}).get("complete")
                       else "stopped early")

        def on_trial_error(self, iteration, trials, trial, **info):
            self._line(trial, "failed")

    return Lines()
