"""query_gpus maps NVML answers to GpuSnapshot, and turns every NVML failure into NvmlUnavailable."""

from __future__ import annotations

import types

import pytest

from studio.gpu import nvml
from studio.gpu.procs import descendants


class FakeNvmlError(Exception):
    pass


def fake_pynvml(*, init_error=None, count=1):
    calls = []

    def init():
        calls.append("init")
        if init_error is not None:
            raise init_error

    proc = types.SimpleNamespace
    return types.SimpleNamespace(
        NVMLError=FakeNvmlError,
        NVMLError_LibraryNotFound=type("LibraryNotFound", (FakeNvmlError,), {}),
        NVMLError_DriverNotLoaded=type("DriverNotLoaded", (FakeNvmlError,), {}),
        nvmlInit=init,
        nvmlSystemGetDriverVersion=lambda: b"580.82",
        nvmlDeviceGetCount=lambda: count,
        nvmlDeviceGetHandleByIndex=lambda i: f"handle{i}",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=8 << 30, used=3 << 30),
        nvmlDeviceGetCudaComputeCapability=lambda h: (12, 0),
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=42),
        nvmlDeviceGetName=lambda h: "NVIDIA GeForce RTX 5090",
        nvmlDeviceGetComputeRunningProcesses=lambda h: [
            proc(pid=10, usedGpuMemory=1 << 30),
            proc(pid=11, usedGpuMemory=None),
        ],
        nvmlDeviceGetGraphicsRunningProcesses=lambda h: [proc(pid=10, usedGpuMemory=1 << 20)],
        calls=calls,
    )


@pytest.fixture
def use_fake(monkeypatch):
    def install(fake):
        monkeypatch.setitem(__import__("sys").modules, "pynvml", fake)
        monkeypatch.setattr(nvml, "_initialised", False)
        return fake

    return install


def test_snapshots_carry_identity_memory_utilisation_and_processes(use_fake):
    fake = use_fake(fake_pynvml(count=2))
    gpus = nvml.query_gpus()
    assert [g.index for g in gpus] == [0, 1]
    gpu = gpus[0]
    assert gpu.name == "NVIDIA GeForce RTX 5090" and gpu.compute_capability == (12, 0)
    assert gpu.driver_version == "580.82"
    assert (gpu.memory_total, gpu.memory_used, gpu.memory_free) == (8 << 30, 3 << 30, 5 << 30)
    assert gpu.utilization_percent == 42
    assert gpu.process_memory == {10: (1 << 30) + (1 << 20), 11: 0}
    assert nvml.process_tree_memory(gpu, {10, 12}) == (1 << 30) + (1 << 20)
    nvml.query_gpus()
    assert fake.calls == ["init"]  # initialised once


@pytest.mark.parametrize(
    ("error_name", "reason"),
    [("NVMLError_LibraryNotFound", "no NVIDIA driver"), ("NVMLError_DriverNotLoaded", "not loaded"),
     ("NVMLError", "NVML failed to start")],
)  # fmt: skip
def test_init_failures_become_nvml_unavailable_with_the_reason(use_fake, error_name, reason):
    fake = fake_pynvml()
    fake.nvmlInit = lambda: (_ for _ in ()).throw(getattr(fake, error_name)("x"))
    use_fake(fake)
    with pytest.raises(nvml.NvmlUnavailable, match=reason):
        nvml.query_gpus()


def test_no_gpu_is_unavailable(use_fake):
    use_fake(fake_pynvml(count=0))
    with pytest.raises(nvml.NvmlUnavailable, match="no GPU"):
        nvml.query_gpus()


def test_this_machine_answers_or_says_why():
    try:
        gpus = nvml.query_gpus()
    except nvml.NvmlUnavailable as exc:
        assert str(exc)
    else:
        assert gpus and all(g.memory_total > 0 for g in gpus)


def test_descendants_include_children_of_children(tmp_path):
    proc = tmp_path / "proc"
    for pid, ppid in ((100, 1), (101, 100), (102, 101), (200, 1)):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "stat").write_text(f"{pid} (a (weird) name) S {ppid} 0 0")
    assert descendants(100, proc) == {100, 101, 102}
    assert descendants(5, tmp_path / "missing") == {5}
