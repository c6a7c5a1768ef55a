"""The Vulkan layer: the only package that imports `vulkan`.

device.py   instance, device choice, capability report, logical device (owns children)
memory.py   storage buffers: upload(array) / download() -> array; texel views of them
kernel.py   compute pipelines with descriptor layouts by connector index (storage or
            uniform texel buffers, as the SPIR-V declares each)
commands.py command lists recorded once and submitted many times, GPU timestamps
compile.py  GLSL -> SPIR-V with glslang 13 and a content-keyed cache
errors.py   VkResult failures as one-line errors
library.py  the `vulkan` package, imported in one place (no loader: one clear line)
coopvec.py  VK_NV_cooperative_vector: a matrix converted to the layout a kernel reads
coopmat2.py VK_NV_cooperative_matrix2: the workgroup-scope shapes a device runs, its limits
display.py  window surface (glfw) and swapchain: present a buffer of texels, read it back
            (imported on its own by the gui: `from vkgraph.pipeline.vk.display import ...`)
"""

# what needs the `vulkan` package (library.py) is imported on first use, so that compiling
# and checking shaders works on a machine without a Vulkan loader; the compiler's names too,
# so that opening a device imports no numpy (`vkgraph denoise` opens it while numpy loads)
_LAZY = {"Device": "device", "DeviceInfo": "device", "choose": "device",
         "list_devices": "device", "validation_messages": "device", "VulkanError": "errors",
         **{name: "compile" for name in (
             "ShaderCompileError", "compile_glsl", "spirv_bindings", "spirv_block_scalars",
             "spirv_buffer_elements", "spirv_image_bindings", "spirv_texel_bindings",
             "spirv_writable")}}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{_LAZY[name]}", __name__), name)


__all__ = ["Device", "DeviceInfo", "ShaderCompileError", "VulkanError", "choose",
           "compile_glsl", "list_devices", "spirv_bindings", "spirv_block_scalars",
           "spirv_buffer_elements", "spirv_image_bindings", "spirv_texel_bindings",
           "spirv_writable", "validation_messages"]
