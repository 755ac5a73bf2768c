"""The routes: OpenAI's ``POST /v1/audio/speech`` (whole files, or streamed PCM/WAV whose first bytes leave
with the first chunk), the voice library (``/v1/voices``), ``/health`` and ``/metrics``. The service is
``request.app.state.service``; CPU work (decoding, encoding, voice files) runs off the event loop, a few jobs
at a time; a client that leaves cancels its take, streamed or not."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import Response, StreamingResponse

from studio.serve.cancellation import with_cancellation
from studio.serve.formats import FORMATS, STREAMABLE, encode, pcm16, wav_stream_header
from studio.serve.protocol import MAX_ID_CHARS, MAX_TRANSCRIPT_CHARS, SpeechBody, check_text
from studio.serve.service import ServiceError, SpeechRequest, SpeechService

log = logging.getLogger("studio.serve")
router = APIRouter()
CPU_JOBS = 4  # decodes, encodes and voice saves at once (each on a worker thread)


async def off_loop(request: Request, function, *args):
    """``function(*args)`` on a worker thread, at most `CPU_JOBS` at once per app."""
    async with request.app.state.cpu_jobs:
        return await asyncio.to_thread(function, *args)


@router.get("/health")
async def health(request: Request) -> dict[str, Any]:
    service: SpeechService = request.app.state.service
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


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    text = await asyncio.to_thread(request.app.state.metrics_text)
    return Response(text, media_type="text/plain; version=0.0.4")


@router.post("/v1/audio/speech")
@with_cancellation
async def speech(body: SpeechBody, request: Request):
    service: SpeechService = request.app.state.service
    if body.response_format not in FORMATS:
        raise ServiceError(422, f"response_format must be one of {', '.join(FORMATS)}", "response_format")
    if body.stream and body.response_format not in STREAMABLE:
        raise ServiceError(422, f"streaming needs response_format {' or '.join(STREAMABLE)}", "stream")
    asked = SpeechRequest(**body.model_dump(), request_id=request.state.request_id)
    take = await off_loop(request, service.synthesize_request, asked)
    service.check_queue()  # a 503 with Retry-After when too many takes already wait
    media = FORMATS[body.response_format][0]
    rate = service.sample_rate
    headers = {"X-Sample-Rate": str(rate), "X-Request-Id": take.request_id}
    if body.stream:
        chunks = _streamed(service, take, body.response_format, rate)
        return StreamingResponse(chunks, media_type=media, headers=headers)
    parts = [samples async for samples in service.chunks(take)]  # cancelled with the route
    audio = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    data = await off_loop(request, encode, audio, rate, body.response_format)
    return Response(data, media_type=media, headers=headers)


async def _streamed(service: SpeechService, take, response_format: str, rate: int):
    """Bytes as chunks come; a client that leaves stops the iteration and so cancels the take; a take that
    fails raises on, and the server aborts the stream."""
    if response_format == "wav":
        yield wav_stream_header(rate)
    chunks = service.chunks(take)
    try:
        async for samples in chunks:
            yield pcm16(samples)
    finally:
        await chunks.aclose()


@router.get("/v1/voices")
async def list_voices(request: Request) -> dict[str, Any]:
    voices = await asyncio.to_thread(request.app.state.service.voices.list)
    return {"object": "list", "data": [_voice_json(v) for v in voices]}


@router.post("/v1/voices", status_code=201)
@with_cancellation
async def add_voice(
    request: Request,
    name: Annotated[str, Form(max_length=MAX_ID_CHARS)],
    audio: Annotated[UploadFile, File()],
    transcript: Annotated[str, Form(max_length=MAX_TRANSCRIPT_CHARS)] = "",
    overwrite: Annotated[bool, Form()] = False,
):
    from studio.serve.voices_api import register_voice

    try:
        check_text(transcript)
    except ValueError as exc:
        raise ServiceError(422, f"transcript {exc}", "transcript") from None
    data = await audio.read()
    service = request.app.state.service
    voice = await off_loop(request, register_voice, service, name, data, transcript, overwrite)
    return _voice_json(voice)


@router.delete("/v1/voices/{voice_id}")
async def delete_voice(voice_id: str, request: Request) -> dict[str, Any]:
    from studio.voices import VoiceError

    try:
        await asyncio.to_thread(request.app.state.service.voices.delete, voice_id)
    except VoiceError:
        raise ServiceError(404, f"no voice {voice_id!r}", "voice_id") from None
    return {"id": voice_id, "object": "voice", "deleted": True}


def _voice_json(voice) -> dict[str, Any]:
    return {
        "id": voice.slug,
        "object": "voice",
        "name": voice.name,
        "transcript": voice.transcript,
        "duration_s": round(voice.duration_s, 3),
        "created": int(voice.created),
    }


def _gpus() -> list[dict[str, Any]] | None:
    try:
        from studio.gpu.nvml import query_gpus

        return [
            {
                "index": g.index,
                "name": g.name,
                "memory_used": g.memory_used,
                "memory_total": g.memory_total,
                "utilization_percent": g.utilization_percent,
            }
            for g in query_gpus()
        ]
    except Exception:  # noqa: BLE001 - no NVIDIA GPU here
        return None
