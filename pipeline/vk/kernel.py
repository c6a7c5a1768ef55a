"""A compute kernel: shader module, descriptor layouts by connector index, pipeline.

set 0: binding 0 global uniform, binding 1 module params, binding 2 node info (storage).
set 1: binding i = node connector i: a storage buffer, or a uniform texel buffer of vec4
texels where the SPIR-V declares a `samplerBuffer` there (read through texelFetch; CPU
drivers fetch those as vector gathers, storage buffers lane by lane). Local size =
specialization constants 0, 1, 2.
"""

from __future__ import annotations

import struct

from .compile import spirv_texel_bindings
from .errors import call
from .library import vk

STAGE = vk.VK_SHADER_STAGE_COMPUTE_BIT


def _set_layout(dev, types: list[int]):
    bindings = [vk.VkDescriptorSetLayoutBinding(binding=i, descriptorType=t, descriptorCount=1,
                                                stageFlags=STAGE) for i, t in enumerate(types)]
    return call("vkCreateDescriptorSetLayout", vk.vkCreateDescriptorSetLayout, dev,
                vk.VkDescriptorSetLayoutCreateInfo(bindingCount=len(bindings),
                                                   pBindings=bindings or None), None)


class Kernel:
    SET0 = [vk.VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER, vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
            vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER]

    def __init__(self, device, spirv: bytes, nconn: int, push_size: int, local, cache=None):
        self.device = device
        self.nconn = nconn
        self.push_size = (push_size + 3) // 4 * 4
        self.local = tuple(int(x) for x in local)
        dev = device.handle
        self.module = call("vkCreateShaderModule", vk.vkCreateShaderModule, dev,
                           vk.VkShaderModuleCreateInfo(codeSize=len(spirv), pCode=spirv), None)
        texel = spirv_texel_bindings(spirv)
        self.set1 = [vk.VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER if (1, i) in texel
                     else vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER for i in range(nconn)]
        self.set_layouts = [_set_layout(dev, self.SET0), _set_layout(dev, self.set1)]
        ranges = []
        if self.push_size:
            ranges = [vk.VkPushConstantRange(stageFlags=STAGE, offset=0, size=self.push_size)]
        self.layout = call("vkCreatePipelineLayout", vk.vkCreatePipelineLayout, dev,
                           vk.VkPipelineLayoutCreateInfo(
                               setLayoutCount=2, pSetLayouts=self.set_layouts,
                               pushConstantRangeCount=len(ranges),
                               pPushConstantRanges=ranges or None), None)
        entries = [vk.VkSpecializationMapEntry(constantID=i, offset=4 * i, size=4)
                   for i in range(3)]
        spec = vk.VkSpecializationInfo(mapEntryCount=3, pMapEntries=entries, dataSize=12,
                                       pData=vk.ffi.from_buffer(struct.pack("<3I", *self.local)))
        stage = vk.VkPipelineShaderStageCreateInfo(stage=STAGE, module=self.module,
                                                   pName="main", pSpecializationInfo=spec)
        flags = vk.VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR if device.pipeline_stats else 0
        self.pipeline = call("vkCreateComputePipelines", vk.vkCreateComputePipelines, dev, cache,
                             1, [vk.VkComputePipelineCreateInfo(flags=flags, stage=stage,
                                                                layout=self.layout)],
                             None)[0]

    def statistics(self) -> dict[str, float]:
        """What the driver reports about the compiled kernel (VK_KHR_pipeline_executable_
        properties: register count, shared memory, ... as the driver names them); empty
        unless the device was opened with VKGRAPH_PIPELINE_STATS=1 and has the extension."""
        if not self.device.pipeline_stats:
            return {}
        dev = self.device.handle
        get = vk.vkGetDeviceProcAddr(dev, "vkGetPipelineExecutableStatisticsKHR")
        info = vk.VkPipelineExecutableInfoKHR(pipeline=self.pipeline, executableIndex=0)
        out = {}
        for st in get(dev, info):
            kind = st.format
            if kind == vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
                v = float(st.value.b32)
            elif kind == vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
                v = float(st.value.i64)
            elif kind == vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
                v = float(st.value.u64)
            else:
                v = float(st.value.f64)
            out[vk.ffi.string(st.name).decode() if not isinstance(st.name, str) else st.name] = v
        return out

    def groups(self, dispatch) -> tuple[int, int, int]:
        """Workgroups for a dispatch counted in threads."""
        return tuple(max(1, -(-int(n) // l)) for n, l in zip(dispatch, self.local, strict=True))

    def destroy(self) -> None:
        if self.pipeline is None:
            return
        dev = self.device.handle
        vk.vkDestroyPipeline(dev, self.pipeline, None)
        vk.vkDestroyPipelineLayout(dev, self.layout, None)
        for sl in self.set_layouts:
            vk.vkDestroyDescriptorSetLayout(dev, sl, None)
        vk.vkDestroyShaderModule(dev, self.module, None)
        self.pipeline = None
