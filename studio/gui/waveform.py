"""A waveform view (pyqtgraph) that can grow live as chunks arrive, drawn as a min/max envelope, with a
playhead, click-to-seek and a placeholder line while it has no audio."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QSizePolicy

#: Envelope bins per second of audio: fine enough to look like a waveform, cheap for minutes of audio.
BINS_PER_SECOND = 200


def envelope(samples: np.ndarray, sample_rate: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(times, minima, maxima) of ``samples`` in bins of 1/BINS_PER_SECOND s; a partial last bin counts."""
    samples = np.asarray(samples, dtype=np.float32).reshape(-1)
    bin_size = max(1, sample_rate // BINS_PER_SECOND)
    count = -(-samples.size // bin_size)
    if count == 0:
        empty = np.zeros(0, dtype=np.float32)
        return empty, empty, empty
    padded = np.zeros(count * bin_size, dtype=np.float32)
    padded[: samples.size] = samples
    blocks = padded.reshape(count, bin_size)
    times = (np.arange(count, dtype=np.float32) * bin_size) / float(sample_rate)
    return times, blocks.min(axis=1), blocks.max(axis=1)


class WaveformView(pg.PlotWidget):
    """Shows mono audio; ``append`` adds samples (a streamed take), ``set_audio`` replaces them."""

    sig_seek = Signal(float)
    """The user clicked at this many seconds into the audio shown."""

    def __init__(self, parent=None, color: str = "#4fc3f7", height: int = 90, autoscale: bool = False):
        super().__init__(parent, background=None)
        self._autoscale = autoscale  # zoom quiet audio to its peak instead of full scale
        self.setFixedHeight(height)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMenuEnabled(False)
        self.setMouseEnabled(x=False, y=False)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # no invisible stop in the Tab order
        self.hideButtons()
        self.setYRange(-1.0, 1.0, padding=0.02)
        self.getPlotItem().hideAxis("left")
        self.getPlotItem().getAxis("bottom").setStyle(tickLength=-4)
        bottom = self.getPlotItem().getAxis("bottom")
        bottom.enableAutoSIPrefix(False)
        bottom.setHeight(22)
        pen = pg.mkPen(color, width=1)
        self._upper = pg.PlotDataItem(pen=pen)
        self._lower = pg.PlotDataItem(pen=pen)
        self._fill = pg.FillBetweenItem(self._upper, self._lower, brush=pg.mkBrush(color))
        self.addItem(self._upper)
        self.addItem(self._lower)
        self.addItem(self._fill)
        self._placeholder = pg.TextItem("", color="#78909c", anchor=(0.5, 0.5))
        self._placeholder.setPos(0.5, 0.0)
        self.addItem(self._placeholder)
        self._cursor = pg.InfiniteLine(angle=90, pen=pg.mkPen("#ffb74d", width=1, style=Qt.PenStyle.DashLine))
        self._cursor.hide()
        self.addItem(self._cursor)
        self._sample_rate = 1  # until audio arrives with its rate (an empty view lasts 0 s at any rate)
        self._samples = np.zeros(0, dtype=np.float32)
        self.setXRange(0.0, 1.0, padding=0.0)
        self.scene().sigMouseClicked.connect(self._on_click)

    @property
    def samples(self) -> np.ndarray:
        return self._samples

    @property
    def duration(self) -> float:
        return self._samples.size / float(self._sample_rate)

    def clear_audio(self) -> None:
        self.set_audio(np.zeros(0, dtype=np.float32), self._sample_rate)

    def set_audio(self, samples: np.ndarray, sample_rate: int) -> None:
        self._sample_rate = int(sample_rate)
        self._samples = np.asarray(samples, dtype=np.float32).reshape(-1).copy()
        self._redraw()

    def append(self, samples: np.ndarray, sample_rate: int) -> None:
        if sample_rate != self._sample_rate and self._samples.size:
            raise ValueError(f"cannot append {sample_rate} Hz audio to {self._sample_rate} Hz audio")
        self._sample_rate = int(sample_rate)
        self._samples = np.concatenate([self._samples, np.asarray(samples, dtype=np.float32).reshape(-1)])
        self._redraw()

    def set_cursor(self, seconds: float | None) -> None:
        """Show the playback position (None hides it)."""
        if seconds is None:
            self._cursor.hide()
            return
        self._cursor.setValue(seconds)
        self._cursor.show()

    def set_placeholder(self, text: str) -> None:
        """A line shown in the middle while there is no audio (e.g. "Generating…")."""
        self._placeholder.setText(text)
        self._placeholder.setVisible(not self._samples.size)

    @property
    def placeholder(self) -> str:
        return self._placeholder.toPlainText() if self._placeholder.isVisible() else ""

    def _on_click(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton or not self._samples.size:
            return
        point = self.getPlotItem().vb.mapSceneToView(event.scenePos())
        self.sig_seek.emit(float(min(max(point.x(), 0.0), self.duration)))

    def _redraw(self) -> None:
        has_audio = bool(self._samples.size)
        self._fill.setVisible(has_audio)  # an emptied pair of curves leaves the old fill path drawn
        self._placeholder.setVisible(not has_audio and bool(self._placeholder.toPlainText()))
        times, lows, highs = envelope(self._samples, self._sample_rate)
        self._upper.setData(times, highs)
        self._lower.setData(times, lows)
        self.setXRange(0.0, max(1.0, self.duration), padding=0.0)
        if self._autoscale:
            top = float(max(highs.max(initial=0.0), -lows.min(initial=0.0)))
            self.setYRange(-max(top, 0.01), max(top, 0.01), padding=0.05)
