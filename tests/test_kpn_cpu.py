"""kpn-t's "cpu" MLP variant (fwd_cpu, bck_cpu, mulw_cpu: one pixel per SIMD lane, for CPU
drivers) against the portable kernels: they sum in the same order as fwd, bck and mulw, so
the forward (logits K, stored activations A), the loss, the output and dE/dW must be
bit-identical. Sizes whose pixel counts are not whole subgroups x pixels per invocation (64)
check the tail; feat 1 checks the constant bias feature. The portable kernels are checked
against the float64 reference in test_kpn_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest
from test_kpn_coopmat import MLP_KERNELS, is_cpu_driver, kernels, use_variant
from test_kpn_gpu import conditioned_weights, kpn_graph, noise_feature_graph, pair, run_with_weights


@pytest.fixture
def cpu_device(device):
    if not is_cpu_driver(device):
        pytest.skip(f"{device.info.name} is not a CPU driver with 8-wide subgroups")
    return device


def frame(device, graph, W):
    """One frame at weights W: loss, dE/dW, output, and per level fwd's K and A."""
    b, E, dW, O = run_with_weights(device, graph, W)
    fwd = [n for n in graph.modules[("kpn-t", "01")].nodes if n.kernel.startswith("fwd")]
    return E, dW, O, [(b.read(n, "K").copy(), b.read(n, "A").copy()) for n in fwd]


def check_identical(a, b):
    Ep, dWp, Op, bufp = a
    Ec, dWc, Oc, bufc = b
    assert Ec == Ep
    assert np.array_equal(Oc, Op)
    assert np.array_equal(dWc, dWp)
    assert np.abs(dWp).max() > 0
    assert len(bufc) == len(bufp)
    for (Kp, Ap), (Kc, Ac) in zip(bufp, bufc, strict=True):
        assert np.array_equal(Kc, Kp) and np.array_equal(Ac, Ap)
        assert np.abs(Kp).max() > 0


@pytest.mark.parametrize("w,h,levels,texel", [(37, 23, 3, True), (16, 9, 2, True),
                                              (37, 23, 3, False)])
def test_cpu_matches_portable(cpu_device, tmp_path, monkeypatch, w, h, levels, texel):
    """texel=False: the storage-buffer loads the cpu kernels fall back to where a buffer
    exceeds the device's texel-view limit (the same bits as through texel views)."""
    if not texel:
        from vkgraph.modules.kpn_t import forward, module
        for kpn_t in (forward, module):  # the forward's kernels and the backward's
            monkeypatch.setattr(kpn_t, "cpu_texel", lambda graph, npx: {})
    X, R = pair(w, h)
    W = conditioned_weights()
    out = {}
    for variant in ("portable", "cpu"):
        use_variant(monkeypatch, variant)
        g = kpn_graph(tmp_path, X, R, levels, "param:kpn-t:01:alpha:0")
        g.frames = 2
        out[variant] = frame(cpu_device, g, W)
        assert MLP_KERNELS[variant] <= kernels(g), kernels(g)
    check_identical(out["portable"], out["cpu"])


@pytest.mark.parametrize("arch", [0, 1, 2])
def test_cpu_noise_features_match_portable(cpu_device, tmp_path, monkeypatch, arch):
    """feat 1: feature 0 is the constant 1 (KPN_BIAS) in fwd_cpu as in fwd; arch 1 (context
    features, 32 outputs) and arch 2 (and match features, 64 outputs) give the portable
    kernels' bits as well."""
    from test_kpn_gpu import ctx_weights, nl_weights

    _, R = pair(40, 24, seed=4)
    W = {0: conditioned_weights, 1: ctx_weights, 2: nl_weights}[arch]()
    out = {}
    for variant in ("portable", "cpu"):
        use_variant(monkeypatch, variant)
        g = noise_feature_graph(tmp_path, R, "param:kpn-t:01:levels:3\n"
                                "param:kpn-t:01:apply:2\nparam:kpn-t:01:loss:2\n"
                                f"param:kpn-t:01:arch:{arch}")
        g.frames = 2
        out[variant] = frame(cpu_device, g, W)
        assert MLP_KERNELS[variant] <= kernels(g), kernels(g)
    check_identical(out["portable"], out["cpu"])
    assert np.all(out["cpu"][3][0][1].reshape(-1, 64)[: 40 * 24, 0] == 1.0)


