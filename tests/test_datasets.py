"""Training sets: pipeline/datasets.py (folders, globs, list files, pkg: paths), i-set's
packing, and cnngenin's batches of tiles from an image or a set."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import CPU_DRIVER, VKGRAPH, has_cpu_driver, load_script, vkgraph_env

from vkgraph.api import run_graph
from vkgraph.pipeline.datasets import image_set, package_file
from vkgraph.pipeline.errors import GraphError
from vkgraph.pipeline.formats import write_pfm
from vkgraph.pipeline.graph import Graph
from vkgraph.pipeline.registry import Registry
from vkgraph.pipeline.testing import CAPTURE

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = CAPTURE  # the `capture` sink


def _iset():
    return load_script("modules/i-set/module.py", "i_set_test")


def test_package_file_and_errors():
    pytest.importorskip("skimage")
    assert package_file("pkg:skimage/data/astronaut.png").is_file()
    with pytest.raises(GraphError, match="not installed"):
        package_file("pkg:no_such_package_xyz/a.png")
    with pytest.raises(GraphError, match="has no file"):
        package_file("pkg:skimage/data/missing.png")
    with pytest.raises(GraphError, match="expected pkg"):
        package_file("pkg:skimage")


def test_image_sets(tmp_path):
    for name in ("b.pfm", "a.pfm", "notes.txt"):
        (tmp_path / name).write_bytes(b"x")
    near = lambda n: tmp_path / n  # noqa: E731
    assert [p.name for p in image_set(".", near)] == ["a.pfm", "b.pfm"]  # a folder, sorted
    assert [p.name for p in image_set("*.pfm", near)] == ["a.pfm", "b.pfm"]
    (tmp_path / "list.txt").write_text("# a list\nb.pfm  # comment\n\na.pfm\n")
    assert [p.name for p in image_set("list.txt", near)] == ["b.pfm", "a.pfm"]
    (tmp_path / "bad.txt").write_text("a.pfm\nmissing.png\n")
    with pytest.raises(GraphError, match="bad.txt:2: no such image file 'missing.png'"):
        image_set("bad.txt", near)
    (tmp_path / "empty").mkdir()
    with pytest.raises(GraphError, match="holds no images"):
        image_set("empty", near)
    with pytest.raises(GraphError, match="no such file or folder"):
        image_set("nothing-here", near)


def test_shipped_photo_lists_are_disjoint():
    pytest.importorskip("skimage")
    here = ROOT / "graphs" / "photos"
    near = lambda n: here / n  # noqa: E731
    train = {p.resolve() for p in image_set("train.txt", near)}
    held = {p.resolve() for p in image_set("held-out.txt", near)}
    assert len(held) >= 4 and len(train) >= 10 and not train & held


def test_pack_layout():
    a = np.full((3, 2, 4), 0.25, np.float32)
    b = np.arange(5 * 4 * 4, dtype=np.float32).reshape(5, 4, 4)
    data = _iset().pack([a, b]).reshape(-1, 4)
    head = data[:3].view(np.uint32)
    assert head[0, 0] == 2
    assert tuple(head[1, :3]) == (3, 2, 3) and tuple(head[2, :3]) == (9, 4, 5)
    np.testing.assert_array_equal(data[3:9], a.reshape(-1, 4))
    np.testing.assert_array_equal(data[9:29], b.reshape(-1, 4))


# -- cnngenin batches ----------------------------------------------------------------------

def _graph(tmp_path, source: str, **params):
    reg = Registry([ROOT / "modules", FIXTURES])
    g = Graph(registry=reg)
    if source == "set":
        g.add_module("i-set", "s").set_param("filename", str(tmp_path / "set"))
        src = ("i-set", "s")
    else:
        g.add_module("i-pfm", "s").set_param("filename", str(tmp_path / "img.pfm"))
        src = ("i-pfm", "s")
    gen = g.add_module("cnngenin", "01")
    for k, v in params.items():
        gen.set_param(k, v)
    g.connect(*src, "output", "cnngenin", "01", "imgi")
    g.connect(*src, "output", "cnngenin", "01", "refi")
    for conn in ("imgo", "refo", "noiseab"):
        g.add_module("capture", conn)
        g.connect("cnngenin", "01", conn, "capture", conn, "input")
    cap = reg.get("capture").hooks.CAPTURED
    cap.clear()
    return g, cap


def _frame(cap, f):
    return tuple(cap[(c, f)] for c in ("imgo", "refo", "noiseab"))


VALUES = (0.001, 0.1, 10.0)


@pytest.fixture
def pictures(tmp_path):
    rng = np.random.default_rng(1)
    write_pfm(tmp_path / "img.pfm", rng.uniform(0, 1, (70, 80, 3)).astype(np.float32))
    (tmp_path / "set").mkdir()
    # constant images of distinct values (ratios > 16, the exposure's range) and sizes (one
    # smaller than a tile)
    for k, (wd, ht) in enumerate([(40, 30), (100, 20), (8, 8)]):
        write_pfm(tmp_path / "set" / f"{k}.pfm", np.full((ht, wd, 3), VALUES[k], np.float32))
    return tmp_path


def test_batch_grid_tile0_is_vkdts_tile(device, pictures):
    """A batch of 6 tiles of 64 is a 3 x 2 grid; tile 0 is exactly the single tile that
    batch 1 (vkdt's behaviour) gives; the other tiles differ; each tile has its record."""
    g1, cap1 = _graph(pictures, "img", generate=4, tiles=1)
    run_graph(g1, device, frames=2)
    one = {f: _frame(cap1, f) for f in range(2)}
    g6, cap6 = _graph(pictures, "img", generate=4, tiles=1, batch=6)
    run_graph(g6, device, frames=2)
    for f in range(2):
        imgo, refo, nab = _frame(cap6, f)
        assert imgo.shape == (128, 192, 4)
        np.testing.assert_array_equal(imgo[:64, :64], one[f][0])
        np.testing.assert_array_equal(refo[:64, :64], one[f][1])
        rec = nab.reshape(6, 4)
        np.testing.assert_array_equal(rec[0, :3], one[f][2][:3])  # [3]: tile columns
        assert np.all(rec[:, 2] == 64) and np.all(rec[:, 3] == 3)
        assert len(set(rec[:, 0].tolist())) == 6  # a noise draw per tile
        tiles = [refo[64 * (t // 3):64 * (t // 3 + 1), 64 * (t % 3):64 * (t % 3 + 1)]
                 for t in range(6)]
        assert all(not np.array_equal(tiles[0], t) for t in tiles[1:])


def test_batch_needs_tiles(device, pictures):
    g, _ = _graph(pictures, "img", generate=1, tiles=0, batch=2)
    with pytest.raises(GraphError, match="needs tiles 1"):
        run_graph(g, device, frames=1)


def test_set_tiles_come_from_one_image_each(device, pictures):
    """From a set of constant images, every tile is constant (one image per tile) and its
    value is an image's value times 2^ev with ev in [-2, 2]; over frames every image is
    drawn; generate 0 repeats image 0's top-left crop."""
    g, cap = _graph(pictures, "set", generate=1, tiles=1, batch=4, tile=16)
    run_graph(g, device, frames=12)
    seen = set()
    for f in range(12):
        refo = _frame(cap, f)[1]
        assert refo.shape == (32, 32, 4)
        for ty in range(2):
            for tx in range(2):
                t = refo[16 * ty:16 * ty + 16, 16 * tx:16 * tx + 16, :3]
                assert np.ptp(t) == 0
                v = float(t[0, 0, 0])
                k = [k for k in range(3) if 0.24 <= v / VALUES[k] <= 4.01]
                assert len(k) == 1
                seen.update(k)
    assert seen == {0, 1, 2}
    g, cap = _graph(pictures, "set", generate=0, tiles=1, batch=2, tile=16)
    run_graph(g, device, frames=1)
    np.testing.assert_allclose(_frame(cap, 0)[1][..., :3], VALUES[0], rtol=1e-3)


def test_zoom_reads_the_mean_of_zoom_squared_pixels(device, tmp_path):
    """zoom 2: a tile drawn z = 2 is the 2x2 means of its image: on a pattern with one bright
    pixel in every 2x2 block it is constant at (1 + 3 x 0.2) / 4 = 0.4 times the tile's
    exposure; a tile drawn z = 1 is, bit for bit, what zoom 1 gives (the draw leaves every
    other number alone), and both kinds occur. zoom without a training set is an error."""
    pattern = np.full((64, 64, 3), 0.2, np.float32)
    pattern[::2, ::2] = 1.0
    (tmp_path / "set").mkdir()
    write_pfm(tmp_path / "set" / "0.pfm", pattern)
    common = dict(generate=1, tiles=1, batch=4, tile=16)
    runs = []
    for zoom in (1, 2):
        g, cap = _graph(tmp_path, "set", zoom=zoom, **common)
        run_graph(g, device, frames=8)
        runs.append({f: _frame(cap, f)[1] for f in range(8)})
    kinds = set()
    for f in range(8):
        for t in range(4):
            ty, tx = divmod(t, 2)
            part = (slice(16 * ty, 16 * ty + 16), slice(16 * tx, 16 * tx + 16), slice(0, 3))
            plain, zoomed = runs[0][f][part], runs[1][f][part]
            gain = float(plain.max())  # the tile's exposure: zoom 1 always holds a 1.0 pixel
            if np.ptp(zoomed) == 0:
                kinds.add(2)
                np.testing.assert_allclose(zoomed, 0.4 * gain, rtol=2e-3)
            else:
                kinds.add(1)
                np.testing.assert_array_equal(zoomed, plain)
    assert kinds == {1, 2}
    write_pfm(tmp_path / "img.pfm", pattern)
    g, _ = _graph(tmp_path, "img", zoom=2, **common)
    with pytest.raises(GraphError, match="zoom 2 needs training sets"):
        run_graph(g, device, frames=1)


def test_set_needs_tiles_and_pairs_of_equal_sets(device, pictures):
    g, _ = _graph(pictures, "set", generate=1, tiles=0)
    with pytest.raises(GraphError, match="needs tiles 1"):
        run_graph(g, device, frames=1)


def test_real_pairs_from_two_sets(device, tmp_path):
    """A noisy set into imgi and its clean set into refi (generate 1): every tile of imgo is
    cut from the same image at the same place as refo's (here noisy = 2 x clean, pixel for
    pixel, in images of two sizes)."""
    rng = np.random.default_rng(2)
    for k, (wd, ht) in enumerate([(50, 40), (30, 70)]):
        for folder in ("noisy", "clean"):
            (tmp_path / folder).mkdir(exist_ok=True)
        clean = rng.uniform(0.1, 1.0, (ht, wd, 3)).astype(np.float32)
        write_pfm(tmp_path / "clean" / f"{k}.pfm", clean)
        write_pfm(tmp_path / "noisy" / f"{k}.pfm", 2 * clean)
    reg = Registry([ROOT / "modules", FIXTURES])
    g = Graph(registry=reg)
    for inst in ("noisy", "clean"):
        g.add_module("i-set", inst).set_param("filename", str(tmp_path / inst))
    gen = g.add_module("cnngenin", "01")
    for k, v in {"generate": 1, "batch": 4, "tile": 16}.items():
        gen.set_param(k, v)
    g.connect("i-set", "noisy", "output", "cnngenin", "01", "imgi")
    g.connect("i-set", "clean", "output", "cnngenin", "01", "refi")
    for conn in ("imgo", "refo"):
        g.add_module("capture", conn)
        g.connect("cnngenin", "01", conn, "capture", conn, "input")
    cap = reg.get("capture").hooks.CAPTURED
    cap.clear()
    run_graph(g, device, frames=3)
    for f in range(3):
        imgo, refo = cap[("imgo", f)], cap[("refo", f)]
        assert imgo.shape == (32, 32, 4)
        np.testing.assert_allclose(imgo[..., :3], 2 * refo[..., :3], rtol=2e-3)
    assert not np.array_equal(cap[("refo", 0)], cap[("refo", 1)])
    # sets of different layouts are refused
    (tmp_path / "other").mkdir()
    write_pfm(tmp_path / "other" / "0.pfm", np.zeros((10, 10, 3), np.float32))
    g.modules[("i-set", "clean")].set_param("filename", str(tmp_path / "other"))
    with pytest.raises(GraphError, match="differ in size"):
        run_graph(g, device, frames=1)


# -- i-set downscaling (maxpix) ----------------------------------------------------------

def test_box_downscale_is_the_area_mean():
    iset = _iset()
    rng = np.random.default_rng(3)
    im = rng.uniform(0, 1, (12, 18, 4)).astype(np.float32)
    half = iset.downscale(im, 9, 6)  # a whole factor 2: the 2x2 means
    want = im.reshape(6, 2, 9, 2, 4).mean(axis=(1, 3))
    np.testing.assert_allclose(half, want, rtol=1e-6, atol=1e-7)
    odd = iset.downscale(im, 7, 5)  # fractional: each output the mean of the area it covers
    assert odd.shape == (5, 7, 4)
    np.testing.assert_allclose(odd.mean(axis=(0, 1)), im.mean(axis=(0, 1)), rtol=1e-5)
    flat = iset.downscale(np.full((300, 301, 4), 0.3, np.float32), 100, 77)
    np.testing.assert_allclose(flat, 0.3, rtol=1e-6)


def large_photos(folder: Path, n: int = 3, wd: int = 3000, ht: int = 2000) -> None:
    """n smooth wd x ht PNGs, cheap to make (and to compress)."""
    import imageio.v3 as iio

    folder.mkdir()
    yy, xx = np.mgrid[0:ht, 0:wd]
    for k in range(n):
        rgb = np.stack([(xx * (k + 1) // 13) % 256, (yy // 9) % 256,
                        ((xx + yy) // (7 + k)) % 256], -1).astype(np.uint8)
        iio.imwrite(folder / f"{k}.png", rgb)


def test_a_folder_of_large_photos_trains_on_the_cpu_driver(tmp_path):
    """3 photos of 6 MP (96 MiB each as rgba f32) are more than the CPU driver's 128 MiB
    storage buffers: i-set (maxpix 0) downscales them to what one buffer holds, says so in
    one line, and kpn-t trains on them. maxpix given: that budget; more than the device holds
    is a usage error. It runs on the CPU driver where a machine has it beside a GPU (whose
    buffers span more), and is skipped where it has none."""
    if not has_cpu_driver():
        pytest.skip("needs the CPU driver (lavapipe), whose storage buffers span 128 MiB")
    large_photos(tmp_path / "photos")
    lines = ["frames:2", f"param:i-set:train:filename:{tmp_path / 'photos'}",
             "param:cnngenin:01:batch:2", "param:cnngenin:01:tile:16"]

    def train(*more):
        return subprocess.run([*VKGRAPH, "cli", "-g", str(ROOT / "graphs" / "train-kpn.cfg"),
                               "--last-frame-only", "--config", *lines, *more], cwd=tmp_path,
                              capture_output=True, text=True, timeout=600,
                              env=vkgraph_env({**os.environ, "VKGRAPH_DEVICE": CPU_DRIVER}))

    res = train()
    assert res.returncode == 0, res.stderr
    said = [ln for ln in res.stderr.splitlines() if "i-set:train: 3 images" in ln]
    assert len(said) == 1, res.stderr
    assert "of 18 MP in all, downscaled by" in said[0], said
    assert "a storage buffer of the device spans 128 MiB" in said[0]
    assert "kpn-t:01: 2 frames" in res.stdout
    assert (tmp_path / "mlp-w.lut").is_file()
    res = train("param:i-set:train:maxpix:200000000")  # 3.2 GB: more than lavapipe's buffers
    assert res.returncode == 2 and "maxpix 200000000 is more than" in res.stderr
    assert "Traceback" not in res.stderr


def test_maxpix_is_the_sets_budget(tmp_path, caplog):
    """maxpix given: the set is downscaled to at most that many pixels, every image by the
    same factor; a set within it is kept as it is."""
    from types import SimpleNamespace

    from vkgraph.pipeline.formats import write_png

    iset = _iset()
    (tmp_path / "s").mkdir()
    for k, (wd, ht) in enumerate([(400, 300), (200, 100)]):
        write_png(tmp_path / "s" / f"{k}.png", np.full((ht, wd, 3), 0.5, np.float32))

    def load(maxpix):
        class Module:
            data = {}

            def param(self, name):
                return {"filename": str(tmp_path / "s"), "maxpix": maxpix}[name]

            def __str__(self):
                return "i-set:s"

        module = Module()
        graph = SimpleNamespace(resolve=lambda n: Path(n), capabilities=None)
        iset.load(graph, module)
        return module.data["sizes"]

    assert load(0) == [(400, 300), (200, 100)]  # no device limit known: 4 GiB
    assert load(140000) == [(400, 300), (200, 100)]
    with caplog.at_level("WARNING", logger="vkgraph"):
        sizes = load(35000)  # a quarter: half the size each way
    assert sizes == [(200, 150), (100, 50)]
    assert ("i-set:s: 2 images of 0.14 MP in all, downscaled by 0.500 to 0.035 MP (maxpix is "
            "35000)") in caplog.text
