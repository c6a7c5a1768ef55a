"""The file modules' declarations and hooks (i-pfm, i-img, i-lut, o-pfm, o-png, o-jpg, o-exr,
o-lut, display), driven through a tiny stand-in for the engine's build."""

from __future__ import annotations

import struct
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest

from vkgraph.pipeline import formats as F
from vkgraph.pipeline.context import connector_meta
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.module import ModuleClass, ModuleInstance, Roi

MODULES = Path(__file__).resolve().parent.parent / "modules"
KPN_TEXT = ("lut contains weights for\nmulti-level kernel predicting mlp with:\n"
            "6 hidden layers\n64 network width\nplain kernel weight activation\n"
            "const alpha blending activation\nleaky relu mlp activation\nSMAPE loss")


class FakeGraph:
    """What hooks use of a build: the frame, the frame count, file resolution and connector
    metadata (the engine's own lookup)."""

    def __init__(self, root: Path, frame: int = 0, frames: int = 1):
        self.root, self.frame, self.frames = root, frame, frames

    @staticmethod
    def meta(module, connector):
        return connector_meta(module, connector)

    def resolve(self, filename: str) -> Path:
        path = Path(filename)
        return path if path.is_absolute() else self.root / path


_classes: dict[str, ModuleClass] = {}


def instance(name: str, **params) -> ModuleInstance:
    if name not in _classes:
        _classes[name] = ModuleClass(name, MODULES / name)
    m = ModuleInstance(_classes[name], "main")
    for key, value in params.items():
        m.set_param(key.replace("_", " "), value)
    return m


def hook(m: ModuleInstance, name: str):
    fn = m.cls.hook(name)
    assert fn is not None, f"{m} has no {name}"
    return fn


def source(graph, m):
    """The engine's order for a source: ROI pass, then the upload."""
    hook(m, "modify_roi_out")(graph, m)
    out = m.connector("output")
    return out, hook(m, "read_source")(graph, m, out)


def rgb(ht=6, wd=9, seed=0):
    return np.random.default_rng(seed).random((ht, wd, 3), dtype=np.float32)


# ------------------------------------------------------------------------------------------
# declarations

DECLARED = {
    "i-pfm": (["output:source:rgba:f32"], ["filename:string:256:test.pfm", "startid:int:1:0",
                                           "noise a:float:1:0.0", "noise b:float:1:0.0"]),
    "i-img": (["output:source:rgba:f32"], ["filename:string:256:test.png"]),
    "o-pfm": (["input:sink:rgba:*"], ["filename:string:256:output"]),
    "o-png": (["input:sink:rgba:*"], ["filename:string:256:output"]),
    "o-jpg": (["input:sink:rgba:*"], ["filename:string:256:output", "quality:int:1:90"]),
    "o-exr": (["input:sink:rgba:*"], ["filename:string:256:output"]),
    "i-lut": (["output:source:*:*"], ["filename:string:256:test.lut"]),
    "o-lut": (["input:sink:*:*"], ["filename:string:256:output", "best:int:1:0"]),
    "display": (["input:sink:rgba:*"], []),
}


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_declarations_are_vkdt_lines(name):
    connectors, params = DECLARED[name]
    folder = MODULES / name
    assert (folder / "connectors").read_text().splitlines() == connectors
    assert ((folder / "params").read_text().splitlines() if params else []) == params
    cls = ModuleClass(name, folder)
    assert [f"{c.name}:{c.type}:{c.chan}:{c.format}" for c in cls.connectors] == connectors
    readme = cls.readme()
    assert readme.startswith(f"# {name}") and "## Connectors" in readme and "```" in readme
    if name == "display":
        assert cls.hooks is None
    else:
        assert cls.hook("read_source" if name.startswith("i-") else "write_sink")


# ------------------------------------------------------------------------------------------
# i-pfm


