"""Shared test fixtures: one Vulkan device per test session (pipeline.testing's, closed at
the end), a helper to
build a graph from cfg lines, and `vkgraph` as a subprocess or in this process."""

from __future__ import annotations

import io
import os
import signal
import sys
from contextlib import contextmanager, nullcontext, redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from vkgraph.pipeline.cfg import apply_line
from vkgraph.pipeline.graph import Graph

# The suite tests the portable fp32 kpn-t kernels against fp32 tolerances, also on a GPU where
# the default would be the fused f16 ones; tests/test_kpn_coopmat.py picks its variants itself.
os.environ.setdefault("VKGRAPH_KPN_MLP", "portable")
# likewise mlp-t's fp32 kernels (tests/test_mlp_coopmat.py picks the coopmat one itself)
os.environ.setdefault("VKGRAPH_MLP", "portable")
# and unet's fp32 layer kernels (tests/test_unet_coopmat.py picks the coopmat ones itself)
os.environ.setdefault("VKGRAPH_UNET_KERNELS", "portable")

ROOT = Path(__file__).resolve().parent.parent


def load_script(rel: str, name: str):
    """A script of the repository that is not in a package (bench/*.py, a module's
    module.py or reference.py, graphs/images/make_scene.py), as module `name` (registered in
    sys.modules, so that its dataclasses and pickles resolve)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / rel)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


# a small training graph: x.pfm -> cnngenin -> kpn-t (2 levels) -> o-lut "w" and display
TINY_KPN_LINES = """module:i-pfm:main
module:cnngenin:01
module:kpn-t:01
module:o-lut:w
module:display:main
connect:i-pfm:main:output:cnngenin:01:imgi
connect:i-pfm:main:output:cnngenin:01:refi
connect:cnngenin:01:imgo:kpn-t:01:input
connect:cnngenin:01:refo:kpn-t:01:ref
connect:cnngenin:01:noiseab:kpn-t:01:noiseab
connect:kpn-t:01:w:o-lut:w:input
connect:kpn-t:01:output:display:main:input
param:i-pfm:main:filename:x.pfm
param:cnngenin:01:generate:2
param:cnngenin:01:tiles:0
param:kpn-t:01:levels:2
param:kpn-t:01:init:1
param:o-lut:w:filename:w"""


@pytest.fixture(scope="session")
def device():
    from vkgraph.pipeline.testing import session_device

    dev = session_device()  # the device pipeline.testing.dispatch runs on, too
    yield dev
    dev.close()


def graph_from_lines(text: str, registry=None) -> Graph:
    """A module graph from cfg lines (one per line), as `vkgraph cli --config` applies them."""
    g = Graph(registry=registry) if registry is not None else Graph()
    for i, line in enumerate(text.strip().splitlines(), 1):
        apply_line(g, line.strip(), f"test:{i}")
    return g


def noisy_training_graph(tmp_path, R, trainer: str, lut: str, extra: str = "") -> Graph:
    """R (written as r.pfm) -> cnngenin's synthetic noise (generate 2, noise 0.05) -> the
    trainer module `trainer` (kpn-t or unet-t, instance 01, from scratch: init 1) -> o-lut
    writing tmp_path / `lut`; `extra`: more cfg lines (cnngenin's grid, the trainer's params;
    later lines win)."""
    from vkgraph.pipeline.formats import write_pfm

    write_pfm(tmp_path / "r.pfm", R)
    return graph_from_lines(f"""
        module:i-pfm:ref
        module:cnngenin:01
        module:{trainer}:01
        module:o-lut:w
        param:i-pfm:ref:filename:{tmp_path / 'r.pfm'}
        param:cnngenin:01:generate:2
        param:cnngenin:01:noise:0.05
        connect:i-pfm:ref:output:cnngenin:01:imgi
        connect:i-pfm:ref:output:cnngenin:01:refi
        connect:cnngenin:01:imgo:{trainer}:01:input
        connect:cnngenin:01:refo:{trainer}:01:ref
        connect:cnngenin:01:noiseab:{trainer}:01:noiseab
        connect:{trainer}:01:w:o-lut:w:input
        param:o-lut:w:filename:{tmp_path / lut}
        param:{trainer}:01:init:1
        {extra}""")


ROOT = Path(__file__).resolve().parent.parent
# `vkgraph` as a subprocess: the module, so tests need no console script on PATH
VKGRAPH = [sys.executable, "-m", "vkgraph"]


CPU_DRIVER = "llvmpipe"  # the name lavapipe's device has (VKGRAPH_DEVICE picks it by it)


def has_cpu_driver() -> bool:
    """Whether this machine has the CPU driver among its Vulkan devices (beside a GPU or not)."""
    from vkgraph.pipeline.vk import list_devices

    return any(CPU_DRIVER in d.name for d in list_devices())


def vkgraph_env(env: dict | None = None) -> dict:
    """An environment in which `python -m vkgraph` finds the package from any directory."""
    out = dict(os.environ if env is None else env)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), out.get("PYTHONPATH")) if p)
    return out


class Hang(BaseException):
    """Raised by the alarm: a BaseException, so main()'s error handling cannot swallow it."""


@contextmanager
def time_limit(seconds: float):
    def alarm(signum, frame):
        raise Hang(f"no result after {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def sigterm_when_ready(proc, wait) -> tuple[str, str]:
    """SIGTERM to the running `proc` once wait() returns, then its (stdout, stderr) within
    120 s; a process still running after that (or after a failed wait) is killed."""
    try:
        wait()
        proc.send_signal(signal.SIGTERM)
        return proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def vkgraph(cwd: Path, *args: str, quiet: bool = False,
            limit_s: float | None = None) -> tuple[int, str, str]:
    """`vkgraph [-q] cli ARGS` in this process (vkgraph.cli.main.main, much faster than a
    subprocess), in `cwd`: (exit status, stdout, stderr). `limit_s` ends a run that takes
    longer with Hang."""
    from vkgraph.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    limit = nullcontext() if limit_s is None else time_limit(limit_s)
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with redirect_stdout(out), redirect_stderr(err), limit:
            rc = main(["-q", "cli", *args] if quiet else ["cli", *args])
    finally:
        os.chdir(old)
    return rc, out.getvalue(), err.getvalue()
