"""Running vkgraph on a Ray cluster (`vkgraph sweep`, `vkgraph denoise --ray`).

Ray is an optional extra (`pip install 'vkgraph[ray]'`): nothing here imports it at load
time, and `import_ray()` turns its absence into one clear error.

GPU mapping. Ray hands a task or actor its GPUs as ids (`ray.get_gpu_ids()`) and sets
CUDA_VISIBLE_DEVICES to them, but Vulkan ignores CUDA_VISIBLE_DEVICES: every process sees
every GPU. So a worker turns its id into the GPU's UUID (NVML through `pynvml` when it can be
imported, else `nvidia-smi --query-gpu=index,uuid`) and opens the Vulkan device whose
`deviceUUID` (VkPhysicalDeviceIDProperties) is that UUID; two workers given different GPUs
therefore never share one. `gpu_uuid()` is that mapping without side effects. Ray's ids are
CUDA's indices, which equal nvidia-smi's when CUDA_DEVICE_ORDER=PCI_BUS_ID and on machines of
one GPU model (CUDA's default order puts the fastest first); an id that is already a UUID
(CUDA_VISIBLE_DEVICES=GPU-...) is used as it is. Without NVIDIA GPUs (no ids, or no NVML and
no nvidia-smi) a worker uses the default device, as `vkgraph cli` would.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading

from ..pipeline.errors import GraphError, RuntimeFailure

log = logging.getLogger("vkgraph")

MISSING = "Ray is not installed: pip install 'vkgraph[ray]' (or: pip install 'ray[tune]')"


def import_ray():
    """The `ray` package, or a GraphError (exit 2) that says how to install it."""
    try:
        import ray
    except ImportError:
        raise GraphError(MISSING) from None
    return ray


def connect(address: str | None = None, num_cpus: int | None = None,
            num_gpus: int | None = None) -> bool:
    """Join the Ray cluster at `address` ("auto", "host:port", "ray://..."), or start a
    local Ray instance (with num_cpus / num_gpus when given, else what the machine has).
    When this process is already connected, that connection is used. True when this call
    connected (the caller shuts it down again with `ray.shutdown()`)."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    # Ray's notice that it uses token authentication (its default) is not for our users
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(
        logging.ERROR)
    opts = dict(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    # ray.init replaces the SIGTERM handler by sys.exit(); the caller's (a graceful stop:
    # the sweep's table, denoise's current file) comes back after it
    main = threading.current_thread() is threading.main_thread()
    term = signal.getsignal(signal.SIGTERM) if main else None
    try:
        if address:
            if num_cpus is not None or num_gpus is not None:
                raise GraphError("--num-cpus/--num-gpus size a local Ray instance; a cluster "
                                 "given with --ray ADDRESS has its own")
            probe(address)
            ray.init(address=address, **opts)
        else:
            if os.environ.get("RAY_ADDRESS"):  # ray.init joins that cluster
                probe(os.environ["RAY_ADDRESS"])
            ray.init(num_cpus=num_cpus, num_gpus=num_gpus, **opts)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = f"the Ray cluster at '{address}'" if address else "a local Ray instance"
        raise RuntimeFailure(f"cannot connect to {where}: "
                             f"{' '.join(str(e).split())[:200]}") from None
    finally:
        if term is not None:
            signal.signal(signal.SIGTERM, term)
    return True


CONNECT_TIMEOUT_S = 10.0  # Ray itself retries an unreachable cluster for minutes


def probe(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """A TCP connection to the host:port of a cluster address (GCS `host:port` or a Ray
    client's `ray://host:port`) within `timeout` seconds, else RuntimeFailure; other forms
    ("auto", "local") are left to Ray."""
    import socket

    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        why = (f"no answer within {timeout:g} s" if isinstance(e, TimeoutError)
               else e.strerror or type(e).__name__)
        raise RuntimeFailure(f"cannot connect to the Ray cluster at '{address}': {why}") \
            from None


def cluster_gpus() -> int:
    """GPUs in the connected cluster (0: a CPU-only cluster)."""
    return int(import_ray().cluster_resources().get("GPU", 0))


def cluster_cpus() -> int:
    return int(import_ray().cluster_resources().get("CPU", 0))


def parse_ids(gpu_ids, cuda_visible: str | None) -> list[str]:
    """The GPU ids a worker was given: Ray's list (ints or strings), else the
    CUDA_VISIBLE_DEVICES list; [] for none."""
    if gpu_ids:
        return [str(i).strip() for i in gpu_ids]
    if cuda_visible is None:
        return []
    return [t.strip() for t in cuda_visible.split(",") if t.strip()]


def gpu_uuid(gpu_ids, cuda_visible: str | None, table: dict[int, str]) -> str | None:
    """The UUID of the GPU a worker was given, from its ids (`ray.get_gpu_ids()`, else
    CUDA_VISIBLE_DEVICES) and the machine's {nvidia-smi index: UUID} table; None for "the
    default device" (no GPU given, or no table: no NVIDIA GPUs visible). A worker given
    several GPUs uses the first. An index the table lacks is an error, never a silent
    fall-back (two workers would share the default GPU)."""
    ids = parse_ids(gpu_ids, cuda_visible)
    if not ids:
        return None
    first = ids[0]
    if first.upper().startswith(("GPU-", "MIG-")):
        return first
    try:
        index = int(first)
    except ValueError:
        raise RuntimeFailure(f"GPU id '{first[:60]}' is neither an index nor a UUID") from None
    if not table:
        return None
    if index not in table:
        raise RuntimeFailure(f"this worker was given GPU {index}, but the machine's GPUs are "
                             f"{', '.join(map(str, sorted(table)))}")
    return table[index]


def parse_smi(text: str) -> dict[int, str]:
    """{index: uuid} from `nvidia-smi --query-gpu=index,uuid --format=csv,noheader`."""
    out = {}
    for line in text.splitlines():
        index, _, uuid = line.partition(",")
        if index.strip().isdigit() and uuid.strip():
            out[int(index)] = uuid.strip()
    return out


def nvidia_gpus() -> dict[int, str]:
    """{index: UUID} of the machine's NVIDIA GPUs (NVML, else nvidia-smi); {} without any.
    Both ignore CUDA_VISIBLE_DEVICES: the indices are the machine's."""
    try:
        import pynvml
    except ImportError:
        pynvml = None
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
            try:
                table = {}
                for i in range(pynvml.nvmlDeviceGetCount()):
                    uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
                    table[i] = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
                return table
            finally:
                pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass  # no driver: try nvidia-smi, then give up
    try:
        res = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse_smi(res.stdout) if res.returncode == 0 else {}


def worker_gpu() -> str | None:
    """The UUID of the GPU Ray gave this worker (None: use the default device)."""
    ids = []
    try:
        import ray

        if ray.is_initialized():
            ids = ray.get_gpu_ids()
    except ImportError:
        pass
    cuda = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not parse_ids(ids, cuda):
        return None
    table = nvidia_gpus()
    uuid = gpu_uuid(ids, cuda, table)
    if uuid is None:
        log.warning("given GPU %s but no NVIDIA GPU table (NVML, nvidia-smi): using the "
                    "default Vulkan device", ",".join(parse_ids(ids, cuda)))
    return uuid


def open_worker_device():
    """The Vulkan device of this worker's GPU (`worker_gpu`), else the default device;
    with the UUID it was picked by (None for the default)."""
    from ..pipeline.vk import Device

    uuid = worker_gpu()
    return Device.open(uuid), uuid
