"""The routes: OpenAI's ``POST /v1/audio/speech`` (PCM and WAV streamed by default, their first bytes with
the first chunk; other formats whole; OpenAI's events with ``stream_format: "sse"``), ``/v1/models``,
``/v1/audio/voices``, the voice library (``/v1/voices``), ``/health`` and ``/metrics``. The service is
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
from studio.serve.formats import FORMATS, STREAMABLE, encode
from studio.serve.protocol import (
    MAX_ID_CHARS,
    MAX_TRANSCRIPT_CHARS,
    ServiceError,
    SpeechBody,
    VoicePatch,
    check_text,
)
from studio.serve.service import SpeechService
from studio.serve.sse import audio_bytes, primed, sse_events

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
    fmt, sse = body.response_format, body.stream_format == "sse"
    if fmt not in FORMATS:
        raise ServiceError(422, f"response_format must be one of {', '.join(FORMATS)}", "response_format")
    if body.stream and fmt not in STREAMABLE and not sse:
        raise ServiceError(422, f"streaming needs response_format {' or '.join(STREAMABLE)}", "stream")
    if sse and body.stream is False:
        raise ServiceError(422, 'stream_format "sse" streams events: leave out "stream": false', "stream")
    take = await off_loop(request, service.synthesize_request, body, request.state.request_id)
    service.check_queue()  # a 503 with Retry-After when too many takes already wait
    media = FORMATS[fmt][0]
    rate = service.sample_rate
    headers = {"X-Sample-Rate": str(rate), "X-Request-Id": take.request_id}
    stats: list = []
    chunks = service.chunks(take, stats)  # cancelled with the route, or with the stream once it has begun
    if sse or (fmt in STREAMABLE if body.stream is None else body.stream):
        pieces = audio_bytes(await primed(chunks), chunks, fmt, rate)  # the answer begins with the audio
        if sse:
            events = sse_events(pieces, len(body.input), stats)
            sse_headers = {**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
            return StreamingResponse(events, media_type="text/event-stream", headers=sse_headers)
        return StreamingResponse(pieces, media_type=media, headers=headers)
    parts = [samples async for samples in chunks]
    audio = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    data = await off_loop(request, encode, audio, rate, fmt)
    return Response(data, media_type=media, headers=headers)


@router.get("/v1/models")
async def list_models(request: Request) -> dict[str, Any]:
    """OpenAI's model list: the model this server speaks with (any ``model`` a request names gets it)."""
    return {"object": "list", "data": [_model(request.app.state.service)]}


@router.get("/v1/models/{model_id}")
async def retrieve_model(request: Request, model_id: str) -> dict[str, Any]:
    """OpenAI's model object for the listed model's id; 404 (``model_not_found``) for any other."""
    service: SpeechService = request.app.state.service
    if model_id != service.model_name:
        raise ServiceError(404, f"The model '{model_id}' does not exist", "model", code="model_not_found")
    return _model(service)


def _model(service: SpeechService) -> dict[str, Any]:
    return {
        "id": service.model_name,
        "object": "model",
        "created": service.model_created,
        "owned_by": "cosyvoice-studio",
    }


@router.get("/v1/audio/voices")
async def audio_voices(request: Request) -> dict[str, Any]:
    """The voices as ``{id, name}`` (Open WebUI reads ``voices``, others ``data``), aliases included."""
    service: SpeechService = request.app.state.service
    library = await asyncio.to_thread(service.voices.list)
    voices = [{"id": v.slug, "name": v.name} for v in library]
    aliases = sorted(service.all_aliases(library).items())  # the library's and --voice-alias
    voices += [{"id": alias, "name": f"{alias} ({slug})"} for alias, slug in aliases]
    return {"object": "list", "data": voices, "voices": voices}


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
    aliases: Annotated[str, Form(max_length=32 * (MAX_ID_CHARS + 1))] = "",  # comma-separated
):
    from studio.serve.voices_api import register_voice

    try:
        check_text(transcript)
    except ValueError as exc:
        raise ServiceError(422, f"transcript {exc}", "transcript") from None
    names = [alias for alias in aliases.split(",") if alias.strip()]
    service = request.app.state.service
    if names:  # refused before the upload is cleaned and saved, when it can be
        await off_loop(request, _check_aliases, service.voices, name, names)
    data = await audio.read()
    voice = await off_loop(request, register_voice, service, name, data, transcript, overwrite)
    service.prepare_voices([voice.slug])
    if names:
        try:
            voice = await off_loop(request, _set_aliases, service.voices, voice.slug, names)
        except ServiceError:
            # an alias taken meanwhile: the request fails whole, no new voice is left without its aliases
            if not overwrite:
                await off_loop(request, service.voices.delete, voice.slug)
            raise
    return _voice_json(voice)


@router.patch("/v1/voices/{voice_id}")
async def patch_voice(voice_id: str, body: VoicePatch, request: Request) -> dict[str, Any]:
    """Set a voice's aliases (OpenAI's voice names, e.g. ``alloy``): 404 unknown id, 409 taken, 422 malformed."""
    voice = await off_loop(request, _set_aliases, request.app.state.service.voices, voice_id, body.aliases)
    return _voice_json(voice)


def _set_aliases(library, voice_id: str, aliases: list[str]):
    from studio.voices import AliasTakenError, VoiceBusyError, VoiceError, VoiceNotFoundError

    try:
        return library.set_aliases(voice_id, aliases)
    except VoiceNotFoundError:
        raise ServiceError(404, f"no voice {voice_id!r}", "voice_id") from None
    except (AliasTakenError, VoiceBusyError) as exc:
        raise ServiceError(409, str(exc), "aliases") from None
    except VoiceError as exc:
        raise ServiceError(422, str(exc), "aliases") from None


def _check_aliases(library, name: str, aliases: list[str]) -> None:
    """A 422 for a malformed alias, a 409 for one another voice than ``name``'s has (its id or an alias)."""
    from studio.voices import VoiceError, alias_key, same_name

    try:
        keys = [alias_key(alias) for alias in aliases]
    except VoiceError as exc:
        raise ServiceError(422, str(exc), "aliases") from None
    for voice in (v for v in library.list() if not same_name(v.name, name)):
        taken = next((key for key in keys if key == voice.slug or key in voice.aliases), None)
        if taken is not None:
            raise ServiceError(409, f"the alias {taken!r} is taken by the voice {voice.slug!r}", "aliases")


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
        "aliases": list(voice.aliases),
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
