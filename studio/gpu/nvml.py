"""Snapshots of NVIDIA GPUs through NVML (nvidia-ml-py), Qt-free.

``query_gpus()`` returns one :class:`GpuSnapshot` per GPU, or raises :class:`NvmlUnavailable` with a
reason a user can act on when there is no driver, no NVML library or no GPU.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

_init_lock = threading.Lock()
_initialised = False


class NvmlUnavailable(Exception):
    """NVML cannot be used here (no NVIDIA driver, no library, no GPU); the message says why."""


@dataclass(frozen=True)
class GpuSnapshot:
    """One reading of one GPU: identity, memory in bytes, utilisation in percent, per-process memory."""

    index: int
    name: str
    compute_capability: tuple[int, int]
    driver_version: str
    memory_total: int
    memory_used: int
    utilization_percent: int | None
    process_memory: dict[int, int] = field(default_factory=dict)

    @property
    def memory_free(self) -> int:
        return max(0, self.memory_total - self.memory_used)


def _nvml():
    """Import pynvml and initialise NVML once per process."""
    global _initialised
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
        raise NvmlUnavailable("nvidia-ml-py is not installed") from exc
    with _init_lock:
        if not _initialised:
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError_LibraryNotFound as exc:
                raise NvmlUnavailable("no NVIDIA driver: the NVML library was not found") from exc
            except pynvml.NVMLError_DriverNotLoaded as exc:
                raise NvmlUnavailable("the NVIDIA driver is installed but not loaded") from exc
            except pynvml.NVMLError as exc:
                raise NvmlUnavailable(f"NVML failed to start: {exc}") from exc
            _initialised = True
    return pynvml


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _process_memory(pynvml, handle) -> dict[int, int]:
    """Used GPU memory per process id (compute and graphics contexts), summed; {} when not permitted."""
    usage: dict[int, int] = {}
    for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        try:
            procs = getattr(pynvml, getter)(handle)
        except (pynvml.NVMLError, AttributeError):
            continue
        for proc in procs:
            used = proc.usedGpuMemory
            if used is None:  # not available (e.g. inside some containers / on Windows WDDM)
                used = 0
            usage[int(proc.pid)] = usage.get(int(proc.pid), 0) + int(used)
    return usage


def _snapshot(pynvml, index: int, driver: str) -> GpuSnapshot:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    try:
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
    except pynvml.NVMLError:
        major, minor = (0, 0)
    try:
        utilization = int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    except pynvml.NVMLError:
        utilization = None
    return GpuSnapshot(
        index=index,
        name=_text(pynvml.nvmlDeviceGetName(handle)),
        compute_capability=(int(major), int(minor)),
        driver_version=driver,
        memory_total=int(memory.total),
        memory_used=int(memory.used),
        utilization_percent=utilization,
        process_memory=_process_memory(pynvml, handle),
    )


def query_gpus() -> list[GpuSnapshot]:
    """Read every GPU now. Raises NvmlUnavailable (with the reason) when NVML cannot answer."""
    pynvml = _nvml()
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            raise NvmlUnavailable("the NVIDIA driver reports no GPU")
        return [_snapshot(pynvml, i, driver) for i in range(count)]
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML query failed: {exc}") from exc


def process_tree_memory(snapshot: GpuSnapshot, pids: set[int] | frozenset[int]) -> int:
    """Bytes a set of processes (e.g. the engine and its vLLM children) holds on this GPU."""
    return sum(used for pid, used in snapshot.process_memory.items() if pid in pids)
