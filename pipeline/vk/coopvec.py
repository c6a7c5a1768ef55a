"""VK_NV_cooperative_vector on the host: a matrix converted to the layout a kernel's
`coopVecMatMul` reads (the device's opaque "inferencing optimal" layout, or row-major).

The `vulkan` package (1.3.275) predates the extension, so the command is reached through
vkGetDeviceProcAddr and its info struct is built as raw memory, laid out as the extension
declares VkConvertCooperativeVectorMatrixInfoNV (64-bit):

    0 sType  8 pNext  16 srcSize  24 srcData  32 pDstSize  40 dstData
    48 srcComponentType  52 dstComponentType  56 numRows  60 numColumns
    64 srcLayout  72 srcStride  80 dstLayout  88 dstStride        (96 bytes)
"""

from __future__ import annotations

import numpy as np
import vulkan as vk

from .errors import VulkanError, result_name

CONVERT_INFO = 1000491004  # VK_STRUCTURE_TYPE_CONVERT_COOPERATIVE_VECTOR_MATRIX_INFO_NV
LAYOUTS = {"row": 0, "column": 1, "inference": 2, "training": 3}  # VkCooperativeVector...NV
FLOAT16 = 0  # VkComponentTypeKHR
ALIGN = 64  # a matrix's offset in its buffer, for the optimal layouts


def convert_matrix(device, matrix: np.ndarray, layout: str = "inference") -> bytes:
    """The bytes of an f16 (rows, columns) row-major matrix in `layout`, made by the driver
    (vkConvertCooperativeVectorMatrixNV, on the host). Needs the extension enabled."""
    if "VK_NV_cooperative_vector" not in getattr(device, "enabled_extensions", ()):
        raise VulkanError(f"{device.info.name} has no VK_NV_cooperative_vector")
    src = np.ascontiguousarray(matrix, dtype=np.float16)
    rows, cols = src.shape
    addr = vk.lib.vkGetDeviceProcAddr(device.handle, b"vkConvertCooperativeVectorMatrixNV")
    if addr == vk.ffi.NULL:
        raise VulkanError("the driver has no vkConvertCooperativeVectorMatrixNV")
    fn = vk.ffi.cast("int32_t (*)(void *, void *)", addr)
    info = vk.ffi.new("uint64_t[12]")
    dst_size = vk.ffi.new("size_t *")
    src_buf = vk.ffi.from_buffer(src)
    info[0] = CONVERT_INFO
    info[2] = src.nbytes
    info[3] = int(vk.ffi.cast("uintptr_t", src_buf))
    info[4] = int(vk.ffi.cast("uintptr_t", dst_size))
    words = vk.ffi.cast("uint32_t *", info)
    words[12], words[13], words[14], words[15] = FLOAT16, FLOAT16, rows, cols
    words[16] = LAYOUTS["row"]
    info[9] = 2 * cols
    words[20] = LAYOUTS[layout]
    info[11] = 2 * cols if layout in ("row", "column") else 0
    if layout == "column":
        info[11] = 2 * rows
    dev = vk.ffi.cast("void *", device.handle)
    res = fn(dev, info)  # dstData 0: the size only
    if res != 0:
        raise VulkanError(f"vkConvertCooperativeVectorMatrixNV (size) failed: "
                          f"{result_name(res)}")
    out = np.zeros(int(dst_size[0]), np.uint8)
    out_buf = vk.ffi.from_buffer(out)
    info[5] = int(vk.ffi.cast("uintptr_t", out_buf))
    res = fn(dev, info)
    if res != 0:
        raise VulkanError(f"vkConvertCooperativeVectorMatrixNV failed: {result_name(res)}")
    return out.tobytes()