def test_i_pfm_reads_rgb_as_rgba(tmp_path):
    img = rgb()
    F.write_pfm(tmp_path / "a.pfm", img)
    g = FakeGraph(tmp_path)
    m = instance("i-pfm", filename="a.pfm", noise_a=2.5, noise_b=0.5)
    out, data = source(g, m)
    assert out.roi == Roi(9, 6)
    assert data.dtype == np.float32 and data.shape == (6, 9, 4)
    assert np.array_equal(data[:, :, :3], img) and np.all(data[:, :, 3] == 1)
    assert not hook(m, "source_due")(g, m)
    assert m.data["noise"] == (2.5, 0.5)


def test_i_pfm_grey_is_expanded(tmp_path):
    img = rgb()[:, :, 0]
    F.write_pfm(tmp_path / "g.pfm", img)
    _, data = source(FakeGraph(tmp_path), instance("i-pfm", filename="g.pfm"))
    assert np.array_equal(data[:, :, 1], img) and np.all(data[:, :, 3] == 1)


def test_i_pfm_sequence(tmp_path):
    for i in (5, 6, 7):
        F.write_pfm(tmp_path / f"seq{i:04d}.pfm", np.full((4, 3, 3), i, np.float32))
    F.write_pfm(tmp_path / "seq0008.pfm", np.zeros((5, 3, 3), np.float32))
    g = FakeGraph(tmp_path, frame=0, frames=4)
    m = instance("i-pfm", filename="seq%04d.pfm", startid=5)
    out, data = source(g, m)
    assert hook(m, "source_due")(g, m)
    assert out.roi == Roi(3, 4) and np.all(data[:, :, :3] == 5)
    for frame in (1, 2):
        g.frame = frame
        assert np.all(hook(m, "read_source")(g, m, out)[:, :, :3] == 5 + frame)
    g.frame = 3
    with pytest.raises(GraphError) as e:
        hook(m, "read_source")(g, m, out)
    assert "seq0008.pfm" in str(e.value) and "3x5" in str(e.value)
    g.frame = 4
    with pytest.raises(GraphError) as e:
        hook(m, "read_source")(g, m, out)
    assert "seq0009.pfm" in str(e.value) and "cannot read" in str(e.value)


def test_i_pfm_bad_files(tmp_path):
    g = FakeGraph(tmp_path)
    with pytest.raises(GraphError) as e:
        source(g, instance("i-pfm"))  # default test.pfm is not there
    assert "test.pfm" in str(e.value)
    img = rgb()
    img[2, 3, 1] = np.inf
    (tmp_path / "inf.pfm").write_bytes(F.pfm_header(9, 6) + img.astype("<f4").tobytes())
    with pytest.raises(GraphError) as e:
        source(g, instance("i-pfm", filename="inf.pfm"))
    assert "x=3 y=2" in str(e.value)
    (tmp_path / "short.pfm").write_bytes(F.pfm_header(4, 4) + bytes(10))
    with pytest.raises(GraphError) as e:
        source(g, instance("i-pfm", filename="short.pfm"))
    assert "byte 16: truncated data" in str(e.value)


# ------------------------------------------------------------------------------------------
# i-img


def test_i_img_png(tmp_path):
    px = np.random.default_rng(1).integers(0, 256, (5, 8, 3), dtype=np.uint8)
    iio.imwrite(tmp_path / "a.png", px)
    g = FakeGraph(tmp_path)
    m = instance("i-img", filename="a.png")
    out, data = source(g, m)
    assert out.roi == Roi(8, 5) and data.shape == (5, 8, 4)
    assert np.allclose(data[:, :, :3], F.srgb_to_linear(px / 255.0))
    assert np.all(data[:, :, 3] == 1)


def test_i_img_exr_and_errors(tmp_path):
    img = rgb(seed=2) * 4
    F.write_exr(tmp_path / "a.exr", img)
    out, data = source(FakeGraph(tmp_path), instance("i-img", filename="a.exr"))
    assert np.array_equal(data[:, :, :3], img)
    (tmp_path / "bad.png").write_bytes(b"not a png at all")
    with pytest.raises(GraphError) as e:
        source(FakeGraph(tmp_path), instance("i-img", filename="bad.png"))
    assert "bad.png" in str(e.value)


