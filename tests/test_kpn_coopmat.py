"""kpn-t's cooperative-matrix MLP kernels against the portable fp32 ones and the float64
reference (modules/kpn-t/reference.py): "coopmat" (fwd_cm, bck_cm, mulw_cm: f16 activations
stored) and "fused" (fwd_cm, bck_fused: the backward recomputes them).

Both variants compute the same function as the portable kernels, in f16 operands and
activations with f32 sums, from the f16 copy of the weights (adam's w16). Tolerances, against
the float64 reference evaluated at those f16 weights:
  E      relative error <= 2e-4
  output |O - O_ref| <= 5e-4 (images in [0, 1])
  dE/dW  <= 5e-3 of the largest entry of each matrix, after putting the reference on the
         device's side of every leaky-ReLU kink that f16 rounding can flip (there the
         derivative jumps by 1000x; see test_kpn_gpu.align_kinks): the flipped pre-activations
         must be rounding-sized (<= 2e-3 of their layer's largest).
  (Measured through the emulation on the test images: E 4e-6, O 2e-5, dE/dW 6e-4, flipped
  |z| 4e-4; f16 rounding of h and g, 2^-11 relative, is the source.)
  fused vs coopmat on one device (same f16 forward, same rounding; only the order of the f32
  sums differs): dE/dW within 1e-4 of the largest entry, E and output equal.

On the GPU machine (VK_KHR_cooperative_matrix, marker `coopmat`) the real kernels run; on any
other device (the CPU driver) the same kernel sources run through the plain-GLSL emulation of
the cooperative-matrix operations (CM_EMULATE in shaders/include/mlp_coopmat.glsl), which
checks their indexing, padding and layouts everywhere.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import load_script
from test_kpn_gpu import (
    conditioned_weights,
    kpn_graph,
    noise_feature_graph,
    pair,
    ref,
    run_with_weights,
    train,
)

from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.runner import Build

CM_SHAPE = "16x16x16 f16*f16+f32->f32"
MLP_KERNELS = {"portable": {"fwd", "bck", "mulw"}, "coopmat": {"fwd_cm", "bck_cm", "mulw_cm"},
               "fused": {"fwd_cm", "bck_fused"}, "cpu": {"fwd_cpu", "bck_cpu", "mulw_cpu"}}
LOSSES = {"smape": 0, "l2": 1, "l1": 2}


def has_coopmat(device) -> bool:
    return CM_SHAPE in device.info.coopmat and device.info.subgroup_size == 32


def is_cpu_driver(device) -> bool:
    """Where kpn-t's "cpu" variant runs (modules/kpn-t/module.py cpu_capable)."""
    return (device.info.type == "CPU" and device.info.subgroup_size == 8
            and device.info.subgroup_shuffle)


@pytest.fixture
def cm_device(device):
    if not has_coopmat(device):
        pytest.skip(f"{device.info.name} has no {CM_SHAPE} cooperative matrices")
    return device


def use_variant(monkeypatch, variant: str, emulate: bool = False) -> None:
    monkeypatch.delenv("VKGRAPH_PORTABLE", raising=False)
    monkeypatch.setenv("VKGRAPH_KPN_MLP", variant)
    if emulate:
        monkeypatch.setenv("VKGRAPH_COOPMAT_EMULATE", "1")
    else:
        monkeypatch.delenv("VKGRAPH_COOPMAT_EMULATE", raising=False)


def kernels(graph) -> set[str]:
    return {n.kernel for n in graph.modules[("kpn-t", "01")].nodes}


def run_variant(device, tmp_path, monkeypatch, variant, X, R, W, levels, loss="smape",
                apply="plain", emulate=False):
    """One frame at weights W (adam's alpha 0 keeps them): (build, graph, E, dW, O)."""
    use_variant(monkeypatch, variant, emulate)
    extra = (f"param:kpn-t:01:alpha:0\nparam:kpn-t:01:loss:{LOSSES[loss]}\n"
             f"param:kpn-t:01:apply:{1 if apply == 'softmax' else 0}")
    g = kpn_graph(tmp_path, X, R, levels, extra)
    g.frames = 2
    b, E, dW, O = run_with_weights(device, g, W)
    assert MLP_KERNELS[variant] <= kernels(g), kernels(g)
    return b, g, E, dW, O


