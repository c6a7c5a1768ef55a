"""Reliability of the command line against a hostile environment and hostile input: a full
disk under the shader cache, no Vulkan loader, bad values for `denoise`, `sweep` spaces
and signals, broken user modules, long and non-UTF-8 names, and small usage mistakes. Each
case ends in one line on stderr and the documented exit status (0 ok, 1 runtime failure,
2 usage or graph error), never an internal error."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import VKGRAPH, vkgraph_env

ROOT = Path(__file__).resolve().parent.parent


def run_vkgraph(*args: str, cwd: Path | None = None, env: dict | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess:
    """`vkgraph ARGS` as a subprocess (for what must not touch this process: imports,
    signals, the environment)."""
    return subprocess.run([*VKGRAPH, *args], capture_output=True, text=True, cwd=cwd,
                          env=vkgraph_env(env), timeout=timeout)


def one_line(res, rc: int) -> str:
    """The single stderr line of a failed command with exit status `rc`."""
    lines = res.stderr.strip().splitlines()
    assert res.returncode == rc, f"exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    assert len(lines) == 1 and "internal error" not in lines[0], res.stderr
    return lines[0]


# -- no Vulkan loader ---------------------------------------------------------------------

@pytest.fixture
def no_loader(tmp_path):
    """An environment whose `import vulkan` raises OSError, as the package does on a machine
    without libvulkan."""
    fake = tmp_path / "fakevk" / "vulkan"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise OSError("Cannot find Vulkan SDK version")\n')
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = str(fake.parent)
    return env


@pytest.mark.parametrize("args", [("devices",), ("cli", "-g", "fit-image.cfg")])
def test_no_vulkan_loader_is_one_line(no_loader, tmp_path, args):
    line = one_line(run_vkgraph(*args, cwd=tmp_path, env=no_loader), 1)
    assert "no Vulkan loader: install libvulkan1" in line
    assert "mesa-vulkan-drivers" in line


def test_shaders_check_needs_no_loader(no_loader, tmp_path):
    res = run_vkgraph("shaders", "--check", cwd=tmp_path, env=no_loader, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "kernel variants compile" in res.stdout
