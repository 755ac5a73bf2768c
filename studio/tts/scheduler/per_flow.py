"""Each flow's one chunk scheduler: made on first use, closed with the model, its counters for bench."""

from __future__ import annotations

import threading

import torch

from studio.tts.scheduler.chunk_scheduler import ChunkScheduler

_schedulers_lock = threading.Lock()


def scheduler_for(flow: torch.nn.Module) -> ChunkScheduler:
    """The flow's one scheduler, made on first use."""
    with _schedulers_lock:
        scheduler = getattr(flow, "_chunk_scheduler", None)
        if scheduler is None or scheduler._closed:
            scheduler = ChunkScheduler(flow)
            flow._chunk_scheduler = scheduler
        return scheduler


def close_scheduler(flow: torch.nn.Module) -> None:
    """Stop the flow's scheduler thread once its queue is empty (the model shuts down: an idle capture still
    running at the interpreter's exit aborts the process)."""
    if (scheduler := getattr(flow, "_chunk_scheduler", None)) is not None:
        scheduler.close()


_STATS = (  # name in bench's JSON, attribute
    ("ticks", "ticks"),
    ("jobs", "jobs"),
    ("scheduler_host_s", "host_seconds"),
    ("scheduler_gpu_wait_s", "wait_seconds"),
    ("scheduler_idle_s", "idle_seconds"),
    ("tick_gpu_s", "gpu_seconds"),
    ("turn_ticks", "turn_ticks"),
    ("gather_s", "gather_seconds"),
    ("idle_captures", "idle_captures"),
)


def scheduler_stats(flow: torch.nn.Module) -> dict[str, float]:
    """Ticks, chunks and the thread's seconds (host, GPU wait, idle; GPU per tick); zeros before first use."""
    scheduler = getattr(flow, "_chunk_scheduler", None)
    return {name: 0 if scheduler is None else getattr(scheduler, attribute) for name, attribute in _STATS}
