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

from .device import raw_properties
from .errors import VulkanError, result_name
from .library import vk

CONVERT_INFO = 1000491004  # VK_STRUCTURE_TYPE_CONVERT_COOPERATIVE_VECTOR_MATRIX_INFO_NV
PROPERTIES = 1000491001  # VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_VECTOR_PROPERTIES_NV
LAYOUTS = {"row": 0, "column": 1, "inference": 2, "training": 3}  # VkCooperativeVector...NV
TYPES = {np.dtype(np.float16): 0, np.dtype(np.float32): 1}  # VkComponentTypeKHR
ALIGN = 64  # a matrix's offset in its buffer, for the optimal layouts


def training_accumulation(pd) -> dict[str, bool]:
    """Which matrix types coopVecOuterProductAccumulate may add into on this physical
    device (VkPhysicalDeviceCooperativeVectorPropertiesNV): {"float16": .., "float32": ..}."""
    # stages, f16 accumulation, f32 accumulation, max components
    words = raw_properties(pd, PROPERTIES, 4)
    return {"float16": bool(words[1]), "float32": bool(words[2])}


def _stride(layout: str, rows: int, cols: int, itemsize: int) -> int:
    return {"row": itemsize * cols, "column": itemsize * rows}.get(layout, 0)


def convert(device, src: bytes, rows: int, cols: int, src_layout: str = "row",
            dst_layout: str = "inference", src_type=np.float16, dst_type=np.float16) -> bytes:
    """A (rows, columns) matrix's bytes in `src_layout` as `src_type` -> its bytes in
    `dst_layout` as `dst_type`, made by the driver (vkConvertCooperativeVectorMatrixNV, on
    the host; "row" and "column" are tightly packed). Needs the extension enabled."""
    if "VK_NV_cooperative_vector" not in getattr(device, "enabled_extensions", ()):
        raise VulkanError(f"{device.info.name} has no VK_NV_cooperative_vector")
    st, dt = np.dtype(src_type), np.dtype(dst_type)
    if st not in TYPES or dt not in TYPES:
        raise ValueError(f"component types are float16 or float32, not {st} / {dt}")
    addr = vk.lib.vkGetDeviceProcAddr(device.handle, b"vkConvertCooperativeVectorMatrixNV")
    if addr == vk.ffi.NULL:
        raise VulkanError("the driver has no vkConvertCooperativeVectorMatrixNV")
    fn = vk.ffi.cast("int32_t (*)(void *, void *)", addr)
    info = vk.ffi.new("uint64_t[12]")
    dst_size = vk.ffi.new("size_t *")
    src_buf = vk.ffi.from_buffer(src)
    info[0] = CONVERT_INFO
    info[2] = len(src)
    info[3] = int(vk.ffi.cast("uintptr_t", src_buf))
    info[4] = int(vk.ffi.cast("uintptr_t", dst_size))
    words = vk.ffi.cast("uint32_t *", info)
    words[12], words[13], words[14], words[15] = TYPES[st], TYPES[dt], rows, cols
    words[16] = LAYOUTS[src_layout]
    info[9] = _stride(src_layout, rows, cols, st.itemsize)
    words[20] = LAYOUTS[dst_layout]
    info[11] = _stride(dst_layout, rows, cols, dt.itemsize)
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


def convert_matrix(device, matrix: np.ndarray, layout: str = "inference") -> bytes:
    """The bytes of an f16 (rows, columns) row-major matrix in `layout`."""
    src = np.ascontiguousarray(matrix, dtype=np.float16)
    return convert(device, src.tobytes(), *src.shape, "row", layout)
