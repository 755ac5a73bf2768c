"""Asks the engine for the transcript of each new reference recording and hands the answer to the voice
panel; only the newest request counts (an older answer for a replaced recording is dropped)."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QObject, Signal

from studio.engine.protocol import Error, Progress, Transcribe, Transcript
from studio.request import RequestError


class TranscriptController(QObject):
    """``request(audio, rate)`` -> ``sig_heard(Transcript)`` or ``sig_unavailable(reason)``."""

    sig_heard = Signal(object)
    """The Transcript of the newest recording."""
    sig_unavailable = Signal(str)
    """No transcript for the newest recording: why, in a sentence (the user types it)."""
    sig_progress = Signal(str)
    """A progress message (the ASR model downloading on first use)."""

    def __init__(self, bridge, model_getter, parent: QObject | None = None):
        super().__init__(parent)
        self.bridge = bridge
        self._model_getter = model_getter  # the configured ASR model ("" = off), read at each request
        self.pending: str | None = None
        bridge.sig_transcript.connect(self.on_transcript)
        bridge.sig_error.connect(self.on_error)
        bridge.sig_progress.connect(self.on_progress)

    @property
    def enabled(self) -> bool:
        return bool(self._model_getter())

    def request(self, audio: np.ndarray, sample_rate: int) -> str | None:
        """Transcribe this recording (replacing any request still out); None when transcripts are off."""
        try:
            request = Transcribe(np.asarray(audio, dtype=np.float32), int(sample_rate), self._model_getter())
        except RequestError as exc:
            self.pending = None
            self.sig_unavailable.emit(str(exc))
            return None
        self.pending = request.request_id
        self.bridge.transcribe(request)
        return request.request_id

    def on_transcript(self, transcript: Transcript) -> None:
        if transcript.request_id == self.pending:
            self.pending = None
            self.sig_heard.emit(transcript)

    def on_error(self, error: Error) -> None:
        if error.request_id is not None and error.request_id == self.pending:
            self.pending = None
            self.sig_unavailable.emit(error.message)

    def on_progress(self, progress: Progress) -> None:
        if progress.request_id is not None and progress.request_id == self.pending:
            self.sig_progress.emit(progress.message)
