"""Instance, physical-device choice, capability report, logical device and queue.

The `Device` owns everything created through it (buffers, kernels, command lists) and
destroys them in reverse order in `close()`; nothing relies on `__del__` at shutdown.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import GraphError, RuntimeFailure
from .errors import VulkanError, call
from .library import vk

log = logging.getLogger("vkgraph.vk")

TYPE_NAMES = {
    vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: "discrete GPU",
    vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: "integrated GPU",
    vk.VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: "virtual GPU",
    vk.VK_PHYSICAL_DEVICE_TYPE_CPU: "CPU",
    vk.VK_PHYSICAL_DEVICE_TYPE_OTHER: "other",
}
PREFERENCE = [vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU,
              vk.VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU, vk.VK_PHYSICAL_DEVICE_TYPE_OTHER,
              vk.VK_PHYSICAL_DEVICE_TYPE_CPU]
COMPONENT = {0: "f16", 1: "f32", 2: "f64", 3: "s8", 4: "s16", 5: "s32", 6: "s64", 7: "u8",
             8: "u16", 9: "u32", 10: "u64"}
VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"


@dataclass
class DeviceInfo:
    index: int
    name: str
    type: str
    api: str
    driver: str
    fp16: bool
    storage16: bool
    float_atomics: bool
    int64_atomics: bool  # atomicAdd on 64-bit integers in storage buffers
    subgroup_size: int
    shared_memory: int
    memory_mib: int
    timestamp_period: float
    coopmat: list[str] = field(default_factory=list)  # "16x16x16 f16*f16+f16->f16"
    extensions: set[str] = field(default_factory=set, repr=False)
    max_storage_range: int = 0  # bytes one storage-buffer binding may span (0: unknown)
    max_texel_elements: int = 0  # texels one texel-buffer view may span (0: unknown)
    # VkPhysicalDeviceIDProperties.deviceUUID as 8-4-4-4-12 hex digits; on NVIDIA it is the
    # GPU's UUID that nvidia-smi and NVML print (after their "GPU-" prefix)
    uuid: str = ""
    # VK_NV_cooperative_vector with its cooperativeVector feature (per-invocation vectors times
    # a matrix in memory on the tensor cores; kernels compiled by Slang, pipeline/slang.py)
    coopvec: bool = False
    # and its cooperativeVectorTraining feature (transposed products, outer-product sums)
    coopvec_training: bool = False
    # compute shaders may use subgroupShuffle (VK_SUBGROUP_FEATURE_SHUFFLE_BIT)
    subgroup_shuffle: bool = False
    # VK_KHR_workgroup_memory_explicit_layout with 16-bit access: shared memory declared as
    # blocks that alias (GL_EXT_shared_memory_block), so f16 tiles move 16 bytes at a time
    shared_blocks: bool = False
    # streaming multiprocessors (VK_NV_shader_sm_builtins' shaderSMCount; 0: not reported)
    sm_count: int = 0
    # VK_NV_cooperative_matrix2: the features of it the device has, by their Vulkan names
    # less the "cooperativeMatrix" prefix ("WorkgroupScope", "Conversions", ...); empty
    # without the extension (kernels compiled by Slang, pipeline/slang.py)
    coopmat2: tuple[str, ...] = ()

    @property
    def has_coopmat_f16(self) -> bool:
        return any(s.startswith("16x16x16 f16*f16") for s in self.coopmat)

    def summary(self) -> str:
        return f"{self.name} ({self.type}, Vulkan {self.api})"


_instance = None
_instance_extensions: set[str] = set()
_validation_messages: list[str] = []


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def validation_requested() -> bool:
    return _env_flag("VKGRAPH_VALIDATION")


def validation_messages() -> list[str]:
    return _validation_messages


def _debug_callback(severity, types, data, user):
    msg = vk.ffi.string(data.pMessage).decode(errors="replace")
    _validation_messages.append(msg)
    log.error("validation: %s", msg)
    return 0


def instance(extensions: Sequence[str] = ()):
    """The process-wide Vulkan instance (validation layers when VKGRAPH_VALIDATION=1).

    `extensions` (e.g. the surface extensions a window needs) are enabled when the instance is
    created; asking for one the existing instance lacks is an error, so a window must ask
    before anything else touches Vulkan.
    """
    global _instance
    if _instance is not None:
        missing = sorted(set(extensions) - _instance_extensions)
        if missing:
            raise RuntimeFailure("the Vulkan instance was created without "
                                 f"{', '.join(missing)}")
        return _instance
    app = vk.VkApplicationInfo(pApplicationName="vkgraph", applicationVersion=1,
                               pEngineName="vkgraph", engineVersion=1,
                               apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))
    layers, exts = [], []
    if validation_requested():
        have = {p.layerName for p in vk.vkEnumerateInstanceLayerProperties()}
        if VALIDATION_LAYER not in have:
            raise RuntimeFailure("VKGRAPH_VALIDATION is set but the Vulkan validation layers "
                                 "are not installed (Debian: vulkan-validationlayers)")
        layers, exts = [VALIDATION_LAYER], [vk.VK_EXT_DEBUG_UTILS_EXTENSION_NAME]
    if extensions:
        have = {e.extensionName for e in vk.vkEnumerateInstanceExtensionProperties(None)}
        missing = sorted(set(extensions) - have)
        if missing:
            raise RuntimeFailure(f"the Vulkan loader lacks {', '.join(missing)} (needed to "
                                 "show a window)")
        exts += [e for e in extensions if e not in exts]
    try:
        inst = vk.vkCreateInstance(vk.VkInstanceCreateInfo(
            pApplicationInfo=app, enabledLayerCount=len(layers), ppEnabledLayerNames=layers,
            enabledExtensionCount=len(exts), ppEnabledExtensionNames=exts), None)
    except (vk.VkError, OSError) as e:
        raise RuntimeFailure(f"cannot create a Vulkan instance ({type(e).__name__}); is a "
                             "Vulkan driver installed? (Debian: libvulkan1 "
                             "mesa-vulkan-drivers)") from None
    if layers:
        create = vk.vkGetInstanceProcAddr(inst, "vkCreateDebugUtilsMessengerEXT")
        sev = (vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT
               | vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT)
        kinds = (vk.VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT
                 | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT
                 | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT)
        info = vk.VkDebugUtilsMessengerCreateInfoEXT(
            messageSeverity=sev, messageType=kinds, pfnUserCallback=_debug_callback)
        instance.messenger = create(inst, info, None)
    _instance = inst
    _instance_extensions.update(exts)
    return inst


def _coopmat_shapes(pd, exts: set[str]) -> list[str]:
    if "VK_KHR_cooperative_matrix" not in exts:
        return []
    try:
        fn = vk.vkGetInstanceProcAddr(instance(),
                                      "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")
        props = fn(pd)
    except Exception:  # noqa: BLE001 - the report must not fail on an odd driver
        return ["(present; shapes not readable)"]
    shapes = []
    for p in props:
        if p.scope != vk.VK_SCOPE_SUBGROUP_KHR:
            continue
        shapes.append(f"{p.MSize}x{p.NSize}x{p.KSize} {COMPONENT.get(p.AType, '?')}*"
                      f"{COMPONENT.get(p.BType, '?')}+{COMPONENT.get(p.CType, '?')}->"
                      f"{COMPONENT.get(p.ResultType, '?')}")
    return sorted(set(shapes))


def _features(pd):
    f11 = vk.VkPhysicalDeviceVulkan11Features()
    f12 = vk.VkPhysicalDeviceVulkan12Features(pNext=f11)
    f13 = vk.VkPhysicalDeviceVulkan13Features(pNext=f12)
    f2 = vk.VkPhysicalDeviceFeatures2(pNext=f13)
    vk.vkGetPhysicalDeviceFeatures2(pd, f2)
    return f2, f11, f12, f13


# Feature structs the `vulkan` package (1.3.275) has no bindings for, by sType and their
# VkBool32 members: built as raw memory (sType, pNext, then the flags, 4 bytes each)
COOPVEC_FEATURES = 1000491000  # VkPhysicalDeviceCooperativeVectorFeaturesNV (2 flags)
REPLICATED_COMPOSITES_FEATURES = 1000564000  # VkPhysicalDeviceShaderReplicatedComposites..EXT
COOPMAT2_FEATURES = 1000593000  # VkPhysicalDeviceCooperativeMatrix2FeaturesNV (7 flags)
COOPMAT2_FLAGS = ("WorkgroupScope", "FlexibleDimensions", "Reductions", "Conversions",
                  "PerElementOperations", "TensorAddressing", "BlockLoads")
COOPVEC_EXT = "VK_NV_cooperative_vector"
COOPMAT2_EXT = "VK_NV_cooperative_matrix2"
WMEL_EXT = "VK_KHR_workgroup_memory_explicit_layout"
STATS_EXT = "VK_KHR_pipeline_executable_properties"
SM_BUILTINS_EXT = "VK_NV_shader_sm_builtins"
REPLICATED_EXT = "VK_EXT_shader_replicated_composites"


def raw_struct(stype: int, nflags: int, pnext=None, flags=()):
    """A Vulkan struct of `nflags` VkBool32 members after sType and pNext, as cffi memory
    (keep a reference while Vulkan may read it); `flags` sets the first ones."""
    raw = vk.ffi.new(f"uint64_t[{2 + (nflags + 1) // 2}]")
    raw[0] = stype
    if pnext is not None and vk.ffi.typeof(pnext).kind == "struct":
        pnext = vk.ffi.addressof(pnext)  # the bindings' structs are values, raw ones arrays
    raw[1] = int(vk.ffi.cast("uintptr_t", pnext)) if pnext is not None else 0
    words = vk.ffi.cast("uint32_t *", raw)
    for i, f in enumerate(flags):
        words[4 + i] = int(bool(f))
    return raw


def raw_flags(raw, nflags: int) -> list[bool]:
    words = vk.ffi.cast("uint32_t *", raw)
    return [bool(words[4 + i]) for i in range(nflags)]


def _raw_feature(pd, stype: int, nflags: int) -> list[bool]:
    """The VkBool32 members of a feature struct the bindings lack, from the driver."""
    raw = raw_struct(stype, nflags)
    vk.vkGetPhysicalDeviceFeatures2(pd, vk.VkPhysicalDeviceFeatures2(pNext=raw))
    return raw_flags(raw, nflags)


def raw_properties(pd, stype: int, nwords: int) -> list[int]:
    """The first `nwords` 32-bit members (after sType and pNext) of a properties struct the
    bindings lack, from the driver."""
    raw = raw_struct(stype, nwords)
    vk.vkGetPhysicalDeviceProperties2(pd, vk.VkPhysicalDeviceProperties2(pNext=raw))
    words = vk.ffi.cast("uint32_t *", raw)
    return [int(words[4 + i]) for i in range(nwords)]


def _describe(index: int, pd) -> DeviceInfo:
    props = vk.vkGetPhysicalDeviceProperties(pd)
    exts = {e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(pd, None)}
    _, f11, f12, _ = _features(pd)
    ids = vk.VkPhysicalDeviceIDProperties()
    sg = vk.VkPhysicalDeviceSubgroupProperties(pNext=ids)
    vk.vkGetPhysicalDeviceProperties2(pd, vk.VkPhysicalDeviceProperties2(pNext=sg))
    mem = vk.vkGetPhysicalDeviceMemoryProperties(pd)
    heap = max((mem.memoryHeaps[i].size for i in range(mem.memoryHeapCount)
                if mem.memoryHeaps[i].flags & vk.VK_MEMORY_HEAP_DEVICE_LOCAL_BIT), default=0)
    v = props.apiVersion
    coopvec = _raw_feature(pd, COOPVEC_FEATURES, 2) if COOPVEC_EXT in exts else [False] * 2
    return DeviceInfo(
        index=index, name=props.deviceName, type=TYPE_NAMES.get(props.deviceType, "other"),
        api=f"{vk.VK_VERSION_MAJOR(v)}.{vk.VK_VERSION_MINOR(v)}.{vk.VK_VERSION_PATCH(v)}",
        driver=str(props.driverVersion), fp16=bool(f12.shaderFloat16),
        storage16=bool(f11.storageBuffer16BitAccess),
        float_atomics="VK_EXT_shader_atomic_float" in exts,
        int64_atomics=bool(f12.shaderBufferInt64Atomics), subgroup_size=sg.subgroupSize,
        shared_memory=props.limits.maxComputeSharedMemorySize, memory_mib=heap >> 20,
        timestamp_period=props.limits.timestampPeriod, coopmat=_coopmat_shapes(pd, exts),
        extensions=exts, max_storage_range=int(props.limits.maxStorageBufferRange),
        max_texel_elements=int(props.limits.maxTexelBufferElements),
        uuid=format_uuid(bytes(vk.ffi.buffer(ids.deviceUUID))),
        coopvec=coopvec[0], coopvec_training=coopvec[1],
        subgroup_shuffle=bool(sg.supportedOperations & vk.VK_SUBGROUP_FEATURE_SHUFFLE_BIT
                              and sg.supportedStages & vk.VK_SHADER_STAGE_COMPUTE_BIT),
        shared_blocks=_shared_blocks(pd, exts), sm_count=_sm_count(pd, exts),
        coopmat2=_coopmat2(pd, exts))


def _coopmat2(pd, exts) -> tuple[str, ...]:
    if COOPMAT2_EXT not in exts or "VK_KHR_cooperative_matrix" not in exts:
        return ()
    flags = _raw_feature(pd, COOPMAT2_FEATURES, len(COOPMAT2_FLAGS))
    return tuple(n for n, on in zip(COOPMAT2_FLAGS, flags, strict=True) if on)


def _sm_count(pd, exts) -> int:
    if SM_BUILTINS_EXT not in exts:
        return 0
    sm = vk.VkPhysicalDeviceShaderSMBuiltinsPropertiesNV()
    vk.vkGetPhysicalDeviceProperties2(pd, vk.VkPhysicalDeviceProperties2(pNext=sm))
    return int(sm.shaderSMCount)


def _shared_blocks(pd, exts) -> bool:
    """Whether the device has explicit-layout shared memory with 16-bit access."""
    if WMEL_EXT not in exts:
        return False
    f = vk.VkPhysicalDeviceWorkgroupMemoryExplicitLayoutFeaturesKHR()
    vk.vkGetPhysicalDeviceFeatures2(pd, vk.VkPhysicalDeviceFeatures2(pNext=f))
    return bool(f.workgroupMemoryExplicitLayout and f.workgroupMemoryExplicitLayout16BitAccess)


def format_uuid(raw: bytes) -> str:
    """16 bytes as 8-4-4-4-12 lower-case hex digits (the form nvidia-smi prints)."""
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def uuid_key(text: str) -> str | None:
    """The 32 hex digits of a device UUID written as nvidia-smi, NVML or `vkgraph devices`
    do ("GPU-" prefix or not, dashes or not, any case); None when `text` is not one."""
    t = text.strip().lower()
    t = t.removeprefix("gpu-").replace("-", "")
    return t if len(t) == 32 and all(c in "0123456789abcdef" for c in t) else None


def physical_devices():
    return call("vkEnumeratePhysicalDevices", vk.vkEnumeratePhysicalDevices, instance())


def list_devices() -> list[DeviceInfo]:
    return [_describe(i, pd) for i, pd in enumerate(physical_devices())]


def choose(infos: list[DeviceInfo], name: str | None = None,
           index: int | None = None) -> DeviceInfo:
    """--device-id, then --device, then VKGRAPH_DEVICE_UUID, then VKGRAPH_DEVICE, else the
    most capable type: discrete GPU first, the CPU driver last. A --device or VKGRAPH_DEVICE
    that is a UUID (`uuid_key`) picks the device with that UUID, anything else the first
    whose name contains it."""
    if not infos:
        raise RuntimeFailure("no Vulkan device found (Debian: apt install mesa-vulkan-drivers)")
    if index is not None:
        if not 0 <= index < len(infos):
            raise GraphError(f"--device-id {index}: there are {len(infos)} devices "
                             f"(0..{len(infos) - 1}); see 'vkgraph devices'")
        return infos[index]
    name = (name or os.environ.get("VKGRAPH_DEVICE_UUID") or os.environ.get("VKGRAPH_DEVICE")
            or None)
    if name and uuid_key(name):
        hits = [d for d in infos if uuid_key(d.uuid) == uuid_key(name)]
        if not hits:
            have = ", ".join(f"{d.name} {d.uuid}" for d in infos)
            raise GraphError(f"no Vulkan device has the UUID '{name}' (have: {have})")
        return hits[0]
    if name:
        hits = [d for d in infos if name.lower() in d.name.lower()]
        if not hits:
            names = ", ".join(d.name for d in infos)
            raise GraphError(f"no Vulkan device matches '{name}' (have: {names})")
        return hits[0]
    order = {t: i for i, t in enumerate(PREFERENCE)}
    rank = {v: k for k, v in TYPE_NAMES.items()}
    return min(infos, key=lambda d: (order.get(rank.get(d.type), 9), d.index))


SWAPCHAIN = "VK_KHR_swapchain"


def _queue_family(pd, surface=None) -> int | None:
    """The first compute queue family (that can also present to `surface`, when given)."""
    for i, q in enumerate(vk.vkGetPhysicalDeviceQueueFamilyProperties(pd)):
        if q.queueFlags & vk.VK_QUEUE_COMPUTE_BIT and (surface is None
                                                       or surface.supports(pd, i)):
            return i
    return None


class Device:
    """A logical device with one compute queue. Create with `Device.open()`.

    With a `surface` (pipeline/vk/display.py) the queue can also present to it and
    VK_KHR_swapchain is enabled; without one, nothing about windows is touched.
    """

    def __init__(self, info: DeviceInfo, pd, surface=None):
        self.info = info
        self.pd = pd
        self.children: list = []  # destroyed in reverse order by close()
        qfams = vk.vkGetPhysicalDeviceQueueFamilyProperties(pd)
        self.queue_family = _queue_family(pd, surface)
        if self.queue_family is None:
            raise RuntimeFailure(f"{info.name} has no compute queue"
                                 + (" that can present to the window" if surface else ""))
        self.can_present = surface is not None
        self.timestamp_bits = qfams[self.queue_family].timestampValidBits
        f2, f11, f12, f13 = _features(pd)
        # enable what we use where the device has it
        want12 = vk.VkPhysicalDeviceVulkan12Features(
            shaderFloat16=f12.shaderFloat16, storageBuffer8BitAccess=f12.storageBuffer8BitAccess,
            scalarBlockLayout=f12.scalarBlockLayout, vulkanMemoryModel=f12.vulkanMemoryModel,
            vulkanMemoryModelDeviceScope=f12.vulkanMemoryModelDeviceScope,
            hostQueryReset=f12.hostQueryReset, bufferDeviceAddress=0,
            shaderBufferInt64Atomics=f12.shaderBufferInt64Atomics)
        want11 = vk.VkPhysicalDeviceVulkan11Features(
            pNext=want12, storageBuffer16BitAccess=f11.storageBuffer16BitAccess,
            uniformAndStorageBuffer16BitAccess=f11.uniformAndStorageBuffer16BitAccess)
        want13 = vk.VkPhysicalDeviceVulkan13Features(
            pNext=want11, subgroupSizeControl=f13.subgroupSizeControl,
            computeFullSubgroups=f13.computeFullSubgroups,
            synchronization2=f13.synchronization2, maintenance4=f13.maintenance4)
        chain = want13
        exts = []
        if "VK_EXT_shader_atomic_float" in info.extensions:
            atom = vk.VkPhysicalDeviceShaderAtomicFloatFeaturesEXT()
            vk.vkGetPhysicalDeviceFeatures2(pd, vk.VkPhysicalDeviceFeatures2(pNext=atom))
            chain = vk.VkPhysicalDeviceShaderAtomicFloatFeaturesEXT(
                pNext=chain, shaderBufferFloat32Atomics=atom.shaderBufferFloat32Atomics,
                shaderBufferFloat32AtomicAdd=atom.shaderBufferFloat32AtomicAdd)
            exts.append("VK_EXT_shader_atomic_float")
        if info.coopmat:
            chain = vk.VkPhysicalDeviceCooperativeMatrixFeaturesKHR(
                pNext=chain, cooperativeMatrix=1)
            exts.append("VK_KHR_cooperative_matrix")
        if info.shared_blocks:
            chain = vk.VkPhysicalDeviceWorkgroupMemoryExplicitLayoutFeaturesKHR(
                pNext=chain, workgroupMemoryExplicitLayout=1,
                workgroupMemoryExplicitLayout16BitAccess=1)
            exts.append(WMEL_EXT)
        self._raw = []  # feature structs in raw memory: alive until vkCreateDevice returns

        def enable_raw(stype: int, flags, ext: str) -> None:
            """Chain a raw feature struct (for an extension the bindings lack) with these
            flags, and enable its extension."""
            nonlocal chain
            self._raw.append(chain)  # only its address is in the raw struct below
            chain = raw_struct(stype, len(flags), chain, flags)
            self._raw.append(chain)
            exts.append(ext)

        if info.coopmat and info.coopmat2:
            enable_raw(COOPMAT2_FEATURES, [n in info.coopmat2 for n in COOPMAT2_FLAGS],
                       COOPMAT2_EXT)
        if info.coopvec:
            enable_raw(COOPVEC_FEATURES, (1, info.coopvec_training), COOPVEC_EXT)
            # Slang may express a splat of a cooperative vector as a replicated composite
            if REPLICATED_EXT in info.extensions and _raw_feature(
                    pd, REPLICATED_COMPOSITES_FEATURES, 1)[0]:
                enable_raw(REPLICATED_COMPOSITES_FEATURES, (1,), REPLICATED_EXT)
        # the driver's statistics of each compiled kernel (Kernel.statistics), on request
        self.pipeline_stats = _env_flag("VKGRAPH_PIPELINE_STATS") and STATS_EXT in info.extensions
        if self.pipeline_stats:
            chain = vk.VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR(
                pNext=chain, pipelineExecutableInfo=1)
            exts.append(STATS_EXT)
        if surface is not None:
            exts.append(SWAPCHAIN)
        base = f2.features
        feats = vk.VkPhysicalDeviceFeatures(shaderInt16=base.shaderInt16,
                                            shaderInt64=base.shaderInt64,
                                            shaderFloat64=base.shaderFloat64)
        qinfo = vk.VkDeviceQueueCreateInfo(queueFamilyIndex=self.queue_family, queueCount=1,
                                           pQueuePriorities=[1.0])
        dinfo = vk.VkDeviceCreateInfo(
            pNext=chain, queueCreateInfoCount=1, pQueueCreateInfos=[qinfo],
            enabledExtensionCount=len(exts), ppEnabledExtensionNames=exts or None,
            pEnabledFeatures=feats)
        self.handle = call("vkCreateDevice", vk.vkCreateDevice, pd, dinfo, None)
        self._raw.clear()
        self.enabled_extensions = set(exts)
        self.queue = vk.vkGetDeviceQueue(self.handle, self.queue_family, 0)
        self.mem_props = vk.vkGetPhysicalDeviceMemoryProperties(pd)
        self.pool = call("vkCreateCommandPool", vk.vkCreateCommandPool, self.handle,
                         vk.VkCommandPoolCreateInfo(
                             flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                             queueFamilyIndex=self.queue_family), None)
        self._pipelines: dict = {}
        self._pipeline_cache = None  # made with the first kernel (pcache.py)
        self._oneshot = None
        self._small_staging = None
        self.closed = False
        log.info("device: %s", info.summary())

    @classmethod
    def open(cls, name: str | None = None, index: int | None = None,
             surface=None) -> Device:
        """The device chosen by `choose`; with a `surface`, one that can present to it (an
        explicit --device / --device-id that cannot is an error, the default skips it)."""
        pds = physical_devices()
        infos = [_describe(i, pd) for i, pd in enumerate(pds)]
        if surface is None:
            info = choose(infos, name, index)
            return cls(info, pds[info.index])
        ok = [d for d in infos if SWAPCHAIN in d.extensions
              and _queue_family(pds[d.index], surface) is not None]
        explicit = (index is not None or name or os.environ.get("VKGRAPH_DEVICE")
                    or os.environ.get("VKGRAPH_DEVICE_UUID"))
        info = choose(infos if explicit else ok or infos, name, index)
        if info not in ok:
            raise RuntimeFailure(f"{info.name} cannot show images in this window (no "
                                 f"{SWAPCHAIN} or no queue that presents to the surface); "
                                 + ("pick another with --device" if explicit
                                    else "use `vkgraph cli`"))
        return cls(info, pds[info.index], surface)

    # factories (each child registers itself for teardown)
    def buffer(self, nbytes: int, host: bool = False, near: bool = False, zero: bool = True,
               cached: bool = False):
        from .memory import Buffer
        return self._own(Buffer(self, nbytes, host, near, zero, cached))

    def zero_all(self, buffers) -> None:
        """Every byte of these buffers (made with zero=False) 0, in one submission."""
        from .memory import zero_all
        zero_all(self, buffers)

    def kernel(self, spirv: bytes, nconn: int, push_size: int = 0, local=(8, 8, 1)):
        """A compute pipeline; identical requests share one pipeline."""
        from .kernel import Kernel
        key = (hash(spirv), nconn, push_size, tuple(local))
        if key not in self._pipelines:
            cache = self.pipeline_cache()
            self._pipelines[key] = self._own(Kernel(self, spirv, nconn, push_size, local,
                                                    cache.handle if cache else None))
            if cache:
                cache.dirty = True
        return self._pipelines[key]

    def pipeline_cache(self):
        """The on-disk cache of the driver's compiled pipelines (pcache.py), opened with
        the first kernel; None where VKGRAPH_PIPELINE_CACHE=0."""
        from . import pcache
        if self._pipeline_cache is None and pcache.enabled():
            props = vk.vkGetPhysicalDeviceProperties(self.pd)
            self._pipeline_cache = self._own(pcache.PipelineCache(self, props))
        return self._pipeline_cache

    def commands(self, timestamps: int = 0):
        from .commands import CommandList
        return self._own(CommandList(self, timestamps))

    def oneshot(self):
        """A command list for one-off transfers (uploads, downloads, clears)."""
        if self._oneshot is None:
            self._oneshot = self.commands()
        return self._oneshot

    def small_staging(self):
        """The host buffer that transfers of up to memory.SMALL bytes share."""
        if self._small_staging is None:
            from .memory import SMALL
            self._small_staging = self.buffer(SMALL, host=True)
        return self._small_staging

    def _own(self, child):
        self.children.append(child)
        return child

    def release(self, children) -> None:
        """Destroy children before the device closes (a closed Build's, a one-off dispatch's),
        newest first, and forget them."""
        for child in reversed(children):
            child.destroy()
        gone = {id(c) for c in children}
        self.children = [c for c in self.children if id(c) not in gone]

    def memory_type(self, bits: int, flags: int) -> int:
        for i in range(self.mem_props.memoryTypeCount):
            if bits & (1 << i) and (self.mem_props.memoryTypes[i].propertyFlags & flags) == flags:
                return i
        raise VulkanError(f"no memory type with flags {flags:#x}")

    def wait_idle(self) -> None:
        call("vkDeviceWaitIdle", vk.vkDeviceWaitIdle, self.handle)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            vk.vkDeviceWaitIdle(self.handle)
        except vk.VkError:
            pass
        for child in reversed(self.children):
            child.destroy()
        self.children.clear()
        vk.vkDestroyCommandPool(self.handle, self.pool, None)
        vk.vkDestroyDevice(self.handle, None)

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
