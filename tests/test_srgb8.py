"""The 8-bit path of `vkgraph denoise`: srgb-in and srgb-out against the host's sRGB tables,
i-bytes and o-array's storage-buffer sink, the Denoiser's srgb() against its float path, its
refusal of non-finite results, and the command choosing the path for 8-bit photos."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from vkgraph.api import Session
from vkgraph.apps.denoise import Denoiser
from vkgraph.cli.main import main
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.formats import (
    decode_unorm,
    linear_rgba,
    read_image,
    srgb8_glsl,
    srgb_samples,
    write_jpg,
)
from vkgraph.pipeline.graph import Graph
from vkgraph.pipeline.registry import DEFAULT_DIR, HOST_MODULES, Registry
from vkgraph.pipeline.testing import dispatch, session_device

ROOT = Path(__file__).resolve().parent.parent
WEIGHTS = str(ROOT / "graphs" / "weights" / "kpn-photo.lut")


def chain(module: str, source: str, data, outputs=("output",), params=None) -> dict:
    """source -> module (its `params` set) -> an o-array per output, run once; what each
    sink took."""
    g = Graph(Registry([DEFAULT_DIR, HOST_MODULES]))
    g.add_module(source, "main")
    g.add_module(module, "main")
    g.connect(source, "main", "output", module, "main", "input")
    for name in outputs:
        g.add_module("o-array", name)
        g.connect(module, "main", name, "o-array", name, "input")
    with Session(g, session_device()) as s:
        s.feed(f"{source}:main", data)
        for name, value in (params or {}).items():
            s.set(f"{module}:main", name, value)
        s.step(0)
        return {name: s.take(f"o-array:{name}") for name in outputs}


def test_srgb_in_decodes_every_code_as_the_host_table():
    """Every 8-bit code in each of r, g, b through the sRGB curve and in alpha linearly: the
    host's float32 values (decode_unorm) bit for bit."""
    codes = np.arange(256, dtype=np.uint8)
    px = np.stack([codes, np.roll(codes, 85), np.roll(codes, 170), codes[::-1]], -1)
    px = np.ascontiguousarray(px.reshape(16, 16, 4))
    got = chain("srgb-in", "i-bytes", px)["output"]
    want = decode_unorm(px)
    assert got.shape == (16, 16, 4) and got.dtype == np.float32
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_srgb_out_codes_and_counts_non_finite():
    """Linear values -> the codes of the host's exact encoder (srgb_samples), also at each
    code's smallest value and the float32 just below it; clamped to [0, 1], NaN to 0, alpha
    255; `bad` counts the pixels with a NaN or inf."""
    rng = np.random.default_rng(1)
    img = np.ones((64, 64, 4), np.float32)
    img[..., :3] = rng.uniform(-0.1, 1.1, (64, 64, 3))
    edges = np.array(re.findall(r"0x([0-9A-F]{8})u", srgb8_glsl().split("SRGB8_EDGE")[-1]))
    edges = np.array([int(v, 16) for v in edges], np.uint32).view(np.float32)
    near = np.concatenate([edges, np.nextafter(edges, np.float32(0))])
    rgb = img[..., :3]  # rows 2.. hold the edges and the values just below them
    rgb[np.unravel_index(np.arange(near.size) + 2 * 64 * 3, rgb.shape)] = near
    img[0, :8, 0] = [np.nan, np.inf, -np.inf, 0, 1, 2, -1, 0.0031308]
    img[1, :3, 1] = np.nan  # three more pixels with a NaN
    out = dispatch("srgb-out", inputs={"input": img},
                   outputs={"output": ((64 * 64,), np.uint32), "bad": ((1,), np.uint32)})
    got = out["output"].view(np.uint8).reshape(64, 64, 4)
    assert int(out["bad"][0]) == 6  # (0, 0..2) and (1, 0..2)
    finite = np.nan_to_num(img[..., :3], nan=0.0, posinf=1.0, neginf=0.0)
    want = srgb_samples(finite, "u8")
    assert (got[..., 3] == 255).all()
    assert list(got[0, :7, 0]) == [0, 255, 0, 0, 255, 255, 0]
    assert np.array_equal(got[..., :3], want)