def aligned_reference(build, graph, X, R, W16, levels, loss, apply):
    """float64 E, O, dE/dW at the f16 weights, with every kink the device's f16 forward put
    on the other side aligned to the device (from the coopmat variant's stored h_1..h_6).
    Also returns the largest aligned |z| relative to its layer's largest."""
    E, O, cache = ref.forward(X.astype(np.float64), R.astype(np.float64), W16, levels=levels,
                              apply_mode=apply, loss=loss)
    fwd = [n for n in graph.modules[("kpn-t", "01")].nodes if n.kernel == "fwd_cm"]
    worst = 0.0
    for node, acts in zip(fwd, cache.acts, strict=True):
        n = acts.h[0].shape[0]
        for layer in range(1, 7):
            h = build.read(node, f"A{layer}")[: n * 64].reshape(n, 64).astype(np.float64)
            z = acts.z[layer]
            flip = (h > 0) != (z > 0)
            if flip.any():
                worst = max(worst, float(np.abs(z[flip]).max() / np.abs(z).max()))
            z[flip] = np.where(h[flip] > 0, 1e-30, -1e-30)
            acts.h[layer][flip] = ref.leaky(z[flip])
    return E, O, ref.backward(cache), worst


def check_against_reference(b, g, E, dW, O, X, R, W16, levels, loss, apply):
    Eref, Oref, dWref, worst = aligned_reference(b, g, X, R, W16, levels, loss, apply)
    assert worst <= 2e-3  # only rounding-sized pre-activations change sides
    assert abs(E - Eref) <= 2e-4 * abs(Eref)
    assert np.abs(O - Oref).max() <= 5e-4
    for layer in range(7):
        scale = np.abs(dWref[layer]).max()
        assert scale > 0
        assert np.abs(dW[layer] - dWref[layer]).max() <= 5e-3 * scale, layer
    assert np.all(dW[6, 16:] == 0)


def check_fused_matches(dW_cm, E_cm, O_cm, dW_f, E_f, O_f):
    assert abs(E_f - E_cm) <= 1e-6 * abs(E_cm)
    assert np.abs(O_f - O_cm).max() <= 1e-6
    for layer in range(7):
        scale = np.abs(dW_cm[layer]).max()
        assert np.abs(dW_f[layer] - dW_cm[layer]).max() <= 1e-4 * scale, layer
    assert np.all(dW_f[6, 16:] == 0)


def test_emulated_kernels_match_reference(device, tmp_path, monkeypatch):
    """The cooperative-matrix kernel sources through the plain-GLSL emulation, on any device:
    odd size (tail tiles, padding), 3 levels."""
    X, R = pair(37, 23)
    W16 = conditioned_weights().astype(np.float16).astype(np.float64)
    b, g, E, dW, O = run_variant(device, tmp_path, monkeypatch, "coopmat", X, R, W16, 3,
                                 emulate=True)
    check_against_reference(b, g, E, dW, O, X, R, W16, 3, "smape", "plain")
    _, _, Ef, dWf, Of = run_variant(device, tmp_path, monkeypatch, "fused", X, R, W16, 3,
                                    emulate=True)
    check_fused_matches(dW, E, O, dWf, Ef, Of)


