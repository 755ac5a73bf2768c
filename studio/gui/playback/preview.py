"""The preview: the take being made grows live in a waveform, with its first-chunk latency, real-time
factor and length once finished; the transport (play/pause, stop, position; click the waveform to seek)
and the denoise toggle with its pending indicator."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from studio.gui.playback.waveform import WaveformView
from studio.gui.widgets.elided_label import WrappedLabel


class PreviewPanel(QWidget):
    """Live waveform and stats of the current take."""

    sig_toggle = Signal()
    """Play/pause the take shown here."""
    sig_stop_playback = Signal()
    """Stop whatever is playing."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("PreviewPanel")
        title = QLabel("Preview")
        title.setObjectName("PanelTitle")
        self.waveform = WaveformView(color="#4fc3f7", height=150, autoscale=True)
        self.stats = WrappedLabel("Generate a take to hear it here.")  # wraps instead of widening the window
        self.stats.setObjectName("Stats")
        self.stats.setMinimumWidth(120)
        self.play_button = QPushButton("▶ Play")
        self.play_button.setToolTip("Play or pause the take shown here (Space)")
        self.play_button.setEnabled(False)
        self.play_button.clicked.connect(self.sig_toggle.emit)
        self.time_label = QLabel("")
        self.time_label.setObjectName("Timer")
        self.stop_playback_button = QPushButton("■ Stop")
        self.stop_playback_button.setToolTip("Stop playback (Esc)")
        self.stop_playback_button.setEnabled(False)
        self.stop_playback_button.clicked.connect(self.sig_stop_playback.emit)
        self.denoise = QCheckBox("Denoise takes")
        self.denoise.setToolTip(
            "Denoise finished takes in the background; playback and export use the "
            "denoised audio once it is ready"
        )
        self.pending = QLabel("")
        self.pending.setObjectName("Pending")
        header = QHBoxLayout()
        header.addWidget(title)
        header.addStretch(1)
        header.addWidget(self.pending)
        header.addWidget(self.denoise)
        footer = QHBoxLayout()
        footer.addWidget(self.stats, 1)
        footer.addWidget(self.time_label)
        footer.addWidget(self.play_button)
        footer.addWidget(self.stop_playback_button)
        layout = QVBoxLayout(self)
        layout.addLayout(header)
        layout.addWidget(self.waveform)
        layout.addLayout(footer)
        layout.addStretch(1)

    def begin_take(self, streaming: bool) -> None:
        self.waveform.clear_audio()
        self.waveform.set_placeholder(
            "Waiting for the first chunk…"
            if streaming
            else "Generating… the take appears once it is complete"
        )
        self.play_button.setEnabled(False)
        self.time_label.setText("")
        self.stats.setText("Waiting for the first chunk…" if streaming else "Generating (not streaming)…")

    def wait_for_memory(self, reason: str) -> None:
        """The take is held back until GPU memory frees up; the first chunk replaces this with its stats."""
        text = f"Waiting for GPU memory… ({reason})" if reason else "Waiting for GPU memory…"
        self.waveform.set_placeholder(text)
        self.stats.setText(text)

    def pause_for_memory(self, reason: str) -> None:
        """The streaming take waits for GPU memory to go on: its audio pauses; its next chunk clears this."""
        why = f" ({reason})" if reason else ""
        self.stats.setText(
            f"Paused: waiting for GPU memory to go on{why} · {self.waveform.duration:.1f} s so far"
        )

    def add_chunk(self, samples: np.ndarray, sample_rate: int, latency_s: float) -> None:
        self.waveform.append(samples, sample_rate)
        self.stats.setText(
            f"First audio after {latency_s * 1000:.0f} ms · {self.waveform.duration:.1f} s so far"
        )

    def finish_take(
        self, latency_s: float | None, rtf: float | None, seconds: float, cancelled: bool
    ) -> None:
        parts = []
        if latency_s is not None:
            parts.append(f"first audio {latency_s * 1000:.0f} ms")
        if rtf is not None:
            parts.append(f"RTF {rtf:.2f}")
        parts.append(f"{seconds:.1f} s of audio")
        self.stats.setText(("Stopped · " if cancelled else "") + " · ".join(parts))
        self.play_button.setEnabled(seconds > 0)
        self.waveform.set_placeholder("")

    def set_transport_state(self, state: str) -> None:
        """ "playing", "paused" or "stopped": the buttons follow."""
        self.play_button.setText("❚❚ Pause" if state == "playing" else "▶ Play")
        if state != "stopped":
            self.play_button.setEnabled(True)
        if state == "stopped" and self.stop_playback_button.hasFocus():
            self._hand_focus_to_play()
        self.stop_playback_button.setEnabled(state != "stopped")

    def _hand_focus_to_play(self) -> None:
        """Stop is disabled once playback stops; its focus goes to Play, never on to the next field in the
        Tab order (the takes search box, where Space would type)."""
        if self.play_button.isEnabled():
            self.play_button.setFocus(Qt.FocusReason.OtherFocusReason)
        else:
            self.stop_playback_button.clearFocus()  # Space then reaches the window's play/pause shortcut

    def set_position(self, seconds: float, duration: float) -> None:
        if duration:
            self.time_label.setText(f"{_clock(seconds)} / {_clock(duration)}")
        else:  # a take still streaming (nothing shown before it starts)
            self.time_label.setText(_clock(seconds) if seconds else "")

    def show_take(self, name: str, seconds: float, denoised: bool) -> None:
        """A stored take is shown (and played): its own caption, never the previous take's stats."""
        self.stats.setText(f"{name} · {seconds:.1f} s" + (" · denoised" if denoised else ""))
        self.waveform.set_placeholder("")
        self.play_button.setEnabled(True)

    def fail_take(self, message: str) -> None:
        self.stats.setText(f"<span style='color:#e57373'>Take failed: {message}</span>")
        self.waveform.set_placeholder("")

    def set_pending(self, count: int) -> None:
        self.pending.setText(f"denoising {count} take(s)…" if count else "")


def _clock(seconds: float) -> str:
    minutes, rest = divmod(max(0.0, seconds), 60.0)
    return f"{int(minutes)}:{rest:04.1f}"
