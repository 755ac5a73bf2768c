"""The engine's state in the status bar: a coloured dot and sentence per state, loading progress, the
warm-up time, error details and a Restart engine button."""

from __future__ import annotations

import time

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QMessageBox, QProgressBar, QPushButton, QWidget

from studio.engine.protocol import EngineState, Error, Progress, State
from studio.gui.widgets.wording import capitalised, sentence

STATE_COLOURS = {
    EngineState.STARTING: "#90a4ae",
    EngineState.LOADING: "#4fc3f7",
    EngineState.WARMING: "#ffb74d",
    EngineState.READY: "#81c784",
    EngineState.BUSY: "#ba68c8",
    EngineState.ERROR: "#e57373",
    EngineState.CRASHED: "#e53935",
    EngineState.STOPPED: "#90a4ae",
}


def waiting_for_model(state: State) -> bool:
    """The engine process is up and idle because no model was asked for yet."""
    return state.state == EngineState.STARTING and "no model" in state.detail


def describe_state(state: State) -> str:
    """One sentence for the status bar."""
    kind = state.state
    if kind == EngineState.STARTING:
        return "Engine started · no model loaded yet" if waiting_for_model(state) else "Engine starting…"
    if kind == EngineState.LOADING:
        detail = state.detail.strip()
        return (capitalised(detail) + "…") if detail else "Loading the model…"
    if kind == EngineState.WARMING:
        load = f" (loaded in {state.load_seconds:.1f} s)" if state.load_seconds is not None else ""
        return f"Warming up{load}…"
    if kind == EngineState.READY:
        running = state.backend or "engine"
        parts = [f"Ready · {state.model} on {running}" if state.model else f"Ready · {running}"]
        steps = [
            (name, value)
            for name, value in (("load", state.load_seconds), ("warm-up", state.warmup_seconds))
            if value is not None
        ]
        if steps:  # time to ready, as bench reports it
            total = sum(value for _, value in steps)
            parts.append(f"ready in {total:.1f} s (" + ", ".join(f"{n} {v:.1f} s" for n, v in steps) + ")")
        text = " · ".join(parts)
        return f"{text} · {state.backend_reason}" if state.backend_reason else text
    if kind == EngineState.BUSY:
        return f"Generating ({state.active_requests} running)" if state.active_requests else "Generating"
    if kind == EngineState.ERROR:
        return f"Engine error: {state.detail}"
    if kind == EngineState.CRASHED:
        return f"Engine crashed: {capitalised(state.detail)}"
    return "Engine stopped"


class EngineStatus(QWidget):
    """Status-bar widget; ``sig_restart`` asks the window to restart the engine."""

    sig_restart = Signal()
    """The user pressed Restart engine."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("EngineStatus")
        self.dot = QLabel("●")
        self.label = QLabel("Engine not started")
        self.label.setObjectName("EngineStateLabel")
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(160)
        self.progress.setMaximumHeight(14)
        self.progress.setTextVisible(False)
        self.progress.hide()
        self.details_button = QPushButton("Details…")
        self.details_button.setFlat(True)
        self.details_button.clicked.connect(self.show_details)
        self.details_button.hide()
        self.restart_button = QPushButton("Restart engine")
        self.restart_button.setObjectName("RestartButton")
        self.restart_button.clicked.connect(self.sig_restart.emit)
        self.restart_button.hide()
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 0, 6, 0)
        layout.addWidget(self.dot)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.progress)
        layout.addWidget(self.details_button)
        layout.addWidget(self.restart_button)
        self.state: EngineState | None = None
        self.last_error: Error | None = None
        self._last_state: State | None = None
        self._since = time.monotonic()
        self._clock = QTimer(self)  # ticks the elapsed time while starting, loading or warming up
        self._clock.setInterval(1000)
        self._clock.timeout.connect(self._show_elapsed)

    def stop(self) -> None:
        self._clock.stop()

    def _show_elapsed(self) -> None:
        if self._last_state is not None:
            elapsed = time.monotonic() - self._since
            self.label.setText(f"{describe_state(self._last_state)} {elapsed:.0f} s")

    def on_state(self, state: State) -> None:
        if state.state != self.state:
            self._since = time.monotonic()
        self.state = state.state
        self._last_state = state
        self.dot.setStyleSheet(f"color: {STATE_COLOURS.get(state.state, '#90a4ae')};")
        self.label.setText(describe_state(state))
        self.label.setToolTip(state.detail)
        loading = state.state in (EngineState.STARTING, EngineState.LOADING, EngineState.WARMING)
        loading = loading and not waiting_for_model(state)
        self.progress.setVisible(loading)
        if loading:
            self.progress.setRange(0, 0)  # busy until a Progress with a fraction arrives
            self._clock.start()
        else:
            self._clock.stop()
        failed = state.state in (EngineState.ERROR, EngineState.CRASHED)
        self.restart_button.setVisible(failed)
        self.details_button.setVisible(failed and self.last_error is not None)
        if state.state == EngineState.READY:
            self.last_error = None

    def on_progress(self, progress: Progress) -> None:
        if progress.request_id is not None or not self.progress.isVisible():
            return
        if progress.fraction is not None:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(progress.fraction * 1000))
        self.progress.setToolTip(progress.message)

    def on_engine_error(self, error: Error) -> None:
        """An engine-level error (request_id None): kept for the Details dialog."""
        self.last_error = error
        self.details_button.setVisible(True)
        self.restart_button.setVisible(True)
        if self.state not in (EngineState.ERROR, EngineState.CRASHED):
            self.label.setText(f"Engine error: {error.message.splitlines()[0]}")
            self.dot.setStyleSheet(f"color: {STATE_COLOURS[EngineState.ERROR]};")

    def show_details(self) -> QMessageBox | None:
        """The last engine error in a dialog (non-blocking), its traceback or log lines under Details."""
        if self.last_error is None:
            return None
        message = sentence(self.last_error.message)
        box = QMessageBox(QMessageBox.Icon.Warning, "Engine error", message, parent=self)
        if self.last_error.traceback:
            box.setDetailedText(self.last_error.traceback)
        box.open()
        return box