def test_variant_selection(device, tmp_path, monkeypatch):
    """auto (the default) picks the fused kernels where the device has cooperative matrices,
    "cpu" on a CPU driver, portable elsewhere; =fused gives fused where it can run, else
    portable, and =cpu likewise; =portable, VKGRAPH_PORTABLE and precise mode keep portable;
    a misspelt variant is an error."""
    X, R = pair(16, 9)
    monkeypatch.delenv("VKGRAPH_COOPMAT_EMULATE", raising=False)
    monkeypatch.delenv("VKGRAPH_PORTABLE", raising=False)
    best = "fused" if has_coopmat(device) else "cpu" if is_cpu_driver(device) else "portable"
    fused = "fused" if has_coopmat(device) else "portable"
    cpu = "cpu" if is_cpu_driver(device) else "portable"
    for want, got in ((None, best), ("auto", best), ("fused", fused), ("cpu", cpu),
                      ("portable", "portable")):
        if want is None:
            monkeypatch.delenv("VKGRAPH_KPN_MLP", raising=False)
        else:
            monkeypatch.setenv("VKGRAPH_KPN_MLP", want)
        g = kpn_graph(tmp_path, X, R, 2)
        Build(g, device)
        assert MLP_KERNELS[got] <= kernels(g), want
    monkeypatch.setenv("VKGRAPH_KPN_MLP", "fused")
    monkeypatch.setenv("VKGRAPH_PORTABLE", "1")
    g = kpn_graph(tmp_path, X, R, 2)
    Build(g, device)
    assert MLP_KERNELS["portable"] <= kernels(g)
    monkeypatch.delenv("VKGRAPH_PORTABLE")
    g = kpn_graph(tmp_path, X, R, 2, "param:kpn-t:01:precise:1")
    Build(g, device)
    assert "fwd" in kernels(g) and "fwd_cm" not in kernels(g)
    monkeypatch.setenv("VKGRAPH_KPN_MLP", "fast")
    with pytest.raises(GraphError, match="VKGRAPH_KPN_MLP=fast"):
        Build(kpn_graph(tmp_path, X, R, 2), device)


@pytest.mark.coopmat
@pytest.mark.parametrize("w,h,levels,loss,apply", [
    (37, 23, 3, "smape", "plain"),
    (64, 64, 4, "smape", "plain"),
    (29, 31, 4, "l2", "softmax"),
    (16, 9, 2, "l1", "plain"),
    (256, 192, 4, "smape", "plain"),
])
def test_coopmat_matches_reference(cm_device, tmp_path, monkeypatch, w, h, levels, loss, apply):
    X, R = pair(w, h)
    W16 = conditioned_weights().astype(np.float16).astype(np.float64)
    b, g, E, dW, O = run_variant(cm_device, tmp_path, monkeypatch, "coopmat", X, R, W16, levels,
                                 loss, apply)
    check_against_reference(b, g, E, dW, O, X, R, W16, levels, loss, apply)
    _, _, Ef, dWf, Of = run_variant(cm_device, tmp_path, monkeypatch, "fused", X, R, W16,
                                    levels, loss, apply)
    check_fused_matches(dW, E, O, dWf, Ef, Of)


@pytest.mark.coopmat
def test_coopmat_matches_portable(cm_device, tmp_path, monkeypatch):
    """Both kernel families on the same device and input: loss, output, and the gradient
    wherever no kink separates them (relative to each matrix's largest entry)."""
    X, R = pair(128, 96, seed=2)
    W = conditioned_weights()
    W16 = W.astype(np.float16).astype(np.float64)
    _, _, Ep, dWp, Op = run_variant(cm_device, tmp_path, monkeypatch, "portable", X, R, W16, 4)
    _, _, Ef, dWf, Of = run_variant(cm_device, tmp_path, monkeypatch, "fused", X, R, W16, 4)
    check_fused_vs_portable(Ep, dWp, Op, Ef, dWf, Of)


def check_fused_vs_portable(Ep, dWp, Op, Ef, dWf, Of, cancel=1.0):
    """Loss and output within f16 rounding; the gradient wherever no kink separates them (a
    flipped kink moves single entries; the bulk must agree), relative to each matrix's
    largest entry. `cancel`: how much more the gradient's sums over pixels cancel (arch 1's
    signed features: terms of both signs, so the f16 terms' rounding is larger against the
    sum; measured emulated at 48x40, median 2.0e-3 and 99% 2.9e-2 of the largest entry in
    W_0, 5e-6 in W_6; an indexing error is O(1))."""
    assert abs(Ef - Ep) <= 2e-4 * abs(Ep)
    assert np.abs(Of - Op).max() <= 5e-4
    for layer in range(7):
        scale = np.abs(dWp[layer]).max()
        err = np.abs(dWf[layer] - dWp[layer]) / scale
        assert np.median(err) <= 1e-3 * cancel and np.quantile(err, 0.99) <= 2e-2 * cancel, layer


