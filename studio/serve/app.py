"""The ASGI app: OpenAI's ``POST /v1/audio/speech`` (whole files, or streamed PCM/WAV whose first bytes leave
with the first chunk), the voice library (``/v1/voices``), ``/health`` and ``/metrics``. Every route but
``/health`` needs ``Authorization: Bearer KEY`` when a key is set; bodies and texts have limits; errors are
OpenAI-shaped (``{"error": {"message", "type", "param"}}``)."""

from __future__ import annotations

import asyncio
import hmac
import os
import socket
from typing import Annotated, Any

import numpy as np
from fastapi import FastAPI, File, Form, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from studio.serve.formats import FORMATS, STREAMABLE, encode, pcm16, wav_stream_header
from studio.serve.service import ServiceError, SpeechRequest, SpeechService

MAX_JSON_BYTES = 4 << 20  # text, or text and a base64 reference recording (30 s of FLAC is ~0.7 MiB)
MAX_UPLOAD_BYTES = 25 << 20  # a reference recording (the model uses at most 30 s of it)
DISCONNECT_POLL_S = 0.2


class SpeechBody(BaseModel):
    model: str = "cosyvoice2"
    input: str
    voice: str = ""  # a voice of the library, or none with reference_audio
    reference_audio: str = ""  # an extension for the studio: a base64 audio file used as the voice
    reference_text: str = ""  # its transcript (empty: cross-lingual)
    response_format: str = "wav"
    speed: float = Field(1.0, gt=0)
    instructions: str = ""
    seed: int | None = None
    stream: bool = False
    first_hop_tokens: int = Field(0, ge=0)  # an extension: the first streamed chunk after N speech tokens


def _error(status: int, message: str, param: str | None = None) -> JSONResponse:
    kind = (
        "authentication_error"
        if status == 401
        else "invalid_request_error"
        if status < 500
        else "server_error"
    )
    return JSONResponse({"error": {"message": message, "type": kind, "param": param}}, status_code=status)


def create_app(service: SpeechService, api_key: str | None = None) -> FastAPI:
    app = FastAPI(title="CosyVoice Studio speech API", docs_url=None, redoc_url=None)
    served_by = f"{socket.gethostname()}:{os.getpid()}"

    @app.middleware("http")
    async def guard(request: Request, call_next):
        if request.url.path != "/health" and api_key:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                return _error(401, "missing or wrong API key: send Authorization: Bearer KEY")
        limit = MAX_UPLOAD_BYTES if request.url.path == "/v1/voices" else MAX_JSON_BYTES
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            return _error(413, f"the request body is {int(length)} bytes; at most {limit} here")
        response = await call_next(request)
        response.headers["X-Served-By"] = served_by  # which process (Ray Serve replica) answered
        return response

    @app.exception_handler(ServiceError)
    async def service_error(_request: Request, exc: ServiceError):
        return _error(exc.status, str(exc), exc.param)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(_request: Request, exc: RequestValidationError):
        """A field of the wrong type or range, in the API's error shape, naming the field."""
        first = (exc.errors() or [{}])[0]
        where = [str(part) for part in first.get("loc", ()) if part != "body"]
        param = ".".join(where) or None
        return _error(422, f"{param or 'the request'}: {first.get('msg', 'is not valid')}", param)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        loaded = service.loaded
        return {
            "state": service.state,
            "error": service.error or None,
            "backend": loaded.backend if loaded else None,
            "model": service.model_dir,
            "device": loaded.device if loaded else None,
            "active_takes": len(service.active),
            "gpu": _gpus(),
        }

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(service.metrics.text(), media_type="text/plain; version=0.0.4")

    @app.post("/v1/audio/speech")
    async def speech(body: SpeechBody, request: Request):
        if body.response_format not in FORMATS:
            raise ServiceError(422, f"response_format must be one of {', '.join(FORMATS)}", "response_format")
        if body.stream and body.response_format not in STREAMABLE:
            raise ServiceError(422, f"streaming needs response_format {' or '.join(STREAMABLE)}", "stream")
        take = service.synthesize_request(SpeechRequest(**body.model_dump()))
        media = FORMATS[body.response_format][0]
        rate = service.sample_rate
        headers = {"X-Sample-Rate": str(rate), "X-Request-Id": take.request_id}
        if body.stream:
            return StreamingResponse(_streamed(service, take, body.response_format, rate), media_type=media,
                                     headers=headers)  # fmt: skip
        audio = await _whole_take(service, take, request)
        if audio is None:
            return Response(status_code=499)  # the client went away; nobody reads this
        return Response(encode(audio, rate, body.response_format), media_type=media, headers=headers)

    @app.get("/v1/voices")
    async def list_voices() -> dict[str, Any]:
        return {"object": "list", "data": [_voice_json(v) for v in service.voices.list()]}

    @app.post("/v1/voices", status_code=201)
    async def add_voice(
        name: Annotated[str, Form()],
        audio: Annotated[UploadFile, File()],
        transcript: Annotated[str, Form()] = "",
        overwrite: Annotated[bool, Form()] = False,
    ):
        from studio.serve.voices_api import register_voice

        data = await audio.read()
        voice = await asyncio.to_thread(register_voice, service, name, data, transcript, overwrite)
        return _voice_json(voice)

    @app.delete("/v1/voices/{voice_id}")
    async def delete_voice(voice_id: str) -> dict[str, Any]:
        from studio.voices import VoiceError

        try:
            service.voices.get(voice_id)
        except VoiceError:
            raise ServiceError(404, f"no voice {voice_id!r}", "voice_id") from None
        service.voices.delete(voice_id)
        return {"id": voice_id, "object": "voice", "deleted": True}

    return app


async def _streamed(service: SpeechService, take, response_format: str, rate: int):
    """Bytes as chunks come; when the client disconnects the server stops iterating and the take is cancelled."""
    if response_format == "wav":
        yield wav_stream_header(rate)
    chunks = service.chunks(take)
    try:
        async for samples in chunks:
            yield pcm16(samples)
    finally:
        await chunks.aclose()


async def _whole_take(service: SpeechService, take, request: Request) -> np.ndarray | None:
    """The whole take, or None when the client disconnected first (then the take is cancelled)."""
    parts: list[np.ndarray] = []

    async def collect() -> None:
        async for samples in service.chunks(take):
            parts.append(samples)

    task = asyncio.ensure_future(collect())
    while not task.done():
        await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
        if not task.done() and await request.is_disconnected():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return None
    task.result()  # a failed take raises here (500, or its ServiceError)
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)


def _voice_json(voice) -> dict[str, Any]:
    return {"id": voice.slug, "object": "voice", "name": voice.name, "transcript": voice.transcript,
            "duration_s": round(voice.duration_s, 3), "created": int(voice.created)}  # fmt: skip


def _gpus() -> list[dict[str, Any]] | None:
    try:
        from studio.gpu.nvml import query_gpus

        return [{"index": g.index, "name": g.name, "memory_used": g.memory_used, "memory_total": g.memory_total,
                 "utilization_percent": g.utilization_percent} for g in query_gpus()]  # fmt: skip
    except Exception:  # noqa: BLE001 - no NVIDIA GPU here
        return None
