"""Runs takes: the one owner of the take in progress. Builds the engine request from the text panel and the
voice, listens to the bridge itself, hands each chunk (with its sample rate) on, and writes the finished
take to the store at once. Audio that reached the GUI is never dropped: a take the disk refuses is kept
(recovery folder, else memory) and announced; a take the engine breaks off (crash, error, restart) is
saved as a partial take. The window only lays out and relays these signals to the player and preview."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np
from PySide6.QtCore import QObject, Signal

from studio.engine.protocol import (
    AudioChunk,
    EngineState,
    Error,
    PrepareVoice,
    State,
    Synthesize,
    TakeFinished,
    TakeQueued,
)
from studio.gui.take.text_panel import TextRequest
from studio.gui.voice.voice_panel import Prompt
from studio.recovery import KeptTake, store_or_keep
from studio.request import Mode, RequestError
from studio.tags import name_from_text
from studio.takes import Take, TakeStore


@dataclass
class ActiveTake:
    """The take being generated: its request, what arrived so far, and when."""

    request: Synthesize
    voice_name: str
    started: float = field(default_factory=time.monotonic)
    first_chunk_at: float | None = None
    sample_rate: int | None = None  # the rate the chunks carry (set by the first one)
    chunks: list[np.ndarray] = field(default_factory=list)

    @property
    def latency(self) -> float | None:
        return None if self.first_chunk_at is None else self.first_chunk_at - self.started


def prepare_request(prompt: Prompt) -> PrepareVoice:
    """The voice's head start: what `build_request` will send for it (a library voice by id, else its audio)."""
    if prompt.voice_id:
        return PrepareVoice(voice_id=prompt.voice_id)
    return PrepareVoice(prompt_wav=prompt.audio, prompt_sr=prompt.sample_rate)


def build_request(text: TextRequest, prompt: Prompt, first_hop_tokens: int = 0) -> Synthesize:
    """The engine request for a take; raises `RequestError` (naming the field) when incomplete.

    A saved voice goes by its id (the engine reads it from the voice library); a fresh one as audio.
    """
    return Synthesize(
        text=text.text,
        mode=text.mode,
        prompt_wav=None if prompt.voice_id else prompt.audio,
        prompt_sr=0 if prompt.voice_id else prompt.sample_rate,
        voice_id=prompt.voice_id,
        prompt_text=prompt.transcript if text.mode is Mode.ZERO_SHOT else "",
        instruct=text.instruct,
        speed=text.speed,
        seed=text.seed,
        stream=text.stream,
        first_hop_tokens=first_hop_tokens,
    )


#: engine states that end whatever take is running
_ENDING_STATES = (EngineState.CRASHED, EngineState.ERROR, EngineState.STOPPED)


