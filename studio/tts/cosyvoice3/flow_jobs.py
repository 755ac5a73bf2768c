"""What a CosyVoice3 take hands `DiTFlowScheduler`: one streamed flow call (`FlowJob`), the call's answer when
it also carries the take's vocoder (`VocodedChunk`), and the error a call cancelled while queued raises."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch

from studio.tts.cosyvoice3.flow_stream import DiTFlowStream
from studio.tts.cosyvoice3.hift_stream import CausalHiftStream
from studio.tts.device.cuda_graphs import autocast_dtype


class FlowCallCancelled(Exception):
    """The take was cancelled while its flow call waited: the call never ran (`DiTWavStream` raises it on
    as CosyVoice2's `ChunkCancelled`, which the pipeline reads as the take's end)."""


@dataclass
class VocodedChunk:
    """What `render_speech` returns: the chunk's new samples and the worker's time on its vocoder batch."""

    speech: torch.Tensor  # [1, S] float32 on the vocoder's device
    hift_seconds: float  # the batched push that made them (all of its takes), on the host's clock


@dataclass(eq=False)  # a call is itself: the queue finds and removes it by identity
class FlowJob:
    stream: DiTFlowStream
    tokens: torch.Tensor
    finalize: bool
    autocast: tuple  # (device type, autocast dtype or None where off): the caller's; the worker runs under it
    first: bool  # the take's first chunk: nothing of it plays yet
    deadline: float  # monotonic seconds by which the take needs this call's audio
    seq: int  # arrival order
    cancel: threading.Event | None = None
    began: float = 0.0  # when the call's take started (`expect`; else when the call came)
    submitted: float = 0.0  # when the call came
    vocoder: CausalHiftStream | None = None  # set: the worker pushes the mel through it (`render_speech`)
    shape_mel: Callable[[torch.Tensor], torch.Tensor] | None = None  # the mel before the vocoder pushes it
    result: Future = field(default_factory=Future)
    outcome: tuple[bool, object] | None = None  # (ok, value or error), handed over by `settle`

    def succeed(self, value: object) -> None:
        self.outcome = (True, value)

    def fail(self, error: BaseException) -> None:
        self.outcome = (False, error)

    def settle(self) -> None:
        """Hand the outcome to the waiting take (after the worker gave the LM's turn back)."""
        ok, value = self.outcome or (False, RuntimeError("the flow scheduler failed while running this call"))
        if ok:
            self.result.set_result(value)
        else:
            self.result.set_exception(value)

    @property
    def group(self) -> tuple:
        return (id(self.stream.flow), self.stream.n_timesteps, self.autocast)

    @property
    def urgency(self) -> tuple:
        """Sort key, most urgent first: first chunks, then the earliest deadline, then arrival."""
        return (not self.first, self.deadline, self.seq)

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()


def caller_autocast(device: torch.device) -> tuple:
    return (device.type, autocast_dtype(device.type))