@pytest.mark.coopmat
@pytest.mark.parametrize("variant", ["coopmat", "fused"])
def test_coopmat_training_lowers_loss(cm_device, tmp_path, monkeypatch, variant):
    use_variant(monkeypatch, variant)
    monkeypatch.chdir(tmp_path)
    b, g, m, hist = train(cm_device, tmp_path, 96, 64)
    assert MLP_KERNELS[variant] <= kernels(g)
    assert len(hist) == 40 and np.all(np.isfinite(hist))
    assert hist[-1] < 0.7 * hist[0]
    assert int(b.read(m.trainable.adam, "stats")[0]) == 0  # no skipped (non-finite) updates


@pytest.mark.parametrize("emulate,arch", [(True, 0), (False, 0), (True, 1), (False, 1),
                                          (True, 2), (False, 2)])
def test_fused_noise_features_match_portable(device, tmp_path, monkeypatch, emulate, arch):
    """feat 1 (noise map, signal-to-noise features, the constant bias feature) and apply 2
    in the fused kernels agree with the portable ones (the tolerances of
    test_coopmat_matches_portable): emulated on any device, the real kernels where the device
    has cooperative matrices; arch 1: the context features and W_6's 32 rows; arch 2: and
    the match features and 56 rows."""
    if not emulate and not has_coopmat(device):
        pytest.skip(f"{device.info.name} has no {CM_SHAPE} cooperative matrices")
    from test_kpn_gpu import ctx_weights, nl_weights
    w, h = (48, 40) if emulate else (128, 96)
    _, R = pair(w, h, seed=4)
    W = {0: conditioned_weights, 1: ctx_weights, 2: nl_weights}[arch]()
    W16 = W.astype(np.float16).astype(np.float64)
    out = {}
    for variant in ("portable", "fused"):
        use_variant(monkeypatch, variant, emulate and variant == "fused")
        g = noise_feature_graph(tmp_path, R, "param:kpn-t:01:levels:3\n"
                                f"param:kpn-t:01:apply:2\nparam:kpn-t:01:loss:2\n"
                                f"param:kpn-t:01:arch:{arch}")
        g.frames = 2
        b, E, dW, O = run_with_weights(device, g, W16)
        assert MLP_KERNELS[variant] <= kernels(g), kernels(g)
        out[variant] = (E, dW, O)
    check_fused_vs_portable(*out["portable"], *out["fused"], cancel=3.0 if arch else 1.0)
    assert np.abs(out["portable"][1][6, 15]).max() > 0  # K_15 gets a gradient (apply 2)
    if arch:
        assert np.abs(out["fused"][1][6, 16:32]).max() > 0
    if arch == 2:
        assert np.abs(out["fused"][1][6, 32:56]).max() > 0


def test_shared_blocks_only_where_the_device_has_them(device, monkeypatch):
    """16-byte shared-memory copies (CM_SHARED_BLOCKS) are asked for only where the device
    has explicit-layout shared memory, never for the plain-GLSL emulation; the kernels that
    opt in compile both ways, and only the block form needs the extension."""
    from dataclasses import replace
    from types import SimpleNamespace

    from vkgraph.modules.kpn_t import module as kpn_t
    from vkgraph.pipeline.kernels import SHADERS
    from vkgraph.pipeline.vk import compile_glsl

    monkeypatch.delenv("VKGRAPH_COOPMAT_EMULATE", raising=False)
    on = SimpleNamespace(capabilities=replace(device.info, shared_blocks=True))
    off = SimpleNamespace(capabilities=replace(device.info, shared_blocks=False))
    assert kpn_t.cm_defines(on, WARPS="16u") == {"WARPS": "16u", "CM_SHARED_BLOCKS": 1}
    assert kpn_t.cm_defines(off, WARPS="16u") == {"WARPS": "16u"}
    monkeypatch.setenv("VKGRAPH_COOPMAT_EMULATE", "1")
    assert "CM_SHARED_BLOCKS" not in kpn_t.cm_defines(on)
    ext = b"SPV_KHR_workgroup_memory_explicit_layout"
    incs = [SHADERS / "include", SHADERS / "kpn-t"]
    for kernel, defs in (("bck_fused", {"WARPS": "16u"}),
                         ("fwd_cm", {"FWD_WARPS": "16u", "FWD_ROWS": "1u", "TRAIN": 1})):
        plain = compile_glsl(SHADERS / "kpn-t" / f"{kernel}.comp", incs, defs, kpn_t.HEADERS)
        blocks = compile_glsl(SHADERS / "kpn-t" / f"{kernel}.comp", incs,
                              {**defs, "CM_SHARED_BLOCKS": 1}, kpn_t.HEADERS)
        assert ext not in plain and ext in blocks, kernel


