"""Declarations against kernels: a kernel that declares a buffer the engine does not bind
(a binding past the node's connectors) is a GraphError naming the kernel and the binding,
not a silent all-zero image (exit 2, one line)."""

from __future__ import annotations

import numpy as np
from conftest import vkgraph
from test_wheel import USER_GRAPH, USER_MODULE, image, write_user_module

from vkgraph.pipeline.formats import read_pfm, write_pfm
from vkgraph.pipeline.vk import (
    compile_glsl,
    spirv_bindings,
    spirv_block_scalars,
    spirv_buffer_elements,
    spirv_texel_bindings,
    spirv_writable,
)


def setup(tmp_path, kernel: str | None = None):
    mods = tmp_path / "mods"
    write_user_module(mods)
    if kernel is not None:
        (mods / "shaders" / "bright" / "main.comp").write_text(kernel)
    write_pfm(tmp_path / "in.pfm", image()[..., :3])
    (tmp_path / "g.cfg").write_text(USER_GRAPH)
    return mods


def refused(tmp_path, monkeypatch, kernel: str, *messages: str) -> None:
    """The user module with this kernel is a GraphError: exit 2, one line naming `messages`,
    and nothing written."""
    monkeypatch.setenv("VKGRAPH_MODULES", str(setup(tmp_path, kernel)))
    rc, out, err = vkgraph(tmp_path, "-g", "g.cfg")
    assert rc == 2, (out, err)
    for m in messages:
        assert m in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out.pfm").exists()


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
    refused(tmp_path, monkeypatch, kernel, "kernel bright/main.comp declares set 1 binding 2",
            "has 2 connectors")


def test_kernel_that_may_write_an_input_is_an_error(tmp_path, monkeypatch):
    # the input bound writable: the barriers between nodes would not see its writes
    kernel = USER_MODULE["shaders/bright/main.comp"].replace("IMG_IN(0, img_in)",
                                                             "IMG_RW(0, img_in)")
    assert kernel != USER_MODULE["shaders/bright/main.comp"]
    refused(tmp_path, monkeypatch, kernel,
            "kernel bright/main.comp may write binding 0, the input connector 'input'")


def test_an_image_read_as_float_array_is_an_error(tmp_path, monkeypatch):
    # an rgba image holds 4 floats a pixel: read as float[], texel(0, p) would index the first
    # quarter of the image and run without a word
    kernel = USER_MODULE["shaders/bright/main.comp"].replace(
        "IMG_IN(0, img_in)", "SSBO_IN(0, float, img_in)").replace(
        "img_in[texel(0, p)]", "vec4(img_in[texel(0, p)])")
    assert "SSBO_IN(0, float" in kernel and "vec4(img_in" in kernel
    refused(tmp_path, monkeypatch, kernel, "module bright:01",
            "kernel bright/main.comp declares set 1 binding 0 (connector 'input') as float[] "
            "(4 bytes an element), but the connector is an rgba image (vec4[], 16 bytes a pixel)")


def test_an_image_written_as_vec2_is_an_error(tmp_path, monkeypatch):
    kernel = USER_MODULE["shaders/bright/main.comp"].replace(
        "IMG_OUT(1, img_out)", "SSBO_OUT(1, vec2, img_out)").replace(
        "vec4(c.rgb * params.gain, c.a)", "c.rg * params.gain")
    assert "vec2, img_out" in kernel and "c.rg *" in kernel
    refused(tmp_path, monkeypatch, kernel, "binding 1 (connector 'output') as vec2[] (8 bytes",
            "an rgba image (vec4[]")


def test_a_missing_kernel_names_every_folder_searched(tmp_path, monkeypatch):
    mods = setup(tmp_path)
    (mods / "shaders" / "bright" / "main.comp").unlink()
    monkeypatch.setenv("VKGRAPH_MODULES", str(mods))
    rc, out, err = vkgraph(tmp_path, "-g", "g.cfg")
    assert rc == 2, (out, err)
    from vkgraph.pipeline.kernels import SHADERS

    assert "kernel bright/main.comp not found; searched" in err
    for folder in (mods / "bright", mods / "shaders" / "bright", SHADERS / "bright"):
        assert str(folder) in err
    assert len([line for line in err.splitlines() if "error" in line]) == 1
    assert not (tmp_path / "out.pfm").exists()