# ------------------------------------------------------------------------------------------
# i-lut


def test_i_lut_kpn_weights_as_ssbo(tmp_path):
    w = np.random.default_rng(3).standard_normal(64 * 448).astype(np.float16)
    F.write_lut(tmp_path / "w.lut", w, 1, "f16", 64, 448, ssbo=True, text=KPN_TEXT)
    m = instance("i-lut", filename="w.lut")
    out, data = source(FakeGraph(tmp_path), m)
    assert (out.chan, out.format, out.roi) == ("ssbo", "f16", Roi(64, 448))
    assert out.nbytes() == 57344
    assert data.dtype == np.float16 and data.shape == (28672,) and np.array_equal(data, w)
    assert out.meta == {"text": KPN_TEXT}  # published for readers (kpn, o-lut)


@pytest.mark.parametrize("channels,fmt,chan", [(1, "f32", "r"), (2, "f16", "rg"),
                                               (3, "ui8", "rgba"), (4, "f32", "rgba")])
def test_i_lut_images(tmp_path, channels, fmt, chan):
    src = np.random.default_rng(4).random((3, 5, channels)).astype(np.float32)
    F.write_lut(tmp_path / "i.lut", src, channels, fmt, 5, 3)
    m = instance("i-lut", filename="i.lut")
    out, data = source(FakeGraph(tmp_path), m)
    assert (out.chan, out.format, out.roi) == (chan, fmt, Roi(5, 3))
    assert data.dtype == np.float32 and data.shape == (3, 5, out.nchan)
    stored = F.read_lut(tmp_path / "i.lut")[0].astype(np.float32)
    if fmt == "ui8":
        stored /= 255
    assert np.array_equal(data[:, :, :channels], stored)
    if channels == 3:
        assert np.all(data[:, :, 3] == 1)
    assert out.meta == {}


def test_i_lut_bad_file(tmp_path):
    (tmp_path / "v1.lut").write_bytes(struct.pack("<IHBBII", 1234, 1, 1, 16, 2, 2) + bytes(8))
    with pytest.raises(GraphError) as e:
        source(FakeGraph(tmp_path), instance("i-lut", filename="v1.lut"))
    assert "v1.lut" in str(e.value) and "byte 4" in str(e.value)


# ------------------------------------------------------------------------------------------
# writers


def sink(name: str, chan: str, fmt: str, roi: Roi, **params):
    m = instance(name, **params)
    c = m.connector("input")
    c.chan, c.format, c.roi = chan, fmt, roi
    return m, c


