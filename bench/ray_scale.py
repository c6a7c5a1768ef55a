"""Ray across GPUs: a sweep of short photo-recipe trainings and the denoise of a photo
collection, each on all the machine's GPUs and on one, with every GPU's busy share.

    python bench/ray_scale.py [--gpus N] [--frames 2000] [--metric psnr|loss] [--copies 2]
                              [--mirror 2] [--keep DIR] [--json OUT]

* sweep: `vkgraph sweep -g graphs/train-photo.cfg --frames F` over 8 trials (alpha 0.002 /
  0.004 x schedule 0 / 1 x loss 1 (L2) / 2 (L1)), FIFO, one GPU a trial; the per-trial wall
  time and the UUID of the Vulkan device each trial ran on come from its sweep.json.
* denoise: `vkgraph denoise --ray --outdir ...` over a collection written to a temporary
  folder: every held-out photograph (scikit-image's) at each of the three noise levels, as
  EXR and as 8-bit PNG, mirrored to 2x2 its size (--mirror), `--copies` times each under
  other names (2: 48 files, 47 megapixels).

Each runs as its own command with a local Ray instance of N GPUs (`--num-gpus`), then of 1.
A thread samples `nvidia-smi --query-gpu=index,uuid,utilization.gpu` every 0.2 s while a
command runs; a GPU's busy share is its mean utilisation over the run (nvidia-smi's
utilisation: the share of the sample period in which a kernel ran). The wall time is the
command's, Ray start-up included. Needs `vkgraph[ray]` and NVIDIA GPUs (nvidia-smi).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vkgraph.apps import heldout  # noqa: E402
from vkgraph.apps.distributed import parse_smi  # noqa: E402
from vkgraph.pipeline.vk.device import uuid_key  # noqa: E402

SPACE = {"param:kpn-t:01:alpha": {"grid": [0.002, 0.004]},
         "param:kpn-t:01:schedule": {"grid": [0, 1]},
         "param:kpn-t:01:loss": {"grid": [1, 2]}}


class Sampler:
    """nvidia-smi's utilisation of every GPU, sampled in a thread: {uuid: [percent, ...]}."""

    QUERY = ["nvidia-smi", "--query-gpu=index,uuid,utilization.gpu",
             "--format=csv,noheader,nounits"]

    def __init__(self, period: float = 0.2):
        self.period = period
        self.samples: dict[str, list[float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            res = subprocess.run(self.QUERY, capture_output=True, text=True, check=False)
            for line in res.stdout.splitlines():
                parts = [p.strip() for p in line.split(",")]
                if len(parts) == 3 and parts[2].isdigit():
                    self.samples.setdefault(parts[1], []).append(float(parts[2]))
            self._stop.wait(self.period)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def busy(self) -> dict[str, float]:
        return {u: float(np.mean(v)) for u, v in self.samples.items() if v}


def vkgraph(args: list[str]) -> tuple[float, dict[str, float], str]:
    """Run `python -m vkgraph ARGS`; (wall seconds, {gpu uuid: busy %}, stdout)."""
    t0 = time.perf_counter()
    with Sampler() as s:
        res = subprocess.run([sys.executable, "-m", "vkgraph", *args], capture_output=True,
                             text=True, check=False)
    wall = time.perf_counter() - t0
    print(f"ray_scale.py: vkgraph {' '.join(args[:1])} {' '.join(args[-2:])}: {wall:.1f} s, "
          f"busy % {s.busy()}", file=sys.stderr, flush=True)  # survives a time limit
    if res.returncode != 0:
        sys.stderr.write(res.stdout[-3000:] + res.stderr[-3000:])
        raise SystemExit(f"ray_scale.py: vkgraph {' '.join(args[:2])} ... failed "
                         f"(exit {res.returncode})")
    return wall, s.busy(), res.stdout


def write_collection(folder: Path, copies: int, mirror: int) -> list[Path]:
    """The held-out photographs at every noise level as EXR and PNG, mirrored to
    mirror x mirror their size (1: as they are, 2: 2x2)."""
    from vkgraph.pipeline.formats import write_exr, write_png

    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for path in heldout.photos():
        clean = heldout.load_clean(path)
        big = clean
        for _ in range(mirror - 1):
            big = np.concatenate([big, clean[:, ::-1]], axis=1)
        row = big
        for _ in range(mirror - 1):
            big = np.concatenate([big, row[::-1]], axis=0)
        for li, (level, a, b) in enumerate(heldout.LEVELS):
            noisy = heldout.add_noise(big, a, b, heldout.seed_of(li))
            for c in range(copies):
                for ext, write in ((".exr", write_exr), (".png", write_png)):
                    out = folder / f"{path.stem}-{level}-{c}{ext}"
                    write(out, noisy)
                    files.append(out)
    return files


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, help="GPUs of the many-GPU runs (default: all)")
    ap.add_argument("--cfg", type=Path, default=ROOT / "graphs" / "train-photo.cfg",
                    help="the training graph of the sweep")
    ap.add_argument("--frames", type=int, default=2000, help="frames of each sweep trial")
    ap.add_argument("--metric", choices=("psnr", "loss"), default="psnr",
                    help="what the sweep ranks by (psnr: held-out PSNR, needs scikit-image)")
    ap.add_argument("--copies", type=int, default=2,
                    help="copies of each denoise input (4 photos x 3 levels x 2 formats each)")
    ap.add_argument("--mirror", type=int, default=2,
                    help="denoise inputs are the photos mirrored to NxN their size")
    ap.add_argument("--keep", type=Path, help="keep the sweeps' folders here")
    ap.add_argument("--json", type=Path, help="write every number here")
    args = ap.parse_args()
    smi = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                         capture_output=True, text=True, check=False)
    table = parse_smi(smi.stdout) if smi.returncode == 0 else {}
    if not table:
        raise SystemExit("ray_scale.py: no NVIDIA GPUs (nvidia-smi)")
    many = args.gpus or len(table)
    counts = [many, 1] if many > 1 else [1]
    rows, trials = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        space = tmp / "space.json"
        space.write_text(json.dumps(SPACE))
        photos = write_collection(tmp / "photos", args.copies, args.mirror)
        pixels = sum(np.prod(heldout.load_clean(p).shape[:2]) * args.mirror ** 2
                      for p in heldout.photos())
        mpix = pixels * len(heldout.LEVELS) * 2 * args.copies / 1e6
        for n in counts:
            out = (args.keep or tmp) / f"sweep-{n}gpu"
            wall, busy, _ = vkgraph(["sweep", "-g", str(args.cfg),
                                     "--space", str(space), "--frames", str(args.frames),
                                     "--metric", args.metric, "--num-gpus", str(n),
                                     "--out", str(out)])
            result = json.loads((out / "sweep.json").read_text())
            trials[n] = result["trials"]
            used = {t["device_uuid"] for t in result["trials"]}
            rows.append({"workload": f"sweep: 8 trials x {args.frames} frames", "gpus": n,
                         "wall_s": wall, "busy": busy, "devices_used": sorted(used),
                         "sum_trial_s": sum(t["seconds"] or 0 for t in result["trials"])})
            wall, busy, _ = vkgraph(["denoise", *map(str, photos), "--outdir",
                                     str(tmp / f"out-{n}gpu"), "--ray", "--num-gpus", str(n)])
            rows.append({"workload": f"denoise: {len(photos)} files, {mpix:.0f} Mpixel",
                         "gpus": n, "wall_s": wall, "busy": busy})
    uuids = [table[i] for i in sorted(table)]
    for n, ts in trials.items():
        print(f"\nsweep on {n} GPU(s): per trial (best first by {args.metric})")
        print("| trial | alpha | schedule | loss fn | loss | psnr | trial s | device uuid |")
        print("|---|---|---|---|---|---|---|---|")
        for t in ts:
            psnr = f"{t['psnr']:.2f}" if t.get("psnr") is not None else "-"
            loss = f"{t['loss']:.4g}" if t.get("loss") is not None else "-"
            print(f"| {t['trial']} | {t['param:kpn-t:01:alpha']} | "
                  f"{t['param:kpn-t:01:schedule']} | {t['param:kpn-t:01:loss']} | {loss} | "
                  f"{psnr} | {t['seconds'] or 0:.1f} | {t['device_uuid']} |")
    print(f"\nRay across {many} GPUs against 1 (wall time of the whole command, Ray start-up "
          "included; busy: mean nvidia-smi utilisation of each GPU during the run)")
    print("| workload | GPUs | wall s | speed-up | " + " | ".join(
        f"GPU {i} busy %" for i in sorted(table)) + " |")
    print("|---|---|---|---|" + "---|" * len(table))
    for r in rows:
        one = next(x["wall_s"] for x in rows if x["workload"] == r["workload"]
                   and x["gpus"] == 1)
        print(f"| {r['workload']} | {r['gpus']} | {r['wall_s']:.1f} | {one / r['wall_s']:.2f}x"
              " | " + " | ".join(f"{r['busy'].get(u, float('nan')):.0f}" for u in uuids)
              + " |")
    for r in rows:
        if "devices_used" in r:
            match = [u for u in r["devices_used"] if uuid_key(u) in map(uuid_key, uuids)]
            print(f"sweep on {r['gpus']} GPU(s): trials ran on {len(r['devices_used'])} "
                  f"distinct Vulkan devices, {len(match)} of them nvidia-smi GPUs; sum of "
                  f"trial times {r['sum_trial_s']:.1f} s")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "trials": trials, "gpus": table},
                                        indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
