"""Showing images in a window: a Vulkan surface for a glfw window and a swapchain.

The window's picture is composed elsewhere by a compute kernel into an ordinary storage
buffer of packed 8-bit texels (`Swapchain.texel_order` says which byte is which channel);
`Swapchain.present` copies that buffer into the next swapchain image and presents it. No
render pass, image view or sampler is needed, only TRANSFER_DST usage on the images (and
TRANSFER_SRC for `capture`, which reads the presented picture back for screenshots).

Synchronisation is by fences on the host: acquire signals a fence, the copy is one submit
waited for, the present waits for nothing. The frame loop waits for every frame anyway, and
this keeps the display independent of how the engine records its frames.
"""

from __future__ import annotations

import logging

import numpy as np

from .device import instance
from .errors import VulkanError, call, result_name
from .library import vk

log = logging.getLogger("vkgraph.vk")

TIMEOUT_NS = 10 * 10**9
UNORM_BGRA = (vk.VK_FORMAT_B8G8R8A8_UNORM, vk.VK_FORMAT_B8G8R8A8_SRGB)
UNORM_RGBA = (vk.VK_FORMAT_R8G8B8A8_UNORM, vk.VK_FORMAT_R8G8B8A8_SRGB)
# bytes are written sRGB-encoded by the compose kernel; a *_SRGB format takes them as they are
# (copies do not convert), so UNORM and SRGB formats of one channel order serve equally
FORMATS = UNORM_BGRA + UNORM_RGBA
PRESENT_MODES = (vk.VK_PRESENT_MODE_MAILBOX_KHR, vk.VK_PRESENT_MODE_IMMEDIATE_KHR,
                 vk.VK_PRESENT_MODE_FIFO_KHR)  # never let the display throttle training


class OutOfDate(Exception):
    """The swapchain no longer matches the window: recreate it (e.g. after a resize)."""


def window_extensions() -> list[str]:
    """Instance extensions glfw needs for window surfaces on this system."""
    import glfw

    return list(glfw.get_required_instance_extensions())


class Surface:
    """The VkSurfaceKHR of a glfw window. Creates the process-wide instance with the
    surface extensions, so make it before anything else uses Vulkan. Destroy it after the
    device (whose swapchain uses it) is closed."""

    def __init__(self, window):
        import glfw

        self.instance = instance(window_extensions())
        ptr = vk.ffi.new("VkSurfaceKHR*")
        res = glfw.create_window_surface(self.instance, window, None, ptr)
        if res != vk.VK_SUCCESS:
            raise VulkanError(f"glfwCreateWindowSurface failed: {result_name(res)}")
        self.handle = ptr[0]
        get = lambda name: vk.vkGetInstanceProcAddr(self.instance, name)  # noqa: E731
        self._support = get("vkGetPhysicalDeviceSurfaceSupportKHR")
        self._caps = get("vkGetPhysicalDeviceSurfaceCapabilitiesKHR")
        self._formats = get("vkGetPhysicalDeviceSurfaceFormatsKHR")
        self._modes = get("vkGetPhysicalDeviceSurfacePresentModesKHR")
        self._destroy = get("vkDestroySurfaceKHR")

    def supports(self, pd, family: int) -> bool:
        """Can queue family `family` of physical device `pd` present to this surface?"""
        try:
            return bool(self._support(pd, family, self.handle))
        except vk.VkError:
            return False

    def capabilities(self, pd):
        return call("vkGetPhysicalDeviceSurfaceCapabilitiesKHR", self._caps, pd, self.handle)

    def formats(self, pd) -> list[int]:
        return [f.format for f in call("vkGetPhysicalDeviceSurfaceFormatsKHR", self._formats,
                                       pd, self.handle)]

    def present_modes(self, pd) -> list[int]:
        return list(call("vkGetPhysicalDeviceSurfacePresentModesKHR", self._modes, pd,
                         self.handle))

    def destroy(self) -> None:
        if self.handle is None:
            return
        self._destroy(self.instance, self.handle, None)
        self.handle = None


