"""Training sweeps on Ray Tune (`vkgraph sweep`): the search space, one trial, the table.

The search space is a JSON or YAML object. Each key names what a trial changes, in the syntax
of a cfg line without its value: `param:<module>:<instance>:<param>` or `frames`. Each value
is one of

    2000                          fixed: every trial gets it (a list is a multi-value param)
    {"grid": [0.001, 0.002]}      every value, crossed with the other grids
    {"choice": [0, 2]}            one value drawn per trial
    {"uniform": [0.5, 2.0]}       a float drawn uniformly from [a, b]
    {"loguniform": [1e-4, 1e-2]}  a float drawn log-uniformly from [a, b] (a > 0)
    {"randint": [4, 16]}          an integer drawn from a..b (both included)

Trials: every grid point, each `samples` times with fresh draws of the random dimensions
(Ray Tune's grid_search and num_samples). A trial applies its values as cfg lines after the
graph's own (`param:kpn-t:01:alpha:0.0031`), so a value is checked against the param's range
exactly as on a cfg line; `check` tries every grid and choice value and both ends of every
interval before anything runs.

A trial (`run_trial`, in a Ray worker) opens the Vulkan device of the GPU Ray gave it
(vkgraph/apps/distributed.py), trains the graph with its display modules dropped and its o-lut
writing into the sweep's weights folder, and reports to Tune every `report_every` frames:
`frame`, `loss` (the mean per-frame loss of the last report_every frames: the per-frame loss
is dominated by each frame's random noise draw) and `best_loss` (the lowest such mean so far).
Schedulers such as ASHA compare trials on `loss` at equal `frame`. At the end it reports the
weights path, the wall time, `complete` (what tells a finished trial from one a
scheduler stopped) and, with metric "psnr", the held-out PSNR (vkgraph/apps/heldout.py).
"""

from __future__ import annotations

import json
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..pipeline.cfg import MAX_FRAMES
from ..pipeline.constants import METRICS  # --metric: what ranks trials
from ..pipeline.errors import GraphError, clip
from ..pipeline.trainer import trainable_modules

KINDS = ("grid", "choice", "uniform", "loguniform", "randint")
SPACE_MAX = 1 << 20  # bytes of a space file


@dataclass
class Dim:
    """One key of the space: kind "fixed" (value), grid/choice (values), or an interval."""

    key: str
    kind: str
    values: list

    def probes(self) -> list:
        """The values `check` applies: every listed value, both ends of an interval."""
        return list(self.values)

    def tune(self):
        from ray import tune

        if self.kind == "fixed":
            return self.values[0]
        if self.kind == "grid":
            return tune.grid_search(list(self.values))
        if self.kind == "choice":
            return tune.choice(list(self.values))
        a, b = self.values
        if self.kind == "uniform":
            return tune.uniform(a, b)
        if self.kind == "loguniform":
            return tune.loguniform(a, b)
        return tune.randint(a, b + 1)  # Tune's upper bound is exclusive


def _number(value, where: str, integer: bool = False):
    """A number from JSON or YAML (YAML reads `1e-4` as text: convert it here)."""
    if isinstance(value, bool):
        raise GraphError(f"{where}: expected a number, got {value}")
    if isinstance(value, str):
        try:
            value = int(value) if integer else float(value)
        except ValueError:
            raise GraphError(f"{where}: expected a number, got '{clip(value, 40)}'") from None
    if integer and not (isinstance(value, int) or (isinstance(value, float)
                                                     and value.is_integer())):
        raise GraphError(f"{where}: expected an integer, got {value}")
    if not isinstance(value, int | float) or not math.isfinite(value):
        raise GraphError(f"{where}: expected a finite number, got {clip(str(value), 40)}")
    return int(value) if integer else float(value)