def elements_of(tmp_path, decls: str) -> bytes:
    path = tmp_path / "e.comp"
    path.write_text("#version 460\n#extension GL_EXT_shader_explicit_arithmetic_types : "
                    "enable\nlayout(local_size_x = 1) in;\n" + decls + "void main() {}\n")
    return compile_glsl(path, [])


def test_spirv_buffer_elements_reads_element_and_stride(tmp_path):
    spirv = elements_of(tmp_path, """
layout(std430, set = 1, binding = 0) buffer a_ { vec4 a[]; };
layout(std430, set = 1, binding = 1) buffer b_ { float b[]; };
layout(std430, set = 1, binding = 2) buffer c_ { float16_t c[]; };
layout(std430, set = 1, binding = 3) buffer d_ { uvec4 d[]; };
layout(std430, set = 1, binding = 4) buffer e_ { int n; double e[]; };
layout(std430, set = 1, binding = 5) buffer f_ { int m; };
""")
    assert spirv_buffer_elements(spirv) == {
        (1, 0): ("float", 32, 4, 16), (1, 1): ("float", 32, 1, 4), (1, 2): ("float", 16, 1, 2),
        (1, 3): ("uint", 32, 4, 16), (1, 4): ("float", 64, 1, 8)}


def test_ssbo_float_width_is_checked(tmp_path):
    """An f16 ssbo read as 32-bit floats (or an f32 one as halves) is refused; the elements a
    kernel chooses for speed (vec4 over f32, uvec4 over packed halves, double over an f32
    buffer twice as long) are not."""
    import pytest

    from vkgraph.pipeline.errors import GraphError
    from vkgraph.pipeline.kernels import check_elements
    from vkgraph.pipeline.module import Connector
    from vkgraph.pipeline.nodes import Node

    spirv = elements_of(tmp_path, """
layout(std430, set = 1, binding = 0) readonly buffer a_ { float a[]; };
layout(std430, set = 1, binding = 1) buffer b_ { vec4 b[]; };
layout(std430, set = 1, binding = 2) buffer c_ { uvec4 c[]; };
layout(std430, set = 1, binding = 3) buffer d_ { double d[]; };
""")

    class Module:
        def __str__(self) -> str:
            return "m:01"

    def node(fmt0: str) -> Node:
        conns = [Connector("a", "read", "ssbo", fmt0), Connector("b", "write", "ssbo", "f32"),
                 Connector("c", "write", "ssbo", "f16"), Connector("d", "write", "ssbo", "f32")]
        return Node(Module(), "m", "k", (1, 1, 1), connectors=conns)

    check_elements(node("f32"), spirv)
    check_elements(node("u32"), spirv)  # integers: the kernel's business
    with pytest.raises(GraphError, match=r"module m:01: kernel m/k.comp declares set 1 "
                       r"binding 0 \(connector 'a'\) as float\[\] \(4 bytes an element\), "
                       r"but the connector is an f16 ssbo \(float16_t\[\]\)"):
        check_elements(node("f16"), spirv)


def test_spirv_writable_tells_readonly_from_written(tmp_path):
    """... and spirv_texel_bindings finds the samplerBuffers (read-only) alone."""
    path = tmp_path / "k.comp"
    path.write_text("""#version 460
layout(local_size_x = 1) in;
layout(std430, set = 1, binding = 0) readonly buffer a_ { float a[]; };
layout(std430, set = 1, binding = 1) writeonly buffer b_ { float b[]; };
layout(std430, set = 1, binding = 2) buffer c_ { float c[]; };
layout(std430, set = 1, binding = 3) readonly buffer d_ { float d0; float d[]; };
layout(set = 1, binding = 4) uniform samplerBuffer t;
layout(set = 1, binding = 5, rgba32f) uniform writeonly imageBuffer s;
void main() {
  b[0] = a[0] + d[0] + d0 + texelFetch(t, 0).x;
  c[0] += 1.0;
  imageStore(s, 0, vec4(c[1]));
}
""")
    spirv = compile_glsl(path, [])
    assert spirv_writable(spirv) == {(1, 1), (1, 2), (1, 5)}
    assert spirv_texel_bindings(spirv) == {(1, 4)}
    # kept per module: a caller's change to a result is not the next caller's answer, and
    # the same bytes in another object (a bytearray) give the same answers
    spirv_writable(spirv).add((9, 9))
    spirv_texel_bindings(spirv).clear()
    again = bytearray(spirv)
    assert spirv_writable(again) == {(1, 1), (1, 2), (1, 5)}
    assert spirv_texel_bindings(again) == {(1, 4)}
    assert spirv_bindings(again) == [(1, b) for b in range(6)]


