"""The speech service behind the API: loads the model in the background (``state`` says where it is), turns
an OpenAI-style request into the studio's `Synthesize`, and runs takes on worker threads, their chunks
handed to the event loop as they come. A take whose consumer goes away (client disconnected) is cancelled."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from studio.engine.protocol import Synthesize
from studio.request import Mode, RequestError
from studio.serve.metrics import Metrics
from studio.serve.protocol import MAX_INPUT_CHARS, ServiceError, SpeechBody
from studio.voices import Voice, VoiceError, VoiceLibrary, folded

log = logging.getLogger("studio.serve")

MAX_REFERENCE_SECONDS = 30.0  # the model reads at most 30 s of a prompt
#: the runtime's field names (`studio.request.RequestError.field`) -> the API's
API_FIELDS = {
    "text": "input",
    "prompt_wav": "reference_audio",
    "prompt_sr": "reference_audio",
    "prompt_text": "reference_text",
    "instruct": "instructions",
}


class SpeechService:
    def __init__(
        self,
        model_dir: str,
        voices: VoiceLibrary,
        backend: str = "pytorch",
        fp16: bool = True,
        vllm_options: dict | None = None,
        vram_budget_gb: float = 0.0,
        workers: int = 64,
        warmup: bool = True,
        asr_model: str = "",
        max_queued: int = 64,
        voice_aliases: dict[str, str] | None = None,
    ):
        self.model_dir, self.backend_asked = model_dir, backend
        self.voices = voices
        #: other names of library voices, e.g. OpenAI's ("alloy" -> "narrator"); names are case-insensitive
        self.voice_aliases = {folded(name): slug for name, slug in (voice_aliases or {}).items()}
        self._load_args = (backend, fp16, vllm_options or {}, vram_budget_gb)
        self._warmup = warmup
        self.asr_model = asr_model  # transcribes uploaded voices sent without a transcript ("" = never)
        self.transcriber = None  # loaded on the first upload that needs it
        self.asr_lock = threading.Lock()
        self.state = "starting"
        self.error = ""
        self.loaded = None
        self.metrics = Metrics(self)
        self.active: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="take")
        self._preparer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prepare-voice")
        self.max_queued = max(0, int(max_queued))  # takes waiting beyond which requests are refused (0: none)
        self.backlog = 0  # takes handed to the pool that no worker has started yet
        self.recent_seconds: deque[float] = deque(maxlen=32)  # the last takes' durations (Retry-After)

    # -- lifecycle -------------------------------------------------------------------------------
    def load(self) -> None:
        """Load (and warm up) the model; on the caller's thread (the server runs it beside the loop)."""
        from studio.runtime import runner
        from studio.runtime.warmup import warmup_request

        self.state = "loading"
        try:
            backend, fp16, options, budget = self._load_args
            self.loaded = runner.load_model(
                self.model_dir, backend, fp16, options, budget, warm_beside=self._warmup
            )
            if self._warmup:
                runner.run_take(self.loaded.model, warmup_request(), backend=self.loaded.backend)
            self.state = "ready"
            log.info("ready: %s backend on %s", self.loaded.backend, self.loaded.device)
            self.prepare_voices()
        except Exception as exc:  # noqa: BLE001 - reported by /health and every request
            log.exception("loading %s failed", self.model_dir)
            self.state, self.error = "error", f"{type(exc).__name__}: {exc}"

    def prepare_voices(self, slugs: list[str] | None = None) -> None:
        """Make library voices' prompt states in the background, one at a time (all of them when ``slugs`` is
        None: after loading), so each voice's first request starts as fast as its later ones instead of paying
        for that state before its first chunk. The prompt cache's budget bounds how many stay made."""
        if self.loaded is None or not hasattr(self.loaded.model, "prepare_voice"):
            return
        for slug in [voice.slug for voice in self.voices.list()] if slugs is None else slugs:
            self._preparer.submit(self._prepare_voice, slug)

    def _prepare_voice(self, slug: str) -> None:
        try:
            prompt, rate, _ = self.voices.load_prompt(slug)
            made = self.loaded.model.prepare_voice(prompt, rate)
            log.info("voice %s %s", slug, "prepared" if made else "was prepared already")
        except Exception:  # noqa: BLE001 - a head start only: the voice's request reports a problem itself
            log.warning("could not prepare voice %s", slug, exc_info=True)

    def close(self) -> None:
        for cancel in list(self.active.values()):
            cancel.set()
        self._preparer.shutdown(wait=True, cancel_futures=True)
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self.loaded is not None:
            self.loaded.close()

    @property
    def model_name(self) -> str:
        """The model's id in ``/v1/models``: its folder's name."""
        from pathlib import Path

        return Path(self.model_dir).name or "cosyvoice2"

    @property
    def model_created(self) -> int:
        """When the model folder was made (``created`` in ``/v1/models``); 0 when it cannot be read."""
        import os

        try:
            return int(os.stat(self.model_dir).st_mtime)
        except OSError:
            return 0

    @property
    def sample_rate(self) -> int:
        from studio.runtime.runner import output_rate

        return output_rate(self.loaded.model)

    # -- requests --------------------------------------------------------------------------------
    def synthesize_request(self, body: SpeechBody, request_id: str = "") -> Synthesize:
        """The studio's take for an API request (``request_id``: the HTTP request's, carried by the take
        into the logs; "" = a new one); a ServiceError (404/422/503) says what is wrong."""
        if self.state != "ready":
            raise ServiceError(503, f"the engine is {self.state}" + (f": {self.error}" if self.error else ""))
        text = (body.input or "").strip()
        if not text:
            raise ServiceError(422, "input is empty: there is nothing to say", "input")
        if len(body.input) > MAX_INPUT_CHARS:
            raise ServiceError(
                422, f"input is {len(body.input)} characters; at most {MAX_INPUT_CHARS}", "input"
            )
        prompt, prompt_rate, transcript = self._voice(body)
        spoken = Mode.ZERO_SHOT if transcript else Mode.CROSS_LINGUAL
        mode = Mode.INSTRUCT if body.instructions.strip() else spoken
        ids = {"request_id": request_id} if request_id else {}
        try:
            return Synthesize(
                text,
                mode=mode,
                prompt_wav=prompt,
                prompt_sr=prompt_rate,
                prompt_text=transcript,
                instruct=body.instructions.strip(),
                speed=float(body.speed),
                seed=body.seed,
                stream=True,
                first_hop_tokens=body.first_hop_tokens,
                **ids,
            )
        except RequestError as exc:
            raise ServiceError(422, str(exc), API_FIELDS.get(exc.field, exc.field)) from None

    def _voice(self, body: SpeechBody) -> tuple[np.ndarray, int, str]:
        """(prompt audio, its rate, transcript) of the reference sent (it wins over ``voice``), or of the
        library voice named, directly or through an alias; an unknown voice is OpenAI's 400 naming it."""
        if body.reference_audio:
            import base64
            import binascii

            from studio.serve.formats import decode_upload

            encoded = body.reference_audio
            if encoded.startswith("data:") and ";base64," in encoded[:100]:  # a data URL (vLLM-Omni's)
                encoded = encoded.split(";base64,", 1)[1]
            try:
                data = base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise ServiceError(422, "reference_audio is not base64", "reference_audio") from None
            samples, rate = decode_upload(data, "reference_audio", MAX_REFERENCE_SECONDS)
            return samples, rate, body.reference_text.strip()
        try:
            voice = self._library_voice(body.voice)
            prompt, rate, transcript = self.voices.load_prompt(voice.slug)  # this server's library
        except VoiceError:
            raise ServiceError(400, f"unknown voice {body.voice!r}; {self.voice_names()}", "voice") from None
        return prompt, rate, transcript

    def _library_voice(self, requested: str) -> Voice:
        """The library voice whose id is exactly ``requested``, else the one ``--voice-alias`` names, else the
        one with that alias in the library (both case-insensitive); a `VoiceError` when none is."""
        try:
            return self.voices.get(requested)
        except VoiceError:
            pass
        slug = self.voice_aliases.get(folded(requested))
        if slug is not None:
            return self.voices.get(slug)
        voice = self.voices.by_alias(requested)
        if voice is None:
            raise VoiceError(f"no voice {requested!r}")
        return voice

    def all_aliases(self, voices: list[Voice]) -> dict[str, str]:
        """Every alias -> the voice id it speaks with: the library's, then ``--voice-alias`` (which wins)."""
        return {**{alias: v.slug for v in voices for alias in v.aliases}, **self.voice_aliases}

    def voice_names(self) -> str:
        """The voices a request may name, for an error message."""
        voices = self.voices.list()
        known = ", ".join(v.slug for v in voices) or "none yet (POST /v1/voices)"
        aliases = ", ".join(f"{alias} ({slug})" for alias, slug in sorted(self.all_aliases(voices).items()))
        return f"registered voices: {known}" + (f"; aliases: {aliases}" if aliases else "")

    @property
    def queued(self) -> int:
        """Takes accepted but not yet running: waiting for a worker, or for GPU memory (the take gate)."""
        gate = getattr(getattr(self.loaded, "model", None), "take_gate", None)
        return self.backlog + (gate.waiting if gate is not None else 0)

    def check_queue(self) -> None:
        """A 503 with ``Retry-After`` when ``max_queued`` takes already wait; else nothing."""
        queued = self.queued
        if not self.max_queued or queued < self.max_queued:
            return
        retry = self.retry_after(queued)
        raise ServiceError(
            503,
            f"the server is busy: {queued} takes are waiting for GPU memory or a worker; "
            f"retry after {retry} s",
            headers={"Retry-After": str(retry)},
            code="server_busy",
        )

    def retry_after(self, queued: int) -> int:
        """Seconds until the queue has likely moved on: the recent takes' mean duration times the queue's
        length over the takes running (5 s a take before any finished); at least 1, at most 600."""
        recent = list(self.recent_seconds)
        take = sum(recent) / len(recent) if recent else 5.0
        running = max(1, len(self.active) - queued)
        return min(600, max(1, math.ceil(take * queued / running)))

    async def chunks(self, request: Synthesize, stats: list | None = None) -> AsyncIterator[np.ndarray]:
        """The take's audio chunks (float32, ``sample_rate``) as they are made; closing this iterator
        early (a client that went away) cancels the take. ``stats`` gets the take's `TakeStats` at its end."""
        from studio.runtime import runner

        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        cancel = threading.Event()
        started = time.perf_counter()

        def put(item) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        def work() -> None:
            with self._lock:
                self.backlog -= 1
            try:
                stats = runner.run_take(
                    self.loaded.model,
                    request,
                    cancel=cancel,
                    backend=self.loaded.backend,
                    on_chunk=lambda samples: put(("chunk", samples)),
                )
                put(("done", stats))
            except RequestError as exc:  # a rule of the runtime the request broke: the client's mistake
                put(("error", ServiceError(422, str(exc), API_FIELDS.get(exc.field, exc.field))))
            except Exception as exc:  # noqa: BLE001 - raised to the consumer
                log.error("take %s failed: %s: %s", request.request_id, type(exc).__name__, exc)
                put(("error", exc))

        with self._lock:
            self.active[request.request_id] = cancel
            self.backlog += 1  # until a worker starts the take (`work`), or it is dropped unstarted
        outcome = "cancelled"
        first: float | None = None
        future = None
        try:
            future = self._pool.submit(work)
            while True:
                kind, payload = await queue.get()
                if kind == "chunk":
                    first = first if first is not None else time.perf_counter() - started
                    yield payload
                elif kind == "done":
                    if stats is not None:
                        stats.append(payload)
                    outcome = "cancelled" if payload.cancelled else "ok"
                    if outcome == "ok":
                        self.metrics.take_done(first, payload.total_seconds, payload.rtf)
                        self.recent_seconds.append(payload.total_seconds)
                    return
                else:
                    outcome = "error"
                    raise payload
        finally:
            cancel.set()  # a no-op for a finished take; stops one whose client went away
            if future is None or future.cancel():  # a take no worker started: not queued any more
                with self._lock:
                    self.backlog -= 1
            self.metrics.request(outcome)  # counted before the take leaves the active list
            with self._lock:
                self.active.pop(request.request_id, None)
