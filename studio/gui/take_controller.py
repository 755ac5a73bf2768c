"""Runs takes: builds the engine request from the text panel and the voice, streams chunks into the
player and the preview, writes the finished take to the store at once, and queues it for denoising."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np
from PySide6.QtCore import QObject, Signal

from studio.engine.protocol import SAMPLE_RATE, AudioChunk, Error, Synthesize, TakeFinished
from studio.gui.text_panel import TextRequest
from studio.gui.voice_panel import Prompt
from studio.takes import Take, TakeStore


@dataclass
class ActiveTake:
    """The take being generated: its request, what arrived so far, and when."""

    request: Synthesize
    voice_name: str
    started: float = field(default_factory=time.monotonic)
    first_chunk_at: float | None = None
    chunks: list[np.ndarray] = field(default_factory=list)

    @property
    def latency(self) -> float | None:
        return None if self.first_chunk_at is None else self.first_chunk_at - self.started


def build_request(text: TextRequest, prompt: Prompt) -> Synthesize:
    """The engine request for a take; raises ValueError with a user-facing reason when incomplete.

    A saved voice goes by its id (the engine reads it from the voice library); a fresh one as audio.
    """
    return Synthesize(
        text=text.text,
        mode=text.mode,
        prompt_wav=None if prompt.voice_id else prompt.audio,
        prompt_sr=0 if prompt.voice_id else prompt.sample_rate,
        voice_id=prompt.voice_id,
        prompt_text=prompt.transcript if text.mode == "zero-shot" else "",
        instruct=text.instruct,
        speed=text.speed,
        seed=text.seed,
        stream=text.stream,
    )


class TakeController(QObject):
    """One take at a time; the window wires the bridge's signals to ``on_*`` and listens to ``sig_*``."""

    sig_started = Signal(object)
    """A take was sent (its Synthesize request)."""
    sig_chunk = Signal(object, float)
    """(float32 samples of a new chunk, first-chunk latency in seconds)."""
    sig_finished = Signal(object, object)
    """The take ended: (TakeStats or None, Take or None); always follows sig_started."""
    sig_failed = Signal(str)
    """The take failed; the reason."""

    def __init__(self, bridge, store: TakeStore, parent: QObject | None = None):
        super().__init__(parent)
        self.bridge = bridge
        self.store = store
        self.active: ActiveTake | None = None

    @property
    def busy(self) -> bool:
        return self.active is not None

    def start(self, text: TextRequest, prompt: Prompt | None) -> bool:
        if self.active is not None:
            self.sig_failed.emit("a take is already running")
            return False
        if prompt is None:
            self.sig_failed.emit("record, import or pick a voice first")
            return False
        try:
            request = build_request(text, prompt)
        except ValueError as exc:
            reason = str(exc)
            if "prompt_text" in reason:
                reason = "zero-shot mode needs the transcript of the voice recording (or use cross-lingual)"
            self.sig_failed.emit(reason)
            return False
        self.active = ActiveTake(request, prompt.voice_name)
        self.sig_started.emit(request)
        self.bridge.synthesize(request)
        return True

    def stop(self) -> None:
        if self.active is not None:
            self.bridge.cancel(self.active.request.request_id)

    def on_chunk(self, chunk: AudioChunk) -> None:
        active = self.active
        if active is None or chunk.request_id != active.request.request_id:
            return
        if active.first_chunk_at is None:
            active.first_chunk_at = time.monotonic()
        samples = np.asarray(chunk.samples, dtype=np.float32).reshape(-1)
        active.chunks.append(samples)
        self.sig_chunk.emit(samples, active.latency or 0.0)

    def on_take_finished(self, event: TakeFinished) -> None:
        active = self.active
        if active is None or event.request_id != active.request.request_id:
            return
        self.active = None
        audio = np.concatenate(active.chunks) if active.chunks else np.zeros(0, dtype=np.float32)
        take = self._save(active, audio, event) if audio.size else None
        self.sig_finished.emit(event.stats, take)

    def _save(self, active: ActiveTake, audio: np.ndarray, event: TakeFinished) -> Take:
        request = active.request
        stats = asdict(event.stats)
        stats["gui_first_chunk_latency"] = active.latency
        name = None
        if event.stats.cancelled:
            name = "(stopped) " + " ".join(request.text.split()[:5])
        return self.store.add(
            audio,
            SAMPLE_RATE,
            text=request.text,
            voice=active.voice_name,
            mode=request.mode,
            seed=request.seed,
            settings={"speed": request.speed, "stream": request.stream, "instruct": request.instruct},
            stats=stats,
            name=name,
        )

    def on_error(self, error: Error) -> None:
        active = self.active
        if active is None:
            return
        if error.request_id is None or error.request_id == active.request.request_id:
            self.active = None
            self.sig_failed.emit(error.message.splitlines()[0] if error.message else "the engine failed")
            self.sig_finished.emit(None, None)
