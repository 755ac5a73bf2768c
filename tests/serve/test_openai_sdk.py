"""The speech API through the official OpenAI Python SDK, as its users call it: whole files, a streamed
answer whose first bytes come with the first chunk (no field OpenAI lacks), OpenAI's server-sent events,
OpenAI's 400 for an unknown voice, voice aliases, voice objects, ``/v1/models`` and ``/v1/audio/voices``."""

from __future__ import annotations

import base64
import io
import json
import time
from typing import Literal

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from pydantic import BaseModel

from tests.serve.conftest import API_KEY, register_voice

RATE = 24000
LONG = "A streamed take on a slow card, long enough for several chunks to leave one after another."


class Usage(BaseModel):
    input_tokens: int
    output_tokens: int
    total_tokens: int


class SpeechAudioDeltaEvent(BaseModel):
    """OpenAI's ``speech.audio.delta`` (API reference, "Speech streaming events")."""

    type: Literal["speech.audio.delta"]
    audio: str  # base64


class SpeechAudioDoneEvent(BaseModel):
    type: Literal["speech.audio.done"]
    usage: Usage


@pytest.fixture(scope="module")
def voice(server):
    return register_voice(server[0], "Narrator SDK")


@pytest.fixture
def sdk(server):
    with openai.OpenAI(base_url=f"{server[0]}/v1", api_key=API_KEY, max_retries=0, timeout=120) as client:
        yield client


def test_create_gives_a_whole_wav(sdk, voice):
    answer = sdk.audio.speech.create(model="tts-1", voice=voice, input="Hello from the SDK.")
    audio, rate = sf.read(io.BytesIO(answer.content), dtype="float32")
    assert rate == RATE and audio.size > RATE // 4 and np.isfinite(audio).all()


def test_a_streamed_answer_begins_with_the_first_chunk(sdk, voice, paced_engine):
    started = time.perf_counter()
    first = None
    pieces = []
    with sdk.audio.speech.with_streaming_response.create(
        model="tts-1", voice=voice, input=LONG, response_format="pcm"
    ) as answer:
        for piece in answer.iter_bytes():
            first = first if first is not None else time.perf_counter() - started
            pieces.append(piece)
    total = time.perf_counter() - started
    assert paced_engine[-1].chunks >= 4, paced_engine[-1]  # a take of several chunks
    ratio = first / total
    print(f"first byte {first:.2f} s of {total:.2f} s: {ratio:.2f}")
    assert ratio < 0.3, (first, total)
    data = b"".join(pieces)
    assert len(data) % 2 == 0 and np.abs(np.frombuffer(data, "<i2")).max() > 0


def test_sse_events_parse_as_openais(sdk, voice):
    with sdk.audio.speech.with_streaming_response.create(
        model="tts-1", voice=voice, input="Spoken as events.", response_format="pcm", stream_format="sse"
    ) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in answer.iter_lines() if line.startswith("data: ")]
    events = [json.loads(line.removeprefix("data: ")) for line in lines]
    deltas = [SpeechAudioDeltaEvent.model_validate(e) for e in events[:-1]]
    done = SpeechAudioDoneEvent.model_validate(events[-1])
    audio = b"".join(base64.b64decode(d.audio) for d in deltas)
    assert deltas and len(audio) % 2 == 0 and len(audio) > RATE // 4
    usage = done.usage
    assert usage.input_tokens == len("Spoken as events.") and usage.output_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


def test_sse_of_a_whole_file_format_is_the_file_in_events(sdk, voice):
    with sdk.audio.speech.with_streaming_response.create(
        model="tts-1", voice=voice, input="A FLAC file.", response_format="flac", stream_format="sse"
    ) as answer:
        events = [json.loads(x[6:]) for x in answer.iter_lines() if x.startswith("data: ")]
    data = b"".join(base64.b64decode(SpeechAudioDeltaEvent.model_validate(e).audio) for e in events[:-1])
    assert sf.read(io.BytesIO(data))[0].size > 0 and events[-1]["type"] == "speech.audio.done"


def test_a_take_failing_mid_sse_sends_an_error_event(client, voice, failing_after_a_chunk):
    body = {"input": LONG, "voice": voice, "response_format": "pcm", "stream_format": "sse"}
    answer = client.post("/v1/audio/speech", json=body)
    events = [json.loads(x[6:]) for x in answer.text.splitlines() if x.startswith("data: ")]
    assert answer.status_code == 200 and events[0]["type"] == "speech.audio.delta"
    assert events[-1]["type"] == "error" and "card fell off" in events[-1]["error"]["message"]
    assert events[-1]["error"]["type"] == "server_error"


def test_an_unknown_voice_is_openais_400_naming_the_voices(sdk, voice):
    with pytest.raises(openai.BadRequestError) as raised:
        sdk.audio.speech.create(model="tts-1", voice="nova", input="Hello.")
    error = raised.value.body
    assert raised.value.status_code == 400 and error["param"] == "voice"
    assert error["type"] == "invalid_request_error" and voice in error["message"]


def test_an_alias_and_a_voice_object_speak(sdk, server, voice, monkeypatch):
    monkeypatch.setitem(server[1].voice_aliases, "alloy", voice)
    aliased = sdk.audio.speech.create(model="tts-1", voice="alloy", input="Aliased.", response_format="pcm")
    assert len(aliased.content) > RATE // 4
    by_id = sdk.audio.speech.create(model="tts-1", voice={"id": voice}, input="By id.", response_format="pcm")
    assert len(by_id.content) > RATE // 4
    listed = {v["id"]: v["name"] for v in sdk.get("/audio/voices", cast_to=httpx.Response).json()["voices"]}
    assert listed[voice] == "Narrator SDK" and voice in listed["alloy"]


def test_models_and_audio_voices_answer_in_openais_shapes(sdk, server, voice):
    models = sdk.models.list()
    assert [m.id for m in models.data] == [server[1].model_name] and models.data[0].object == "model"
    assert models.data[0].owned_by and isinstance(models.data[0].created, int)
    assert sdk.models.retrieve(server[1].model_name) == models.data[0]
    with pytest.raises(openai.NotFoundError) as missing:
        sdk.models.retrieve("gpt-4o-mini-tts")
    assert (
        missing.value.body["code"] == "model_not_found" and "gpt-4o-mini-tts" in missing.value.body["message"]
    )
    voices = httpx.get(f"{server[0]}/v1/audio/voices", headers={"Authorization": f"Bearer {API_KEY}"}).json()
    assert {"id": voice, "name": "Narrator SDK"} in voices["data"] and voices["voices"] == voices["data"]


def test_vllm_omnis_fields_drive_a_take(client):
    from tests.serve.conftest import wav_bytes

    reference = "data:audio/wav;base64," + base64.b64encode(wav_bytes(3.0)).decode()
    body = {"input": "Cloned.", "ref_audio": reference, "ref_text": "A calm voice.", "task_type": "Base"}
    body |= {"language": "English", "response_format": "pcm", "stream": False}
    answer = client.post("/v1/audio/speech", json=body)
    assert answer.status_code == 200 and len(answer.content) > RATE // 4, answer.text