def test_an_input_read_through_a_texel_view_gives_the_same_image(tmp_path, monkeypatch):
    # TEX_IN: the engine binds a uniform texel buffer (vec4 texels) where the kernel declares
    # a samplerBuffer; texelFetch reads the same floats as the storage-buffer load
    kernel = USER_MODULE["shaders/bright/main.comp"].replace(
        "IMG_IN(0, img_in)", "TEX_IN(0, img_in)").replace(
        "img_in[texel(0, p)]", "texelFetch(img_in, texel(0, p))")
    assert "texelFetch" in kernel
    monkeypatch.setenv("VKGRAPH_MODULES", str(setup(tmp_path, kernel)))
    rc, _, err = vkgraph(tmp_path, "-g", "g.cfg")
    assert rc == 0, err
    np.testing.assert_array_equal(read_pfm(tmp_path / "out.pfm")[..., :3],
                                  (3 * image()[..., :3]).astype(np.float32))


def test_a_storage_image_is_an_error(tmp_path, monkeypatch):
    # the engine binds storage buffers and uniform texel buffers: an imageBuffer would be
    # bound as a storage buffer, which the driver need not catch
    kernel = USER_MODULE["shaders/bright/main.comp"].replace(
        "IMG_OUT(1, img_out)", "layout(set = 1, binding = 1, rgba32f) uniform writeonly "
        "imageBuffer img_out;").replace("img_out[p.x + p.y * node.roi[1].x] = ",
                                        "imageStore(img_out, p.x + p.y * node.roi[1].x, ")
    kernel = kernel.replace("c.a);", "c.a));")
    refused(tmp_path, monkeypatch, kernel,
            "kernel bright/main.comp declares an image or sampler at set 1 binding 1")


def test_spirv_bindings_reads_the_declarations(tmp_path):
    path = tmp_path / "k.comp"
    path.write_text(USER_MODULE["shaders/bright/main.comp"])
    from vkgraph.pipeline.kernels import SHADERS
    from vkgraph.pipeline.module import parse_param_line
    from vkgraph.pipeline.paramblock import params_glsl

    gen = {"params.gen": params_glsl([parse_param_line("gain:float:1:2", "p")])}
    spirv = compile_glsl(path, [SHADERS / "include"], generated=gen)
    assert spirv_bindings(spirv) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]


# -- the params block generated from `params`

def test_generated_block_follows_the_declaration():
    from vkgraph.pipeline.paramblock import params_glsl
    from vkgraph.pipeline.registry import Registry

    reg = Registry()
    kpn_t = params_glsl(reg.get("kpn-t").params)
    assert "  int precise_;  // 'precise'" in kpn_t
    assert kpn_t.index("float alpha;") < kpn_t.index("int init;") < kpn_t.index("int feat;")
    kpn = params_glsl(reg.get("kpn").params)
    assert "  float noise_a;  // 'noise a'" in kpn
    mlp = params_glsl(reg.get("mlp-t").params)
    assert "  int tiles[2];" in mlp and "  uint enc[4];  // string 'enc'" in mlp


def test_every_awkward_name_compiles_and_lands_on_its_bytes(tmp_path):
    """Every GLSL keyword and reserved word, names with spaces, digits and gl_ as params: the
    generated block compiles, and each member's offset and type is the blob's."""
    from vkgraph.pipeline.kernels import SHADERS
    from vkgraph.pipeline.module import parse_param_line
    from vkgraph.pipeline.paramblock import GLSL_WORDS, glsl_name, layout, params_glsl
    from vkgraph.pipeline.vk import spirv_block_scalars

    names = sorted(w for w in GLSL_WORDS if len(w) <= 8) + ["noise a", "2x", "gl_x", "a-b"]
    lines = [f"{n}:{('int', 'float', 'string')[i % 3]}:{(1, 3, 5)[i % 3]}:0"
             for i, n in enumerate(names)]
    params = [parse_param_line(ln, "params") for ln in lines]
    first = {True: "[0]", False: ""}
    reads = " + ".join(f"float(params.{glsl_name(p.name)}{first[p.nbytes() > 4]})"
                       for p in params)
    path = tmp_path / "k.comp"
    path.write_text('#version 460\n#extension GL_GOOGLE_include_directive : enable\n'
                    '#include "vkgraph.glsl"\n#include "params.gen"\nSSBO_OUT(0, float, o)\n'
                    f"void main() {{ o[0] = {reads}; }}\n")
    spirv = compile_glsl(path, [SHADERS / "include"], generated={"params.gen": params_glsl(params)})
    scalars = spirv_block_scalars(spirv, 0, 1)
    words = layout(params)
    assert len(scalars) == len(words)
    for member, off, kind, _bits in scalars:
        p, ptype = words[off]
        assert member.split("[")[0] == glsl_name(p.name)
        assert kind == {"float": "float", "int": "int", "string": "uint"}[ptype]


