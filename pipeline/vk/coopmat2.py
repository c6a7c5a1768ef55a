"""VK_NV_cooperative_matrix2 on the host: which workgroup-scope (and flexible) matrix
shapes the device runs, and its limits for them.

The `vulkan` package (1.3.275) predates the extension, so the query is reached through
vkGetInstanceProcAddr and its structs are raw memory, laid out as the extension declares
VkCooperativeMatrixFlexibleDimensionsPropertiesNV (64-bit):

    0 sType  8 pNext  16 MGranularity  20 NGranularity  24 KGranularity
    28 AType  32 BType  36 CType  40 ResultType  44 saturatingAccumulation
    48 scope  52 workgroupInvocations                                  (56 bytes)

and VkPhysicalDeviceCooperativeMatrix2PropertiesNV: sType, pNext, then
cooperativeMatrixWorkgroupScopeMaxWorkgroupSize, cooperativeMatrixFlexibleDimensionsMaxDimension
and cooperativeMatrixWorkgroupScopeReservedSharedMemory (uint32 each).
"""

from __future__ import annotations

from dataclasses import dataclass

from .device import COMPONENT, instance, raw_properties
from .library import vk

FLEX_PROPERTIES = 1000593001  # VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_...
PROPERTIES = 1000593002  # VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_PROPERTIES_NV
SCOPES = {1: "device", 2: "workgroup", 3: "subgroup", 5: "queue family"}  # VkScopeKHR


@dataclass(frozen=True)
class FlexShape:
    """Matrices of any M, N, K that are multiples of the granularities, for these types."""
    m: int
    n: int
    k: int
    a: str
    b: str
    c: str
    result: str
    scope: str
    invocations: int  # the workgroup size such matrices need (workgroup scope)

    def __str__(self) -> str:
        return (f"{self.m}x{self.n}x{self.k} {self.a}*{self.b}+{self.c}->{self.result} "
                f"{self.scope}" + (f" ({self.invocations} invocations)"
                                   if self.scope == "workgroup" else ""))


def limits(pd) -> dict[str, int]:
    """The extension's three limits on this physical device."""
    size, dim, reserved = raw_properties(pd, PROPERTIES, 3)
    return {"max_workgroup_size": size, "max_dimension": dim, "reserved_shared_memory": reserved}


def flexible_shapes(pd) -> list[FlexShape]:
    """Every flexible-dimension matrix combination the driver lists (empty if the query is
    missing)."""
    name = b"vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV"
    addr = vk.lib.vkGetInstanceProcAddr(instance(), name)
    if addr == vk.ffi.NULL:
        return []
    fn = vk.ffi.cast("int32_t (*)(void *, uint32_t *, void *)", addr)
    count = vk.ffi.new("uint32_t *")
    handle = vk.ffi.cast("void *", pd)
    if fn(handle, count, vk.ffi.NULL) != 0 or count[0] == 0:
        return []
    n = int(count[0])
    raw = vk.ffi.new(f"uint64_t[{7 * n}]")
    for i in range(n):
        raw[7 * i] = FLEX_PROPERTIES
    if fn(handle, count, raw) != 0:
        return []
    words = vk.ffi.cast("uint32_t *", raw)
    shapes = []
    for i in range(int(count[0])):
        w = [int(words[14 * i + j]) for j in range(14)]
        t = [COMPONENT.get(x, "?") for x in w[7:11]]
        shapes.append(FlexShape(w[4], w[5], w[6], *t, SCOPES.get(w[12], "?"), w[13]))
    return shapes
