"""What the Script view plays, and what it shows while it plays: one line, or the lines from one on joined
as the export joins them (gaps, paragraph pauses); a ▶ marker on the row of the line playing (it moves on
with "From here"), the line and the position, and Stop. Playing goes through the window's transport, so
one clip plays at a time: a take started elsewhere clears the marker."""

from __future__ import annotations

from bisect import bisect_right
from pathlib import Path

import numpy as np
from PySide6.QtCore import QObject
from PySide6.QtWidgets import QLabel, QPushButton

from studio.gui.playback.transport import Clip, Transport
from studio.gui.script.script_table import ScriptTable
from studio.script.assemble import Joiner
from studio.script.manifest import LineRecord
from studio.script.render import ScriptRender

PLAY_FROM_LIMIT_S = 15 * 60  # "From here" joins at most this much in memory


def clock(seconds: float) -> str:
    """``m:ss.s``, as the preview shows positions."""
    minutes, rest = divmod(max(0.0, seconds), 60.0)
    return f"{int(minutes)}:{rest:04.1f}"


class ScriptPlayback(QObject):
    """Plays the Script view's lines and marks the one playing in ``table``."""

    def __init__(self, table: ScriptTable, parent: QObject | None = None):
        super().__init__(parent)
        self.table = table
        self.transport: Transport | None = None
        self.stop_button = QPushButton("■ Stop playing")
        self.stop_button.setToolTip("Stop playing (Esc)")
        self.stop_button.setEnabled(False)
        self.stop_button.clicked.connect(self.stop)
        self.position = QLabel("")  # "▶ Line 2 · 0:01.2 / 0:04.5"
        self.position.setObjectName("Stats")
        self._key: str | None = None  # the key of the clip this view started
        self._starts: list[float] = []  # where each line starts in that clip, in seconds
        self._rows: list[int] = []  # the row of each of those lines

    def attach(self, transport: Transport) -> None:
        self.transport = transport
        transport.sig_state.connect(lambda _state: self._show())
        transport.sig_position.connect(lambda _seconds, _duration: self._show())

    @property
    def playing(self) -> bool:
        """A clip of this view plays or is paused."""
        transport = self.transport
        return (
            transport is not None
            and self._key is not None
            and transport.key == self._key
            and transport.state != "stopped"
        )

    def play(
        self, folder: Path, render: ScriptRender, records: list[LineRecord], first: LineRecord, to_end: bool
    ) -> bool:
        """Play ``first`` (or ``first`` and the finished lines after it, joined); False when nothing plays."""
        import soundfile as sf

        if self.transport is None:
            return False
        if not to_end:
            samples, rate = sf.read(folder / first.file, dtype="float32")
            clip = Clip(f"script:{first.key}:{first.seed}", samples, rate, first.file)
            return self._start(clip, [0.0], [first.number - 1])
        blocks: list[np.ndarray] = []
        joiner = Joiner(blocks.append, render.rate)
        starts, rows = [], []
        for later in records[first.number - 1 :]:
            if not later.done or joiner.written > PLAY_FROM_LIMIT_S * render.rate:
                break
            samples, _rate = sf.read(folder / later.file, dtype="float32")
            starts.append(joiner.add(samples, render.gap_before(later))[0])
            rows.append(later.number - 1)
        joiner.close()
        clip = Clip(f"script-from:{first.number}:{first.key}", np.concatenate(blocks), render.rate, "script")
        return self._start(clip, starts, rows)

    def _start(self, clip: Clip, starts: list[float], rows: list[int]) -> bool:
        self._key, self._starts, self._rows = clip.key, starts, rows
        started = self.transport.play(clip)
        self._show()
        return started

    def toggle(self) -> bool:
        """Pause or resume whatever plays; False when nothing does."""
        if self.transport is None or self.transport.state == "stopped":
            return False
        self.transport.toggle()
        return True

    def stop(self) -> None:
        if self.transport is not None and self.transport.state != "stopped":
            self.transport.stop()

    def _show(self) -> None:
        """The marker, the position and Stop, as the transport stands now."""
        if not self.playing:
            self.table.set_playing(None)
            self.position.setText("")
            self.stop_button.setEnabled(False)
            return
        transport = self.transport
        seconds = transport.position
        row = self._rows[max(0, bisect_right(self._starts, seconds) - 1)]
        self.table.set_playing(row)
        symbol = "❚❚" if transport.state == "paused" else "▶"
        duration = transport.clip.duration if transport.clip is not None else 0.0
        self.position.setText(f"{symbol} Line {row + 1} · {clock(seconds)} / {clock(duration)}")
        self.stop_button.setEnabled(True)
