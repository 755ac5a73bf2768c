"""The window's audio out: one player and one transport for the preview's take, the reference recordings
and the take being streamed; the preview's transport bar, Space to play/pause and playheads on the
preview and both reference waveforms (click one to seek)."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QAbstractButton, QApplication, QComboBox

from studio.gui.playback.player import StreamPlayer
from studio.gui.playback.transport import Clip, Transport
from studio.takes import Take, TakeError


def take_key(take_id: str) -> str:
    return f"take:{take_id}"


class Playback(QObject):
    """Plays takes and references for ``window`` (its preview, voice panel and take store)."""

    sig_message = Signal(str)

    def __init__(self, window) -> None:
        super().__init__(window)
        self.window = window
        self.player = StreamPlayer(self)
        self.transport = Transport(self.player, self)
        self.preview_clip: Clip | None = None  # the take the preview shows (what its Play plays)
        self._preview_key: str | None = None  # also set while a take streams into the preview
        preview, voice = window.preview, window.voice_panel
        self.transport.bind(preview.waveform, lambda: self._preview_key, lambda: self.preview_clip)
        for which, view in (("original", voice.before), ("cleaned", voice.after)):
            self.transport.bind(
                view, lambda w=which: voice.reference_key(w), lambda w=which: voice.reference_clip(w)
            )
        self.transport.sig_state.connect(preview.set_transport_state)
        self.transport.sig_position.connect(self._on_position)
        self.transport.sig_no_device.connect(
            lambda: self.sig_message.emit("No audio output device: cannot play.")
        )
        preview.sig_toggle.connect(self.toggle_preview)
        preview.sig_stop_playback.connect(self.transport.stop)
        voice.sig_play.connect(self.transport.play)
        self.space = QShortcut(QKeySequence(Qt.Key.Key_Space), window)
        self.space.setAutoRepeat(False)  # a held Space toggles once, not on every repeat
        self.space.activated.connect(self.on_space)

    @property
    def last_take_id(self) -> str | None:
        key = self._preview_key or ""
        return key.removeprefix("take:") if key.startswith("take:") else None

    # -- takes ---------------------------------------------------------------------------------------
    def play_take(self, take_id: str) -> bool:
        """Show a stored take in the preview and play it (the denoised copy when there is one)."""
        store = self.window.store
        try:
            audio, rate = store.load_audio(take_id, prefer_denoised=True)
            take = store.get(take_id)
        except TakeError as exc:
            self.sig_message.emit(str(exc))
            return False
        clip = self._show_in_preview(take, audio, rate)
        self.window.preview.show_take(take.name, clip.duration, take.denoised)
        return self.transport.play(clip)

    def _show_in_preview(self, take: Take, audio: np.ndarray, rate: int) -> Clip:
        clip = Clip(take_key(take.id), audio, rate, take.name)
        self.preview_clip, self._preview_key = clip, clip.key
        self.window.preview.waveform.set_audio(audio, rate)
        return clip

    def toggle_preview(self) -> None:
        """The preview's Play/Pause: toggles its take, or starts it when something else plays."""
        if self._preview_key is not None and self.transport.key == self._preview_key:
            self.transport.toggle(self.preview_clip)
        elif self.preview_clip is not None:
            self.transport.play(self.preview_clip)

    def on_space(self) -> None:
        """Space plays/pauses, except on a focused button or list box, which Space activates.

        The shortcut takes the key press from a focused button, so it clicks the button here, at once: an
        animated click would leave the button down and the key's release would click it a second time."""
        focus = QApplication.focusWidget()
        if isinstance(focus, QAbstractButton):
            focus.click()
        elif isinstance(focus, QComboBox):
            focus.showPopup()
        elif self.window.script_view.isVisible():
            self.window.script_view.on_space()  # the Script tab: its lines, not the preview's take
        else:
            self.transport.toggle(self.preview_clip)

    # -- the take being made -------------------------------------------------------------------------
    def begin_live(self, request_id: str) -> None:
        self.preview_clip, self._preview_key = None, f"live:{request_id}"
        self.transport.begin_live(self._preview_key)

    def feed_live(self, samples: np.ndarray, sample_rate: int) -> None:
        if self._preview_key is not None:
            self.transport.feed_live(self._preview_key, samples, sample_rate)

    def end_live(self, take: Take | None) -> None:
        """The take is stored (or nothing arrived): it plays on and becomes the preview's clip."""
        key = self._preview_key
        clip = None
        if take is not None:
            audio = self.window.preview.waveform.samples
            clip = Clip(take_key(take.id), audio, take.sample_rate, take.name)
            self.preview_clip, self._preview_key = clip, clip.key
        if key is not None:
            self.transport.end_live(key, clip)

    def stop(self) -> None:
        self.transport.stop()

    def _on_position(self, seconds: float, duration: float) -> None:
        preview = self.window.preview
        current = self.transport.key
        if current is not None and current == self._preview_key:
            preview.set_position(seconds, duration)
        elif self.transport.clip is not None and self.transport.state != "stopped":
            preview.time_label.setText(f"{self.transport.clip.label} {seconds:.1f} s")
        else:
            preview.set_position(0.0, self.preview_clip.duration if self.preview_clip else 0.0)
