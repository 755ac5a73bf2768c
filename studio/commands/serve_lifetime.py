"""How ``serve`` stops: SIGTERM (Docker, systemd, Kubernetes) and SIGINT (Ctrl+C) alike stop accepting
connections, let running takes finish for up to ``--drain-seconds``, cancel the rest, close the service
(vLLM's engine and its processes), end any process still starting (a model still loading) and exit 0.

uvicorn's own signal handling raises the signal again once it has shut down, so a SIGTERM ended the
process before the service was closed and vLLM's processes outlived it; this server keeps the handlers
and returns instead."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from typing import Any

from studio import lifetime

log = logging.getLogger("studio.serve")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def stopping_server(config: Any) -> Any:
    """A uvicorn Server that shuts down on SIGINT and SIGTERM and then returns (no signal raised again)."""
    import uvicorn

    class StoppingServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in STOP_SIGNALS}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

        def handle_exit(self, sig: int, frame: Any) -> None:
            if not self.should_exit:
                log.info(
                    "%s: draining for up to %.0f s",
                    signal.Signals(sig).name,
                    config.timeout_graceful_shutdown,
                )
            super().handle_exit(sig, frame)

    return StoppingServer(config)


def serve_until_stopped(app: Any, service: Any, host: str, port: int, drain_seconds: float) -> int:
    """Serve ``app`` until SIGINT or SIGTERM; drain, cancel, close ``service``, end our children, then
    end this process with status 0 (without the interpreter's teardown)."""
    import uvicorn

    config = uvicorn.Config(
        app, host=host, port=port, log_level="info", timeout_graceful_shutdown=max(0.0, drain_seconds)
    )
    try:
        stopping_server(config).run()
    finally:
        log.info("closing the service")
        service.close()  # cancels the takes still running, shuts vLLM's engine down
        lifetime.end_children()  # an engine core still starting (a model still loading)
        log.info("stopped")
    # A model still loading holds native threads the interpreter's teardown would abort on
    # ("terminate called without an active exception"); everything worth doing is done.
    lifetime.exit_now(0)
    return 0
