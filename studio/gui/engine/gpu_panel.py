"""The GPU panel: NVML readings at 2 Hz over the last 5 minutes (memory of the whole GPU and of the
engine's processes, utilisation), with marks where takes started and ended, or a clear no-GPU state."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QVBoxLayout, QWidget

from studio.gpu.nvml import GpuSnapshot, NvmlUnavailable, process_tree_memory, query_gpus
from studio.gpu.procs import descendants
from studio.gui.widgets.elided_label import ElidedLabel, WrappedLabel

SAMPLE_INTERVAL_MS = 500
WINDOW_SECONDS = 300.0
PROCESS_TREE_REFRESH_S = 5.0
GIB = float(1 << 30)
WHOLE_GPU_COLOR, ENGINE_COLOR, BUSY_COLOR = "#4fc3f7", "#ffb74d", "#81c784"


class GpuPanel(QWidget):
    """Plots GPU memory and utilisation; ``query`` is injectable (tests, or a machine without NVML)."""

    sig_unavailable = Signal(str)
    """NVML cannot be used here; the reason (the panel shows it too)."""

    def __init__(self, parent: QWidget | None = None, query: Callable[[], list[GpuSnapshot]] = query_gpus):
        super().__init__(parent)
        self.setObjectName("GpuPanel")
        self._query = query
        self._engine_pid: int | None = None
        self._engine_pids: set[int] = set()
        self._pids_refreshed = 0.0
        self._history: deque[tuple[float, float, float, float]] = deque(
            maxlen=int(WINDOW_SECONDS * 1000 / SAMPLE_INTERVAL_MS) + 1
        )
        self._marks: list[tuple[float, pg.InfiniteLine, pg.InfiniteLine]] = []
        self.unavailable_reason = ""

        self._title = ElidedLabel("GPU", mode=Qt.TextElideMode.ElideRight)  # a long GPU name never widens it
        self._title.setObjectName("PanelTitle")
        self._gpu_choice = QComboBox()
        self._gpu_choice.hide()
        self._gpu_choice.currentIndexChanged.connect(lambda _i: self._history.clear())
        self._figures = WrappedLabel("")  # wraps in a narrow column instead of widening the window
        self._figures.setObjectName("GpuFigures")
        self._no_gpu = WrappedLabel("")
        self._no_gpu.setObjectName("NoGpu")
        self._no_gpu.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._no_gpu.hide()

        # the figures line, in the curves' colours, is their legend (a legend box would hide a short plot)
        self._memory_plot = self._make_plot("Memory", "GiB")
        self._gpu_curve = self._memory_plot.plot(name="whole GPU", pen=pg.mkPen(WHOLE_GPU_COLOR, width=2))
        self._engine_curve = self._memory_plot.plot(name="engine", pen=pg.mkPen(ENGINE_COLOR, width=2))
        self._util_plot = self._make_plot("Utilisation", "%")
        self._util_plot.setYRange(0, 100, padding=0.02)
        self._util_curve = self._util_plot.plot(
            pen=pg.mkPen(BUSY_COLOR, width=2), fillLevel=0, brush=pg.mkBrush(129, 199, 132, 50)
        )

        header = QHBoxLayout()
        header.addWidget(self._title, 1)
        header.addWidget(self._gpu_choice)
        layout = QVBoxLayout(self)
        layout.addLayout(header)
        layout.addWidget(self._figures)
        layout.addWidget(self._no_gpu, 1)
        plots = QHBoxLayout()  # side by side: the panel stays short enough for 1280x720
        plots.addWidget(self._memory_plot, 1)
        plots.addWidget(self._util_plot, 1)
        layout.addLayout(plots, 1)

        self._timer = QTimer(self)
        self._timer.setInterval(SAMPLE_INTERVAL_MS)
        self._timer.timeout.connect(self.on_sample)

    @staticmethod
    def _make_plot(title: str, units: str) -> pg.PlotWidget:
        plot = pg.PlotWidget(background=None)
        plot.setMenuEnabled(False)
        plot.setMouseEnabled(x=False, y=False)
        plot.hideButtons()
        plot.setTitle(title, size="9pt")
        plot.setLabel("left", units=units)
        plot.setToolTip(f"{title} over the last 5 minutes (the axis counts seconds ago)")
        plot.setXRange(-WINDOW_SECONDS, 0, padding=0)
        plot.showGrid(x=True, y=True, alpha=0.15)
        plot.setMinimumHeight(100)  # readable, and the window fits 1280x720 (it grows with the panel)
        return plot

    # -- control -------------------------------------------------------------------------------------
    @property
    def is_sampling(self) -> bool:
        return self._timer.isActive()

    def start(self) -> None:
        """Take a first reading now, then every 500 ms (unless NVML is unavailable)."""
        self.on_sample()
        if not self.unavailable_reason:
            self._timer.start()

    def stop(self) -> None:
        self._timer.stop()

    def set_engine_pid(self, pid: int | None) -> None:
        """The engine's process (its children count too); None when no engine runs."""
        self._engine_pid = pid
        self._pids_refreshed = 0.0

    def mark_take_started(self) -> None:
        self._add_mark("#81c784")

    def mark_take_finished(self) -> None:
        self._add_mark("#e57373")

    def _add_mark(self, color: str) -> None:
        now = time.monotonic()
        pen = pg.mkPen(color, width=1, style=Qt.PenStyle.DashLine)
        lines = (pg.InfiniteLine(0, angle=90, pen=pen), pg.InfiniteLine(0, angle=90, pen=pen))
        self._memory_plot.addItem(lines[0])
        self._util_plot.addItem(lines[1])
        self._marks.append((now, *lines))
        self._place_marks(now)

    def _place_marks(self, now: float) -> None:
        kept = []
        for at, memory_line, util_line in self._marks:
            if now - at > WINDOW_SECONDS:
                self._memory_plot.removeItem(memory_line)
                self._util_plot.removeItem(util_line)
                continue
            memory_line.setValue(at - now)
            util_line.setValue(at - now)
            kept.append((at, memory_line, util_line))
        self._marks = kept

    @property
    def mark_count(self) -> int:
        return len(self._marks)

    # -- sampling ------------------------------------------------------------------------------------
    def on_sample(self) -> None:
        """Read NVML once and redraw; on NvmlUnavailable switch to the no-GPU state for good."""
        try:
            snapshots = self._query()
            if not snapshots:
                raise NvmlUnavailable("the NVIDIA driver reports no GPU")
        except NvmlUnavailable as exc:
            self._show_unavailable(str(exc))
            return
        self._sync_gpu_choice(snapshots)
        snapshot = snapshots[min(max(0, self._gpu_choice.currentIndex()), len(snapshots) - 1)]
        now = time.monotonic()
        engine_bytes = process_tree_memory(snapshot, self._current_engine_pids(now))
        util = snapshot.utilization_percent
        self._history.append(
            (now, snapshot.memory_used / GIB, engine_bytes / GIB, float("nan") if util is None else util)
        )
        major, minor = snapshot.compute_capability
        self._title.setText(f"GPU {snapshot.index}: {snapshot.name} · sm_{major}{minor}")
        self._title.setToolTip(f"{self._title.text()} · driver {snapshot.driver_version}")
        self._figures.setText(  # one line in the column at 1280x720 (it wraps when narrower)
            f"<span style='color:{WHOLE_GPU_COLOR}'>GPU {snapshot.memory_used / GIB:.1f}/"
            f"{snapshot.memory_total / GIB:.0f} GiB</span> · "
            f"<span style='color:{ENGINE_COLOR}'>engine {engine_bytes / GIB:.2f} GiB</span> · "
            f"<span style='color:{BUSY_COLOR}'>{'-' if util is None else util} % busy</span>"
        )
        self._memory_plot.setYRange(0, snapshot.memory_total / GIB, padding=0.02)
        self._redraw(now)

    def _current_engine_pids(self, now: float) -> set[int]:
        if self._engine_pid is None:
            return set()
        if now - self._pids_refreshed > PROCESS_TREE_REFRESH_S:
            self._engine_pids = descendants(self._engine_pid)
            self._pids_refreshed = now
        return self._engine_pids

    def _sync_gpu_choice(self, snapshots: list[GpuSnapshot]) -> None:
        names = [f"GPU {s.index}" for s in snapshots]
        if [self._gpu_choice.itemText(i) for i in range(self._gpu_choice.count())] != names:
            self._gpu_choice.blockSignals(True)
            self._gpu_choice.clear()
            self._gpu_choice.addItems(names)
            self._gpu_choice.blockSignals(False)
        self._gpu_choice.setVisible(len(snapshots) > 1)

    def _redraw(self, now: float) -> None:
        data = np.array(self._history, dtype=np.float64).reshape(-1, 4)
        x = data[:, 0] - now
        self._gpu_curve.setData(x, data[:, 1])
        self._engine_curve.setData(x, data[:, 2])
        self._util_curve.setData(x, np.nan_to_num(data[:, 3]), connect="finite")
        self._place_marks(now)

    def _show_unavailable(self, reason: str) -> None:
        self._timer.stop()
        first = not self.unavailable_reason
        self.unavailable_reason = reason
        self._title.setText("GPU")
        self._figures.hide()
        self._memory_plot.hide()
        self._util_plot.hide()
        self._no_gpu.setText(
            f"<b>No NVIDIA GPU</b><br>{reason}.<br>The engine runs on the CPU: it works, slowly."
        )
        self._no_gpu.show()
        if first:
            self.sig_unavailable.emit(reason)

    @property
    def history(self) -> list[tuple[float, float, float, float]]:
        """(monotonic time, GPU used GiB, engine GiB, utilisation %) per reading, oldest first."""
        return list(self._history)
