"""The studio's working state survives a restart (and a crash of the GUI itself): the text, mode,
instruction, speed, seed, Reduce noise, the picked saved voice, the export format, the view shown and the
Script view's options are kept in the settings (``extra["session"]``), written atomically at most a second
after each change and at close, and restored when the window opens. The voice "" is the unsaved recording,
which the voice panel keeps on disk itself (`studio.gui.voice.reference_draft`) and shows when it opens."""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import QObject, QTimer

log = logging.getLogger("studio.gui")
SESSION_KEY = "session"
SAVE_DELAY_MS = 1000  # a crash loses at most the last second of typing


class SessionKeeper(QObject):
    """Watches the window's inputs; ``restore()`` once at start, ``flush()`` at close."""

    def __init__(self, window) -> None:
        super().__init__(window)
        self.window = window
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(SAVE_DELAY_MS)
        self._timer.timeout.connect(self.flush)
        text, voice = window.text_panel, window.voice_panel
        for signal in (
            text.editor.textChanged,
            text.mode.currentIndexChanged,
            text.instruct.textChanged,
            text.speed.valueChanged,
            text.seed.valueChanged,
            text.random_seed.toggled,
            voice.denoise_prompt.toggled,
            voice.saved.currentIndexChanged,
            voice.transcript.textChanged,
            window.takes_panel.export_format.currentIndexChanged,
            window.script_view.export_bar.sig_changed,
            window.script_view.at_once.valueChanged,
            window.views.currentChanged,
        ):
            signal.connect(self.changed)

    def capture(self) -> dict[str, Any]:
        text, voice = self.window.text_panel, self.window.voice_panel
        return {
            "text": text.editor.toPlainText(),
            "mode": text.mode.currentData(),
            "instruct": text.instruct.text(),
            "speed": text.speed.value(),
            "seed": text.seed.value(),
            "random_seed": text.random_seed.isChecked(),
            "reduce_noise": voice.denoise_prompt.isChecked(),
            "voice": voice.saved.currentData() or "",
            "export_format": self.window.takes_panel.export_format.currentData(),
            "view": self.window.views.currentIndex(),  # single take or script
            "script": {
                **self.window.script_view.export_bar.options(),
                "at_once": self.window.script_view.at_once.value(),
            },
        }

    def changed(self, *_args) -> None:
        self._timer.start()  # restarts: one write per pause in typing

    def flush(self) -> None:
        """Write the state now (if it changed), and the unsaved recording's transcript with it."""
        self._timer.stop()
        self.window.voice_panel.keep_draft()
        state = self.capture()
        settings = self.window.settings
        if settings.extra.get(SESSION_KEY) != state:
            settings.extra[SESSION_KEY] = state
            self.window.update_settings(settings)

    def stop(self) -> None:
        self._timer.stop()

    def restore(self) -> None:
        """Put the saved state back (what no longer exists, e.g. a deleted voice, is skipped)."""
        state = self.window.settings.extra.get(SESSION_KEY)
        if isinstance(state, dict):
            self.apply(state)
        self._timer.stop()  # restoring is not a change

    def apply(self, state: dict[str, Any]) -> bool:
        """Set the inputs named in ``state`` (the keys of `capture`); False when its voice is not saved."""
        text, voice = self.window.text_panel, self.window.voice_panel
        voice_found = True
        try:
            if "text" in state:
                text.editor.setPlainText(str(state["text"]))
            _select(text.mode, state.get("mode"))
            if "instruct" in state:
                text.instruct.setText(str(state["instruct"]))
            if "speed" in state:
                text.speed.setValue(float(state["speed"]))
            if "seed" in state:
                text.seed.setValue(int(state["seed"]))
            if "random_seed" in state:
                text.random_seed.setChecked(bool(state["random_seed"]))
            if "reduce_noise" in state:
                voice.denoise_prompt.blockSignals(True)  # nothing to clean yet
                voice.denoise_prompt.setChecked(bool(state["reduce_noise"]))
                voice.denoise_prompt.blockSignals(False)
            _select(self.window.takes_panel.export_format, state.get("export_format"))
            if isinstance(state.get("script"), dict):
                self.window.script_view.export_bar.apply_options(state["script"])
                if isinstance(state["script"].get("at_once"), int):
                    self.window.script_view.at_once.setValue(state["script"]["at_once"])
            if state.get("view") in (0, 1):
                self.window.views.setCurrentIndex(state["view"])
            if state.get("voice"):
                index = voice.saved.findData(state["voice"])
                voice_found = index > 0
                if voice_found:
                    voice.saved.setCurrentIndex(index)
                    voice.on_pick_saved(index)
        except (TypeError, ValueError) as exc:  # a hand-edited settings file: keep what was restored
            log.warning("the saved session could not be restored in full: %s", exc)
        return voice_found


def take_state(take) -> dict[str, Any]:
    """What a stored take was made with, as `SessionKeeper.apply` takes it ("regenerate")."""
    state: dict[str, Any] = {"text": take.text, "mode": take.mode, "random_seed": take.seed is None}
    settings = take.settings
    if settings.get("instruct"):
        state["instruct"] = settings["instruct"]
    if isinstance(settings.get("speed"), (int, float)):
        state["speed"] = settings["speed"]
    if take.seed is not None:
        state["seed"] = take.seed
    state["voice"] = settings.get("voice_id") or ""
    return state


def _select(combo, data) -> None:
    index = combo.findData(data) if data is not None else -1
    if index >= 0:
        combo.setCurrentIndex(index)
