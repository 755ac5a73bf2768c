"""The preview: the take being made grows live in a waveform, with its first-chunk latency, real-time
factor and length once finished, a replay button and the denoise toggle with its pending indicator."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from studio.gui.waveform import WaveformView


class PreviewPanel(QWidget):
    """Live waveform and stats of the current take."""

    sig_replay = Signal()
    """Replay the last take."""
    sig_stop_playback = Signal()
    """Stop whatever is playing."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("PreviewPanel")
        title = QLabel("Preview")
        title.setObjectName("PanelTitle")
        self.waveform = WaveformView(color="#4fc3f7", height=150, autoscale=True)
        self.stats = QLabel("Generate a take to hear it here.")
        self.stats.setObjectName("Stats")
        self.replay_button = QPushButton("▶ Replay")
        self.replay_button.setEnabled(False)
        self.replay_button.clicked.connect(self.sig_replay.emit)
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
        footer.addWidget(self.replay_button)
        footer.addWidget(self.stop_playback_button)
        layout = QVBoxLayout(self)
        layout.addLayout(header)
        layout.addWidget(self.waveform)
        layout.addLayout(footer)
        layout.addStretch(1)

    def begin_take(self, streaming: bool) -> None:
        self.waveform.clear_audio()
        self.replay_button.setEnabled(False)
        self.stats.setText("Waiting for the first chunk…" if streaming else "Generating (not streaming)…")

    def add_chunk(self, samples: np.ndarray, sample_rate: int, latency_s: float) -> None:
        self.waveform.append(samples, sample_rate)
        self.stats.setText(
            f"First chunk after {latency_s * 1000:.0f} ms · {self.waveform.duration:.1f} s so far"
        )

    def finish_take(
        self, latency_s: float | None, rtf: float | None, seconds: float, cancelled: bool
    ) -> None:
        parts = []
        if latency_s is not None:
            parts.append(f"first chunk {latency_s * 1000:.0f} ms")
        if rtf is not None:
            parts.append(f"RTF {rtf:.2f}")
        parts.append(f"{seconds:.1f} s of audio")
        self.stats.setText(("Stopped · " if cancelled else "") + " · ".join(parts))
        self.replay_button.setEnabled(seconds > 0)

    def set_playing(self, playing: bool) -> None:
        self.stop_playback_button.setEnabled(playing)

    def show_take(self, name: str, seconds: float, denoised: bool) -> None:
        """A stored take is shown (and played): its own caption, never the previous take's stats."""
        self.stats.setText(f"▶ {name} · {seconds:.1f} s" + (" · denoised" if denoised else ""))
        self.replay_button.setEnabled(True)

    def fail_take(self, message: str) -> None:
        self.stats.setText(f"<span style='color:#e57373'>Take failed: {message}</span>")

    def set_pending(self, count: int) -> None:
        self.pending.setText(f"denoising {count} take(s)…" if count else "")
