"""The on-disk cache of the driver's compiled pipelines (pipeline/vk/pcache.py)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from vkgraph.pipeline.vk import pcache
from vkgraph.pipeline.vk.compile import compile_glsl
from vkgraph.pipeline.vk.device import Device
from vkgraph.pipeline.vk.library import vk

SHADER = Path(__file__).resolve().parent.parent / "shaders" / "kpn-t" / "sub.comp"


def _spirv() -> bytes:
    return compile_glsl(SHADER, [SHADER.parent.parent / "include"])


def _header(props, version=None, uuid=None) -> bytes:
    vendor, device, own = pcache.header_fields(props)
    return pcache.HEADER.pack(pcache.HEADER.size,
                              vk.VK_PIPELINE_CACHE_HEADER_VERSION_ONE if version is None
                              else version, vendor, device, own if uuid is None else uuid)


def test_header_check(device):
    props = vk.vkGetPhysicalDeviceProperties(device.pd)
    assert pcache.usable(_header(props) + b"data", props)
    assert not pcache.usable(_header(props)[:20], props)  # truncated
    assert not pcache.usable(_header(props, version=7), props)
    assert not pcache.usable(_header(props, uuid=bytes(16) if any(
        pcache.header_fields(props)[2]) else b"\1" * 16), props)
    assert not pcache.usable(b"\xff\xd8\xff\xe0" + bytes(60), props)  # a JPEG, say


def _open_make_close(monkeypatch, root: Path) -> tuple[int, Path]:
    """A fresh device with its pipeline cache under `root`: one kernel made, closed. What
    the cache loaded at open, and its file."""
    monkeypatch.setenv("VKGRAPH_CACHE", str(root))
    spirv = _spirv()
    dev = Device.open()
    try:
        dev.kernel(spirv, 2, local=(64, 1, 1))
        cache = dev.pipeline_cache()
        return cache.loaded, cache.path
    finally:
        dev.close()


def test_foreign_file_is_ignored_and_kernels_still_made(monkeypatch, tmp_path, device):
    props = vk.vkGetPhysicalDeviceProperties(device.pd)
    monkeypatch.setenv("VKGRAPH_CACHE", str(tmp_path))
    path = pcache.cache_file(props)
    path.parent.mkdir(parents=True)
    path.write_bytes(struct.pack("<4I", 32, 1, 0xdead, 0xbeef) + bytes(16) + b"junk")
    loaded, _ = _open_make_close(monkeypatch, tmp_path)
    assert loaded == 0


def test_switched_off(monkeypatch, tmp_path):
    monkeypatch.setenv("VKGRAPH_PIPELINE_CACHE", "0")
    monkeypatch.setenv("VKGRAPH_CACHE", str(tmp_path))
    dev = Device.open()
    try:
        dev.kernel(_spirv(), 2, local=(64, 1, 1))
        assert dev.pipeline_cache() is None
    finally:
        dev.close()
    assert not (tmp_path / "pipelines").exists()


def test_second_run_loads_what_the_first_saved(monkeypatch, tmp_path):
    """The first run writes the file, the second loads it; the second made no pipeline the
    file lacked, so it leaves the file alone."""
    loaded, path = _open_make_close(monkeypatch, tmp_path)
    assert loaded == 0
    if not path.exists():
        pytest.skip("the driver keeps no pipeline data (lavapipe); checked on the GPU")
    size, inode = path.stat().st_size, path.stat().st_ino
    assert size > pcache.HEADER.size
    loaded, _ = _open_make_close(monkeypatch, tmp_path)
    assert loaded == size
    assert path.stat().st_ino == inode  # its pipeline came from the file: not written again
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left behind
