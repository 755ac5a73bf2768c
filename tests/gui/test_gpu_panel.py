"""The GPU panel: a clear no-GPU state without NVML, and plots fed at 2 Hz from (fake) NVML snapshots."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from studio.gpu.nvml import GpuSnapshot, NvmlUnavailable
from studio.gui.engine.gpu_panel import GIB, GpuPanel

pytestmark = pytest.mark.gui


def snapshot(used_gib: float, util: int, processes: dict[int, int]) -> GpuSnapshot:
    return GpuSnapshot(
        0, "NVIDIA H200", (9, 0), "580.1", int(141 * GIB), int(used_gib * GIB), util, processes
    )


def test_without_nvml_the_panel_says_there_is_no_nvidia_gpu(qtbot):
    def no_driver():
        raise NvmlUnavailable("no NVIDIA driver: the NVML library was not found")

    panel = GpuPanel(query=no_driver)
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.sig_unavailable, timeout=1000) as unavailable:
        panel.start()
    assert "NVML library was not found" in unavailable.args[0]
    assert not panel.is_sampling
    assert "No NVIDIA GPU" in panel._no_gpu.text() and not panel._no_gpu.isHidden()
    assert panel._memory_plot.isHidden() and panel._util_plot.isHidden()
    panel.mark_take_started()  # marks still work (nothing to draw on, but no error)


def test_the_real_query_on_this_machine_never_raises_out_of_the_panel(qtbot):
    panel = GpuPanel()  # the real NVML: a GPU machine samples, a CPU machine shows the no-GPU state
    qtbot.addWidget(panel)
    panel.start()
    assert panel.is_sampling != bool(panel.unavailable_reason)
    panel.stop()


def test_samples_memory_of_the_gpu_and_the_engine_process_tree_and_marks_takes(qtbot):
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        readings = iter([
            snapshot(10.0, 5, {os.getpid(): int(2 * GIB), child.pid: int(1 * GIB), 999999: int(4 * GIB)}),
            snapshot(12.0, 80, {os.getpid(): int(3 * GIB), child.pid: int(1 * GIB)}),
        ])  # fmt: skip
        panel = GpuPanel(query=lambda: [next(readings)])
        qtbot.addWidget(panel)
        panel.set_engine_pid(os.getpid())  # the engine and its child; pid 999999 is another program
        panel.start()
        assert panel.is_sampling
        panel.mark_take_started()
        qtbot.waitUntil(lambda: len(panel.history) == 2, timeout=3000)
        panel.stop()
        panel.mark_take_finished()
    finally:
        child.stdin.close()
        child.wait(10)
    (t0, gpu0, engine0, util0), (t1, gpu1, engine1, util1) = panel.history
    assert 0.3 < t1 - t0 < 1.5  # about every 500 ms
    assert (gpu0, engine0, util0) == pytest.approx((10.0, 3.0, 5.0))
    assert (gpu1, engine1, util1) == pytest.approx((12.0, 4.0, 80.0))
    assert panel.mark_count == 2
    assert "NVIDIA H200" in panel._title.text() and "sm_90" in panel._title.text()
