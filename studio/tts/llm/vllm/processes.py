"""vLLM's own processes (engine cores and their workers): found once started, reaped at shutdown."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def engine_processes(engine: Any) -> list[Any]:
    """psutil handles of the processes vLLM started for `engine` (engine cores and their workers)."""
    manager = getattr(
        getattr(getattr(engine, "engine_core", None), "resources", None), "engine_manager", None
    )
    pids = [p.pid for p in getattr(manager, "processes", None) or () if getattr(p, "pid", None)]
    if not pids:
        return []
    try:
        import psutil  # a vLLM dependency
    except ImportError:
        return []
    found: list[Any] = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            found += [proc, *proc.children(recursive=True)]
        except psutil.Error:
            continue
    return found


def reap_processes(processes: list[Any], timeout: float) -> None:
    """Wait up to `timeout` s for `processes` (psutil handles) to end, then kill the rest."""
    if not processes:
        return
    import psutil

    _gone, alive = psutil.wait_procs(processes, timeout=timeout)
    for proc in alive:
        log.warning("vLLM process %d did not exit; killing it", proc.pid)
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=5)