def test_the_shaders_tables_are_the_hosts():
    """shaders/include/srgb8.glsl is what formats.srgb8_glsl() makes of the host's tables."""
    assert (ROOT / "shaders" / "include" / "srgb8.glsl").read_text() == srgb8_glsl()


@pytest.fixture(scope="module")
def den():
    return Denoiser(session_device(), WEIGHTS)


def photo8(h: int = 40, w: int = 56, seed: int = 2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    clean = np.stack([128 + 90 * np.sin(xx / 5.0 + c) * np.cos(yy / 7.0) for c in range(3)], -1)
    px = np.full((h, w, 4), 255, np.uint8)
    px[..., :3] = np.clip(clean + 12 * rng.standard_normal(clean.shape), 0, 255)
    return px


def test_srgb_matches_the_float_path(den):
    """Denoiser.srgb on 8-bit pixels: the float path's result (decoded on the host, run,
    encoded on the host), code for code."""
    px = photo8()
    assert den.srgb8() == (den.device.info.type != "CPU")  # the command's choice
    got = den.srgb(px, 0.0, 60.0)
    want = srgb_samples(den(linear_rgba(px), 0.0, 60.0), "u8")
    assert np.array_equal(got[..., :3], want)
    assert (got[..., 3] == 255).all()
    assert np.abs(got[..., :3].astype(int) - px[..., :3]).mean() > 1  # it did denoise


def test_srgb_refuses_non_finite_results(den, monkeypatch):
    """A result with non-finite pixels (srgb-out's count) is an error, after the fp32
    kernels were tried where the f16 ones ran."""
    calls = []

    def run(pixels, a, b):
        calls.append(den.fp32)
        return pixels, 7

    monkeypatch.setattr(den, "_run_srgb8", run)
    monkeypatch.setattr(den, "_f16", lambda: True)
    monkeypatch.setattr(den, "fp32", False)
    with pytest.raises(GraphError, match="7 pixels of non-finite"):
        den.srgb(photo8(), 0.0, 60.0)
    assert calls == [False, True]
    with pytest.raises(GraphError, match="uint8"):
        den.srgb(np.zeros((8, 8, 4), np.float32), 0.0, 1.0)


def test_the_command_takes_the_8bit_path_for_8bit_photos(tmp_path, capsys, monkeypatch):
    """`vkgraph denoise photo.jpg -o out.png` runs the 8-bit path (Denoiser.srgb) where
    Denoiser.srgb8 says so (on a GPU; here made to) and writes what the float path writes
    (srgb8 saying no, as on a CPU driver), code for code."""
    src = tmp_path / "p.jpg"
    write_jpg(src, linear_rgba(photo8()), quality=95)
    used = []
    srgb = Denoiser.srgb

    def spy(self, *args):
        used.append("srgb")
        return srgb(self, *args)

    monkeypatch.setattr(Denoiser, "srgb", spy)
    monkeypatch.setattr(Denoiser, "srgb8", lambda self: True)
    assert main(["denoise", str(src), "-o", str(tmp_path / "a.png"), "--weights", WEIGHTS]) == 0
    assert used == ["srgb"]
    monkeypatch.setattr(Denoiser, "srgb8", lambda self: False)
    assert main(["denoise", str(src), "-o", str(tmp_path / "b.png"), "--weights", WEIGHTS]) == 0
    assert used == ["srgb"]
    capsys.readouterr()
    a = srgb_samples(read_image(tmp_path / "a.png")[..., :3], "u8").astype(int)
    b = srgb_samples(read_image(tmp_path / "b.png")[..., :3], "u8").astype(int)
    assert a.shape == (40, 56, 3) and np.array_equal(a, b)


def test_prepare_builds_the_path_the_command_takes():
    """Denoiser.prepare(wd, ht, "srgb8") (the command, while the JPEG decodes) builds the
    8-bit graph where srgb8() sends the photo there (a GPU) and the float one where it does
    not (a CPU driver): never a build the call then leaves unused."""
    den = Denoiser(session_device(), WEIGHTS)
    den.prepare(56, 40, "srgb8")
    assert [key[3] for key in den.sessions] == ["srgb8" if den.srgb8() else "float"]
    den.close()
