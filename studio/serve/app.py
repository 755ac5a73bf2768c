"""The ASGI app: the routes of `studio.serve.api_router` behind the plain ASGI `Guard` (API key on every route
but ``/health``, limits on the bytes read, request ids, every answer counted by status), every refusal in
OpenAI's error shape (``{"error": {"message", "type", "param", "code"}}``) naming the field at fault."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException

from studio.serve import realtime
from studio.serve.api_router import CPU_JOBS, router
from studio.serve.guard import Guard
from studio.serve.protocol import ServiceError, error_response
from studio.serve.service import SpeechService


def create_app(
    service: SpeechService, api_key: str | None = None, metrics_text: Callable[[], bytes] | None = None
) -> FastAPI:
    """The API of ``service``; ``metrics_text`` makes ``/metrics`` (default: this process's metrics)."""
    app = FastAPI(title="CosyVoice Studio speech API", docs_url=None, redoc_url=None)
    app.state.service = service
    app.state.metrics_text = metrics_text or service.metrics.text
    app.state.cpu_jobs = asyncio.Semaphore(CPU_JOBS)
    served_by = f"{socket.gethostname()}:{os.getpid()}"  # which process (Ray Serve replica) answered
    app.add_middleware(Guard, api_key=api_key, served_by=served_by, count=service.metrics.response)
    app.include_router(router)
    app.include_router(realtime.router)  # the WebSocket /v1/audio/speech/stream

    app.add_exception_handler(ServiceError, service_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid_body)
    return app


async def service_error(_request: Request, exc: ServiceError):
    """A request the service refused, in the API's error shape."""
    return error_response(exc.status, str(exc), exc.param, exc.headers, exc.code)


async def http_error(_request: Request, exc: HTTPException):
    """Unknown routes, wrong methods, bodies over their limit: in the API's error shape."""
    return error_response(exc.status_code, str(exc.detail), headers=exc.headers)


async def invalid_body(_request: Request, exc: RequestValidationError):
    """A field of the wrong type or range, in the API's error shape, naming the field."""
    first = (exc.errors() or [{}])[0]
    where = [str(part) for part in first.get("loc", ()) if part != "body"]
    param = ".".join(where) if first.get("type") != "json_invalid" else None
    message = str(first.get("msg", "is not valid")).removeprefix("Value error, ")
    return error_response(422, f"{param or 'the request body'}: {message}", param or None)
