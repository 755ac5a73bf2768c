"""A waveform view (pyqtgraph) that can grow live as chunks arrive, drawn as a min/max envelope, with a
playhead, click-to-seek and a placeholder line while it has no audio."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QSizePolicy

#: Envelope bins per second of a short take: fine enough to look like a waveform.
BINS_PER_SECOND = 200
#: Columns drawn at most, about a wide screen's pixels: a longer take merges neighbouring columns in pairs.
MAX_COLUMNS = 2048


class Envelope:
    """The min/max outline of mono audio in at most `MAX_COLUMNS` columns, kept up to date as samples arrive.

    Columns start as 1/BINS_PER_SECOND s; when the audio outgrows `MAX_COLUMNS` of them, neighbours merge in
    pairs (each column twice as long). Appending costs the new samples plus at most a merge of the columns,
    never a pass over the audio so far, so a 15-minute take costs per chunk what a 20-second one does.
    """

    def __init__(self, sample_rate: int):
        if sample_rate <= 0:
            raise ValueError(f"sample rate must be positive, got {sample_rate}")
        self.sample_rate = int(sample_rate)
        self.span = max(1, self.sample_rate // BINS_PER_SECOND)  # samples per column
        self.total = 0  # samples seen
        self.count = 0  # columns in use (the last one may be partial)
        self._lows = np.zeros(MAX_COLUMNS, dtype=np.float32)
        self._highs = np.zeros(MAX_COLUMNS, dtype=np.float32)
        self.peak = 0.0  # the largest magnitude seen

    @property
    def lows(self) -> np.ndarray:
        return self._lows[: self.count]

    @property
    def highs(self) -> np.ndarray:
        return self._highs[: self.count]

    @property
    def times(self) -> np.ndarray:
        """Where each column starts, in seconds."""
        return np.arange(self.count, dtype=np.float64) * (self.span / self.sample_rate)

    def extend(self, samples: np.ndarray) -> None:
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        if not samples.size:
            return
        while -(-(self.total + samples.size) // self.span) > MAX_COLUMNS:
            self._merge_pairs()
        self.peak = max(self.peak, float(samples.max()), float(-samples.min()))
        filled = self.total % self.span  # samples already in the last, partial column
        if filled:
            head, samples = samples[: self.span - filled], samples[self.span - filled :]
            last = self.count - 1
            self._lows[last] = min(self._lows[last], head.min())
            self._highs[last] = max(self._highs[last], head.max())
            self.total += head.size
        if not samples.size:
            return
        whole = samples.size // self.span
        lows = samples[: whole * self.span].reshape(whole, self.span).min(axis=1)
        highs = samples[: whole * self.span].reshape(whole, self.span).max(axis=1)
        tail = samples[whole * self.span :]
        if tail.size:
            lows, highs = np.append(lows, tail.min()), np.append(highs, tail.max())
        self._lows[self.count : self.count + lows.size] = lows
        self._highs[self.count : self.count + highs.size] = highs
        self.count += lows.size
        self.total += samples.size

    def _merge_pairs(self) -> None:
        """Each column twice as long: neighbours merged (an odd last column stays as it is, now partial)."""
        count, paired = self.count, self.count // 2 * 2
        for values, pick in ((self._lows, np.minimum), (self._highs, np.maximum)):
            merged = pick(values[0:paired:2], values[1:paired:2])
            if count % 2:
                merged = np.append(merged, values[count - 1])
            values[: merged.size] = merged
        self.count = -(-count // 2)
        self.span *= 2


class WaveformView(pg.PlotWidget):
    """Shows mono audio; ``append`` adds samples (a streamed take), ``set_audio`` replaces them."""

    sig_seek = Signal(float)
    """The user clicked at this many seconds into the audio shown."""

    def __init__(
        self,
        parent=None,
        color: str = "#4fc3f7",
        height: int = 90,
        autoscale: bool = False,
        caption: str = "",
    ):
        super().__init__(parent, background=None)
        if caption:  # named in its top-left corner, over the plot: no caption row above it
            self.caption = QLabel(caption, self)
            self.caption.setObjectName("Caption")
            self.caption.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
            self.caption.move(4, 0)
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
        self._chunks: list[np.ndarray] = []  # the audio as it arrived; joined when asked for
        self._size = 0
        self._envelope = Envelope(self._sample_rate)
        self.setXRange(0.0, 1.0, padding=0.0)
        self.scene().sigMouseClicked.connect(self._on_click)

    @property
    def samples(self) -> np.ndarray:
        """All the audio shown (joined once when asked for, not on every chunk)."""
        if len(self._chunks) != 1:
            joined = np.concatenate(self._chunks) if self._chunks else np.zeros(0, dtype=np.float32)
            self._chunks = [joined]
        return self._chunks[0]

    @property
    def duration(self) -> float:
        return self._size / float(self._sample_rate)

    def clear_audio(self) -> None:
        self.set_audio(np.zeros(0, dtype=np.float32), self._sample_rate)

    def set_audio(self, samples: np.ndarray, sample_rate: int) -> None:
        self._chunks, self._size = [], 0
        self._envelope = Envelope(sample_rate)
        self._sample_rate = int(sample_rate)
        self.append(samples, sample_rate)

    def append(self, samples: np.ndarray, sample_rate: int) -> None:
        """Add samples at the end; costs what the samples do, not what is already shown."""
        if sample_rate != self._sample_rate and self._size:
            raise ValueError(f"cannot append {sample_rate} Hz audio to {self._sample_rate} Hz audio")
        if sample_rate != self._sample_rate:
            self._envelope = Envelope(sample_rate)
            self._sample_rate = int(sample_rate)
        samples = np.array(samples, dtype=np.float32).reshape(-1)  # a copy: the caller may reuse its buffer
        if samples.size:
            self._chunks.append(samples)
            self._size += samples.size
            self._envelope.extend(samples)
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
        self._placeholder.setVisible(not self._size)

    @property
    def placeholder(self) -> str:
        return self._placeholder.toPlainText() if self._placeholder.isVisible() else ""

    def _on_click(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton or not self._size:
            return
        point = self.getPlotItem().vb.mapSceneToView(event.scenePos())
        self.sig_seek.emit(float(min(max(point.x(), 0.0), self.duration)))

    def _redraw(self) -> None:
        """Draw the outline: at most `MAX_COLUMNS` points a curve, whatever the audio's length."""
        has_audio = bool(self._size)
        self._fill.setVisible(has_audio)  # an emptied pair of curves leaves the old fill path drawn
        self._placeholder.setVisible(not has_audio and bool(self._placeholder.toPlainText()))
        outline = self._envelope
        times = outline.times
        self._upper.setData(times, outline.highs.copy())  # copies: the outline's arrays change in place
        self._lower.setData(times, outline.lows.copy())
        self.setXRange(0.0, max(1.0, self.duration), padding=0.0)
        if self._autoscale:
            top = max(outline.peak, 0.01)
            self.setYRange(-top, top, padding=0.05)
