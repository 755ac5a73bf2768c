"""The plain ASGI guard alone (no server, no model): it stops reading a body at its limit, whatever the
headers say, and a fault after the answer began is raised on (the server then aborts the connection)."""

from __future__ import annotations

import asyncio

import pytest

from studio.serve.guard import MAX_JSON_BYTES, Guard


def _run(app, path="/v1/audio/speech", chunks=64, chunk=1 << 20, headers=()):
    received, sent, statuses = [], [], []

    async def receive():
        received.append(len(received))
        more = len(received) < chunks
        return {"type": "http.request", "body": b" " * chunk, "more_body": more}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": path, "headers": list(headers), "method": "POST"}
    guard = Guard(app, api_key=None, served_by="here", count=statuses.append)
    asyncio.run(guard(scope, receive, send))
    return received, sent, statuses


async def _reads_everything(scope, receive, send):
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def test_a_chunked_body_is_cut_off_at_the_limit_while_it_streams_in():
    received, sent, statuses = _run(_reads_everything)
    assert len(received) == MAX_JSON_BYTES // (1 << 20) + 1  # stopped at the first chunk over the limit
    assert sent[0]["status"] == 413 and statuses == [413]
    assert (b"x-served-by", b"here") in sent[0]["headers"]


def test_a_declared_length_over_the_limit_is_refused_before_reading():
    received, sent, _ = _run(_reads_everything, headers=[(b"content-length", b"99999999")])
    assert received == [] and sent[0]["status"] == 413


def test_a_fault_after_the_answer_began_is_raised_on():
    async def breaks_midway(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"RIFF", "more_body": True})
        raise RuntimeError("the take failed")

    with pytest.raises(RuntimeError):
        _run(breaks_midway, chunks=1, chunk=10)


def test_a_fault_before_the_answer_is_an_openai_shaped_500():
    async def breaks(scope, receive, send):
        raise RuntimeError("a bug")

    _received, sent, statuses = _run(breaks, chunks=1, chunk=10)
    assert statuses == [500] and b'"server_error"' in sent[1]["body"] and b"request id" in sent[1]["body"]
