"""Aliases kept in the voice library (OpenAI's ``alloy``...) through the real server and the official OpenAI
SDK: set by ``PATCH /v1/voices/{id}`` or with ``POST /v1/voices``, spoken, listed, refused when taken."""

from __future__ import annotations

import openai
import pytest

from studio.voices import VoiceLibrary
from tests.serve.conftest import API_KEY, register_voice, wav_bytes

RATE = 24000


@pytest.fixture(scope="module")
def voices(server):
    base = server[0]
    return register_voice(base, "Alias Narrator"), register_voice(base, "Alias Second")


@pytest.fixture
def sdk(server):
    with openai.OpenAI(base_url=f"{server[0]}/v1", api_key=API_KEY, max_retries=0, timeout=120) as client:
        yield client


def test_a_patched_alias_speaks_through_the_sdk_and_persists(sdk, client, server, voices):
    narrator, _second = voices
    patched = client.patch(f"/v1/voices/{narrator}", json={"aliases": ["alloy", "Nova"]})
    assert patched.status_code == 200, patched.text
    assert patched.json()["aliases"] == ["alloy", "nova"]
    for name in ("alloy", "ALLOY", "nova"):
        spoken = sdk.audio.speech.create(model="tts-1", voice=name, input="Aliased.", response_format="pcm")
        assert len(spoken.content) > RATE // 4
    assert VoiceLibrary(server[1].voices.folder).by_alias("Alloy").slug == narrator  # on disk


def test_aliases_are_listed(client, voices):
    narrator, _second = voices
    assert client.patch(f"/v1/voices/{narrator}", json={"aliases": ["shimmer"]}).status_code == 200
    listed = {v["id"]: v for v in client.get("/v1/voices").json()["data"]}
    assert listed[narrator]["aliases"] == ["shimmer"]
    audio = {v["id"]: v["name"] for v in client.get("/v1/audio/voices").json()["voices"]}
    assert audio["shimmer"] == f"shimmer ({narrator})"
    unknown = client.post("/v1/audio/speech", json={"input": "Hi.", "voice": "onyx"})
    assert unknown.status_code == 400 and f"shimmer ({narrator})" in unknown.json()["error"]["message"]


def test_a_taken_alias_is_a_409(sdk, client, voices):
    narrator, second = voices
    assert client.patch(f"/v1/voices/{narrator}", json={"aliases": ["echo"]}).status_code == 200
    for taken in ("echo", "ECHO", narrator):  # another voice's alias (any case), another voice's id
        answer = client.patch(f"/v1/voices/{second}", json={"aliases": [taken]})
        assert answer.status_code == 409, answer.text
        assert answer.json()["error"]["param"] == "aliases"
    with pytest.raises(openai.BadRequestError):  # the refused alias speaks with no voice
        sdk.audio.speech.create(model="tts-1", voice="fable", input="Hi.")


def test_unknown_ids_and_bad_aliases(client, voices):
    assert client.patch("/v1/voices/nobody", json={"aliases": ["ash"]}).status_code == 404
    for bad in ([""], ["x" * 101], ["a\x01b"], "ash"):
        answer = client.patch(f"/v1/voices/{voices[1]}", json={"aliases": bad})
        assert answer.status_code == 422, (bad, answer.text)
        assert answer.json()["error"]["type"] == "invalid_request_error"


def test_a_voice_posted_with_aliases(sdk, server, client):
    made = client.post(
        "/v1/voices",
        data={"name": "Alias Posted", "transcript": "A calm voice.", "aliases": "coral, Sage"},
        files={"audio": ("voice.wav", wav_bytes(3.0))},
    )
    assert made.status_code == 201, made.text
    assert made.json()["aliases"] == ["coral", "sage"]
    spoken = sdk.audio.speech.create(model="tts-1", voice="sage", input="Posted.", response_format="pcm")
    assert len(spoken.content) > RATE // 4
    again = client.post(
        "/v1/voices",
        data={"name": "Alias Other", "aliases": "coral"},
        files={"audio": ("voice.wav", wav_bytes(3.0))},
    )
    assert again.status_code == 409, again.text
    assert "Alias Other" not in {v["name"] for v in client.get("/v1/voices").json()["data"]}


def test_an_alias_taken_while_the_voice_saves_fails_the_whole_post(server, client, monkeypatch):
    from studio.serve import api_router

    holder = register_voice(server[0], "Alias Holder")
    assert client.patch(f"/v1/voices/{holder}", json={"aliases": ["ballad"]}).status_code == 200
    monkeypatch.setattr(
        api_router, "_check_aliases", lambda *args: None
    )  # the alias is taken after the check
    raced = client.post(
        "/v1/voices",
        data={"name": "Alias Raced", "aliases": "ballad"},
        files={"audio": ("voice.wav", wav_bytes(3.0))},
    )
    assert raced.status_code == 409, raced.text
    assert "Alias Raced" not in {v["name"] for v in client.get("/v1/voices").json()["data"]}


def test_the_command_line_alias_wins(sdk, server, client, voices, monkeypatch):
    narrator, second = voices
    assert client.patch(f"/v1/voices/{narrator}", json={"aliases": ["verse"]}).status_code == 200
    monkeypatch.setitem(server[1].voice_aliases, "verse", second)
    assert server[1]._library_voice("Verse").slug == second
    assert server[1]._library_voice(narrator).slug == narrator  # an exact id before any alias
