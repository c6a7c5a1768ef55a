"""Command lists: collect operations, record them once into a command buffer, submit many times.

Operations are collected in Python first (`dispatch`, `fill`, `copy`, `barrier`), then `end()`
sizes one descriptor pool for all of them, writes the descriptor sets and records the
command buffer. Submitting again costs one vkQueueSubmit and one fence wait.
"""

from __future__ import annotations

from .errors import VulkanError, call, result_name
from .library import vk

ALL_STAGES = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | vk.VK_PIPELINE_STAGE_TRANSFER_BIT
ALL_ACCESS = (vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT
              | vk.VK_ACCESS_TRANSFER_READ_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT
              | vk.VK_ACCESS_UNIFORM_READ_BIT)
WRITES = vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT
FENCE_TIMEOUT_NS = 600 * 10**9


class CommandList:
    def __init__(self, device, timestamps: int = 0):
        self.device = device
        dev = device.handle
        self.cmd = call("vkAllocateCommandBuffers", vk.vkAllocateCommandBuffers, dev,
                        vk.VkCommandBufferAllocateInfo(
                            commandPool=device.pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                            commandBufferCount=1))[0]
        self.fence = call("vkCreateFence", vk.vkCreateFence, dev, vk.VkFenceCreateInfo(), None)
        self.submit_info = vk.VkSubmitInfo(commandBufferCount=1, pCommandBuffers=[self.cmd])
        # per-frame calls go straight to the loader with prepared arguments: the package's
        # argument conversion costs more than the submit itself (bench/overhead.py)
        self._submit_ptr = vk.ffi.addressof(self.submit_info)
        self._fences = vk.ffi.new("VkFence[1]", [self.fence])
        self.desc_pool = None
        self.query_pool = None
        self.max_timestamps = timestamps
        self.labels: list[str] = []
        self.ops: list[tuple] = []
        self.pending = False

    # -- collecting
    def begin(self) -> CommandList:
        self.ops = []
        self.labels = []
        return self

    def dispatch(self, kernel, set0: list, set1: list, push: bytes, groups, label=None) -> None:
        if len(set1) != kernel.nconn:
            raise VulkanError(f"kernel expects {kernel.nconn} buffers, got {len(set1)}")
        self.ops.append(("dispatch", kernel, set0, set1, push, groups, label))

    def fill(self, buffer) -> None:
        self.ops.append(("fill", buffer))

    def copy(self, src, dst, size: int, src_offset: int = 0, dst_offset: int = 0) -> None:
        self.ops.append(("copy", src, dst, size, src_offset, dst_offset))

    def barrier(self, first: bool = False) -> None:
        """A full memory barrier after what is recorded so far. first=True at the start of a
        list: against the commands of earlier submissions to the queue (frames in flight)."""
        if (first and not self.ops) or (self.ops and self.ops[-1][0] != "barrier"):
            self.ops.append(("barrier",))

    # -- recording
    def end(self, host: bool = True) -> CommandList:
        """Record the collected operations. host=False leaves out the closing barrier that
        makes the list's writes visible to the host (for lists whose writes the host reads
        only through later lists, which open with a barrier)."""
        dev = self.device.handle
        self._free_pools()
        n = sum(1 for op in self.ops if op[0] == "dispatch")
        nbuf = sum(3 + len(op[3]) for op in self.ops if op[0] == "dispatch")
        if n:  # (pool sizes per type may exceed what the sets take: they are upper bounds)
            sizes = [vk.VkDescriptorPoolSize(type=t, descriptorCount=c) for t, c in (
                (vk.VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER, n),
                (vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, nbuf),
                (vk.VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, nbuf))]
            self.desc_pool = call("vkCreateDescriptorPool", vk.vkCreateDescriptorPool, dev,
                                  vk.VkDescriptorPoolCreateInfo(maxSets=2 * n,
                                                                poolSizeCount=len(sizes),
                                                                pPoolSizes=sizes), None)
        nlabels = sum(1 for op in self.ops if op[0] == "dispatch" and op[6])
        if self.max_timestamps and nlabels:
            self.query_pool = call("vkCreateQueryPool", vk.vkCreateQueryPool, dev,
                                   vk.VkQueryPoolCreateInfo(
                                       queryType=vk.VK_QUERY_TYPE_TIMESTAMP,
                                       queryCount=2 * nlabels), None)
        vk.vkResetCommandBuffer(self.cmd, 0)
        vk.vkBeginCommandBuffer(self.cmd, vk.VkCommandBufferBeginInfo())
        if self.query_pool is not None:
            vk.vkCmdResetQueryPool(self.cmd, self.query_pool, 0, 2 * nlabels)
        for op in self.ops:
            getattr(self, "_rec_" + op[0])(*op[1:])
        if host:  # make every write visible to the host after the fence
            vk.vkCmdPipelineBarrier(self.cmd, ALL_STAGES, vk.VK_PIPELINE_STAGE_HOST_BIT, 0, 1,
                                    [vk.VkMemoryBarrier(srcAccessMask=WRITES,
                                                        dstAccessMask=vk.VK_ACCESS_HOST_READ_BIT)],
                                    0, None, 0, None)
        call("vkEndCommandBuffer", vk.vkEndCommandBuffer, self.cmd)
        return self

    def _rec_dispatch(self, kernel, set0, set1, push, groups, label) -> None:
        dev = self.device.handle
        sets = vk.vkAllocateDescriptorSets(dev, vk.VkDescriptorSetAllocateInfo(
            descriptorPool=self.desc_pool, descriptorSetCount=2,
            pSetLayouts=kernel.set_layouts))
        writes = []
        for s, bufs, types in ((0, set0, kernel.SET0), (1, set1, kernel.set1)):
            for i, (buf, t) in enumerate(zip(bufs, types, strict=True)):
                if t == vk.VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER:
                    where = dict(pTexelBufferView=[buf.texels()])
                else:
                    where = dict(pBufferInfo=[vk.VkDescriptorBufferInfo(
                        buffer=buf.handle, offset=0, range=buf.nbytes)])
                writes.append(vk.VkWriteDescriptorSet(dstSet=sets[s], dstBinding=i,
                                                      descriptorCount=1, descriptorType=t,
                                                      **where))
        vk.vkUpdateDescriptorSets(dev, len(writes), writes, 0, None)
        cmd = self.cmd
        vk.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, kernel.pipeline)
        vk.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, kernel.layout, 0, 2,
                                   sets, 0, None)
        if kernel.push_size:
            data = (push or b"").ljust(kernel.push_size, b"\0")[: kernel.push_size]
            vk.vkCmdPushConstants(cmd, kernel.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0,
                                  kernel.push_size, vk.ffi.from_buffer(data))
        q = None
        if label and self.query_pool is not None:
            q = 2 * len(self.labels)
            self.labels.append(label)
            vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT,
                                   self.query_pool, q)
        vk.vkCmdDispatch(cmd, *groups)
        if q is not None:
            vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT,
                                   self.query_pool, q + 1)

    def _rec_fill(self, buffer) -> None:
        vk.vkCmdFillBuffer(self.cmd, buffer.handle, 0, buffer.nbytes, 0)

    def _rec_copy(self, src, dst, size, src_offset, dst_offset) -> None:
        vk.vkCmdCopyBuffer(self.cmd, src.handle, dst.handle, 1, [vk.VkBufferCopy(
            srcOffset=src_offset, dstOffset=dst_offset, size=size)])

    def _rec_barrier(self) -> None:
        vk.vkCmdPipelineBarrier(self.cmd, ALL_STAGES, ALL_STAGES, 0, 1,
                                [vk.VkMemoryBarrier(srcAccessMask=WRITES,
                                                    dstAccessMask=ALL_ACCESS)],
                                0, None, 0, None)

    # -- running
    def submit(self) -> None:
        if self.pending:  # its fence is still signalled: Vulkan forbids the submit
            raise VulkanError("a command list was submitted again before it was waited for")
        res = vk.lib.vkQueueSubmit(self.device.queue, 1, self._submit_ptr, self.fence)
        if res != vk.VK_SUCCESS:
            raise VulkanError(f"vkQueueSubmit failed: {result_name(res)}")
        self.pending = True

    def wait(self) -> None:
        if not self.pending:
            return
        dev = self.device.handle
        res = vk.lib.vkWaitForFences(dev, 1, self._fences, vk.VK_TRUE, FENCE_TIMEOUT_NS)
        if res == vk.VK_TIMEOUT:
            raise VulkanError("the device did not finish a frame within 10 minutes "
                              "(VK_TIMEOUT)")
        if res != vk.VK_SUCCESS:
            raise VulkanError(f"waiting for a frame failed: {result_name(res)}")
        vk.lib.vkResetFences(dev, 1, self._fences)
        self.pending = False

    def run(self) -> None:
        self.submit()
        self.wait()

    def timings(self) -> list[tuple[str, float]]:
        """(label, milliseconds) of the last run, for dispatches recorded with a label."""
        return [(lab, end - start) for lab, start, end in self.stamps()]

    def stamps(self) -> list[tuple[str, float, float]]:
        """(label, start, end) in milliseconds from the first dispatch's start, of the last
        run, for dispatches recorded with a label (dispatches without a barrier between them
        may overlap: their times add up to more than the span)."""
        if self.query_pool is None or not self.labels:
            return []
        n = 2 * len(self.labels)
        data = vk.ffi.new("uint64_t[]", n)
        vk.vkGetQueryPoolResults(self.device.handle, self.query_pool, 0, n, 8 * n, data, 8,
                                 vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
        period = self.device.info.timestamp_period * 1e-6
        t0 = min(data[2 * i] for i in range(len(self.labels)))
        return [(lab, (data[2 * i] - t0) * period, (data[2 * i + 1] - t0) * period)
                for i, lab in enumerate(self.labels)]

    # -- one-off helpers
    def copy_now(self, src, dst, size: int, src_offset: int = 0, dst_offset: int = 0) -> None:
        self.begin()
        self.barrier(first=True)  # after earlier submissions' writes (frames end without one)
        self.copy(src, dst, size, src_offset, dst_offset)
        self.end().run()

    def _free_pools(self) -> None:
        dev = self.device.handle
        if self.desc_pool is not None:
            vk.vkDestroyDescriptorPool(dev, self.desc_pool, None)
            self.desc_pool = None
        if self.query_pool is not None:
            vk.vkDestroyQueryPool(dev, self.query_pool, None)
            self.query_pool = None

    def destroy(self) -> None:
        if self.fence is None:
            return
        self._free_pools()
        dev = self.device.handle
        vk.vkFreeCommandBuffers(dev, self.device.pool, 1, [self.cmd])
        vk.vkDestroyFence(dev, self.fence, None)
        self.fence = None