def test_generated_text_is_part_of_the_cache_key(tmp_path):
    from vkgraph.pipeline.kernels import SHADERS
    from vkgraph.pipeline.module import parse_param_line
    from vkgraph.pipeline.paramblock import params_glsl

    path = tmp_path / "k.comp"
    path.write_text(USER_MODULE["shaders/bright/main.comp"])
    one = compile_glsl(path, [SHADERS / "include"], generated={
        "params.gen": params_glsl([parse_param_line("gain:float:1:2", "p")])})
    two = compile_glsl(path, [SHADERS / "include"], generated={
        "params.gen": params_glsl([parse_param_line("x:int:1:0", "p"),
                                   parse_param_line("gain:float:1:2", "p")])})
    offsets = [s[1] for s in spirv_block_scalars(one, 0, 1)], [
        s[1] for s in spirv_block_scalars(two, 0, 1)]
    assert offsets == ([0], [0, 4])


HAND = 'layout(std430, set = 0, binding = 1) readonly buffer Params { %s } params;\n'


def test_a_hand_written_block_that_agrees_runs(tmp_path, monkeypatch):
    kernel = USER_MODULE["shaders/bright/main.comp"].replace('#include "params.gen"\n',
                                                             HAND % "float gain;")
    monkeypatch.setenv("VKGRAPH_MODULES", str(setup(tmp_path, kernel)))
    rc, _, err = vkgraph(tmp_path, "-g", "g.cfg")
    assert rc == 0, err


def test_a_param_read_as_another_type_is_an_error(tmp_path, monkeypatch):
    # `gain` is declared float; the kernel reads its bits as an int: a wrong image, silently,
    # before the check
    kernel = USER_MODULE["shaders/bright/main.comp"].replace(
        '#include "params.gen"\n', HAND % "int gain;").replace("params.gain", "float(params.gain)")
    monkeypatch.setenv("VKGRAPH_MODULES", str(setup(tmp_path, kernel)))
    rc, out, err = vkgraph(tmp_path, "-g", "g.cfg")
    assert rc == 2, (out, err)
    assert ("kernel bright/main.comp reads params member 'gain' (byte 0) as int, but param "
            "'gain' is declared float") in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out.pfm").exists()


def test_a_member_past_the_params_is_an_error(tmp_path, monkeypatch):
    kernel = USER_MODULE["shaders/bright/main.comp"].replace(
        '#include "params.gen"\n', HAND % "float gain; float bias;").replace(
        "params.gain", "(params.gain + params.bias)")
    monkeypatch.setenv("VKGRAPH_MODULES", str(setup(tmp_path, kernel)))
    rc, out, err = vkgraph(tmp_path, "-g", "g.cfg")
    assert rc == 2, (out, err)
    assert "reads params member 'bias' at byte 4 as float, but the module's params are 4 bytes" \
        in err


def test_same_glsl_name_twice_is_an_error():
    from vkgraph.pipeline.errors import GraphError
    from vkgraph.pipeline.module import parse_param_line
    from vkgraph.pipeline.paramblock import params_glsl

    params = [parse_param_line("noise a:float:1:0", "p"), parse_param_line("noise_a:int:1:0", "p")]
    try:
        params_glsl(params, "mods/x/params")
    except GraphError as e:
        assert "params 'noise a' and 'noise_a' have the same GLSL name 'noise_a'" in e.line()
    else:
        raise AssertionError("no error")
