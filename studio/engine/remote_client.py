"""The studio on a remote engine: `EngineClient`'s interface over a speech server (``cosyvoice-studio
serve``), so the bridge, the panels and the take controller work unchanged. Takes go out as streamed-PCM
``/v1/audio/speech`` requests carrying their reference recording; ``/health`` is polled for the state; a
lost connection becomes a CRASHED state (the window's Restart reconnects); the GPU panel reads ``/metrics``.
"""

from __future__ import annotations

import base64
import io
import queue
import threading
import time
from typing import Any

import numpy as np

from studio import __version__
from studio.engine.client import EngineError
from studio.engine.protocol import (
    PROTOCOL_VERSION,
    AudioChunk,
    EngineState,
    Error,
    Hello,
    LoadModel,
    State,
    Synthesize,
    TakeFinished,
    TakeStats,
    Transcribe,
)
from studio.request import Mode

POLL_SECONDS = 1.0
_STATES = {
    "starting": EngineState.STARTING,
    "loading": EngineState.LOADING,
    "ready": EngineState.READY,
    "error": EngineState.ERROR,
}


def _reason(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def reference_payload(request: Synthesize) -> dict[str, str]:
    """The take's voice as the server's ``reference_audio`` (base64 FLAC) and ``reference_text``."""
    import soundfile as sf

    from studio.voices import saved_prompt

    audio, rate, text = request.prompt_wav, request.prompt_sr, request.prompt_text
    if audio is None and request.voice_id:  # a saved voice of this computer: the server may not have it
        saved = saved_prompt(request.voice_id)
        if saved is None:
            raise EngineError(f"the saved voice {request.voice_id!r} is not in this computer's library")
        audio, rate, transcript = saved
        text = text or transcript
    buffer = io.BytesIO()
    sf.write(buffer, np.asarray(audio, dtype=np.float32), int(rate), format="FLAC", subtype="PCM_16")
    spoken = text if request.mode is Mode.ZERO_SHOT else ""
    return {"reference_audio": base64.b64encode(buffer.getvalue()).decode(), "reference_text": spoken}


class RemoteEngineClient:
    """Talks to ``url`` (Authorization: Bearer ``key`` when given); events come from `get_event`."""

    def __init__(self, url: str, key: str = "", poll_seconds: float = POLL_SECONDS) -> None:
        self.url = url.rstrip("/")
        self.key = key
        self.poll_seconds = poll_seconds
        self.last_state: State | None = None
        self._events: queue.Queue = queue.Queue()
        self._takes: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self._http = None

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> Hello:
        import httpx

        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=httpx.Timeout(15.0, read=600.0))
        self._stop.clear()
        try:
            self._publish(self._health())
        except EngineError:
            self._http.close()
            raise
        self._poller = threading.Thread(target=self._poll, name="remote-engine-health", daemon=True)
        self._poller.start()
        return Hello(PROTOCOL_VERSION, 0, __version__, f"server {self.url}")

    def restart(self, load: LoadModel | None = None, timeout: float = 30.0) -> Hello:
        self.shutdown(timeout)
        return self.start()

    def shutdown(self, timeout: float = 30.0) -> None:
        self._stop.set()
        with self._lock:
            for cancel in self._takes.values():
                cancel.set()
        if self._poller is not None:
            self._poller.join(timeout)
            self._poller = None
        if self._http is not None:
            self._http.close()
            self._http = None
        self._publish(State(EngineState.STOPPED, f"disconnected from {self.url}"))

    # -- requests ------------------------------------------------------------------------------------
    def load_model(self, request: LoadModel) -> None:
        """The server loads its own model: nothing to send; its state comes from /health."""

    def send(self, request: Any) -> None:
        if isinstance(request, Transcribe):
            self._events.put(Error(request.request_id, "the server does not transcribe references: type it"))
            return
        raise EngineError(f"a remote engine cannot take {type(request).__name__}")

    def synthesize(self, request: Synthesize) -> str:
        if self._http is None:
            raise EngineError("not connected to the server")
        cancel = threading.Event()
        with self._lock:
            self._takes[request.request_id] = cancel
            running = len(self._takes)
        self._publish(State(EngineState.BUSY, f"{running} take(s) running", active_requests=running))
        threading.Thread(
            target=self._take, args=(request, cancel), name=f"remote-{request.request_id}", daemon=True
        ).start()
        return request.request_id

    def cancel(self, request_id: str) -> None:
        with self._lock:
            cancel = self._takes.get(request_id)
        if cancel is not None:
            cancel.set()

    def get_event(self, timeout: float | None = None) -> Any | None:
        try:
            return self._events.get(timeout=timeout) if timeout else self._events.get_nowait()
        except queue.Empty:
            return None

    # -- internals -----------------------------------------------------------------------------------
    def _publish(self, state: State) -> None:
        if self.last_state is None or (state.state, state.detail) != (
            self.last_state.state,
            self.last_state.detail,
        ):
            self.last_state = state
            self._events.put(state)

    def _health(self) -> State:
        try:
            answer = self._http.get("/health")
            answer.raise_for_status()
            health = answer.json()
        except Exception as exc:  # noqa: BLE001 - any failure to reach the server
            raise EngineError(f"cannot reach the engine server {self.url}: {_reason(exc)}") from exc
        kind = _STATES.get(health.get("state"), EngineState.ERROR)
        with self._lock:
            running = len(self._takes)
        if kind is EngineState.READY and running:
            kind = EngineState.BUSY
        detail = f"{health.get('backend') or 'engine'} on {health.get('device') or '?'} at {self.url}"
        if health.get("error"):
            detail = str(health["error"])
        return State(kind, detail, backend=health.get("backend") or "", active_requests=running)

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            try:
                self._publish(self._health())
            except EngineError as exc:
                self._publish(State(EngineState.CRASHED, f"lost the connection to the server: {exc}"))
                return  # Restart reconnects

    def _take(self, request: Synthesize, cancel: threading.Event) -> None:
        started = time.perf_counter()
        first: float | None = None
        samples = chunks = 0
        rate = 24000
        try:
            body = {
                "input": request.text,
                "response_format": "pcm",
                "stream": True,
                "speed": request.speed,
                "seed": request.seed,
                "instructions": request.instruct if request.mode is Mode.INSTRUCT else "",
                "first_hop_tokens": request.first_hop_tokens,
                **reference_payload(request),
            }
            with self._http.stream("POST", "/v1/audio/speech", json=body) as answer:
                if answer.status_code != 200:
                    answer.read()
                    message = answer.json().get("error", {}).get("message", answer.text)
                    raise EngineError(f"the server refused the take ({answer.status_code}): {message}")
                rate = int(answer.headers.get("x-sample-rate", rate))
                spare = b""
                for piece in answer.iter_raw():
                    if cancel.is_set():
                        break
                    data, spare = spare + piece, b""
                    if len(data) % 2:
                        data, spare = data[:-1], data[-1:]
                    if not data:
                        continue
                    first = first if first is not None else time.perf_counter() - started
                    audio = np.frombuffer(data, "<i2").astype(np.float32) / 32767.0
                    self._events.put(AudioChunk(request.request_id, chunks, audio, rate))
                    chunks += 1
                    samples += audio.size
            total = time.perf_counter() - started
            seconds = samples / rate
            stats = TakeStats(
                first if first is not None else total,
                total,
                seconds,
                total / seconds if seconds else float("inf"),
                0,
                chunks,
                backend="remote",
                cancelled=cancel.is_set(),
            )
            self._events.put(TakeFinished(request.request_id, stats))
        except Exception as exc:  # noqa: BLE001 - the take's error, in the engine's words
            message = (
                str(exc)
                if isinstance(exc, EngineError)
                else f"lost the connection to the server: {_reason(exc)}"
            )
            self._events.put(Error(request.request_id, message))
        finally:
            with self._lock:
                self._takes.pop(request.request_id, None)
                running = len(self._takes)
            if not self._stop.is_set():
                ready = State(EngineState.READY, f"ready at {self.url}") if not running else None
                self._publish(
                    ready or State(EngineState.BUSY, f"{running} take(s) running", active_requests=running)
                )


