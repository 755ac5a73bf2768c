"""The engine's pipes to the studio are closed in processes forked from it (vLLM's engine core)."""

from __future__ import annotations

import multiprocessing
import os


def _child(result) -> None:  # in a spawned process: its fork hooks do not reach the test process
    import logging

    from studio.engine.hygiene import keep_from_forks

    requests, _studio_end = multiprocessing.Pipe(duplex=False)
    logging.getLogger().addHandler(logging.NullHandler())
    keep_from_forks(requests)
    pid = os.fork()
    if pid == 0:  # the forked process: the pipe is closed here, the log handler gone
        try:
            os.fstat(requests.fileno())
            code = 1
        except OSError:
            code = (
                0 if not any(isinstance(h, logging.NullHandler) for h in logging.getLogger().handlers) else 2
            )
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    os.fstat(requests.fileno())  # still open here
    result.put(os.waitstatus_to_exitcode(status))


def test_a_forked_child_holds_neither_the_studios_pipes_nor_its_log():
    context = multiprocessing.get_context("spawn")
    result = context.Queue()
    process = context.Process(target=_child, args=(result,))
    process.start()
    code = result.get(timeout=120)
    process.join(30)
    assert code == 0 and process.exitcode == 0
