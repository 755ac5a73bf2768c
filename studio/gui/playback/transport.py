"""The transport: one clip at a time (a take, the reference's original or cleaned recording, or the take
being streamed), with play, pause, stop and seek, and a playhead on every waveform that shows that clip.

Waveforms are bound to the transport with the key of the clip they show; a click on a bound waveform seeks
in its clip (starting it when another clip was playing). Keys name one version of the audio (a take id, or
a reference with its generation), so a playhead never lands on audio that replaced the clip.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QObject, Signal

from studio.gui.playback.player import StreamPlayer


@dataclass(frozen=True, eq=False)
class Clip:
    """Audio the transport can play: ``key`` names it (``take:<id>``, ``original:<n>``…)."""

    key: str
    samples: np.ndarray
    sample_rate: int
    label: str = ""

    @property
    def duration(self) -> float:
        return len(self.samples) / float(self.sample_rate)


@dataclass
class _Binding:
    view: object  # a WaveformView: set_cursor(seconds | None), sig_seek(float)
    key: Callable[[], str | None]  # the key of the clip the view shows now
    clip: Callable[[], Clip | None]  # that clip, to start it on a click


class Transport(QObject):
    """Plays `Clip`s through a `StreamPlayer`; ``state`` is "stopped", "playing" or "paused"."""

    sig_state = Signal(str)
    sig_position = Signal(float, float)
    """(position, duration) of the current clip in seconds; duration 0 while a take still streams."""
    sig_no_device = Signal()

    def __init__(self, player: StreamPlayer, parent: QObject | None = None):
        super().__init__(parent)
        self.player = player
        self.state = "stopped"
        self.key: str | None = None  # the current clip's key (also while it streams)
        self.clip: Clip | None = None  # None while a take streams: it cannot be sought yet
        self._resume_at: float | None = None  # a seek while paused: where resume starts
        self._position = 0.0
        self._bindings: list[_Binding] = []
        player.sig_state.connect(self._on_player_state)
        player.sig_position.connect(self._on_player_position)

    # -- clips ---------------------------------------------------------------------------------------
    def play(self, clip: Clip, start_s: float = 0.0) -> bool:
        self.key, self.clip, self._resume_at = clip.key, clip, None
        start = min(max(0.0, start_s), clip.duration)
        if start >= clip.duration:
            start = 0.0
        if not self.player.play(clip.samples, clip.sample_rate, start):
            self._set_state("stopped")
            self.sig_no_device.emit()
            return False
        self._show_position(start)
        return True

    def begin_live(self, key: str) -> None:
        """A take starts streaming: its chunks play as they arrive (``feed_live``)."""
        self.key, self.clip, self._resume_at = key, None, None
        self.player.begin()
        self._set_state("playing")

    def feed_live(self, key: str, samples: np.ndarray, sample_rate: int) -> None:
        if key == self.key and self.clip is None:
            self.player.feed(samples, sample_rate)

    def end_live(self, key: str, clip: Clip | None) -> None:
        """The streamed take is complete: it keeps playing and becomes an ordinary clip (seekable)."""
        if key != self.key or self.clip is not None:
            return
        self.player.end()
        if clip is not None:
            self.key, self.clip = clip.key, clip
        if not self.player.is_playing:
            self._set_state("stopped")

    # -- controls ------------------------------------------------------------------------------------
    def toggle(self, fallback: Clip | None = None) -> None:
        """Space: pause or resume; when stopped, play the current clip again (or ``fallback``)."""
        if self.state == "playing":
            self.pause()
        elif self.state == "paused":
            self.resume()
        elif self.clip is not None or fallback is not None:
            self.play(self.clip or fallback)

    def pause(self) -> None:
        if self.state == "playing":
            self.player.pause()

    def resume(self) -> None:
        if self.state != "paused":
            return
        if self._resume_at is not None and self.clip is not None:
            self.play(self.clip, self._resume_at)
        else:
            self.player.resume()

    def stop(self) -> None:
        self._resume_at = None
        self.player.stop()
        self._set_state("stopped")
        self._show_position(None)

    def seek(self, seconds: float) -> None:
        """Move in the current clip: playing continues from there, paused stays paused there."""
        if self.clip is None:
            return  # a take still streaming cannot be sought
        seconds = min(max(0.0, seconds), self.clip.duration)
        if self.state == "paused":
            self._resume_at = seconds
            self._show_position(seconds)
        else:
            self.play(self.clip, seconds)

    @property
    def position(self) -> float:
        return self._position

    # -- waveforms -----------------------------------------------------------------------------------
    def bind(self, view, key: Callable[[], str | None], clip: Callable[[], Clip | None]) -> None:
        """Show the playhead on ``view`` while its clip plays; a click on it seeks there."""
        binding = _Binding(view, key, clip)
        self._bindings.append(binding)
        view.sig_seek.connect(lambda seconds, b=binding: self._on_view_seek(b, seconds))

    def _on_view_seek(self, binding: _Binding, seconds: float) -> None:
        if self.key is not None and binding.key() == self.key and self.clip is not None:
            self.seek(seconds)
            return
        clip = binding.clip()
        if clip is not None:
            self.play(clip, seconds)

    def _show_position(self, seconds: float | None) -> None:
        self._position = 0.0 if seconds is None else seconds
        for binding in self._bindings:
            here = seconds is not None and self.key is not None and binding.key() == self.key
            binding.view.set_cursor(seconds if here else None)
        duration = self.clip.duration if self.clip is not None else 0.0
        self.sig_position.emit(self._position, duration)

    # -- player events -------------------------------------------------------------------------------
    def _on_player_position(self, seconds: float) -> None:
        if self.state == "playing":
            self._show_position(seconds)

    def _on_player_state(self, state: str) -> None:
        if state == "playing":
            self._set_state("playing")
        elif state == "paused":
            self._set_state("paused")
        elif state == "idle" and not self.player.is_playing:
            self._resume_at = None
            self._set_state("stopped")
            self._show_position(None)

    def _set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.sig_state.emit(state)
