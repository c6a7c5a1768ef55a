"""The wheel works anywhere: built from a copy of the repository, installed (not editable) in
a fresh virtualenv, and run from a folder outside the repository: --version, modules,
shaders --check, a shipped graph, a graph using a module from a --modules folder, denoise
with the shipped weights, every file the shipped graphs read, and (slow) every shipped
graph. Offline: the wheel is built without build isolation and installed without
dependencies; the new venv sees this environment's packages (numpy, vulkan, glslang)
through a .pth line, which adds the folder but runs none of its .pth files, so this
checkout's editable install stays invisible there."""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import numpy as np
import pytest

from vkgraph.pipeline.formats import read_image, read_pfm, write_pfm, write_png

ROOT = Path(__file__).resolve().parent.parent
SKIP = {".venv", ".git", "build", "dist", "__pycache__", ".pytest_cache", ".ruff_cache",
        "results", "out"}

# a module of one's own, as README "Adding a module" describes it (kernel in shaders/<name>/)
USER_MODULE = {
    "bright/connectors": "input:read:rgba:*\noutput:write:rgba:f32\n",
    "bright/params": "gain:float:1:2.0\n",
    "bright/ranges": "gain:0:inf\n",
    "bright/README.md": "# bright\n\nMultiplies rgb by `gain`.\n",
    "shaders/bright/main.comp": """#version 460
#extension GL_GOOGLE_include_directive : enable
#include "vkgraph.glsl"

#include "params.gen"
IMG_IN(0, img_in)
IMG_OUT(1, img_out)

void main() {
  ivec2 p = ivec2(gl_GlobalInvocationID.xy);
  if (!inside(1, p)) return;
  vec4 c = img_in[texel(0, p)];
  img_out[p.x + p.y * node.roi[1].x] = vec4(c.rgb * params.gain, c.a);
}
""",
}

USER_GRAPH = """module:i-pfm:main
module:bright:01
module:o-pfm:main
connect:i-pfm:main:output:bright:01:input
connect:bright:01:output:o-pfm:main:input
param:i-pfm:main:filename:in.pfm
param:bright:01:gain:3
param:o-pfm:main:filename:out
"""