class TakeController(QObject):
    """One take at a time. Connects itself to the bridge's take signals; the window listens to ``sig_*``."""

    sig_started = Signal(object)
    """A take was sent (its Synthesize request)."""
    sig_queued = Signal(str)
    """The take waits for GPU memory that other takes hold (why, in words); its first chunk ends the wait."""
    sig_paused = Signal(str)
    """The take's audio pauses: it waits for GPU memory to go on (why, in words); its next chunk ends it."""
    sig_chunk = Signal(object, int, float)
    """(float32 samples of a new chunk, their sample rate in Hz, first-chunk latency in seconds)."""
    sig_finished = Signal(object, object)
    """The take ended: (TakeStats or None, Take or None); always follows sig_started."""
    sig_failed = Signal(str)
    """The take failed; the reason (and where its partial audio was kept, if any arrived)."""
    sig_kept = Signal(object)
    """A KeptTake: audio the take store refused (disk full, folder gone), kept for saving elsewhere."""

    def __init__(
        self, bridge, store: TakeStore, parent: QObject | None = None, recovery: TakeStore | None = None
    ):
        super().__init__(parent)
        self.bridge = bridge
        self.store = store
        self.recovery = recovery  # None: the data folder's recovery store
        self.active: ActiveTake | None = None
        self.kept: list[KeptTake] = []  # refused takes not yet saved elsewhere
        # tokens before the first streamed chunk (0: upstream's); the window sets it from the settings
        self.first_hop = lambda: 0
        bridge.sig_take_queued.connect(self.on_take_queued)
        bridge.sig_chunk.connect(self.on_chunk)
        bridge.sig_take_finished.connect(self.on_take_finished)
        bridge.sig_error.connect(self.on_error)
        bridge.sig_state_changed.connect(self.on_engine_state)

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
            request = build_request(text, prompt, self.first_hop())
        except RequestError as exc:
            reason = str(exc)
            if exc.field == "prompt_text":
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

    def abandon(self, reason: str = "the engine was restarted") -> None:
        """End the running take because the engine goes away under it; what arrived is kept as partial."""
        if self.active is not None:
            self.on_error(Error(None, reason))

    def on_take_queued(self, event: TakeQueued) -> None:
        active = self.active
        if active is None or event.request_id != active.request.request_id:
            return  # not ours
        if active.first_chunk_at is None:
            self.sig_queued.emit(event.reason)
        else:  # its audio streams: the take waits to grow its state
            self.sig_paused.emit(event.reason)

    def on_chunk(self, chunk: AudioChunk) -> None:
        active = self.active
        if active is None or chunk.request_id != active.request.request_id:
            return
        if active.first_chunk_at is None:
            active.first_chunk_at = time.monotonic()
            active.sample_rate = int(chunk.sample_rate)
        elif chunk.sample_rate != active.sample_rate:
            raise ValueError(f"chunk at {chunk.sample_rate} Hz in a {active.sample_rate} Hz take")
        samples = np.asarray(chunk.samples, dtype=np.float32).reshape(-1)
        active.chunks.append(samples)
        self.sig_chunk.emit(samples, active.sample_rate, active.latency or 0.0)

    def on_take_finished(self, event: TakeFinished) -> None:
        active = self.active
        if active is None or event.request_id != active.request.request_id:
            return
        self.active = None
        prefix = "(stopped) " if event.stats.cancelled else ""
        take = self._save(active, asdict(event.stats), prefix)
        self.sig_finished.emit(event.stats, take)

    def on_error(self, error: Error) -> None:
        active = self.active
        if active is None:
            return
        if error.request_id is None or error.request_id == active.request.request_id:
            self.active = None
            reason = error.message.splitlines()[0] if error.message else "the engine failed"
            take = self._save(active, {"failed": reason}, "(partial) ", partial=True)
            if take is not None:
                reason += f"; the {take.duration_s:.1f} s received were kept as “{take.name}”"
            self.sig_failed.emit(reason)
            self.sig_finished.emit(None, take)

    def on_engine_state(self, state: State) -> None:
        """A crash, failed load or shutdown ends the running take as failed."""
        if state.state in _ENDING_STATES and self.active is not None:
            self.on_error(Error(None, f"engine {state.state.value}"))

    def _save(self, active: ActiveTake, stats: dict, prefix: str, partial: bool = False) -> Take | None:
        """Store what arrived (nothing for an empty take); a refused take is kept and announced instead."""
        if not active.chunks:
            return None
        request = active.request
        stats["gui_first_chunk_latency"] = active.latency
        instruct = request.instruct if request.mode is Mode.INSTRUCT else ""  # other modes ignore it
        settings = {"speed": request.speed, "stream": request.stream, "instruct": instruct}
        if request.voice_id:
            settings["voice_id"] = request.voice_id  # "regenerate" picks the same saved voice
        if partial:
            settings["partial"] = True
        outcome = store_or_keep(
            self.store,
            np.concatenate(active.chunks),
            active.sample_rate,
            self.recovery,
            text=request.text,
            voice=active.voice_name,
            mode=request.mode.value,
            seed=request.seed,
            settings=settings,
            stats=stats,
            name=(prefix + name_from_text(request.text, words=5)) if prefix else None,
        )
        if isinstance(outcome, KeptTake):
            self.kept.append(outcome)
            self.sig_kept.emit(outcome)
            return None
        return outcome