@pytest.mark.coopmat
def test_fused_backward_fits_the_registers(cm_device, tmp_path, monkeypatch):
    """bck_fused's 512 threads get all of an SM's registers (128 a thread on NVIDIA): where
    the driver reports pipeline statistics, the kernel must not spill to local memory (a
    spill of 48 bytes a thread, from a prefetch of the scratch loads, cost 4% on the H100)."""

    from vkgraph.pipeline.vk import Device

    monkeypatch.setenv("VKGRAPH_PIPELINE_STATS", "1")
    dev = Device.open(cm_device.info.name)
    try:
        if not dev.pipeline_stats:
            pytest.skip(f"{dev.info.name} reports no pipeline statistics")
        use_variant(monkeypatch, "fused")
        X, R = pair(64, 48, seed=3)
        g = kpn_graph(tmp_path, X, R, 2)
        stats = load_script("bench/kernel_stats.py", "kernel_stats")
        table = {name: st for name, _, st in stats.rows(Build(g, dev))}
        st = table["kpn-t/bck_fused"]
        assert 0 < st["Register Count"] <= 65536 / 512
        assert int(st.get("Local Memory Size", 0)) % stats.LOCAL_OFFSET == 0, st
    finally:
        dev.close()


def test_fused_groups_one_per_sm(device, monkeypatch):
    """bck_fused's workgroups: one per SM where the device reports its SM count (a group
    fills an SM's registers; a partial second wave measured slower), else the fixed default;
    VKGRAPH_CM_TUNE=fused_groups=N still overrides it."""
    from dataclasses import replace
    from types import SimpleNamespace

    from vkgraph.modules.kpn_t import forward as kpn_t

    monkeypatch.delenv("VKGRAPH_CM_TUNE", raising=False)
    assert kpn_t.cm_tuning()["fused_groups"] == 0  # the default: ask the device
    for sm, want in ((132, 132), (108, 108), (0, kpn_t.FUSED_GROUPS)):
        g = SimpleNamespace(capabilities=replace(device.info, sm_count=sm))
        assert kpn_t.fused_groups(g) == want
    assert kpn_t.fused_groups(SimpleNamespace(capabilities=None)) == kpn_t.FUSED_GROUPS
    monkeypatch.setenv("VKGRAPH_CM_TUNE", "fused_groups=77")
    assert kpn_t.cm_tuning()["fused_groups"] == 77


@pytest.mark.coopmat
def test_denoise_with_weights_that_overflow_f16(cm_device, caplog, monkeypatch):
    """Weights from a diverging run (tests/fixtures/kpn-f16-overflow.lut: the photo recipe
    with a 200k-frame schedule on the H100, the last good weights before it stopped) overflowed
    the fused kernels' f16 activations on a held-out photograph at low noise (NaN pixels,
    measured: astronaut, 3702 pixels) before the per-layer scales (wscale.comp); now the f16
    kernels hold them: finite images better than the input, no rerun with the fp32 kernels."""
    pytest.importorskip("skimage")
    from vkgraph.apps import heldout
    from vkgraph.apps.denoise import Denoiser

    use_variant(monkeypatch, "auto")  # what vkgraph denoise runs: the fused kernels here
    lut = Path(__file__).resolve().parent / "fixtures" / "kpn-f16-overflow.lut"
    den = Denoiser(cm_device, lut)
    level, a, b = heldout.LEVELS[0]
    with caplog.at_level("WARNING", logger="vkgraph"):
        for path in heldout.photos():
            clean = heldout.load_clean(path)
            noisy = heldout.add_noise(clean, a, b, heldout.seed_of(0)).astype(np.float32)
            out = den(noisy, a, b)
            assert np.isfinite(out).all(), path.stem
            assert heldout.psnr(out, clean) > heldout.psnr(noisy, clean), path.stem
    assert not den.fp32 and not any("overflowed" in r.getMessage() for r in caplog.records)