def _dim(key: str, spec, where: str) -> Dim:
    if spec is None:
        raise GraphError(f"{where}: no value")
    if not isinstance(spec, dict):
        return Dim(key, "fixed", [spec])
    if len(spec) != 1 or next(iter(spec)) not in KINDS:
        raise GraphError(f"{where}: expected one of {', '.join(KINDS)} (e.g. "
                         f"{{\"grid\": [1, 2]}}), got {clip(json.dumps(spec), 80)}")
    kind, arg = next(iter(spec.items()))
    if not isinstance(arg, list) or not arg:
        raise GraphError(f"{where}: {kind} takes a non-empty list")
    if kind in ("grid", "choice"):
        return Dim(key, kind, list(arg))
    if len(arg) != 2:
        raise GraphError(f"{where}: {kind} takes [a, b], got {len(arg)} values")
    a, b = (_number(v, f"{where}: {kind}", integer=kind == "randint") for v in arg)
    if a > b or (kind != "randint" and a == b):
        raise GraphError(f"{where}: {kind} [a, b] needs a {'<=' if kind == 'randint' else '<'}"
                         f" b, got [{a}, {b}]")
    if kind == "loguniform" and a <= 0:
        raise GraphError(f"{where}: loguniform [a, b] needs a > 0, got {a}")
    return Dim(key, kind, [a, b])


class Space:
    """The dimensions of a sweep, in the order of the file."""

    def __init__(self, dims: list[Dim], source: str = "space"):
        self.dims = dims
        self.source = source

    @classmethod
    def parse(cls, data, source: str = "space") -> Space:
        if not isinstance(data, dict) or not data:
            raise GraphError(f"{source}: expected an object of keys (e.g. "
                             "\"param:kpn-t:01:alpha\") and values")
        dims = []
        for key, spec in data.items():
            key = str(key)
            where = f"{source}: {clip(key, 80)}"
            fields = key.split(":")
            if key != "frames" and not (fields[0] == "param" and len(fields) == 4
                                        and all(fields[1:])):
                raise GraphError(f"{where}: a key is `param:<module>:<instance>:<param>` or "
                                 "`frames`")
            dims.append(_dim(key, spec, where))
        return cls(dims, source)

    @classmethod
    def load(cls, path: str | Path) -> Space:
        """A space from a .json, .yaml or .yml file."""
        from ..pipeline.formats import read_bounded

        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in (".json", ".yaml", ".yml"):
            raise GraphError(f"{path}: a space file is .json, .yaml or .yml")
        try:
            text = read_bounded(path, SPACE_MAX, "space file").decode()
        except UnicodeDecodeError:
            raise GraphError(f"{path}: not UTF-8 text") from None
        try:
            data = cls._decode(path, suffix, text)
        except RecursionError:  # json and yaml parse nested lists and objects recursively
            raise GraphError(f"{path}: nested too deeply (a space is an object of keys and "
                             "values; a value is a number, a list or {kind: [values]})") \
                from None
        return cls.parse(data, str(path))

    @staticmethod
    def _decode(path: Path, suffix: str, text: str):
        if suffix == ".json":
            try:
                return json.loads(text)
            except json.JSONDecodeError as e:
                raise GraphError(f"{path}:{e.lineno}: {e.msg}") from None
        else:
            try:
                import yaml
            except ImportError:
                raise GraphError(f"{path}: reading YAML needs PyYAML (pip install pyyaml, "
                                 "or give the space as JSON)") from None
            try:
                return yaml.safe_load(text)
            except yaml.YAMLError as e:
                mark = getattr(e, "problem_mark", None)
                line = f":{mark.line + 1}" if mark is not None else ""
                raise GraphError(f"{path}{line}: {' '.join(str(e).split())[:200]}") from None

    @property
    def keys(self) -> list[str]:
        return [d.key for d in self.dims]

    def dim(self, key: str) -> Dim | None:
        return next((d for d in self.dims if d.key == key), None)

    def trials(self, samples: int) -> int:
        """How many trials Tune runs: the grid's points times samples."""
        n = 1
        for d in self.dims:
            if d.kind == "grid":
                n *= len(d.values)
        return n * samples

    def frames(self, default: int) -> int:
        """The most frames a trial runs (ASHA's max_t)."""
        d = self.dim("frames")
        if d is None:
            return default
        return max(int(_number(v, f"{self.source}: frames", True)) for v in d.probes())

    def check(self, graph_path: Path) -> None:
        """Apply every probe value of every key to the graph: a bad key, module, param or
        value is a GraphError now, not in the middle of the sweep."""
        from ..pipeline.cfg import apply_line, read_cfg

        graph = read_cfg(graph_path)
        for d in self.dims:
            for value in d.probes():
                where = f"{self.source}: {d.key}"
                if d.key == "frames":
                    if not 1 <= _number(value, where, integer=True) <= MAX_FRAMES:
                        raise GraphError(f"{where}: frames must be 1..{MAX_FRAMES} (the frame "
                                         f"index is a GLSL int), got {clip(text(value), 40)}")
                    continue
                apply_line(graph, line(d.key, value), where)


