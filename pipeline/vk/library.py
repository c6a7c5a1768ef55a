"""The `vulkan` package, imported in one place. Its import opens the Vulkan loader
(libvulkan.so.1) and raises OSError where there is none; that becomes one line saying what
to install (exit 1) instead of an internal error. Everything that needs no device
(compiling shaders, reading SPIR-V, `vkgraph shaders --check`) never imports this file."""

from __future__ import annotations

from ..errors import RuntimeFailure

NO_LOADER = ("no Vulkan loader: install libvulkan1 and a driver "
             "(Debian: libvulkan1 mesa-vulkan-drivers)")


class NoVulkanLoader(RuntimeFailure):
    pass


try:
    import vulkan as vk
except OSError:  # cffi's dlopen of libvulkan failed
    raise NoVulkanLoader(NO_LOADER) from None

__all__ = ["NO_LOADER", "NoVulkanLoader", "vk"]
