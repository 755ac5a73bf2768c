"""Cancel a route's work when its client disconnects: the handler runs as a task beside one that waits for
``http.disconnect`` on the request's ``receive``; whichever ends first cancels the other. This needs plain ASGI
middleware in front (`studio.serve.guard`): ``@app.middleware("http")`` hides the disconnect from the route."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

CLIENT_CLOSED = 499  # nginx's status for "the client closed the connection"; nobody reads it


async def _disconnected(request: Request) -> None:
    """Return when the client has gone (the body was read already: only ``http.disconnect`` is left)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def with_cancellation(handler: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Wrap a FastAPI route that takes a `Request` argument: a disconnect cancels the running handler (its
    ``CancelledError`` runs its cleanup, e.g. cancels a take) and answers 499."""

    @functools.wraps(handler)
    async def wrapper(*args, **kwargs):
        request = next(a for a in (*args, *kwargs.values()) if isinstance(a, Request))
        work = asyncio.ensure_future(handler(*args, **kwargs))
        watch = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (work, watch):
                if not task.done():
                    task.cancel()
            await asyncio.gather(work, watch, return_exceptions=True)
        if work.cancelled():
            return Response(status_code=CLIENT_CLOSED)
        return work.result()

    return wrapper