def _layout_barrier(cmd, image, old: int, new: int, src_access: int, dst_access: int,
                    src_stage: int, dst_stage: int) -> None:
    rng = vk.VkImageSubresourceRange(aspectMask=vk.VK_IMAGE_ASPECT_COLOR_BIT, baseMipLevel=0,
                                     levelCount=1, baseArrayLayer=0, layerCount=1)
    barrier = vk.VkImageMemoryBarrier(
        srcAccessMask=src_access, dstAccessMask=dst_access, oldLayout=old, newLayout=new,
        srcQueueFamilyIndex=vk.VK_QUEUE_FAMILY_IGNORED,
        dstQueueFamilyIndex=vk.VK_QUEUE_FAMILY_IGNORED, image=image, subresourceRange=rng)
    vk.vkCmdPipelineBarrier(cmd, src_stage, dst_stage, 0, 0, None, 0, None, 1, [barrier])


class Swapchain:
    """Swapchain of a surface on a device opened with that surface. Create with
    `Swapchain(device, surface, width, height)`; owned (and destroyed) by the device."""

    def __init__(self, device, surface, width: int, height: int):
        if not getattr(device, "can_present", False):
            raise VulkanError("the device was opened without a surface (Device.open(..., "
                              "surface=...))")
        self.device = device
        self.surface = surface
        dev = device.handle
        get = lambda name: vk.vkGetDeviceProcAddr(dev, name)  # noqa: E731
        self._create = get("vkCreateSwapchainKHR")
        self._destroy = get("vkDestroySwapchainKHR")
        self._images = get("vkGetSwapchainImagesKHR")
        self._acquire = get("vkAcquireNextImageKHR")
        self._present = get("vkQueuePresentKHR")
        self.handle = None
        self.images: list = []
        self.extent: tuple[int, int] = (0, 0)
        self.format = None
        self.can_capture = False
        self._readback = None
        self.cmd = call("vkAllocateCommandBuffers", vk.vkAllocateCommandBuffers, dev,
                        vk.VkCommandBufferAllocateInfo(
                            commandPool=device.pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                            commandBufferCount=1))[0]
        self.fence = call("vkCreateFence", vk.vkCreateFence, dev, vk.VkFenceCreateInfo(), None)
        device._own(self)
        self.recreate(width, height)

    @property
    def texel_order(self) -> str:
        """Byte order of a texel in the buffer given to `present`: 'bgra' or 'rgba'."""
        return "bgra" if self.format in UNORM_BGRA else "rgba"

    @property
    def usable(self) -> bool:
        """False while the window has no area (minimised): skip presenting then."""
        return self.handle is not None and min(self.extent) > 0

    def recreate(self, width: int, height: int) -> None:
        """(Re)create for a framebuffer of width x height (the surface may decide)."""
        pd = self.device.pd
        dev = self.device.handle
        self.device.wait_idle()
        caps = self.surface.capabilities(pd)
        cur = caps.currentExtent
        if cur.width != 0xFFFFFFFF:
            width, height = cur.width, cur.height
        width = min(max(int(width), caps.minImageExtent.width), caps.maxImageExtent.width)
        height = min(max(int(height), caps.minImageExtent.height), caps.maxImageExtent.height)
        if width == 0 or height == 0:
            self.extent = (0, 0)  # minimised: keep the old swapchain until there is area
            return
        formats = self.surface.formats(pd)
        fmt = next((f for f in FORMATS if f in formats), None)
        if fmt is None:
            raise VulkanError(f"the window offers no 8-bit RGBA/BGRA format (has {formats})")
        usage = vk.VK_IMAGE_USAGE_TRANSFER_DST_BIT
        if not caps.supportedUsageFlags & usage:
            raise VulkanError("the window's images cannot be written by copies "
                              "(no TRANSFER_DST usage)")
        self.can_capture = bool(caps.supportedUsageFlags & vk.VK_IMAGE_USAGE_TRANSFER_SRC_BIT)
        if self.can_capture:
            usage |= vk.VK_IMAGE_USAGE_TRANSFER_SRC_BIT
        modes = self.surface.present_modes(pd)
        mode = next((m for m in PRESENT_MODES if m in modes), vk.VK_PRESENT_MODE_FIFO_KHR)
        count = caps.minImageCount + 1
        if caps.maxImageCount:
            count = min(count, caps.maxImageCount)
        alpha = next((a for a in (vk.VK_COMPOSITE_ALPHA_OPAQUE_BIT_KHR,
                                  vk.VK_COMPOSITE_ALPHA_INHERIT_BIT_KHR,
                                  vk.VK_COMPOSITE_ALPHA_PRE_MULTIPLIED_BIT_KHR,
                                  vk.VK_COMPOSITE_ALPHA_POST_MULTIPLIED_BIT_KHR)
                      if caps.supportedCompositeAlpha & a), vk.VK_COMPOSITE_ALPHA_OPAQUE_BIT_KHR)
        info = vk.VkSwapchainCreateInfoKHR(
            surface=self.surface.handle, minImageCount=count, imageFormat=fmt,
            imageColorSpace=vk.VK_COLOR_SPACE_SRGB_NONLINEAR_KHR,
            imageExtent=vk.VkExtent2D(width=width, height=height), imageArrayLayers=1,
            imageUsage=usage, imageSharingMode=vk.VK_SHARING_MODE_EXCLUSIVE,
            preTransform=caps.currentTransform, compositeAlpha=alpha, presentMode=mode,
            clipped=vk.VK_TRUE, oldSwapchain=self.handle or vk.VK_NULL_HANDLE)
        new = call("vkCreateSwapchainKHR", self._create, dev, info, None)
        if self.handle is not None:
            self._destroy(dev, self.handle, None)
        self.handle = new
        self.images = list(call("vkGetSwapchainImagesKHR", self._images, dev, new))
        self.extent = (width, height)
        self.format = fmt
        if self._readback is not None:
            self._readback.destroy()
            self._readback = None
        log.debug("swapchain %dx%d, %d images, format %d, present mode %d", width, height,
                  len(self.images), fmt, mode)

    def present(self, texels, capture: bool = False) -> np.ndarray | None:
        """Copy `texels` (a storage buffer of width*height packed 8-bit texels in
        `texel_order`, top row first) into the next image and present it.

        With `capture`, returns what was presented as an (height, width, 4) RGBA uint8
        array. Raises OutOfDate when the swapchain must be recreated first."""
        if not self.usable:
            raise OutOfDate()
        if capture and not self.can_capture:
            raise VulkanError("this window's images cannot be read back (no TRANSFER_SRC "
                              "usage), so no screenshot")
        dev = self.device.handle
        index = vk.ffi.new("uint32_t*")
        suboptimal = False
        try:
            self._acquire(dev, self.handle, TIMEOUT_NS, vk.VK_NULL_HANDLE, self.fence, index)
        except vk.VkSuboptimalKhr:
            suboptimal = True  # acquired all the same: present it, then recreate
        except vk.VkErrorOutOfDateKhr:
            raise OutOfDate() from None
        except (vk.VkError, vk.VkException) as e:
            raise VulkanError(f"vkAcquireNextImageKHR failed: {type(e).__name__}") from None
        self._wait()
        image = self.images[index[0]]
        wd, ht = self.extent
        if capture and (self._readback is None or self._readback.nbytes < 4 * wd * ht):
            self._readback = self.device.buffer(4 * wd * ht, host=True)
        self._record(image, texels, self._readback if capture else None)
        call("vkQueueSubmit", vk.vkQueueSubmit, self.device.queue, 1,
             vk.VkSubmitInfo(commandBufferCount=1, pCommandBuffers=[self.cmd]), self.fence)
        self._wait()
        pixels = None
        if capture:
            pixels = self._readback.view(np.uint8)[: 4 * wd * ht].reshape(ht, wd, 4).copy()
            if self.texel_order == "bgra":
                pixels = pixels[:, :, [2, 1, 0, 3]]
        try:
            self._present(self.device.queue, vk.VkPresentInfoKHR(
                swapchainCount=1, pSwapchains=[self.handle], pImageIndices=index))
        except vk.VkSuboptimalKhr:
            suboptimal = True
        except vk.VkErrorOutOfDateKhr:
            suboptimal = True
        except (vk.VkError, vk.VkException) as e:
            raise VulkanError(f"vkQueuePresentKHR failed: {type(e).__name__}") from None
        if suboptimal:
            raise OutOfDate()
        return pixels

    def _wait(self) -> None:
        dev = self.device.handle
        try:
            vk.vkWaitForFences(dev, 1, [self.fence], vk.VK_TRUE, TIMEOUT_NS)
        except vk.VkTimeout:
            raise VulkanError("the window's image did not become ready in 10 s") from None
        vk.vkResetFences(dev, 1, [self.fence])

    def _record(self, image, texels, readback) -> None:
        cmd = self.cmd
        wd, ht = self.extent
        region = vk.VkBufferImageCopy(
            bufferOffset=0, bufferRowLength=0, bufferImageHeight=0,
            imageSubresource=vk.VkImageSubresourceLayers(
                aspectMask=vk.VK_IMAGE_ASPECT_COLOR_BIT, mipLevel=0, baseArrayLayer=0,
                layerCount=1),
            imageOffset=vk.VkOffset3D(x=0, y=0, z=0),
            imageExtent=vk.VkExtent3D(width=wd, height=ht, depth=1))
        xfer = vk.VK_PIPELINE_STAGE_TRANSFER_BIT
        vk.vkResetCommandBuffer(cmd, 0)
        vk.vkBeginCommandBuffer(cmd, vk.VkCommandBufferBeginInfo(
            flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
        # the texels were written by compute shaders of an earlier submit on this queue
        vk.vkCmdPipelineBarrier(cmd, vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | xfer, xfer, 0, 1,
                                [vk.VkMemoryBarrier(
                                    srcAccessMask=vk.VK_ACCESS_SHADER_WRITE_BIT
                                    | vk.VK_ACCESS_TRANSFER_WRITE_BIT,
                                    dstAccessMask=vk.VK_ACCESS_TRANSFER_READ_BIT)],
                                0, None, 0, None)
        _layout_barrier(cmd, image, vk.VK_IMAGE_LAYOUT_UNDEFINED,
                        vk.VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, 0,
                        vk.VK_ACCESS_TRANSFER_WRITE_BIT, vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT,
                        xfer)
        vk.vkCmdCopyBufferToImage(cmd, texels.handle, image,
                                  vk.VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, 1, [region])
        layout = vk.VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL
        access = vk.VK_ACCESS_TRANSFER_WRITE_BIT
        if readback is not None:
            _layout_barrier(cmd, image, layout, vk.VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL,
                            access, vk.VK_ACCESS_TRANSFER_READ_BIT, xfer, xfer)
            layout = vk.VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL
            access = 0
            vk.vkCmdCopyImageToBuffer(cmd, image, layout, readback.handle, 1, [region])
            vk.vkCmdPipelineBarrier(cmd, xfer, vk.VK_PIPELINE_STAGE_HOST_BIT, 0, 1,
                                    [vk.VkMemoryBarrier(
                                        srcAccessMask=vk.VK_ACCESS_TRANSFER_WRITE_BIT,
                                        dstAccessMask=vk.VK_ACCESS_HOST_READ_BIT)],
                                    0, None, 0, None)
        _layout_barrier(cmd, image, layout, vk.VK_IMAGE_LAYOUT_PRESENT_SRC_KHR, access, 0,
                        xfer, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT)
        call("vkEndCommandBuffer", vk.vkEndCommandBuffer, cmd)

    def destroy(self) -> None:
        if self.fence is None:
            return
        dev = self.device.handle
        if self.handle is not None:
            self._destroy(dev, self.handle, None)
            self.handle = None
        vk.vkFreeCommandBuffers(dev, self.device.pool, 1, [self.cmd])
        vk.vkDestroyFence(dev, self.fence, None)
        self.fence = None
