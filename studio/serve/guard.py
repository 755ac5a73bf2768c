"""The plain ASGI middleware in front of every route: the API key, limits on the bytes actually read (a body,
chunked or not, is cut off with 413 as soon as it passes its limit), a request id and ``X-Served-By`` on every
answer, every answer counted by status, and our own faults answered as OpenAI-shaped 500s with the request id
logged. A fault after the answer started (a streamed take) is raised on, so the server aborts the connection:
the client sees a broken stream, never a clean end."""

from __future__ import annotations

import hmac
import logging
import uuid
from collections.abc import Callable

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from studio.serve.protocol import error_response

log = logging.getLogger("studio.serve")

MAX_JSON_BYTES = 4 << 20  # text, or text and a base64 reference recording (30 s of FLAC is ~0.7 MiB)
MAX_UPLOAD_BYTES = 25 << 20  # a reference recording to register as a voice
OPEN_PATHS = ("/health",)


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` once more bytes came than the route's limit (an HTTPException, so FastAPI's
    body parsing passes it on rather than calling it a malformed body)."""

    def __init__(self, limit: int):
        super().__init__(413, f"the request body is over {limit} bytes; at most {limit} here")


def body_limit(path: str) -> int:
    return MAX_UPLOAD_BYTES if path == "/v1/voices" else MAX_JSON_BYTES


class Guard:
    """Wraps the app (``app.add_middleware(Guard, ...)``); ``count(status)`` records each answer."""

    def __init__(self, app: ASGIApp, api_key: str | None, served_by: str, count: Callable[[int], None]):
        self.app, self.api_key, self.served_by, self.count = app, api_key, served_by, count
        self.expected = f"Bearer {api_key}".encode() if api_key else b""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = uuid.uuid4().hex[:16]
        scope.setdefault("state", {})["request_id"] = request_id
        started = False
        extra = [(b"x-served-by", self.served_by.encode()), (b"x-request-id", request_id.encode())]

        async def answer(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                names = {name.lower() for name, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []), *(h for h in extra if h[0] not in names)]
                self.count(message["status"])
            await send(message)

        headers = dict(scope.get("headers") or [])
        if scope["path"] not in OPEN_PATHS and self.api_key:
            given = headers.get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                refusal = error_response(401, "missing or wrong API key: send Authorization: Bearer KEY")
                await refusal(scope, receive, answer)
                return
        limit = body_limit(scope["path"])
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            await error_response(413, BodyTooLarge(limit).detail)(scope, receive, answer)
            return
        read = 0

        async def limited() -> Message:
            nonlocal read
            message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                if read > limit:
                    raise BodyTooLarge(limit)
            return message

        try:
            await self.app(scope, limited, answer)
        except BodyTooLarge as exc:
            if started:
                raise
            await error_response(413, exc.detail)(scope, receive, answer)
        except Exception:
            if started:
                log.exception(
                    "request %s failed after its answer began; the connection is aborted", request_id
                )
                raise
            log.exception("request %s failed (a fault of the server)", request_id)
            message = f"the server failed on this request (request id {request_id}); it is logged"
            await error_response(500, message)(scope, receive, answer)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A WebSocket needs the key as HTTP does, on its upgrade; refused before the app sees it: a 401 in
        the API's shape where the server can answer the upgrade so, else a close (sent as a 403)."""
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        if not self.api_key or hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        self.count(401)
        if "websocket.http.response" in scope.get("extensions", {}):
            refusal = error_response(401, "missing or wrong API key: send Authorization: Bearer KEY")
            await refusal(scope, receive, send)
        else:
            await send({"type": "websocket.close", "code": 1008})