def write_user_module(folder: Path) -> None:
    for name, text in USER_MODULE.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def image(h: int = 24, w: int = 32) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([x / w, y / h, (x + y) % 7 / 7.0, np.ones_like(x)], -1)
    return (0.25 * img).astype(np.float32)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv bin folder, the wheel) with vkgraph installed from a freshly built wheel."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=lambda d, names: [
        n for n in names if n in SKIP or n.endswith((".egg-info", ".pyc"))])
    dist = tmp / "dist"
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation",
                          "--no-deps", "--no-index", "-w", str(dist), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    wheel = next(dist.glob("vkgraph-*.whl"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    py = venv / "bin" / "python"
    res = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q",
                          "--no-deps", "--no-index", str(wheel)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    # this environment's package folders: its own, and those its .pth files add (a venv
    # layered on a shared one), but not the checkout an editable install points at
    here = [sysconfig.get_paths()["purelib"]] + [
        p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    (Path(site.stdout.strip()) / "_test_deps.pth").write_text(
        "".join(f"{p}\n" for p in dict.fromkeys(here)))
    return venv / "bin", wheel


def outside(env: dict | None = None) -> dict:
    """The environment without this checkout on PYTHONPATH (where a machine puts the project
    there, e.g. the GPU runner, the installed copy must still be the one imported)."""
    env = dict(os.environ if env is None else env)
    keep = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
            if p and Path(p).resolve() != ROOT.resolve()]
    env["PYTHONPATH"] = os.pathsep.join(keep)
    return env


def run(bin_dir: Path, cwd: Path, *args: str, env: dict | None = None):
    return subprocess.run([str(bin_dir / "vkgraph"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env=outside(env))


def test_wheel_claims_one_name_and_carries_the_data(installed):
    _, wheel = installed
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"vkgraph", wheel.name.split("-py3")[0] + ".dist-info"}, tops
    for need in ("vkgraph/modules/kpn-t/connectors", "vkgraph/modules/kpn/module.py",
                 "vkgraph/shaders/include/vkgraph.glsl", "vkgraph/shaders/kpn-t/fwd.comp",
                 "vkgraph/graphs/train-kpn.cfg", "vkgraph/graphs/images/scene.pfm",
                 "vkgraph/graphs/photos/train.txt", "vkgraph/graphs/weights/kpn-photo.lut",
                 "vkgraph/pipeline/hostmods/i-array/connectors", "vkgraph/cli/main.py"):
        assert need in names, need
    assert not any("__pycache__" in n for n in names)


def test_installed_command_runs_from_anywhere(installed, tmp_path):
    bin_dir, _ = installed
    where = subprocess.run([str(bin_dir / "python"), "-c", "import vkgraph; "
                            "print(vkgraph.__file__)"], cwd=tmp_path, capture_output=True,
                           text=True, check=True, env=outside()).stdout
    assert where.startswith(str(bin_dir.parent)), where  # the installed copy, not this one

    res = run(bin_dir, tmp_path, "--version")
    assert res.returncode == 0 and res.stdout.startswith("vkgraph 0."), res.stderr

    res = run(bin_dir, tmp_path, "modules")
    assert res.returncode == 0, res.stderr
    listed = {line.split()[0] for line in res.stdout.splitlines()}
    assert {"i-pfm", "kpn-t", "kpn", "o-lut", "cnngenin"} <= listed

    res = run(bin_dir, tmp_path, "shaders", "--check")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith("kernel variants compile")

    # a shipped graph, by bare name (found among the shipped graphs) and by path
    res = run(bin_dir, tmp_path, "-q", "cli", "-g", "train-kpn.cfg", "--frames", "2",
              "--last-frame-only", "--format", "o-pfm", "--filename", "out")
    assert res.returncode == 0, res.stderr
    assert "kpn-t:01: 2 frames" in res.stdout
    assert (tmp_path / "mlp-w.lut").is_file() and (tmp_path / "out.pfm").is_file()

    # denoise with the shipped weights
    write_png(tmp_path / "x.png", image(32, 32)[..., :3])
    res = run(bin_dir, tmp_path, "-q", "denoise", "x.png", "--noise", "1e6", "100")
    assert res.returncode == 0, res.stderr
    assert read_image(tmp_path / "x-denoised.png").shape[:2] == (32, 32)


def test_installed_command_runs_a_user_module(installed, tmp_path):
    bin_dir, _ = installed
    mods = tmp_path / "mods"
    write_user_module(mods)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    img = image()
    write_pfm(run_dir / "in.pfm", img[..., :3])
    (run_dir / "g.cfg").write_text(USER_GRAPH)
    res = run(bin_dir, run_dir, "--modules", str(mods), "cli", "-g", "g.cfg")
    assert res.returncode == 0, res.stderr
    out = read_pfm(run_dir / "out.pfm")
    np.testing.assert_allclose(out[..., :3], 3 * img[..., :3], rtol=1e-6)

    # the same folder through $VKGRAPH_MODULES; the module is listed and compiles
    env = {**os.environ, "VKGRAPH_MODULES": str(mods)}
    res = run(bin_dir, run_dir, "modules", "bright", env=env)
    assert res.returncode == 0 and "gain:float:1:2.0" in res.stdout, res.stderr
    res = run(bin_dir, run_dir, "shaders", "--check", env=env)
    assert res.returncode == 0, res.stderr
    (run_dir / "out.pfm").unlink()
    res = run(bin_dir, run_dir, "-q", "cli", "-g", "g.cfg", env=env)
    assert res.returncode == 0 and (run_dir / "out.pfm").is_file(), res.stderr

    # without the folder the module is unknown: exit 2, one line
    res = run(bin_dir, run_dir, "cli", "-g", "g.cfg")
    assert res.returncode == 2 and "unknown module 'bright'" in res.stderr


# ------------------------------------------------------------------------------------------
# every shipped graph from the installed wheel

SOURCE = re.compile(r"^param:(i-[a-z]+):[^:]+:filename:(.+)$", re.M)
WRITTEN = re.compile(r"^param:o-lut:[^:]+:filename:(.+)$", re.M)
# --config overrides that make a graph a few seconds on the CPU driver; each runs 2 frames
TINY = {"fit-*": ["param:mlp-t:01:batch:256"],
        "gradcheck-mlp": ["param:mlp-t:01:batch:256"],
        "train-photo": ["param:cnngenin:01:batch:2", "param:cnngenin:01:tile:32"],
        "train-camera": ["param:cnngenin:01:batch:2", "param:cnngenin:01:tile:32"],
        "train-photo-ctx": ["param:cnngenin:01:batch:2", "param:cnngenin:01:tile:32"],
        "train-jpeg-ctx": ["param:cnngenin:01:batch:2", "param:cnngenin:01:tile:32"],
        "train-photo-nl": ["param:cnngenin:01:batch:2", "param:cnngenin:01:tile:32"],
        "train-jpeg-nl": ["param:cnngenin:01:batch:2", "param:cnngenin:01:tile:32"],
        "train-unet*": ["param:cnngenin:01:batch:2", "param:cnngenin:01:tile:32",
                        "param:unet-t:01:width:4"],
        "train-raw": ["param:cnngenin:01:batch:2", "param:cnngenin:01:tile:32",
                      "param:unet-t:01:width:4"]}


def installed_graphs(bin_dir: Path) -> Path:
    """The installed package's graphs/ (asked from outside the tree, so not this one's)."""
    where = subprocess.run([str(bin_dir / "python"), "-c", "import vkgraph; "
                            "print(vkgraph.DATA / 'graphs')"], cwd=bin_dir,
                           capture_output=True, text=True, check=True, env=outside())
    graphs = Path(where.stdout.strip())
    assert graphs.is_relative_to(bin_dir.parent), graphs
    return graphs


def test_wheel_carries_every_file_a_graph_reads(installed):
    """Each file a shipped graph's source modules name (and each file of an i-set list) is
    in the installed package, beside the cfg as the graph names it; files another shipped
    graph writes (continue-kpn reads train-kpn's mlp-w.lut) and pkg: names aside."""
    graphs = installed_graphs(installed[0])
    cfgs = sorted(graphs.glob("*.cfg"))
    assert {p.name for p in cfgs} == {p.name for p in (ROOT / "graphs").glob("*.cfg")}
    written = {f"{m}.lut" for p in cfgs for m in WRITTEN.findall(p.read_text())}
    missing = []
    for cfg in cfgs:
        for module, name in SOURCE.findall(cfg.read_text()):
            if name.startswith("pkg:") or name in written:
                continue
            path = cfg.parent / name
            if not path.is_file():
                missing.append(f"{cfg.name}: {module} {name}")
            elif module == "i-set":
                for line in path.read_text().splitlines():
                    entry = line.strip()
                    if entry and not entry.startswith(("#", "pkg:")) and \
                            not (path.parent / entry).is_file():
                        missing.append(f"{cfg.name}: {name}: {entry}")
    assert not missing, missing


@pytest.mark.slow
def test_installed_wheel_runs_every_shipped_graph(installed, tmp_path, request):
    """`vkgraph cli` from the installed wheel, outside the tree, over every shipped graph
    for 2 frames (TINY sizes): each exits 0. train-kpn runs first: continue-kpn goes on from
    its mlp-w.lut. Minutes on a shared CPU (denoise.cfg is a whole photograph), so it runs
    with VKGRAPH_SLOW=1 or `-m slow`."""
    from test_graphs_cli import slow_enabled

    if not slow_enabled(request):
        pytest.skip("minutes on lavapipe: VKGRAPH_SLOW=1 or -m slow runs it")
    bin_dir, _ = installed
    names = sorted(p.stem for p in installed_graphs(bin_dir).glob("*.cfg"))
    names.sort(key=lambda n: n != "train-kpn")
    failed = []
    for name in names:
        extra = next((v for k, v in TINY.items() if fnmatch.fnmatch(name, k)), [])
        if name == "continue-kpn":
            extra = [f"param:i-lut:w:filename:{tmp_path / 'mlp-w.lut'}"]
        res = run(bin_dir, tmp_path, "-q", "cli", "-g", f"{name}.cfg", "--last-frame-only",
                  "--config", "frames:2", *extra)
        if res.returncode != 0:
            failed.append(f"{name}: exit {res.returncode}: {res.stderr.strip()[-300:]}")
    assert not failed, "\n".join(failed)
