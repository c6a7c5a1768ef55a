"""The Python API (vkgraph/api.py): README's example runs as written; feed, set, run, read
and save_weights on small graphs."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import numpy as np
import pytest

import vkgraph
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.formats import read_lut

ROOT = Path(__file__).resolve().parent.parent


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Python API"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "example.py").write_text(readme_example())
    runpy.run_path(str(tmp_path / "example.py"), run_name="__main__")
    line = capsys.readouterr().out.strip()
    m = re.fullmatch(r"5 frames: loss ([\d.]+) -> ([\d.]+), output \(64, 64, 4\)", line)
    assert m, line
    assert float(m.group(2)) < float(m.group(1))  # it learns
    data, channels, text = read_lut(tmp_path / "my-weights.lut")
    assert data.size == 64 * 448 and "pyramid levels" in text


EXPOSURE = """module:i-pfm:main
module:exposure:01
module:display:main
connect:i-pfm:main:output:exposure:01:input
connect:exposure:01:output:display:main:input
param:i-pfm:main:filename:nothing-here.pfm
param:exposure:01:exposure:1"""


def picture(h=12, w=20, k=1.0):
    y, x = np.mgrid[0:h, 0:w]
    return (k * np.stack([x / w, y / h, (x * y) % 5 / 5.0], -1)).astype(np.float32)


def test_feed_set_run_read(device):
    s = vkgraph.Session.load(EXPOSURE, device=device)
    s.feed("i-pfm:main", picture())  # the file source becomes i-array, wires kept
    assert s.module("i-array:main") is not None
    s.run(1)
    out = s.read("exposure:01", "output")
    assert out.shape == (12, 20, 4)
    np.testing.assert_allclose(out[..., :3], 2 * picture(), rtol=1e-6)
    np.testing.assert_allclose(s.read("i-array:main", "output")[..., :3], picture())

    s.set("exposure:01", "exposure", 2)  # next frame, same build
    s.feed("i-array:main", picture(k=0.5))  # same size: uploaded again
    build = s.build
    s.run(2)
    assert s.build is build and s.frame == 3
    np.testing.assert_allclose(s.read("exposure:01", "output")[..., :3], 2 * picture(),
                               rtol=1e-6)
    s.feed("i-array:main", picture(6, 8))  # another size: rebuilt
    s.run(1)
    assert s.read("exposure:01", "output").shape == (6, 8, 4)

    with pytest.raises(GraphError, match="outside its range"):
        s.set("exposure:01", "exposure", 1000)
    with pytest.raises(GraphError, match="no connector 'nope'"):
        s.read("exposure:01", "nope")
    with pytest.raises(GraphError, match="trainable"):
        s.save_weights("w.lut")
    s.close()  # the device is the test session's: left open
    assert device is not None
