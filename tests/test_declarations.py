"""Declarations against kernels: a kernel that declares a buffer the engine does not bind
(a binding past the node's connectors) is a GraphError naming the kernel and the binding,
not a silent all-zero image (exit 2, one line)."""

from __future__ import annotations

import numpy as np
from conftest import vkgraph
from test_wheel import USER_GRAPH, USER_MODULE, image, write_user_module

from vkgraph.pipeline.formats import read_pfm, write_pfm
from vkgraph.pipeline.vk import compile_glsl, spirv_bindings


def setup(tmp_path, kernel: str | None = None):
    mods = tmp_path / "mods"
    write_user_module(mods)
    if kernel is not None:
        (mods / "shaders" / "bright" / "main.comp").write_text(kernel)
    write_pfm(tmp_path / "in.pfm", image()[..., :3])
    (tmp_path / "g.cfg").write_text(USER_GRAPH)
    return mods


def test_a_good_user_kernel_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("VKGRAPH_MODULES", str(setup(tmp_path)))
    rc, _, err = vkgraph(tmp_path, "-g", "g.cfg")
    assert rc == 0, err
    np.testing.assert_allclose(read_pfm(tmp_path / "out.pfm")[..., :3], 3 * image()[..., :3],
                               rtol=1e-6)


def test_binding_past_the_connectors_is_an_error(tmp_path, monkeypatch):
    # the output declared at binding 2 although `connectors` has two lines (bindings 0, 1)
    kernel = USER_MODULE["shaders/bright/main.comp"].replace("IMG_OUT(1, img_out)",
                                                             "IMG_OUT(2, img_out)")
    monkeypatch.setenv("VKGRAPH_MODULES", str(setup(tmp_path, kernel)))
    rc, out, err = vkgraph(tmp_path, "-g", "g.cfg")
    assert rc == 2, (out, err)
    assert "kernel bright/main.comp declares set 1 binding 2" in err
    assert "has 2 connectors" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out.pfm").exists()


def test_spirv_bindings_reads_the_declarations(tmp_path):
    path = tmp_path / "k.comp"
    path.write_text(USER_MODULE["shaders/bright/main.comp"])
    from vkgraph.pipeline.runner import SHADERS

    spirv = compile_glsl(path, [SHADERS / "include"])
    assert spirv_bindings(spirv) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
