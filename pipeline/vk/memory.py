"""Storage buffers with numpy in, numpy out, and texel views of them (vec4 texels).

Device-local buffers are filled and read through a host-visible staging buffer and a one-off
copy; host-visible buffers (uniforms, staging of sources and sinks) stay mapped. Transfers up to
SMALL bytes share one staging buffer per device (tools that read a loss or write a weight
thousands of times, like the gradient check, would otherwise allocate memory for each).
"""

from __future__ import annotations

import numpy as np

from .errors import VulkanError, call
from .library import vk

USAGE = (vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT
         | vk.VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT
         | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT)
TEXEL_FORMAT = vk.VK_FORMAT_R32G32B32A32_SFLOAT  # a texel view's texel: one vec4
HOST = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
CACHED = vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT
SMALL = 1 << 16


def _staging(device, nbytes: int, cached: bool = False):
    """(host buffer of >= nbytes, whether the caller destroys it); cached: one the host
    reads back (Buffer's)."""
    if nbytes <= SMALL:
        return device.small_staging(), False
    return Buffer(device, nbytes, host=True, cached=cached), True


def zero_all(device, buffers) -> None:
    """Every byte of the buffers 0: mapped ones by the host, the others by one submission
    (a build's dozens of buffers: one wait instead of one per buffer)."""
    rest = []
    for buf in buffers:
        if buf.mapped is not None:
            np.frombuffer(buf.mapped, np.uint8)[:] = 0
        else:
            rest.append(buf)
    if rest:
        cl = device.oneshot()
        cl.begin()
        cl.barrier(first=True)
        for buf in rest:
            cl.fill(buf)
        cl.end().run()


class Buffer:
    """host=True: mapped host-visible memory; near=True as well: prefer memory that is also
    device-local (a GPU reads it at its own memory's speed), and say so in `device_local`;
    cached=True instead: prefer memory the host's caches hold, for what the host reads back
    (a driver's plain host-visible memory may be write-combined: quick for the host to fill,
    slow to read; on the H100 machine both kinds read 58 MB in 7-8 ms)."""

    def __init__(self, device, nbytes: int, host: bool = False, near: bool = False,
                 zero: bool = True, cached: bool = False):
        """zero=False: the contents are left as the driver gives them (the caller fills
        them, or zeroes many buffers at once with zero_all)."""
        self.device = device
        self.nbytes = max(16, (int(nbytes) + 3) // 4 * 4)
        dev = device.handle
        self.handle = call("vkCreateBuffer", vk.vkCreateBuffer, dev, vk.VkBufferCreateInfo(
            size=self.nbytes, usage=USAGE, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE), None)
        req = vk.vkGetBufferMemoryRequirements(dev, self.handle)
        local = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
        wants = ([HOST | local] if host and near else []) + (
            [HOST | CACHED] if host and cached else []) + [HOST if host else local, HOST]
        for flags in wants:
            try:
                mtype = device.memory_type(req.memoryTypeBits, flags)
                break
            except VulkanError:
                if flags == wants[-1]:
                    raise
        props = device.mem_props.memoryTypes[mtype].propertyFlags
        self.host = bool(props & vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)
        self.device_local = bool(props & local)
        try:
            self.memory = vk.vkAllocateMemory(dev, vk.VkMemoryAllocateInfo(
                allocationSize=req.size, memoryTypeIndex=mtype), None)
        except vk.VkError as e:
            vk.vkDestroyBuffer(dev, self.handle, None)
            raise VulkanError(f"cannot allocate {self.nbytes / 2**20:.1f} MiB of device "
                              f"memory ({type(e).__name__})") from None
        vk.vkBindBufferMemory(dev, self.handle, self.memory, 0)
        self._texels = None
        self.mapped = None
        if self.host:
            self.mapped = vk.vkMapMemory(dev, self.memory, 0, self.nbytes, 0)
        if zero:
            zero_all(device, [self])

    def view(self, dtype=np.uint8) -> np.ndarray:
        """The mapped bytes as a numpy array (host-visible buffers only)."""
        return np.frombuffer(self.mapped, dtype, count=self.nbytes // np.dtype(dtype).itemsize)

    def upload(self, array, offset: int = 0) -> None:
        data = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
        if offset + data.size > self.nbytes:
            raise VulkanError(f"upload of {data.size} bytes into a {self.nbytes}-byte buffer")
        if self.mapped is not None:
            self.view()[offset:offset + data.size] = data
            return
        staging, own = _staging(self.device, data.size)
        staging.view()[: data.size] = data
        self.device.oneshot().copy_now(staging, self, data.size, dst_offset=offset)
        if own:
            staging.destroy()

    def download(self, dtype=np.float32, count: int | None = None) -> np.ndarray:
        n = self.nbytes // np.dtype(dtype).itemsize if count is None else count
        if self.mapped is not None:
            return self.view(dtype)[:n].copy()
        nbytes = n * np.dtype(dtype).itemsize
        staging, own = _staging(self.device, nbytes, cached=True)
        self.device.oneshot().copy_now(self, staging, nbytes)
        out = staging.view(dtype)[:n].copy()
        if own:
            staging.destroy()
        return out

    def texels(self):
        """A uniform-texel-buffer view of the whole buffer as vec4 texels (made on first use,
        destroyed with the buffer). A buffer of more texels than the device's
        maxTexelBufferElements is a VulkanError (kernels that read through texel views choose
        storage-buffer loads for such sizes)."""
        if self._texels is None:
            n = self.nbytes // 16
            limit = self.device.info.max_texel_elements
            if limit and n > limit:
                raise VulkanError(f"a {self.nbytes / 2**20:.0f} MiB buffer has {n} vec4 texels; "
                                  f"a texel view on {self.device.info.name} spans at most {limit}")
            self._texels = call("vkCreateBufferView", vk.vkCreateBufferView, self.device.handle,
                                vk.VkBufferViewCreateInfo(buffer=self.handle, format=TEXEL_FORMAT,
                                                          offset=0, range=16 * n), None)
        return self._texels

    def destroy(self) -> None:
        if self.handle is None:
            return
        dev = self.device.handle
        if self._texels is not None:
            vk.vkDestroyBufferView(dev, self._texels, None)
            self._texels = None
        if self.mapped is not None:
            vk.vkUnmapMemory(dev, self.memory)
            self.mapped = None
        vk.vkDestroyBuffer(dev, self.handle, None)
        vk.vkFreeMemory(dev, self.memory, None)
        self.handle = None