def test_cpu_kernels_need_subgroup_shuffle(device):
    """The cpu kernels hand weights to the lanes with subgroupShuffle: a CPU driver without
    it (or with other subgroups than 8 lanes) runs portable."""
    from dataclasses import replace
    from types import SimpleNamespace

    from vkgraph.modules.kpn_t import forward as kpn_t

    cpu = replace(device.info, type="CPU", subgroup_size=8, subgroup_shuffle=True)
    assert kpn_t.cpu_capable(SimpleNamespace(capabilities=cpu))
    for info in (replace(cpu, subgroup_shuffle=False), replace(cpu, subgroup_size=4),
                 replace(cpu, type="discrete GPU"), None):
        assert not kpn_t.cpu_capable(SimpleNamespace(capabilities=info))


def test_cpu_kernels_read_texels_where_the_activations_fit(device):
    """TEXEL (texel-view loads) only where a level's 7 x 64 activations a pixel fit the
    device's maxTexelBufferElements; else the storage-buffer loads, at any size."""
    from dataclasses import replace
    from types import SimpleNamespace

    from vkgraph.modules.kpn_t import forward as kpn_t

    def texel(limit, npx):
        info = replace(device.info, max_texel_elements=limit)
        return kpn_t.cpu_texel(SimpleNamespace(capabilities=info), npx)

    assert texel(112 * 4096, 4096) == {"TEXEL": 1}
    assert texel(112 * 4096 - 1, 4096) == {}
    assert texel(0, 16) == {}  # unknown limit
    assert kpn_t.cpu_texel(SimpleNamespace(capabilities=None), 16) == {}


def test_a_texel_view_past_the_device_limit_is_an_error(device, monkeypatch):
    from dataclasses import replace

    from vkgraph.pipeline.vk import VulkanError

    buf = device.buffer(1024)
    monkeypatch.setattr(device, "info", replace(device.info, max_texel_elements=63))
    with pytest.raises(VulkanError, match="64 vec4 texels"):
        buf.texels()
    monkeypatch.undo()
    assert buf.texels() is buf.texels()  # one view, made once


@pytest.mark.parametrize("feat", [0, 1])
def test_kpn_cpu_reads_lut_weights_like_portable(cpu_device, tmp_path, monkeypatch, feat):
    """kpn's .lut weights are f16: the cpu variant converts them once to f32 (w32) and then
    gives exactly portable's output (fwd's W16 reads the same values, sums in the same
    order). feat 1: the noise-normalised features (KPN_BIAS, the nmap node)."""
    from vkgraph.apps.denoise import Denoiser
    from vkgraph.modules.kpn_t import module as kpn_t
    from vkgraph.pipeline.formats import write_lut

    lut = tmp_path / "w.lut"
    write_lut(lut, conditioned_weights().astype(np.float16).ravel(), 1, "f16", 64, 448,
              ssbo=True, text=kpn_t.lut_text(feat, 0, feat, 3))
    X, _ = pair(37, 23, seed=5)
    out, nodes = {}, {}
    for variant in ("portable", "cpu"):
        use_variant(monkeypatch, variant)
        den = Denoiser(cpu_device, lut)
        out[variant] = den(X, 2e5, 20)
        g = den.builds[(37, 23, False, "float")][1]
        nodes[variant] = {n.kernel for n in g.modules[("kpn", "01")].nodes}
    assert {"fwd_cpu", "w32"} <= nodes["cpu"] and "fwd" not in nodes["cpu"]
    assert "fwd" in nodes["portable"] and "w32" not in nodes["portable"]
    assert np.abs(out["portable"]).max() > 0
    np.testing.assert_array_equal(out["cpu"], out["portable"])

