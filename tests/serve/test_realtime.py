"""The realtime WebSocket ``/v1/audio/speech/stream`` through a real network client (`websockets`) against the
real server: sentences spoken in order as they complete, flush, cancel, close, the API key, a client that
leaves, and mistakes answered as error events on a connection that stays open."""

from __future__ import annotations

import json
import time

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from studio.serve.realtime import MAX_BUFFERED_CHARS, split_sentences
from tests.serve.conftest import API_KEY, register_voice

LONG = "This sentence is long enough to be interrupted well before it ends by itself, and then some more"


@pytest.fixture(scope="module")
def voice(server):
    return register_voice(server[0], "Talker")


def _open(base: str, key: str | None = API_KEY):
    url = base.replace("http://", "ws://") + "/v1/audio/speech/stream"
    headers = {"Authorization": f"Bearer {key}"} if key else None
    return connect(url, additional_headers=headers, open_timeout=30, max_size=None)


def _event(ws, timeout: float = 120) -> dict:
    """The next JSON event (binary frames skipped)."""
    while True:
        frame = ws.recv(timeout=timeout)
        if isinstance(frame, str):
            return json.loads(frame)


def _until(ws, kind: str, timeout: float = 120) -> tuple[list, dict]:
    """Every frame (decoded events and bytes) up to and with the first event of type ``kind``."""
    frames = []
    deadline = time.monotonic() + timeout
    while True:
        frame = ws.recv(timeout=max(0.1, deadline - time.monotonic()))
        frames.append(json.loads(frame) if isinstance(frame, str) else frame)
        if isinstance(frame, str) and frames[-1]["type"] == kind:
            return frames, frames[-1]


def _send(ws, **event) -> None:
    ws.send(json.dumps(event))


def _session(ws, voice: str, **settings) -> dict:
    created = _event(ws)
    assert created["type"] == "session.created"
    assert created["session"]["sample_rate"] == 24000 and created["session"]["encoding"] == "pcm_s16le"
    _send(ws, type="session.update", voice=voice, **settings)
    updated = _event(ws)
    assert updated["type"] == "session.updated" and updated["session"]["voice"] == voice
    return updated["session"]


def test_sentences_split_where_they_end():
    assert split_sentences("Hi there. How are") == (["Hi there."], " How are")
    assert split_sentences("It costs 3.") == ([], "It costs 3.")  # "3.5" may follow
    assert split_sentences("It costs 3.50 now! Ok") == (["It costs 3.50 now!"], " Ok")
    assert split_sentences("你好。今天\n好") == (["你好。", "今天"], "好")
    assert split_sentences('He said "go." Then') == (['He said "go."'], " Then")


def test_pieces_forming_two_sentences_are_spoken_in_order(server, voice):
    with _open(server[0]) as ws:
        _session(ws, voice)
        for piece in ("Hello there, my", " good friend. How are", " you today?"):
            _send(ws, type="input_text.append", text=piece)
        seen = []
        for expected in ("Hello there, my good friend.", "How are you today?"):
            frames, done = _until(ws, "audio.done")
            start = frames[0]
            assert start["type"] == "audio.start" and start["text"] == expected and start["id"]
            audio = [frame for frame in frames if isinstance(frame, bytes)]
            assert audio and all(len(frame) % 2 == 0 for frame in audio)  # 16-bit samples
            assert done["status"] == "completed" and done["id"] == start["id"]
            assert done["duration_s"] == pytest.approx(sum(map(len, audio)) / 2 / 24000, abs=1e-3)
            seen.append(start["segment"])
        assert seen == [1, 2]


def test_flush_speaks_an_unterminated_sentence_and_close_speaks_the_rest(server, voice):
    with _open(server[0]) as ws:
        _session(ws, voice, response_format="wav")
        _send(ws, type="input_text.append", text="No sentence end here")
        with pytest.raises(TimeoutError):
            ws.recv(timeout=1.0)  # nothing to say yet
        _send(ws, type="input_text.flush")
        frames, done = _until(ws, "audio.done")
        assert frames[0]["text"] == "No sentence end here" and done["status"] == "completed"
        assert frames[1][:4] == b"RIFF"  # response_format wav: a streamed WAV header first
        _send(ws, type="input_text.append", text="Goodbye then")
        _send(ws, type="close")
        frames, _closed = _until(ws, "session.closed")
        assert [f["text"] for f in frames if isinstance(f, dict) and f["type"] == "audio.start"] == [
            "Goodbye then"
        ]


