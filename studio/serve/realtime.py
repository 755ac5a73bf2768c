"""The realtime WebSocket ``/v1/audio/speech/stream`` (vLLM-Omni's path), for voice agents (Pipecat, LiveKit):
text comes in pieces as JSON frames, each sentence is spoken as soon as it is complete, its audio leaves as
binary frames of 16-bit mono PCM, sentences one after another, on one connection for a whole conversation.
The protocol is in docs/DEPLOY.md ("Realtime WebSocket"). The key is checked by the Guard, as for HTTP.

Sentences are synthesised one at a time: the server sends a take's audio as fast as it is made, so a second
take beside it would only share the same compute."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, WebSocket
from starlette.websockets import WebSocketDisconnect

from studio.serve.formats import pcm16, wav_stream_header
from studio.serve.protocol import (
    MAX_ID_CHARS,
    MAX_INPUT_CHARS,
    MAX_INSTRUCTIONS_CHARS,
    MAX_SEED,
    ServiceError,
    SpeechBody,
    check_text,
    error_json,
    speakable,
)
from studio.serve.service import SpeechService

log = logging.getLogger("studio.serve")
router = APIRouter()

MAX_BUFFERED_CHARS = MAX_INPUT_CHARS  # text not yet spoken: the buffer and the sentences waiting
MAX_FRAME_BYTES = 64 << 10  # a client's JSON frame
FORMATS = ("pcm", "wav")
_CLOSE_QUOTES = "\"'\u201d\u2019)\\]"
#: where a sentence ends: . ! ? (then a space, or the end of what came so far), 。！？, a line break
_END = re.compile(rf"[.!?]+[{_CLOSE_QUOTES}]*(?=\s|$)|[。！？]+[」』\u201d\u2019）]*|\n")


def split_sentences(buffer: str) -> tuple[list[str], str]:
    """The complete sentences at the start of ``buffer`` (stripped, blank ones left out) and the rest. A
    period right after a digit at the very end waits: "3." may go on as "3.5" in the next piece."""
    sentences, start = [], 0
    for match in _END.finditer(buffer):
        if match.end() == len(buffer) and match.group()[0] == "." and buffer[: match.start()][-1:].isdigit():
            break
        piece = buffer[start : match.end()].strip()
        if piece:
            sentences.append(piece)
        start = match.end()
    return sentences, buffer[start:]


class Refused(Exception):
    """A client message the session refuses: an ``error`` event, the connection stays open."""

    def __init__(self, message: str, param: str | None = None, code: str = "invalid_value"):
        super().__init__(message)
        self.param, self.code = param, code


@dataclass
class Segment:
    number: int
    text: str
    settings: dict[str, Any]  # the session's settings when the sentence was complete
    take_id: str = ""  # set when its audio begins (``audio.start``)

    @property
    def started(self) -> bool:
        return bool(self.take_id)


class Session:
    """One connection: its settings, the text buffer, the sentences waiting, and the task that speaks them."""

    def __init__(self, websocket: WebSocket, service: SpeechService):
        self.ws, self.service = websocket, service
        self.id = "ws_" + uuid.uuid4().hex[:12]
        self.settings: dict[str, Any] = {
            "voice": "",
            "response_format": "pcm",
            "speed": 1.0,
            "instructions": "",
            "seed": None,
        }
        self.buffer = ""
        self.pending: asyncio.Queue[Segment | None] = asyncio.Queue()
        self.pending_chars = 0
        self.numbered = 0
        self.speaking: Segment | None = None
        self.speaker: asyncio.Task | None = None
        self.send_lock = asyncio.Lock()

    # -- sending ---------------------------------------------------------------------------------
    async def send_json(self, event: dict[str, Any]) -> None:
        async with self.send_lock:
            await self.ws.send_text(json.dumps(event, ensure_ascii=False))

    async def send_bytes(self, data: bytes) -> None:
        async with self.send_lock:
            await self.ws.send_bytes(data)

    async def error(
        self, message: str, param: str | None = None, code: str | None = None, status: int = 400, **extra: Any
    ) -> None:
        await self.send_json({"type": "error", **error_json(status, message, param, code), **extra})

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            **self.settings,
            "sample_rate": self.service.sample_rate,
            "channels": 1,
            "encoding": "pcm_s16le",
        }

    # -- the connection --------------------------------------------------------------------------
    async def run(self) -> None:
        await self.ws.accept()
        if self.service.state != "ready":
            detail = f": {self.service.error}" if self.service.error else ""
            await self.error(f"the engine is {self.service.state}{detail}", status=503)
            await self.ws.close(1013)  # try again later
            return
        await self.send_json({"type": "session.created", "session": self.describe()})
        self.speaker = asyncio.create_task(self.speak_all())
        try:
            while True:
                message = await self.ws.receive()
                if message["type"] == "websocket.disconnect":
                    return
                try:
                    event = self.parse(message)
                    if event["type"] == "close":
                        await self.close()
                        return
                    await self.handle(event)
                except Refused as exc:
                    await self.error(str(exc), exc.param, exc.code)
        except WebSocketDisconnect:
            return
        finally:
            await self.stop_speaking()  # a client that left cancels its take

    def parse(self, message: dict[str, Any]) -> dict[str, Any]:
        text = message.get("text")
        if text is None:
            raise Refused("binary frames are not accepted: send JSON text frames", code="invalid_frame")
        if len(text) > MAX_FRAME_BYTES or len(text.encode("utf-8", "replace")) > MAX_FRAME_BYTES:
            raise Refused(f"the frame is over {MAX_FRAME_BYTES} bytes", code="frame_too_large")
        try:
            event = json.loads(text)
        except ValueError as exc:
            raise Refused(f"the frame is not JSON: {exc}", code="invalid_json") from None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise Refused('the frame must be a JSON object with a "type"', "type", "invalid_event")
        return event

    async def handle(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "session.update":
            self.update(event.get("session") if isinstance(event.get("session"), dict) else event)
            await self.send_json({"type": "session.updated", "session": self.describe()})
        elif kind == "input_text.append":
            self.append(event.get("text"))
        elif kind == "input_text.flush":
            rest, self.buffer = self.buffer, ""
            self.queue(rest.strip())
        elif kind == "cancel":
            await self.cancel()
        else:
            known = "session.update, input_text.append, input_text.flush, cancel, close"
            raise Refused(f"unknown event type {kind[:64]!r}; known: {known}", "type", "unknown_event")

    def update(self, fields: dict[str, Any]) -> None:
        """The settings in ``fields`` (all or none), for the sentences completed from now on."""
        new = dict(self.settings)
        if "voice" in fields:
            new["voice"] = _line(fields["voice"], "voice", MAX_ID_CHARS)
        if "response_format" in fields:
            if fields["response_format"] not in FORMATS:
                raise Refused(f"response_format must be one of {', '.join(FORMATS)}", "response_format")
            new["response_format"] = fields["response_format"]
        if "speed" in fields:
            speed = fields["speed"]
            number = isinstance(speed, int | float) and not isinstance(speed, bool)
            if not number or not math.isfinite(speed) or speed <= 0:
                raise Refused("speed must be a number above 0", "speed")
            new["speed"] = float(speed)
        if "instructions" in fields:
            new["instructions"] = _text(fields["instructions"], "instructions", MAX_INSTRUCTIONS_CHARS)
        if "seed" in fields:
            seed = fields["seed"]
            whole = isinstance(seed, int) and not isinstance(seed, bool)
            if seed is not None and not (whole and 0 <= seed <= MAX_SEED):
                raise Refused(f"seed must be an integer from 0 to {MAX_SEED}, or null", "seed")
            new["seed"] = seed
        self.settings = new

    def append(self, text: Any) -> None:
        text = _text(text, "text", MAX_BUFFERED_CHARS)
        if not self.settings["voice"]:
            raise Refused('no voice yet: send {"type": "session.update", "voice": ...} first', "voice")
        held = len(self.buffer) + self.pending_chars
        if held + len(text) > MAX_BUFFERED_CHARS:
            raise Refused(
                f"{held} characters wait to be spoken; at most {MAX_BUFFERED_CHARS}: this piece is dropped",
                "text",
                "buffer_full",
            )
        sentences, self.buffer = split_sentences(self.buffer + text)
        for sentence in sentences:
            self.queue(sentence)

    def queue(self, sentence: str) -> None:
        if not speakable(sentence):
            return
        self.numbered += 1
        self.pending_chars += len(sentence)
        self.pending.put_nowait(Segment(self.numbered, sentence, dict(self.settings)))

    # -- speaking --------------------------------------------------------------------------------
    async def speak_all(self) -> None:
        """Speak the sentences waiting, in order, until the end marker (None)."""
        try:
            while (segment := await self.pending.get()) is not None:
                self.pending_chars -= len(segment.text)
                self.speaking = segment
                await self.speak(segment)
                self.speaking = None
        except WebSocketDisconnect:
            return

    async def speak(self, segment: Segment) -> None:
        settings = segment.settings
        asked = SpeechBody.model_construct(input=segment.text, **settings)  # `update` checked the settings
        try:
            take = await asyncio.to_thread(
                self.service.synthesize_request, asked, f"{self.id}-{segment.number}"
            )
            self.service.check_queue()
        except ServiceError as exc:
            await self.error(str(exc), exc.param, exc.code, exc.status, segment=segment.number)
            return
        rate = self.service.sample_rate
        start = {"type": "audio.start", "segment": segment.number, "id": take.request_id}
        await self.send_json({**start, "text": segment.text, "sample_rate": rate})
        segment.take_id = take.request_id
        if settings["response_format"] == "wav":
            await self.send_bytes(wav_stream_header(rate))
        samples, status = 0, "failed"
        chunks = self.service.chunks(take)
        try:
            async for audio in chunks:
                await self.send_bytes(pcm16(audio))
                samples += len(audio)
            status = "completed"
        except WebSocketDisconnect:
            raise
        except ServiceError as exc:
            await self.error(str(exc), exc.param, exc.code, exc.status, segment=segment.number)
        except Exception as exc:  # noqa: BLE001 - the take failed; the connection goes on
            log.error("take %s failed: %s: %s", take.request_id, type(exc).__name__, exc)
            await self.error(f"the take failed: {type(exc).__name__}", status=500, segment=segment.number)
        finally:
            await chunks.aclose()  # cancels a take still running
        done = {"type": "audio.done", "segment": segment.number, "id": take.request_id, "status": status}
        await self.send_json({**done, "duration_s": round(samples / rate, 3)})

    async def stop_speaking(self) -> Segment | None:
        """Stop the speaker task (its take cancelled); the segment it was speaking, if it had begun."""
        segment = self.speaking
        if self.speaker is not None:
            self.speaker.cancel()
            await asyncio.gather(self.speaker, return_exceptions=True)
        self.speaking = None
        return segment if segment is not None and segment.started else None

    async def cancel(self) -> None:
        """Stop the take speaking now and drop everything waiting; the session goes on."""
        dropped = []
        self.buffer = ""
        while not self.pending.empty():
            waiting = self.pending.get_nowait()
            if waiting is not None:
                dropped.append(waiting.number)
        self.pending_chars = 0
        stopped = await self.stop_speaking()
        if stopped is not None:
            done = {"type": "audio.done", "segment": stopped.number, "id": stopped.take_id}
            await self.send_json({**done, "status": "cancelled"})
        self.speaker = asyncio.create_task(self.speak_all())
        stopped_numbers = [stopped.number] if stopped is not None else []
        await self.send_json({"type": "cancelled", "segments": stopped_numbers + dropped})

    async def close(self) -> None:
        """Speak what was sent (the buffer too), then close the connection."""
        rest, self.buffer = self.buffer, ""
        self.queue(rest.strip())
        self.pending.put_nowait(None)
        if self.speaker is not None:
            await self.speaker
        await self.send_json({"type": "session.closed"})
        await self.ws.close(1000)


def _text(value: Any, param: str, limit: int) -> str:
    if not isinstance(value, str):
        raise Refused(f"{param} must be a string", param)
    if len(value) > limit:
        raise Refused(f"{param} is {len(value)} characters; at most {limit}", param)
    try:
        return check_text(value)
    except ValueError as exc:
        raise Refused(f"{param} {exc}", param) from None


def _line(value: Any, param: str, limit: int) -> str:
    text = _text(value, param, limit)
    if any(char in text for char in "\t\n\r"):
        raise Refused(f"{param} must be one line", param)
    return text.strip()


@router.websocket("/v1/audio/speech/stream")
async def speech_stream(websocket: WebSocket) -> None:
    await Session(websocket, websocket.app.state.service).run()
