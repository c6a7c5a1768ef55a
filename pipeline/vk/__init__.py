"""The Vulkan layer: the only package that imports `vulkan`.

device.py   instance, device choice, capability report, logical device (owns children)
memory.py   storage buffers: upload(array) / download() -> array; texel views of them
kernel.py   compute pipelines with descriptor layouts by connector index (storage or
            uniform texel buffers, as the SPIR-V declares each)
commands.py command lists recorded once and submitted many times, GPU timestamps
compile.py  GLSL -> SPIR-V with glslang 13 and a content-keyed cache
errors.py   VkResult failures as one-line errors
coopvec.py  VK_NV_cooperative_vector: a matrix converted to the layout a kernel reads
coopmat2.py VK_NV_cooperative_matrix2: the workgroup-scope shapes a device runs, its limits
display.py  window surface (glfw) and swapchain: present a buffer of texels, read it back
            (imported on its own by the gui: `from vkgraph.pipeline.vk.display import ...`)
"""

from .compile import (
                      ShaderCompileError,
                      compile_glsl,
                      spirv_bindings,
                      spirv_block_scalars,
                      spirv_image_bindings,
                      spirv_texel_bindings,
                      spirv_writable,
)
from .device import Device, DeviceInfo, choose, list_devices, validation_messages
from .errors import VulkanError

__all__ = ["Device", "DeviceInfo", "ShaderCompileError", "VulkanError", "choose",
           "compile_glsl", "list_devices", "spirv_bindings", "spirv_block_scalars",
           "spirv_image_bindings", "spirv_texel_bindings", "spirv_writable", "validation_messages"]
