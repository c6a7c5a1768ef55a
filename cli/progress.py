"""Progress bar and end-of-run summaries for `vkgraph cli`.

A trainable module reports through two optional hooks: `stats(graph, module) -> dict` (e.g.
{"loss": 0.1}, shown in the progress bar) and `summary(graph, module) -> str` (one line at the
end, e.g. `kpn-t:01: 300 frames, first loss 0.4123, loss 0.1021, best 0.0987, 12.3 frames/s`).
"""

from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger("vkgraph")
HEARTBEAT_S = 10.0  # without the bar: a line this often (a long run shows it is alive)


class Progress:
    """The bar (`enabled`), else a heartbeat line every `heartbeat` seconds of the run (frame,
    frames/s and the trainable's stats), logged so that `-q` silences it."""

    def __init__(self, enabled: bool, heartbeat: float | None = None):
        self.enabled = enabled
        self.bar = None
        self.t_last = 0.0
        self.heartbeat = HEARTBEAT_S if heartbeat is None else heartbeat
        self.t_start = time.perf_counter()
        self.t_beat = self.t_start + self.heartbeat

    def update(self, build, frame: int) -> None:
        if not self.enabled:
            self._beat(build, frame)
            return
        if self.bar is None:
            from tqdm import tqdm
            self.bar = tqdm(total=build.frames, initial=getattr(build, "first_frame", 0),
                            unit="frame", file=sys.stderr, dynamic_ncols=True, desc="frames")
        self.bar.update(1)
        now = time.perf_counter()
        if now - self.t_last > 0.2 or frame == build.frames - 1:
            self.t_last = now
            post = stats(build)
            if post:
                self.bar.set_postfix(post, refresh=False)

    def _beat(self, build, frame: int) -> None:
        now = time.perf_counter()
        if now < self.t_beat or frame >= build.frames - 1:
            return
        self.t_beat = now + self.heartbeat
        done = frame + 1 - getattr(build, "first_frame", 0)
        post = "".join(f", {k} {v}" for k, v in stats(build).items())
        log.info("frame %d of %d, %.3g frames/s%s", frame + 1, build.frames,
                 done / max(now - self.t_start, 1e-9), post)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def stats(build) -> dict:
    """The `stats` hooks' values of the active modules, formatted."""
    post = {}
    for m in build.active:
        hook = m.cls.hook("stats")
        if hook:
            post.update({k: (f"{v:.4g}" if isinstance(v, float) else v)
                         for k, v in hook(build.context, m).items()})
    return post


def summaries(build) -> list[str]:
    out = []
    for m in build.active:
        hook = m.cls.hook("summary")
        if hook:
            line = hook(build.context, m)
            if line:
                out.append(line)
    return out


def print_profile(build) -> None:
    rows = build.timings()
    total = sum(ms for _, ms in rows) or 1.0
    print(f"{'node':40s} {'ms':>9s} {'%':>6s}")
    for label, ms in rows:
        print(f"{label:40s} {ms:9.3f} {100 * ms / total:6.1f}")
    print(f"{'total':40s} {total:9.3f}")
    print(f"{'first start to last end':40s} {build.gpu_span():9.3f}  (nodes without a barrier "
          "between them overlap)")