def test_cancel_stops_the_take_and_the_connection_goes_on(server, voice, paced_engine):
    _base, service = server
    with _open(server[0]) as ws:
        _session(ws, voice)
        _send(ws, type="input_text.append", text=f"{LONG}. A second sentence waits. And a")
        start = _event(ws)
        assert start["type"] == "audio.start"
        assert isinstance(ws.recv(timeout=60), bytes)  # the take is speaking
        asked = time.monotonic()
        _send(ws, type="cancel")
        frames, cancelled = _until(ws, "cancelled", timeout=10)
        assert time.monotonic() - asked < 2.0
        done = [f for f in frames if isinstance(f, dict) and f["type"] == "audio.done"]
        assert done == [{"type": "audio.done", "segment": 1, "id": start["id"], "status": "cancelled"}]
        assert cancelled["segments"] == [1, 2]  # the one speaking and the one waiting; the buffer dropped
        deadline = time.monotonic() + 10
        while service.active and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not service.active
        with pytest.raises(TimeoutError):
            ws.recv(timeout=0.8)  # no stale audio after the cancel
        _send(ws, type="input_text.append", text="Still here.")
        frames, done = _until(ws, "audio.done")
        assert frames[0]["text"] == "Still here." and frames[0]["segment"] == 3
        assert done["status"] == "completed"


def test_a_client_that_leaves_mid_take_cancels_it(server, voice, paced_engine):
    _base, service = server
    with _open(server[0]) as ws:
        _session(ws, voice)
        _send(ws, type="input_text.append", text=f"{LONG}.")
        assert _event(ws)["type"] == "audio.start"
        assert isinstance(ws.recv(timeout=60), bytes)
        assert len(service.active) == 1
    deadline = time.monotonic() + 10
    while (service.active or not paced_engine) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not service.active and paced_engine[-1].cancelled


@pytest.mark.parametrize("key", [None, "wrong-key"])
def test_a_connection_without_the_key_is_refused(server, key):
    with pytest.raises(InvalidStatus) as refused:
        _open(server[0], key)
    assert refused.value.response.status_code == 401
    assert json.loads(refused.value.response.body)["error"]["type"] == "authentication_error"


def test_mistakes_are_error_events_and_the_connection_stays_open(server, voice):
    with _open(server[0]) as ws:
        assert _event(ws)["type"] == "session.created"
        _send(ws, type="input_text.append", text="Who speaks?")
        assert _event(ws)["error"]["param"] == "voice"  # no voice yet
        ws.send("{not json")
        error = _event(ws)
        assert error["type"] == "error" and error["error"]["code"] == "invalid_json"
        _send(ws, type="speak.louder")
        error = _event(ws)["error"]
        assert error["param"] == "type" and "speak.louder" in error["message"]
        assert error["type"] == "invalid_request_error"
        ws.send(b"\x00\x01")
        assert _event(ws)["error"]["code"] == "invalid_frame"
        _send(ws, type="session.update", voice=voice, response_format="mp3")
        assert _event(ws)["error"]["param"] == "response_format"
        _send(ws, type="session.update", voice=voice, speed="fast")
        assert _event(ws)["error"]["param"] == "speed"
        _send(ws, type="session.update", voice=voice)
        assert _event(ws)["type"] == "session.updated"
        _send(ws, type="input_text.append", text="x" * (MAX_BUFFERED_CHARS - 10))
        _send(ws, type="input_text.append", text="y" * 20)
        assert _event(ws)["error"]["code"] == "buffer_full"
        _send(ws, type="cancel")
        assert _event(ws) == {"type": "cancelled", "segments": []}
        _send(ws, type="session.update", voice="nobody-here")
        assert _event(ws)["type"] == "session.updated"
        _send(ws, type="input_text.append", text="Unknown voice.")
        error = _event(ws)
        assert error["error"]["param"] == "voice" and error["segment"] == 1
        _send(ws, type="session.update", voice=voice)
        assert _event(ws)["type"] == "session.updated"
        _send(ws, type="input_text.append", text="Fine now.")
        frames, done = _until(ws, "audio.done")
        assert frames[0]["text"] == "Fine now." and done["status"] == "completed"
