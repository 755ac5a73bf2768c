"""Start callables on threads while a solver or scheduler is paused, so that one batch sees them all."""

from __future__ import annotations

import threading
import time


def queue_while_paused(holder, work: list, expect: int | None = None) -> list[BaseException]:
    """Run each callable on its own thread while `holder.paused()`; release once `expect` (default: all)
    have queued, join them, and return what they raised. `holder` is an EstimatorSolver or ChunkScheduler."""
    errors: list[BaseException] = []

    def guarded(fn) -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - the test reads them
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(fn,)) for fn in work]
    with holder.paused():
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        wanted = len(work) if expect is None else expect
        while holder.queued() < wanted and time.monotonic() < deadline and not errors:
            time.sleep(0.005)
    for thread in threads:
        thread.join(timeout=120)
    return errors
