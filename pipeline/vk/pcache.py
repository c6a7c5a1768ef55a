"""The driver's compiled pipelines kept on disk between runs (a VkPipelineCache).

Creating a compute pipeline makes the driver compile SPIR-V to machine code. The SPIR-V is
cached already (compile.py); this keeps the driver's output too, so that a second run of the
same graph on the same device and driver skips that compile (on an H100 the first build of
`vkgraph denoise` spent most of its time there). One file per device and driver:
`$VKGRAPH_CACHE/pipelines/<pipelineCacheUUID>-<vendor>-<device>-<driver>.bin`. It is read
when the device opens, and written back (atomically, only when new pipelines were made, that
the file did not hold) when the device closes. The driver checks the data's header itself
and ignores data it cannot use; we check it too, so that a foreign or truncated file is
never handed over. VKGRAPH_PIPELINE_CACHE=0 turns it off (the driver's pipelines are then
made afresh every run).
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

from ..errors import VkgraphError
from ..formats import atomic_write
from .compile import cache_root
from .errors import call
from .library import vk

log = logging.getLogger("vkgraph")

HEADER = struct.Struct("<IIII16s")  # VkPipelineCacheHeaderVersionOne


def enabled() -> bool:
    return os.environ.get("VKGRAPH_PIPELINE_CACHE", "1").strip().lower() not in ("0", "off",
                                                                                 "no", "false")


def header_fields(props) -> tuple[int, int, bytes]:
    """(vendorID, deviceID, pipelineCacheUUID) of a VkPhysicalDeviceProperties."""
    return props.vendorID, props.deviceID, bytes(vk.ffi.buffer(props.pipelineCacheUUID))


def cache_file(props) -> Path:
    vendor, device, uuid = header_fields(props)
    return cache_root() / "pipelines" / (f"{uuid.hex()}-{vendor:04x}-{device:04x}-"
                                         f"{props.driverVersion:08x}.bin")


def usable(data: bytes, props) -> bool:
    """Whether `data` starts with a version-one header of this device and driver."""
    if len(data) < HEADER.size:
        return False
    size, version, vendor, device, uuid = HEADER.unpack_from(data)
    return (size >= HEADER.size and version == vk.VK_PIPELINE_CACHE_HEADER_VERSION_ONE
            and (vendor, device, uuid) == header_fields(props))


class PipelineCache:
    """One VkPipelineCache of a device, seeded from and saved to its file."""

    def __init__(self, device, props):
        self.device = device
        self.path = cache_file(props)
        self.dirty = False
        data = b""
        try:
            data = self.path.read_bytes()
        except OSError:
            pass
        if data and not usable(data, props):
            log.info("pipeline cache %s is for another device or driver; starting afresh",
                     self.path)
            data = b""
        self.seed = data  # what the file held: a run that adds nothing to it writes nothing
        info = vk.VkPipelineCacheCreateInfo(
            initialDataSize=len(data), pInitialData=vk.ffi.from_buffer(data) if data else None)
        self.handle = call("vkCreatePipelineCache", vk.vkCreatePipelineCache, device.handle,
                           info, None)

    @property
    def loaded(self) -> int:
        """The bytes of driver data the cache started from (0: none, or unusable)."""
        return len(self.seed)

    def data(self) -> bytes:
        """What the driver holds now (vkGetPipelineCacheData's two calls)."""
        dev = self.device.handle
        size = vk.ffi.new("size_t *")
        if vk.lib.vkGetPipelineCacheData(dev, self.handle, size, vk.ffi.NULL) != 0:
            return b""
        buf = vk.ffi.new("char[]", size[0])
        if vk.lib.vkGetPipelineCacheData(dev, self.handle, size, buf) != 0:
            return b""
        return bytes(vk.ffi.buffer(buf, size[0]))

    def save(self) -> None:
        """Write the cache back when this run made pipelines that the file did not hold (the
        driver's data differs from it); a cache folder that cannot be written costs only the
        next run's compile, so it is a log line, not an error. (A run whose pipelines all
        came from the file skips the write and its two fsyncs: 12 MP `vkgraph denoise`
        closes its device faster.)"""
        if not self.dirty:
            return
        data = self.data()
        if len(data) <= HEADER.size or data == self.seed:  # nothing kept (lavapipe), or new
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, data)
        except (OSError, VkgraphError) as e:
            log.info("pipeline cache not saved to %s: %s", self.path, e)

    def destroy(self) -> None:
        if self.handle is None:
            return
        self.save()
        vk.vkDestroyPipelineCache(self.device.handle, self.handle, None)
        self.handle = None
