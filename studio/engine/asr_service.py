"""Transcription in the engine process: ``Transcribe`` requests run one at a time on their own thread (takes
keep streaming meanwhile), with the last Whisper model kept loaded. Answers ``Transcript`` or ``Error``."""

from __future__ import annotations

import logging
import queue
import threading
import traceback
from collections.abc import Callable
from typing import Any

from studio.engine.protocol import Error, Progress, Transcribe, Transcript

log = logging.getLogger("studio.engine")


class AsrService:
    """Owns the ASR model of the engine process; ``submit`` returns at once, events go out through ``send``."""

    def __init__(self, send: Callable[[Any], None]):
        self._send = send
        self._queue: queue.Queue[Transcribe | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._loaded: tuple[str, Any] | None = None  # (model folder, Transcriber)

    def submit(self, request: Transcribe) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="asr", daemon=True)
            self._thread.start()
        self._queue.put(request)

    def close(self, timeout: float = 30.0) -> None:
        """Finish the transcription under way (if any) and stop; queued ones are dropped."""
        if self._thread is None:
            return
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._queue.put(None)
        self._thread.join(timeout)
        self._thread = None

    def _serve(self) -> None:
        while (request := self._queue.get()) is not None:
            self._send(self._answer(request))

    def _answer(self, request: Transcribe) -> Transcript | Error:
        from studio.asr.transcriber import AsrError, Transcriber, resolve_model

        try:
            folder = resolve_model(
                request.asr_model, progress=lambda text: self._send(Progress(request.request_id, text))
            )
            if self._loaded is None or self._loaded[0] != str(folder):
                self._loaded = None  # free the old model before loading the next
                self._loaded = (str(folder), Transcriber(folder))
            heard = self._loaded[1].transcribe(request.audio, request.sample_rate, request.language or None)
        except AsrError as exc:
            log.info("transcription %s: %s", request.request_id, exc)
            return Error(request.request_id, str(exc))
        except Exception as exc:  # noqa: BLE001 - this request's error; the engine keeps serving
            log.exception("transcription %s failed", request.request_id)
            return Error(request.request_id, f"transcription failed: {exc}", traceback.format_exc())
        log.info("transcription %s: %.2f s, %s", request.request_id, heard.seconds, heard.language)
        return Transcript(
            request.request_id, heard.text, heard.language, heard.language_name, heard.seconds, heard.model
        )
