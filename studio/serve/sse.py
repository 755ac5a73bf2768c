"""Streamed answers of ``/v1/audio/speech``: the bytes of a streamable format as its chunks come, or OpenAI's
server-sent events (``stream_format: "sse"``): ``speech.audio.delta`` events whose ``audio`` is base64 of the
same bytes, then one ``speech.audio.done`` with ``usage`` (input tokens = characters of the input, output
tokens = the speech tokens the model made). A take that fails once the answer has begun breaks a byte stream
(the client sees it incomplete) and ends an event stream with an ``error`` event in OpenAI's error shape."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator

import numpy as np

from studio.serve.formats import STREAMABLE, encode, pcm16, wav_stream_header
from studio.serve.protocol import ServiceError, error_json

log = logging.getLogger("studio.serve")


async def primed(chunks: AsyncIterator[np.ndarray]) -> np.ndarray | None:
    """The take's first chunk (None for a take without audio): awaited before the answer starts, so a take
    refused or failing before its first audio is an ordinary HTTP error."""
    try:
        return await anext(chunks)
    except StopAsyncIteration:
        return None


async def audio_bytes(
    first: np.ndarray | None, chunks: AsyncIterator[np.ndarray], response_format: str, rate: int
) -> AsyncIterator[bytes]:
    """The file in ``response_format`` piece by piece: a streamable one (`STREAMABLE`) a chunk at a time,
    the first bytes with the first chunk; any other whole, at the end. Closing this closes ``chunks`` (a
    client that leaves cancels the take); a take that fails raises on."""
    try:
        if response_format not in STREAMABLE:
            parts = [first] if first is not None else []
            parts += [samples async for samples in chunks]
            audio = np.concatenate(parts) if parts else np.zeros(0, np.float32)
            yield await asyncio.to_thread(encode, audio, rate, response_format)
            return
        header = wav_stream_header(rate) if response_format == "wav" else b""
        yield header + (pcm16(first) if first is not None else b"")
        async for samples in chunks:
            yield pcm16(samples)
    finally:
        await chunks.aclose()


def event(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


async def sse_events(pieces: AsyncIterator[bytes], input_chars: int, stats: list) -> AsyncIterator[bytes]:
    """OpenAI's speech events over ``pieces`` (`audio_bytes`); ``stats`` holds the take's `TakeStats` once
    the take is done."""
    try:
        async for piece in pieces:
            if piece:
                yield event({"type": "speech.audio.delta", "audio": base64.b64encode(piece).decode("ascii")})
    except ServiceError as exc:
        yield event({"type": "error", **error_json(exc.status, str(exc), exc.param, exc.code)})
        return
    except Exception as exc:  # noqa: BLE001 - the stream has begun: an error event, then the end
        log.error("a streamed take failed: %s: %s", type(exc).__name__, exc)
        yield event({"type": "error", **error_json(500, f"the take failed: {type(exc).__name__}: {exc}")})
        return
    finally:
        await pieces.aclose()
    speech_tokens = stats[-1].speech_tokens if stats else 0
    total = input_chars + speech_tokens
    usage = {"input_tokens": input_chars, "output_tokens": speech_tokens, "total_tokens": total}
    yield event({"type": "speech.audio.done", "usage": usage})
