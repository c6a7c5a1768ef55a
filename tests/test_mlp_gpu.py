"""mlp-t on the device against its float64 reference (modules/mlp-t/reference.py): init, the
frame's samples, loss, every weight gradient and the output image for each encoding,
activation, loss, transform, filter and network arrays; Adam and SGD steps; weights through
o-lut and back through i-lut; and the shipped graphs (graphs/fit-*.cfg) training on the CPU
driver. Weights are set in adam's buffer with alpha 0 (a step then leaves them unchanged),
so frame 1 computes E and dE/dW for exactly those weights."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import graph_from_lines

from vkgraph.api import run_graph
from vkgraph.modules.mlp_t import reference as mlp_t_reference
from vkgraph.modules.poly import module as poly_module
from vkgraph.pipeline.formats import read_image, read_lut, read_pfm, write_pfm
from vkgraph.pipeline.runner import Build

ROOT = Path(__file__).resolve().parent.parent


ref = mlp_t_reference
poly = poly_module


def target_image(w, h):
    yy, xx = np.mgrid[0:h, 0:w]
    return np.stack([0.5 + 0.4 * np.sin(xx / 3.0 + c) * np.cos(yy / 4.0) for c in range(3)],
                    -1).astype(np.float32)


def mlp_graph(tmp_path, target, params: dict, frames=2):
    write_pfm(tmp_path / "t.pfm", target)
    lines = [f"param:mlp-t:01:{k}:{v}" for k, v in params.items()]
    g = graph_from_lines("\n".join([
        "module:i-pfm:main", "module:mlp-t:01", "module:o-pfm:out", "module:o-lut:w",
        f"param:i-pfm:main:filename:{tmp_path / 't.pfm'}",
        f"param:o-pfm:out:filename:{tmp_path / 'out'}",
        f"param:o-lut:w:filename:{tmp_path / 'w'}",
        "connect:i-pfm:main:output:mlp-t:01:target",
        "connect:mlp-t:01:output:o-pfm:out:input",
        "connect:mlp-t:01:w:o-lut:w:input", *lines]))
    g.frames = frames
    return g


def spec_of(module) -> dict:
    a = module.data["arch"]
    spec = dict(a._asdict())
    spec.update(nets=a.nets, layers=a.layers, batch=int(module.param("batch")),
                seed=int(module.param("seed")), shift=float(module.param("shift")))
    spec.update({k: int(module.param(k)) for k in ("levels", "features", "log2size",
                                                   "baseres")})
    spec["perlevel"] = float(module.param("perlevel"))
    return spec


def split(a, w: np.ndarray):
    """The param vector -> (W as (nets, layers, width, width), the table or None)."""
    W = w[: a.weights].reshape(a.nets, a.layers, a.width, a.width)
    return W, (w[a.weights:].copy() if a.table is not None else None)


def rgba(target):
    """The target as the device holds it (alpha 1)."""
    return np.concatenate([target, np.ones_like(target[..., :1])], -1).astype(np.float64)


CASES = {
    "none-leaky-l1-bias": dict(enc="none", bias=1, width=16, depth=1, nout=4, act="leaky",
                               outact="none", loss="l1", batch=77),
    "freq-tanh-l2": dict(enc="frequency", octaves=2, width=32, depth=2, act="tanh",
                         outact="sigmoid", loss="l2", batch=100, lscale=128),
    "tri-softplus-exp-rel": dict(enc="triangle", octaves=4, shift=0.2, act="softplus",
                                 outact="exp", loss="rel-l2", width=32, depth=3, bias=1,
                                 batch=130, xform="zoom"),
    "array-sigmoid-smape": dict(enc="frequency", octaves=3, act="sigmoid", outact="tanh",
                                loss="smape", tiles="2:3", filter="bilinear", xform="flip",
                                width=8, bias=1, batch=40),
    # levels 0, 1 dense ((N+1)^2 = 16, 49 entries), level 2 hashed (169 > 2^6)
    "hashgrid-2d": dict(enc="hashgrid", levels=3, features=2, log2size=6, baseres=3,
                        perlevel=2.0, width=16, depth=2, act="leaky", outact="sigmoid",
                        batch=100, lscale=64),
    # 3-D over 4 stacked slices, one sample per voxel at a random offset; level 1 hashed
    "hashgrid-3d-jitter": dict(enc="hashgrid", dims=3, slices=4, levels=2, features=3,
                               log2size=7, baseres=2, perlevel=3.0, width=16, depth=1,
                               act="tanh", outact="none", loss="l1", bias=1, jitter=1,
                               batch=500),
    "permuto-2d": dict(enc="permuto", levels=3, features=2, log2size=6, baseres=4,
                       perlevel=2.0, width=16, depth=2, act="leaky", outact="exp",
                       batch=90, filter="bilinear"),
    "permuto-3d": dict(enc="permuto", dims=3, slices=2, levels=2, features=4, log2size=7,
                       baseres=3, perlevel=1.5, width=16, depth=1, act="softplus",
                       outact="sigmoid", loss="rel-l2", batch=70),
}


@pytest.mark.parametrize("case", list(CASES))
def test_matches_reference(device, tmp_path, case):
    T = target_image(20, 24)
    g = mlp_graph(tmp_path, T, {"alpha": 0, **CASES[case]})
    b = Build(g, device)
    m = g.modules[("mlp-t", "01")]
    spec = spec_of(m)
    a = m.data["arch"]
    shape = (a.nets, a.layers, a.width, a.width)
    used = m.trainable.used
    assert m.trainable.layout == (a.nets * a.layers, a.width)
    assert used.shape == (a.params,)
    if a.table is not None:  # the engine's layout against the reference's
        lay = ref.table_layout(spec)
        assert list(a.table.sizes) == lay["sizes"] and a.table.used == lay["floats"]
        assert a.n_in == spec["levels"] * spec["features"]

    b.run_frame(0, download=False)
    w0, t0 = split(a, b.read(m.trainable.adam, "w"))
    assert np.abs(w0 - ref.init_weights(spec, spec["seed"])).max() <= 1e-6
    w0all = b.read(m.trainable.adam, "w")
    assert np.all(w0all[~used] == 0) and np.abs(w0all[used]).max() > 0
    if t0 is not None:
        tref = ref.init_table(spec, spec["seed"], a.table_floats, a.weights)
        assert np.abs(t0 - tref).max() <= 1e-10 and np.abs(t0).max() > 5e-5

    rng = np.random.default_rng(1)
    W = (w0 + 0.2 * rng.standard_normal(shape) * used[: a.weights].reshape(shape)).astype(
        np.float32)
    Tb = None
    if t0 is not None:  # table entries of the size training gives them
        Tb = (0.5 * rng.standard_normal(t0.size) * used[a.weights:]).astype(np.float32)
    wall = np.concatenate([W.ravel(), Tb if Tb is not None else []]).astype(np.float32)
    b.buffer(m.trainable.adam, "w").upload(wall)
    b.run_frame(1, download=False)
    assert np.array_equal(b.read(m.trainable.adam, "w"), wall)  # alpha 0: unchanged
    E = float(b.read(m.trainable.lsum, "cur")[0])
    dW, dT = split(a, b.read(m.trainable.dw, "dw"))
    W64 = W.astype(np.float64)
    T64 = Tb.astype(np.float64) if Tb is not None else None
    out = ref.frame_loss_grad(spec, W64, rgba(T), 1, T64)
    Eref, dWref = out[:2]
    assert abs(E - Eref) <= 1e-5 * abs(Eref)
    scale = np.abs(dWref).max()
    assert scale > 0
    assert np.abs(dW - dWref).max() <= 1e-4 * scale
    assert np.all(dW.ravel()[~used[: a.weights]] == 0)
    if T64 is not None:  # the table's gradient: 64-bit fixed point sums, fp32 backward
        dTref = out[2]
        assert np.count_nonzero(dTref) > 20
        assert np.abs(dT - dTref).max() <= 1e-4 * np.abs(dTref).max()
        assert np.all(dT[~used[a.weights:]] == 0)
    O = b.read(m.backing["output"][0], "output")
    Oref = ref.evaluate(spec, W64, (20, 24), T64)
    assert np.abs(O[..., : a.nout] - Oref).max() <= 1e-5 * max(1.0, np.abs(Oref).max())
    if a.nout < 4:
        assert np.all(O[..., 3] == 1)


def test_reference_gradient_is_the_derivative():
    """The reference backward against central differences of the reference loss (exact
    derivatives also through the relative-l2 and smape denominators)."""
    rng = np.random.default_rng(2)
    T = rgba(target_image(12, 10))
    for loss, outact, act in (("rel-l2", 3, 6), ("smape", 0, 4), ("l2", 5, 3)):
        spec = dict(enc=1, octaves=2, n_in=8, hidden=6, depth=2, nout=3, bias=True, width=16,
                    tiles=(1, 2), act=act, outact=outact, xform=0, filter=1, nets=2, layers=3,
                    batch=20, seed=3, shift=0.0,
                    loss={"l2": 0, "l1": 1, "rel-l2": 2, "smape": 3}[loss])
        W = ref.init_weights(spec, 5) + 0.1 * rng.standard_normal((2, 3, 16, 16))
        used = ref.init_weights(spec, 5) != 0
        used[:, :, :6, 15] = True
        used[:, 2, 3:, :] = False
        W *= used
        _, dW = ref.frame_loss_grad(spec, W, T, 4)
        for idx in zip(*np.nonzero(used)[:4], strict=True):
            if rng.random() > 0.1:
                continue
            eps = 1e-6
            Wp, Wm = W.copy(), W.copy()
            Wp[idx] += eps
            Wm[idx] -= eps
            num = (ref.frame_loss_grad(spec, Wp, T, 4)[0] - ref.frame_loss_grad(
                spec, Wm, T, 4)[0]) / (2 * eps)
            assert abs(num - dW[idx]) <= 1e-6 + 1e-5 * abs(num), (loss, idx, num, dW[idx])


@pytest.mark.parametrize("act,outact,loss", [("tanh", "sigmoid", "l2"),
                                             ("softplus", "exp", "smape")])
def test_precise_loss_differences_match_the_gradient(device, tmp_path, act, outact, loss):
    """What `vkgraph gradcheck` relies on: with precise 1 the loss is computed in float64 on
    the same samples every frame, matches the float64 reference, and its central differences
    (steps that float32 weights can hold) match dw."""
    T = target_image(16, 16)
    g = mlp_graph(tmp_path, T, dict(enc="frequency", octaves=2, width=16, depth=2, bias=1,
                                    act=act, outact=outact, loss=loss, batch=48, precise=1,
                                    alpha=0, tiles="1:2"), frames=2)
    b = Build(g, device)
    m = g.modules[("mlp-t", "01")]
    current = m.cls.hook("current_loss")
    frame = iter(range(1000))

    def E():
        b.run_frame(next(frame), download=False)
        return current(b.context, m)

    E()  # frame 0 initialises
    E0 = E()
    dw = b.read(m.trainable.dw, "dw").astype(np.float64)
    assert E() == E0  # same samples, same weights: the same loss
    w = b.read(m.trainable.adam, "w")
    spec = spec_of(m)
    a = m.data["arch"]
    Eref, _ = ref.frame_loss_grad(spec, w.reshape(a.nets, a.layers, a.width, a.width).astype(
        np.float64), rgba(T), 0)
    assert abs(E0 - Eref) <= 1e-7 * abs(Eref)  # inputs are encoded in fp32
    wbuf = b.buffer(m.trainable.adam, "w")
    rng = np.random.default_rng(4)
    for j in rng.choice(np.flatnonzero(m.trainable.used), 10, replace=False):
        wp, wm = np.float32(w[j] + 1e-4), np.float32(w[j] - 1e-4)
        wbuf.upload(np.array([wp], np.float32), offset=4 * int(j))
        ep = E()
        wbuf.upload(np.array([wm], np.float32), offset=4 * int(j))
        em = E()
        wbuf.upload(w[j:j + 1], offset=4 * int(j))
        num = (ep - em) / (float(wp) - float(wm))
        assert abs(num - dw[j]) <= 1e-5 * np.abs(dw).max() + 1e-3 * abs(num), (j, num, dw[j])


def first_step(device, tmp_path, **params):
    """(module, weights and gradient of frame 0, weights after frame 1's optimiser step) of a
    small frequency-encoded mlp-t graph with `params` added (opt, alpha, ...)."""
    g = mlp_graph(tmp_path, target_image(16, 16), dict(
        enc="frequency", octaves=2, width=16, depth=2, bias=1, act="tanh", batch=64,
        **params), frames=3)
    b = Build(g, device)
    m = g.modules[("mlp-t", "01")]
    b.run_frame(0, download=False)
    w0 = b.read(m.trainable.adam, "w").astype(np.float64)
    g0 = b.read(m.trainable.dw, "dw").astype(np.float64)
    b.run_frame(1, download=False)
    return m, w0, g0, b.read(m.trainable.adam, "w")


@pytest.mark.parametrize("opt", ["adam", "sgd"])
def test_optimizer_step_matches_reference(device, tmp_path, opt):
    m, w0, g0, w1 = first_step(device, tmp_path, opt=opt, alpha=0.01)
    if opt == "adam":
        wr, _, _ = ref.adam_step(w0, 0 * w0, 0 * w0, g0, 1, alpha=0.01)
    else:
        wr = ref.sgd_step(w0, g0, 0.01)
    assert np.abs(w1 - wr).max() <= 1e-6
    assert np.abs(w1 - w0).max() > 1e-4  # it moved
    assert np.all(w1[~m.trainable.used] == 0)


@pytest.mark.parametrize("enc", ["frequency", "hashgrid"])
def test_gradient_norm_per_net_and_clipped_step(device, tmp_path, enc):
    """reduce's gn: per net, the L2 norm of its dw (with a table encoding, one net, which
    also has the table's entries) and 1 for finite; adam's step clips each net's gradient to
    `gradclip` with it."""
    T = target_image(24, 16)
    extra = dict(levels=3, features=2, log2size=7, baseres=4, jitter=1) \
        if enc == "hashgrid" else dict(octaves=2, tiles="3:1")
    clip = 0.005
    g = mlp_graph(tmp_path, T, dict(enc=enc, width=16, depth=2, act="tanh", batch=96,
                                    alpha=0.01, opt="sgd", gradclip=clip, **extra), frames=3)
    b = Build(g, device)
    m = g.modules[("mlp-t", "01")]
    a = m.data["arch"]
    b.run_frame(0, download=False)
    w0 = b.read(m.trainable.adam, "w").astype(np.float64)
    g0 = b.read(m.trainable.dw, "dw").astype(np.float64)
    gn = b.read(m.trainable.dw, "gn")
    nw = a.net_weights
    parts = [g0[n * nw:(n + 1) * nw] for n in range(a.nets)]
    parts[0] = np.concatenate([parts[0], g0[a.weights:]])  # the table counts as net 0's
    norms = np.array([np.linalg.norm(p) for p in parts])
    assert len(gn) == 2 * a.nets and np.all(norms > clip)  # every net is clipped
    np.testing.assert_allclose(gn[0::2], norms, rtol=1e-5)
    assert np.all(gn[1::2] == 1.0)
    b.run_frame(1, download=False)
    w1 = b.read(m.trainable.adam, "w").astype(np.float64)
    scale = np.concatenate([np.full(nw, clip / gn[2 * n]) for n in range(a.nets)]
                           + [np.full(len(g0) - a.weights, clip / gn[0])])
    used = m.trainable.used
    np.testing.assert_allclose(w1[used], (w0 - 0.01 * g0 * scale)[used], rtol=0, atol=1e-7)


LUT_CASES = {
    "triangle-array": (dict(enc="triangle", octaves=3, width=16, depth=2, bias=1, act="leaky",
                            batch=64, alpha=0.01, tiles="2:1"), "2 networks (2x1 tiles)"),
    "hashgrid": (dict(enc="hashgrid", levels=3, features=2, log2size=7, baseres=4, width=16,
                      depth=1, act="leaky", batch=64, alpha=0.01, jitter=1),
                 "then the hashgrid table from float 512 (row 32): 3 levels of 2 features"),
}


@pytest.mark.parametrize("case", list(LUT_CASES))
def test_weights_through_lut_reproduce_the_output(device, tmp_path, case):
    """o-lut writes the f32 weights (and the encoding's table after them) with a description;
    i-lut loads them into wcp, and with alpha 0 the network shows exactly the picture the
    trained one showed."""
    T = target_image(16, 12)
    params, described = LUT_CASES[case]
    g = mlp_graph(tmp_path, T, params, frames=12)
    b = run_graph(g, device, last_frame_only=True)
    m = g.modules[("mlp-t", "01")]
    data, info, text = read_lut(tmp_path / "w.lut")
    assert info.format == "f32" and info.ssbo
    a = m.data["arch"]
    assert (info.wd, info.ht) == (a.width, a.params // a.width)
    assert np.array_equal(data.ravel(), b.read(m.trainable.adam, "w"))
    assert described in text and "leaky hidden activation" in text
    trained = read_pfm(tmp_path / "out.pfm")

    g2 = mlp_graph(tmp_path, T, {**params, "alpha": 0}, frames=1)
    g2.add_module("i-lut", "w")
    g2.modules[("i-lut", "w")].set_param("filename", str(tmp_path / "w.lut"))
    g2.connect("i-lut", "w", "output", "mlp-t", "01", "wcp")
    g2.modules[("o-pfm", "out")].set_param("filename", str(tmp_path / "again"))
    g2.modules[("o-lut", "w")].set_param("filename", str(tmp_path / "w2"))
    run_graph(g2, device, last_frame_only=True)
    assert np.array_equal(read_pfm(tmp_path / "again.pfm"), trained)


def test_checkpoint_of_another_shape_is_refused(device, tmp_path):
    from vkgraph.pipeline.errors import GraphError
    from vkgraph.pipeline.formats import write_lut

    write_lut(tmp_path / "bad.lut", np.zeros(100, np.float32), 1, "f32", 100, 1, ssbo=True)
    g = mlp_graph(tmp_path, target_image(8, 8), dict(width=16, depth=1))
    g.add_module("i-lut", "w")
    g.modules[("i-lut", "w")].set_param("filename", str(tmp_path / "bad.lut"))
    g.connect("i-lut", "w", "output", "mlp-t", "01", "wcp")
    with pytest.raises(GraphError, match="holds 100 values"):
        Build(g, device)


def test_bad_choice_names_the_options(device, tmp_path):
    from vkgraph.pipeline.errors import GraphError

    g = mlp_graph(tmp_path, target_image(8, 8), dict(act="relux"))
    with pytest.raises(GraphError, match="expected one of none, relu, leaky"):
        Build(g, device)


def test_poly_matches_reference(device, tmp_path):
    g = graph_from_lines(f"""
        module:poly:01
        module:o-pfm:p
        param:poly:01:size:13:7
        param:o-pfm:p:filename:{tmp_path / 'p'}
        connect:poly:01:output:o-pfm:p:input""")
    run_graph(g, device)
    assert np.abs(read_pfm(tmp_path / "p.pfm") - poly.reference(13, 7)[..., :3]).max() <= 1e-6


def run_cli(tmp_path, monkeypatch, capsys, cfg: str, *config: str) -> tuple[float, float]:
    """Run a shipped graph with `vkgraph cli`; (first loss, last loss) from its summary."""
    from vkgraph.cli.main import main

    monkeypatch.chdir(tmp_path)
    rc = main(["-q", "cli", "-g", str(ROOT / "graphs" / cfg), "--last-frame-only",
               "--format", "o-pfm", "--filename", "out", "--config", *config])
    out = capsys.readouterr().out
    assert rc == 0, out
    line = next(ln for ln in out.splitlines() if ln.startswith("mlp-t:01: "))
    match = re.match(r"mlp-t:01: (\d+) frames, first loss (\S+), loss (\S+), best (\S+), "
                     r"(\S+) frames/s", line)
    assert match, line
    assert int(match[1]) == int(next(c for c in config if c.startswith("frames:"))[7:])
    assert (tmp_path / "out.pfm").exists()
    assert (tmp_path / f"{cfg[:-4]}-w.lut").exists()
    return float(match[2]), float(match[3])


@pytest.fixture(scope="module")
def small_scene(tmp_path_factory):
    """graphs/images/scene.pfm averaged down to 32 x 32."""
    img = read_image(ROOT / "graphs" / "images" / "scene.pfm")[:, :, :3]
    small = img.reshape(32, 8, 32, 8, 3).mean((1, 3)).astype(np.float32)
    path = tmp_path_factory.mktemp("scene") / "scene32.pfm"
    write_pfm(path, small)
    return path


def test_fit_image_graph_trains(device, tmp_path, monkeypatch, capsys, small_scene):
    first, last = run_cli(tmp_path, monkeypatch, capsys, "fit-image.cfg", "frames:300",
                          f"param:i-img:main:filename:{small_scene}",
                          "param:mlp-t:01:batch:64", "param:mlp-t:01:preview:0")
    assert last < 0.5 * first


def test_fit_poly_graph_trains(device, tmp_path, monkeypatch, capsys):
    first, last = run_cli(tmp_path, monkeypatch, capsys, "fit-poly.cfg", "frames:300")
    assert last < 0.5 * first


def test_fit_array_graph_trains(device, tmp_path, monkeypatch, capsys, small_scene):
    first, last = run_cli(tmp_path, monkeypatch, capsys, "fit-array.cfg", "frames:150",
                          f"param:i-img:main:filename:{small_scene}", "param:mlp-t:01:tiles:4:4",
                          "param:mlp-t:01:batch:64", "param:mlp-t:01:preview:0")
    assert last < 0.5 * first
    out = read_pfm(tmp_path / "out.pfm")
    assert out.shape == (32, 32, 3) and np.all(np.isfinite(out))


def test_table_encodings_fit_better_than_frequency(device, tmp_path, monkeypatch, capsys,
                                                   small_scene):
    """fit-image-hash.cfg and fit-image-permuto.cfg (a smaller network: 4 levels, 16 wide)
    against fit-image.cfg's frequency encoding, all with batch 128, 300 frames, Adam 0.01, on
    the 32 x 32 scene: the tables hold the texels that 12 frequency inputs blur (measured:
    31.1 and 31.3 dB against 24.6 dB)."""
    target = read_pfm(small_scene)[..., :3].astype(np.float64)
    common = ["frames:300", f"param:i-img:main:filename:{small_scene}",
              "param:mlp-t:01:batch:128", "param:mlp-t:01:preview:0",
              "param:mlp-t:01:alpha:0.01"]
    small = ["param:mlp-t:01:levels:4", "param:mlp-t:01:width:16", "param:mlp-t:01:depth:1"]
    mse = {}
    for cfg, extra in (("fit-image.cfg", []), ("fit-image-hash.cfg", small),
                       ("fit-image-permuto.cfg", small)):
        folder = tmp_path / cfg[:-4]
        folder.mkdir()
        first, last = run_cli(folder, monkeypatch, capsys, cfg, *common, *extra)
        assert last < 0.2 * first
        out = read_pfm(folder / "out.pfm")[..., :3]
        mse[cfg] = float(np.mean((out - target) ** 2))
    assert mse["fit-image-hash.cfg"] < 0.4 * mse["fit-image.cfg"], mse
    assert mse["fit-image-permuto.cfg"] < 0.4 * mse["fit-image.cfg"], mse


@pytest.mark.parametrize("d", [2, 3])
def test_reference_permutohedral_simplex(d):
    """The reference's lattice construction: vertices are lattice points (coordinates of one
    remainder mod d+1, summing to 0), the barycentric weights are >= 0, sum to 1 and
    reproduce the elevated point; a unit step in p has the length of a lattice edge."""
    rng = np.random.default_rng(d)
    p = rng.uniform(-30, 30, (2000, d))
    y = ref.elevate(p)
    assert np.allclose(y.sum(1), 0, atol=1e-9)
    assert np.allclose(np.linalg.norm(ref.elevate(np.eye(d)), axis=1), np.sqrt(d * (d + 1)))
    keys, b = ref.simplex(y)
    assert np.all(keys.sum(2) == 0)
    assert np.all(np.ptp(keys % (d + 1), axis=2) == 0)
    assert b.min() >= 0 and np.allclose(b.sum(1), 1)
    assert np.allclose((keys * b[:, :, None]).sum(1), y, atol=1e-9)


def test_reference_table_gradient_is_the_derivative():
    """dE/dT of the reference (the scatter) against central differences of its loss."""
    rng = np.random.default_rng(5)
    T = rgba(target_image(12, 10))
    for enc in (3, 4):
        spec = dict(enc=enc, octaves=0, n_in=4, hidden=6, depth=1, nout=3, bias=True,
                    width=16, tiles=(1, 1), act=4, outact=3, xform=0, filter=0, nets=1,
                    layers=2, batch=30, seed=3, shift=0.0, loss=0, levels=2, features=2,
                    log2size=5, baseres=3, perlevel=2.0)
        W = ref.init_weights(spec, 5)[None][0]
        n_t = ref.table_layout(spec)["floats"]
        table = rng.standard_normal(n_t)
        _, _, dT = ref.frame_loss_grad(spec, W, T, 2, table)
        for e in rng.choice(np.flatnonzero(dT), 8, replace=False):
            tp, tm = table.copy(), table.copy()
            tp[e] += 1e-6
            tm[e] -= 1e-6
            num = (ref.frame_loss_grad(spec, W, T, 2, tp)[0]
                   - ref.frame_loss_grad(spec, W, T, 2, tm)[0]) / 2e-6
            assert abs(num - dT[e]) <= 1e-7 + 1e-5 * abs(num), (enc, e, num, dT[e])


def small_trainer(device, folder: Path, kind: str, frames: int, kpn_levels: int = 2,
                  profile: bool = False, **params):
    """(build, module) of a small mlp-t (resample 1, `params` added) or kpn-t (`kpn_levels`
    levels) training graph of `frames` frames in a new `folder`; `profile`: GPU timestamps
    (and node labels) in the frame lists."""
    folder.mkdir()
    if kind == "mlp-t":
        g = mlp_graph(folder, target_image(20, 24), {"width": 16, "depth": 1, "batch": 64,
                                                     "resample": 1, **params}, frames=frames)
    else:
        from test_kpn_gpu import kpn_graph
        rng = np.random.default_rng(5)
        X = rng.random((16, 16, 4), np.float32)
        g = kpn_graph(folder, X, np.clip(X + 0.1, 0, 1), kpn_levels)
        g.frames = frames
    return Build(g, device, profile=profile), g.modules[(kind, "01")]


@pytest.mark.parametrize("kind", ["mlp-t", "kpn-t"])
def test_frames_in_flight_train_as_one_at_a_time(device, tmp_path, kind):
    """run_frames submits frames back to back (the next one's host work overlaps the one
    running; each command list takes its frame number from its own slot): the trained
    weights must be bit for bit those of frames run and waited for one at a time. mlp-t
    draws its samples from the frame number (resample), kpn-t ping-pongs feedback buffers."""
    def build(folder):
        return small_trainer(device, folder, kind, 9)

    b1, m1 = build(tmp_path / "wait")
    for f in range(9):
        b1.run_frame(f, download=False)  # waits for each
        if f == 1:
            w_early = b1.read(m1.trainable.adam, "w")
    b2, m2 = build(tmp_path / "flight")
    b2.run_frames(0, 9, last_frame_only=True)
    w1, w2 = b1.read(m1.trainable.adam, "w"), b2.read(m2.trainable.adam, "w")
    assert not np.array_equal(w1, w_early)  # the frames after 1 trained
    assert np.array_equal(w1, w2)


def test_frames_in_flight_see_their_frame_number(device, tmp_path):
    """Each frame in flight reads its own frame number (mlp-t draws that frame's samples):
    the loss and gradient of the last of 10 frames run back to back (odd: the second command
    list) are the reference's for frame 9."""
    T = target_image(20, 24)
    g = mlp_graph(tmp_path, T, {"alpha": 0, "width": 16, "depth": 1, "batch": 64,
                                "resample": 1}, frames=10)
    b = Build(g, device)
    m = g.modules[("mlp-t", "01")]
    spec, a = spec_of(m), m.data["arch"]
    b.run_frames(0, 10, last_frame_only=True)
    W, _ = split(a, b.read(m.trainable.adam, "w"))
    E = float(b.read(m.trainable.lsum, "cur")[0])
    for frame in (9, 8):
        Eref = ref.frame_loss_grad(spec, W.astype(np.float64), rgba(T), frame, None)[0]
        if frame == 9:
            assert abs(E - Eref) <= 1e-5 * abs(Eref)
        else:  # another frame's samples give another loss: the check can fail
            assert abs(E - Eref) > 1e-3 * abs(Eref)