def text(value) -> str:
    """A value as a cfg line writes it (lists as multi-value params)."""
    if isinstance(value, list | tuple):
        return ":".join(text(v) for v in value)
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, float | np.floating):
        value = float(value)
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    if isinstance(value, np.integer):
        return str(int(value))
    return str(value)


def line(key: str, value) -> str:
    return f"{key}:{text(value)}"


# ------------------------------------------------------------------------------------------
# one trial (runs in a Ray worker)


def prepare(graph, weights: Path):
    """Drop the displays, point the o-lut writers at `weights` (the first one; others get
    `<stem>-<instance>.lut` beside it) and return the trainable module (the one with a loss
    history); an o-lut is added for a trainable module whose weights nothing writes."""
    trainable = trainable_modules(graph.modules.values())
    if len(trainable) != 1:
        names = ", ".join(str(m) for m in trainable) or "none"
        raise GraphError(f"a sweep trains one trainable module (kpn-t, mlp-t); the graph "
                         f"has {names}")
    for m in [m for m in graph.modules.values() if m.name == "display"]:
        graph.remove_module("display", m.inst)
    luts = [m for m in graph.modules.values() if m.name == "o-lut"]
    if not luts and "w" in trainable[0].cls.connector_names():
        luts = [graph.add_module("o-lut", "sweep")]
        graph.connect(trainable[0].name, trainable[0].inst, "w", "o-lut", "sweep", "input")
    stem = weights.with_suffix("")
    for i, m in enumerate(luts):
        m.set_param("filename", str(stem) if i == 0 else f"{stem}-{m.inst}")
    return trainable[0]


