"""Vulkan failures as one-line RuntimeFailure errors carrying the symbolic VkResult name."""

from __future__ import annotations

from ..errors import RuntimeFailure
from .library import vk


class VulkanError(RuntimeFailure):
    pass


def result_name(code: int) -> str:
    for name in dir(vk):
        if name.startswith("VK_") and not name.startswith("VK_MAX") and getattr(vk, name) == code:
            if name.startswith(("VK_ERROR_", "VK_SUCCESS", "VK_NOT_READY", "VK_TIMEOUT",
                                "VK_INCOMPLETE")):
                return name
    return str(code)


def call(what: str, fn, *args):
    """Call a vulkan function; turn the package's exceptions into a VulkanError."""
    try:
        return fn(*args)
    except vk.VkError as e:  # the package raises subclasses named after the VkResult
        raise VulkanError(f"{what} failed: {type(e).__name__}") from None