def overflow_continuation(frames: int):
    """graphs/train-photo.cfg continued from tests/fixtures/kpn-f16-overflow.lut (the last
    good weights of a 200k-frame run that diverged by f16 overflow) for `frames` frames."""
    from conftest import ROOT, graph_from_lines

    text = (ROOT / "graphs" / "train-photo.cfg").read_text()
    text = text.replace("filename:photos/", f"filename:{ROOT / 'graphs' / 'photos'}/")
    lut = Path(__file__).resolve().parent / "fixtures" / "kpn-f16-overflow.lut"
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    lines = [ln for ln in lines if not ln.startswith(("frames:", "param:kpn-t:01:init:"))]
    lines += [f"frames:{frames}", "module:i-lut:w0", f"param:i-lut:w0:filename:{lut}",
              "connect:i-lut:w0:output:kpn-t:01:wcp", "param:kpn-t:01:init:0"]
    return graph_from_lines("\n".join(lines))


@pytest.mark.coopmat
def test_training_goes_on_from_weights_past_f16(cm_device, monkeypatch, tmp_path):
    """Continued from weights whose f16 activations overflowed the fused kernels (the
    fixture), the photo recipe trains on, finite, without a rollback: the per-layer scales
    (wscale.comp) hold them, and the dynamic activation scale (adam's stats[2]) would meet what
    they miss (measured on the H100: no step skipped, the activation scale stays 1; before
    both, every step was non-finite and the run stopped)."""
    from vkgraph.api import run_graph
    from vkgraph.pipeline.trainer import diverged

    use_variant(monkeypatch, "fused")
    monkeypatch.chdir(tmp_path)
    g = overflow_continuation(300)
    b = run_graph(g, cm_device, frames=300, last_frame_only=True)
    m = g.modules[("kpn-t", "01")]
    st = b.read(m.trainable.adam, "stats")
    hist = m.cls.hook("losses")(b, m)
    assert 0 < st[2] <= 1, st[:4]
    assert st[0] <= 40, st[:4]  # skipped steps: a few at most, not all of them
    assert np.isfinite(hist[-50:]).all() and diverged(b, m) is None


@pytest.mark.parametrize("emulate", [True, False])
def test_layer_scales_hold_weights_past_f16(device, tmp_path, monkeypatch, emulate):
    """Weights rescaled by the MLP's symmetry (W_0 x 2^15, W_6 x 2^-15: the same K, exactly)
    put activations past f16's range (the portable kernels' h_l exceed 65504); the fused
    kernels' per-layer scales (wscale.comp) bring them back, and fused and portable agree as
    for ordinary weights."""
    if not emulate and not has_coopmat(device):
        pytest.skip(f"{device.info.name} has no {CM_SHAPE} cooperative matrices")
    w, h = (48, 40) if emulate else (128, 96)
    _, R = pair(w, h, seed=4)
    W = conditioned_weights()
    W[0] *= 2.0 ** 15
    W[6] *= 2.0 ** -15
    W16 = W.astype(np.float16).astype(np.float64)
    out = {}
    for variant in ("portable", "fused"):
        use_variant(monkeypatch, variant, emulate and variant == "fused")
        g = noise_feature_graph(tmp_path, R, "param:kpn-t:01:levels:3\n"
                                "param:kpn-t:01:apply:2\nparam:kpn-t:01:loss:2")
        g.frames = 2
        b, E, dW, O = run_with_weights(device, g, W16)
        out[variant] = (E, dW, O)
        if variant == "portable":
            fwd = next(n for n in g.modules[("kpn-t", "01")].nodes if n.kernel == "fwd")
            assert np.abs(b.read(fwd, "A")).max() > 65504
        else:
            lsc = b.read(next(n for n in g.modules[("kpn-t", "01")].nodes
                              if n.kernel == "wscale"), "lsc")
            assert lsc[0] <= 2.0 ** -12 and lsc[6] >= 2.0 ** 12, lsc
    check_fused_vs_portable(*out["portable"], *out["fused"])