def window_means(hist: np.ndarray, every: int) -> np.ndarray:
    """The mean loss of each whole window of `every` frames (nan-aware: a skipped update's
    non-finite loss does not poison its window)."""
    n = len(hist) // every
    if n == 0:
        return np.empty(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-nan window stays nan
        return np.nanmean(hist[:n * every].reshape(n, every), axis=1)


def run_trial(config: dict, spec: dict) -> None:
    """Train one configuration and report it to Ray Tune (the function Tune runs).

    spec: graph (absolute cfg path), weights (folder), frames (the default frame count),
    report_every, metric, eval_crop."""
    from ray import tune

    from ..api import run_graph
    from ..pipeline.cfg import apply_line, read_cfg
    from .distributed import open_worker_device

    t0 = time.perf_counter()
    name = tune.get_context().get_trial_name()
    every = int(spec["report_every"])
    graph = read_cfg(spec["graph"])
    for key, value in config.items():
        if key != "frames":
            apply_line(graph, line(key, value), f"trial {name}: {key}")
    frames = int(config.get("frames", spec["frames"] or graph.frames))
    weights = Path(spec["weights"]) / f"{name}.lut"
    module = prepare(graph, weights)
    device, _ = open_worker_device()
    # the Vulkan device's UUID: on NVIDIA the GPU's (nvidia-smi's, after "GPU-")
    info = {"device": device.info.name, "device_uuid": device.info.uuid}
    best = math.inf
    try:
        losses = module.cls.hook("losses")

        def progress(build, f):
            nonlocal best
            if (f + 1) % every or f + 1 == frames:
                return  # the last frame is reported once the run is over
            loss = float(window_means(losses(build.context, module)[f + 1 - every:], every)[0])
            best = min(best, loss) if math.isfinite(loss) else best
            tune.report({"frame": f + 1, "loss": loss, "best_loss": best, **info})

        build = run_graph(graph, device, frames=frames, last_frame_only=True,
                          progress=progress)
        hist = losses(build.context, module)
        tail = hist[-min(every, len(hist)):]
        loss = float(window_means(tail, len(tail))[0])
        best = min([best, loss, *window_means(hist, every)], key=lambda v: (
            not math.isfinite(v), v))
        final = {"frame": frames, "loss": loss, "best_loss": best, **info,
                 "train_s": round(build.seconds, 3)}
        if spec.get("metric") == "psnr":
            from .heldout import evaluate

            final.update({f"psnr{'' if k == 'psnr' else '_' + k}": v
                          for k, v in evaluate(device, weights, spec.get("eval_crop")).items()
                          if k != "per_level"})
    finally:
        device.close()
    final.update(weights=str(weights), seconds=round(time.perf_counter() - t0, 3), complete=True)
    tune.report(final)


# ------------------------------------------------------------------------------------------
# the table


def rows(results, keys: list[str], metric: str) -> list[dict]:
    """One row per trial from Tune's results (ray.tune.ResultGrid), best first: finished
    trials ranked by `metric`, then those a scheduler stopped (by the same metric at the
    frame they reached), then failed ones, then those that never ran (an interrupted
    sweep)."""
    out = []
    for r in results:
        m = dict(r.metrics or {})
        name = Path(r.path).name if r.path else m.get("trial_id", "?")
        # stopped: a scheduler ended it after some reports; not run: the sweep was
        # interrupted before it started
        status = ("error" if r.error else "done" if m.get("complete")
                  else "stopped" if "frame" in m else "not run")
        row = {"trial": name, "status": status}
        row.update({k: (r.config or {}).get(k) for k in keys})
        for k in ("frame", "loss", "best_loss", "psnr", "psnr_gain", "train_s", "seconds",
                  "device", "device_uuid", "weights"):
            row[k] = m.get(k)
        if row["weights"] and not Path(row["weights"]).is_file():
            row["weights"] = None
        row["error"] = error_line(r.error) if r.error else None
        out.append(row)
    sign = -1.0 if METRICS[metric] == "max" else 1.0

    def rank(row):
        value = row.get(metric)
        ok = isinstance(value, int | float) and math.isfinite(value)
        return ({"done": 0, "stopped": 1, "error": 2}.get(row["status"], 3), not ok,
                sign * value if ok else 0.0, row["trial"])

    return sorted(out, key=rank)


def error_line(error) -> str:
    """The last line of a trial's error (Ray's text holds the worker's traceback before it),
    with the exception's class named without its module."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    last = lines[-1] if lines else type(error).__name__
    kind, sep, msg = last.partition(": ")
    if sep and kind.endswith(("Error", "Exception", "Failure")) and " " not in kind:
        last = f"{kind.rsplit('.', 1)[-1]}: {msg}"
    return clip(last, 300)


def write_tables(folder: Path, rows_: list[dict], meta: dict) -> tuple[Path, Path]:
    """sweep.csv (one row per trial) and sweep.json ({meta..., "trials": rows}), atomically."""
    import csv
    import io

    from ..pipeline.formats import atomic_write

    folder.mkdir(parents=True, exist_ok=True)
    columns = list(rows_[0]) if rows_ else ["trial", "status"]
    buf = io.StringIO()
    w = csv.DictWriter(buf, columns, lineterminator="\n")
    w.writeheader()
    for r in rows_:
        w.writerow({k: ("" if v is None else text(v) if isinstance(v, list) else v)
                    for k, v in r.items()})
    csv_path, json_path = folder / "sweep.csv", folder / "sweep.json"
    atomic_write(csv_path, buf.getvalue().encode())
    atomic_write(json_path, (json.dumps({**meta, "trials": rows_}, indent=1,
                                        default=float) + "\n").encode())
    return csv_path, json_path