def remote_gpu_query(url: str, key: str = ""):
    """A GPU panel query that reads the server's /metrics (its NVML gauges) instead of this machine's NVML."""
    import httpx

    from studio.gpu.nvml import GpuSnapshot, NvmlUnavailable

    headers = {"Authorization": f"Bearer {key}"} if key else {}

    def query() -> list:
        from prometheus_client.parser import text_string_to_metric_families

        try:
            text = httpx.get(f"{url.rstrip('/')}/metrics", headers=headers, timeout=2.0).text
        except Exception as exc:  # noqa: BLE001 - shown by the panel as "no GPU"
            raise NvmlUnavailable(f"the server's metrics did not answer: {_reason(exc)}") from exc
        values: dict[str, dict[str, float]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.startswith("cosyvoice_gpu_"):
                    values.setdefault(sample.labels.get("gpu", "0"), {})[sample.name] = sample.value
        if not values:
            raise NvmlUnavailable("the server reports no NVIDIA GPU")
        return [
            GpuSnapshot(
                int(gpu),
                f"server GPU {gpu}",
                (0, 0),
                "",
                int(v.get("cosyvoice_gpu_memory_total_bytes", 0)),
                int(v.get("cosyvoice_gpu_memory_used_bytes", 0)),
                int(100 * v["cosyvoice_gpu_utilization_ratio"])
                if "cosyvoice_gpu_utilization_ratio" in v
                else None,
            )
            for gpu, v in sorted(values.items())
        ]

    return query
