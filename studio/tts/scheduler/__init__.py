"""The flow's chunk scheduler: one thread runs the streamed chunks of every take (chunk_scheduler.py), what
travels through it (jobs.py), a tick's GPU work (gpu_work.py), the wait for takes started together
(gather.py), graph captures while idle (idle_capture.py), and each flow's one scheduler (per_flow.py)."""

from studio.tts.scheduler.chunk_scheduler import ChunkScheduler
from studio.tts.scheduler.idle_capture import IDLE_CAPTURE_SECONDS
from studio.tts.scheduler.jobs import ChunkCancelled, ChunkJob
from studio.tts.scheduler.per_flow import close_scheduler, scheduler_for, scheduler_stats

__all__ = [
    "IDLE_CAPTURE_SECONDS",
    "ChunkCancelled",
    "ChunkJob",
    "ChunkScheduler",
    "close_scheduler",
    "scheduler_for",
    "scheduler_stats",
]
