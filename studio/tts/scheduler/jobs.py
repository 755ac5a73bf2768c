"""What travels through the chunk scheduler: a take's chunk (`ChunkJob`) and one tick of GPU work (`Tick`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch

from studio.tts.flow.streaming.incremental import FlowStep


class ChunkCancelled(Exception):
    """The take was cancelled while its chunk waited for the scheduler."""


@dataclass
class ChunkJob:
    """One take's chunk on its way through the scheduler."""

    stream: object  # the take's Token2WavStream
    tokens: list[int]
    finalize: bool
    deadline: float
    seq: int
    submitted: float
    first: bool = False  # the take's first chunk: nothing of it plays yet
    began: float = 0.0  # when the take started (`ChunkScheduler.expect`; else when the chunk came)
    done: threading.Event = field(default_factory=threading.Event)
    step: FlowStep | None = None
    speech: torch.Tensor | None = None  # on the host once done
    hift_seconds: float = 0.0
    error: BaseException | None = None

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.done.set()


@dataclass
class Tick:
    """The chunks launched together whose audio is still on its way to the host."""

    jobs: list[ChunkJob]
    event: torch.cuda.Event | None  # recorded after the tick's last copy to the host (CUDA only)
    start: torch.cuda.Event | None = None  # recorded before the tick's first kernel (CUDA only)
    turn: bool = False  # made first chunks with the GPU's turn: the LM waits until the tick is delivered

    def ready(self) -> bool:
        return self.event is None or self.event.query()
