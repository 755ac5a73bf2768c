"""A fuzz run of the API (hypothesis) against a real server on the tiny model: a few hundred requests of
every shape (fields of any type, unprintable and invalid text, huge numbers, raw bytes, odd paths, voice
uploads that are not audio); none may get a 5xx or hang, and every refusal is in OpenAI's error shape."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.serve.conftest import API_KEY, register_voice, wav_bytes

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),  # JSON has neither
    st.text(max_size=12),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
TEXT = st.one_of(
    st.text(max_size=24),
    st.sampled_from(["Hello there.", "...!?", "\u0000", "\ud800 hi", "[3db] ok", "x" * 5000, "你好。"]),
)
SPEECH = st.fixed_dictionaries(
    {"input": TEXT},
    optional={
        "voice": st.one_of(st.sampled_from(["fuzz", "../../fuzz", "FUZZ", "fuzz!!", ""]), ANY),
        "response_format": st.one_of(st.sampled_from(["wav", "pcm", "flac", "mp3", "opus", "aiff"]), ANY),
        "stream": st.one_of(st.booleans(), ANY),
        "seed": st.one_of(st.sampled_from([0, 2**64 - 1, 2**64, -1]), ANY),
        "speed": st.one_of(st.sampled_from([0.5, 1.0, 2.0, 0, -1, 1e308]), ANY),
        "instructions": st.one_of(TEXT, ANY),
        "reference_audio": st.one_of(st.sampled_from(["", "!!", "UklGRg=="]), ANY),
        "reference_text": st.one_of(TEXT, ANY),
        "first_hop_tokens": st.one_of(st.integers(min_value=-5, max_value=20_000), ANY),
        "model": ANY,
    },
)


@pytest.fixture(scope="module")
def fuzz_voice(server):
    return register_voice(server[0], "Fuzz")


def _sound(answer: httpx.Response) -> None:
    assert answer.status_code < 500, (answer.status_code, answer.text[:300])
    if answer.status_code >= 400 and answer.status_code != 499:
        error = answer.json()["error"]
        assert {"message", "type", "param", "code"} <= set(error), error


@FUZZ
@given(body=SPEECH)
def test_speech_requests_of_any_shape(client, fuzz_voice, body):
    data = json.dumps(body, allow_nan=False).encode()  # ASCII: lone surrogates travel as escapes
    answer = client.post(
        "/v1/audio/speech", content=data, headers={"content-type": "application/json"}, timeout=60
    )
    _sound(answer)


@FUZZ
@given(
    method=st.sampled_from(["GET", "POST", "DELETE", "PUT"]),
    path=st.one_of(
        st.sampled_from(
            [
                "/v1/audio/speech",
                "/v1/voices",
                "/v1/voices/fuzz!!",
                "/v1/voices/..%2f..%2ffuzz",
                "/health",
                "/metrics",
                "/v1/models",
                "/v1/models/..%2fnope",
                "/",
            ]
        ),
        st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=20).map(
            lambda p: "/" + p
        ),
    ),
    content=st.one_of(st.binary(max_size=64), st.sampled_from([b"{", b"null", b"[]", b'{"input": 5}'])),
    keyed=st.booleans(),
)
def test_raw_requests_anywhere(server, method, path, content, keyed):
    base, _ = server
    headers = {
        "content-type": "application/json",
        **({"Authorization": f"Bearer {API_KEY}"} if keyed else {}),
    }
    try:
        answer = httpx.request(method, base + path, content=content, headers=headers, timeout=30)
    except httpx.InvalidURL:
        return
    _sound(answer)


@settings(FUZZ, max_examples=40)
@given(
    name=st.one_of(st.text(max_size=20), st.sampled_from(["a\u0000b", "n" * 200, "../x", "Fuzz"])),
    audio=st.one_of(st.binary(max_size=200), st.sampled_from([b"RIFF", b"fLaC", b"OggS", wav_bytes(3.0)])),
    transcript=st.text(max_size=20),
    overwrite=st.sampled_from(["true", "false", "maybe"]),
)
def test_voice_uploads_of_any_shape(client, name, audio, transcript, overwrite):
    fields = {"name": name, "transcript": transcript, "overwrite": overwrite}
    try:
        answer = client.post("/v1/voices", data=fields, files={"audio": ("a.wav", audio)}, timeout=60)
    except UnicodeEncodeError:  # a lone surrogate cannot even leave the client in a form
        return
    _sound(answer)
    if answer.status_code == 201:
        assert client.delete(f"/v1/voices/{answer.json()['id']}").status_code == 200
