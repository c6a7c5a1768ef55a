"""Kernel variants: what the build's device can run (cooperative matrices, a CPU driver's
SIMD lanes), the environment switches that force a variant, and the launch-shape overrides
benchmarks set. Modules pick their kernels with these (kpn-t, kpn and mlp-t); `graph` is
the hook context, whose `capabilities` is the device's vk.DeviceInfo (None without one)."""

from __future__ import annotations

import os

from .errors import GraphError


def env_on(name: str) -> bool:
    """An environment switch: set and not "0" (VKGRAPH_PORTABLE, VKGRAPH_COOPMAT_EMULATE)."""
    return os.environ.get(name, "") not in ("", "0")


def emulated() -> bool:
    """VKGRAPH_COOPMAT_EMULATE: the cooperative-matrix kernels in plain GLSL, on any device
    (tests on the CPU driver; slow)."""
    return env_on("VKGRAPH_COOPMAT_EMULATE")


def portable_forced(precise: bool = False) -> bool:
    """The fp32 kernels regardless of the device: VKGRAPH_PORTABLE=1, or `precise` (the
    gradient check's float64 forward, which only the portable kernels have)."""
    return precise or env_on("VKGRAPH_PORTABLE")


def env_choice(name: str, choices: tuple[str, ...]) -> str:
    """The value of environment variable `name` (default "auto"), one of `choices`."""
    want = os.environ.get(name, "") or "auto"
    if want not in choices:
        raise GraphError(f"{name}={want}: expected {', '.join(choices[:-1])} or {choices[-1]}")
    return want


def tuning(env: str, defaults: dict) -> tuple[dict, set]:
    """(defaults with the overrides of `env` = "key=N,key=N", the keys given): the launch
    shapes of the cooperative-matrix kernels, overridden for benchmarks (kpn-t's
    VKGRAPH_CM_TUNE, mlp-t's VKGRAPH_MLP_TUNE). An unknown key or a non-integer is an error."""
    t, given = dict(defaults), set()
    for item in filter(None, os.environ.get(env, "").split(",")):
        key, _, value = item.partition("=")
        if key.strip() not in t or not value.strip().isdigit():
            raise GraphError(f"{env}: {item!r} is not one of {', '.join(k + '=N' for k in t)}")
        t[key.strip()] = int(value)
        given.add(key.strip())
    return t, given


def cm_capable(graph) -> bool:
    """Whether the build's device runs the cooperative-matrix kernels: 16x16x16 f16 x f16 +
    f32 matrices, 32-wide subgroups, f16 arithmetic and storage, 45 KiB of shared memory."""
    info = graph.capabilities
    return (info is not None and info.subgroup_size == 32 and info.fp16 and info.storage16
            and "16x16x16 f16*f16+f32->f32" in info.coopmat and info.shared_memory >= 46080)


def cm_available(graph) -> bool:
    """The cooperative-matrix kernels can run: on the device, or emulated."""
    return emulated() or cm_capable(graph)


def cpu_capable(graph) -> bool:
    """Whether the build's device suits kernels written for a CPU driver (lavapipe), whose
    subgroups are the 8 lanes of a 256-bit SIMD register, with subgroupShuffle (kpn-t's cpu
    kernels hand weights to the lanes with it)."""
    info = graph.capabilities
    return (info is not None and info.type == "CPU" and info.subgroup_size == 8
            and info.subgroup_shuffle)


def sm_count(graph, default: int) -> int:
    """The device's streaming multiprocessors where it says (VK_NV_shader_sm_builtins), else
    `default`."""
    info = graph.capabilities
    return info.sm_count if info is not None and info.sm_count > 0 else default


def cm_defines(graph, **extra) -> dict:
    """The defines of a cooperative-matrix kernel (kpn-t's and mlp-t's): `extra`, plus
    CM_EMULATE under VKGRAPH_COOPMAT_EMULATE, else CM_SHARED_BLOCKS where the device has
    explicit-layout shared memory."""
    if emulated():
        return {"CM_EMULATE": 1, **extra}
    if graph.capabilities is not None and graph.capabilities.shared_blocks:
        extra["CM_SHARED_BLOCKS"] = 1  # 16-byte shared-memory copies (mlp_coopmat.glsl)
    return dict(extra)