def test_o_lut_writes_kpn_weights_like_vkdt(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w = np.random.default_rng(5).standard_normal(64 * 448).astype(np.float16)
    m, c = sink("o-lut", "ssbo", "f16", Roi(64, 448), filename="weights")
    writer = instance("kpn-t")
    writer.connector("w").meta["text"] = KPN_TEXT
    c.source = (writer, "w")  # the wire: o-lut writes its writer's text
    hook(m, "write_sink")(FakeGraph(tmp_path, frame=3), m, c, w)
    raw = (tmp_path / "weights.lut").read_bytes()
    assert len(raw) == 57558
    assert struct.unpack("<IHBBII", raw[:16]) == (1234, 2, 1, 16, 64, 448)
    assert raw[16:16 + 57344] == w.tobytes() and raw.endswith(b"SMAPE loss\n")


def test_o_lut_round_trips_i_lut(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w = np.random.default_rng(6).standard_normal(64 * 448).astype(np.float16)
    F.write_lut(tmp_path / "in.lut", w, 1, "f16", 64, 448, ssbo=True, text=KPN_TEXT)
    g = FakeGraph(tmp_path)
    src = instance("i-lut", filename="in.lut")
    out, data = source(g, src)
    m, c = sink("o-lut", out.chan, out.format, out.roi, filename="out")
    c.source = (src, "output")  # the wire: the text travels from i-lut to o-lut
    hook(m, "write_sink")(g, m, c, data)
    assert (tmp_path / "out.lut").read_bytes() == (tmp_path / "in.lut").read_bytes()


@pytest.mark.parametrize("fmt,code,dtype", [("f16", 0, np.float16), ("f32", 1, np.float32),
                                            ("ui8", 2, np.uint8), ("*", 1, np.float32)])
def test_o_lut_images(tmp_path, monkeypatch, fmt, code, dtype):
    monkeypatch.chdir(tmp_path)
    img = np.random.default_rng(7).random((4, 6, 2), dtype=np.float32)
    m, c = sink("o-lut", "rg", fmt, Roi(6, 4))
    hook(m, "write_sink")(FakeGraph(tmp_path), m, c, img)
    data, info, text = F.read_lut(tmp_path / "output.lut")
    assert (info.datatype, info.channels, info.wd, info.ht, text) == (code, 2, 6, 4, None)
    ref = np.rint(img * 255) if fmt == "ui8" else img
    assert np.array_equal(data, ref.astype(dtype))


def test_o_pfm_round_trips_i_pfm_bytes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    F.write_pfm(tmp_path / "in.pfm", rgb(7, 5))
    g = FakeGraph(tmp_path)
    out, data = source(g, instance("i-pfm", filename="in.pfm"))
    m, c = sink("o-pfm", "rgba", "f32", out.roi, filename="copy")
    hook(m, "write_sink")(g, m, c, data)
    assert (tmp_path / "copy.pfm").read_bytes() == (tmp_path / "in.pfm").read_bytes()


def test_writers_number_frames(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    img = np.concatenate([rgb(), np.ones((6, 9, 1), np.float32)], axis=2)
    for frame in (0, 1):
        m, c = sink("o-pfm", "rgba", "f32", Roi(9, 6), filename="run_%04d")
        hook(m, "write_sink")(FakeGraph(tmp_path, frame=frame, frames=2), m, c, img)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run_0000.pfm", "run_0001.pfm"]


def test_o_png_o_jpg_o_exr(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    y, x = np.mgrid[0:16, 0:24] / 24
    img = np.stack([x, y, x * y, np.ones_like(x)], axis=2).astype(np.float32)
    g = FakeGraph(tmp_path)
    m, c = sink("o-png", "rgba", "f32", Roi(24, 16))
    hook(m, "write_sink")(g, m, c, img)
    assert np.array_equal(iio.imread(tmp_path / "output.png"), F.to_srgb8(img[:, :, :3]))
    for quality in (20, 100):
        m, c = sink("o-jpg", "rgba", "f32", Roi(24, 16), filename=f"q{quality}",
                    quality=quality)
        hook(m, "write_sink")(g, m, c, img)
    assert (tmp_path / "q20.jpg").stat().st_size < (tmp_path / "q100.jpg").stat().st_size
    for fmt in ("f32", "f16"):
        m, c = sink("o-exr", "rgba", fmt, Roi(24, 16), filename=f"e{fmt}")
        hook(m, "write_sink")(g, m, c, img)
        got = F.read_exr(tmp_path / f"e{fmt}.exr")
        want = img[:, :, :3].astype(np.float16 if fmt == "f16" else np.float32)
        assert np.array_equal(got[:, :, :3], want.astype(np.float32))
    assert (tmp_path / "ef16.exr").stat().st_size < (tmp_path / "ef32.exr").stat().st_size


def test_writer_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    m, c = sink("o-pfm", "rgba", "f32", Roi(2, 2), filename="missing/dir/out")
    with pytest.raises(GraphError) as e:
        hook(m, "write_sink")(FakeGraph(tmp_path), m, c, np.zeros((2, 2, 4), np.float32))
    assert "does not exist" in str(e.value)
    with pytest.raises(GraphError, match="'filename' of o-png:main is empty"):
        sink("o-png", "rgba", "f32", Roi(2, 2), filename="")
