"""The GPU work of one tick: the chunks' encoders (`begin`), their Euler solves, HiFT and copies to the host
(`launch`, which does not wait), and handing the audio to the takes once the GPU is done (`deliver`)."""

from __future__ import annotations

import logging
import time
from contextlib import suppress

import torch

from studio.tts.device.transfer import to_host_async
from studio.tts.device.vram_budget import freed_after_out_of_memory
from studio.tts.flow.streaming.solver import solver_for
from studio.tts.scheduler.jobs import ChunkJob, Tick

log = logging.getLogger(__name__)


def gpu_mark(flow: torch.nn.Module) -> torch.cuda.Event | None:
    """A timing event on the flow's CUDA stream (None on a CPU)."""
    device = next(flow.parameters()).device
    if device.type != "cuda":
        return None
    event = torch.cuda.Event(enable_timing=True)
    event.record(torch.cuda.current_stream(device))
    return event


@torch.inference_mode()
def begin(jobs: list[ChunkJob]) -> list[ChunkJob]:
    """The chunks' encoders, batched per precision; the jobs begun (one that fails gets its error).

    When a batch fails, its chunks begin again one by one, so only the culprit's take gets the error
    (a chunk begun again recomputes its take's flow from the first frame: its state was left unsure).
    """
    groups: dict[bool, list[ChunkJob]] = {}
    for job in jobs:
        groups.setdefault(job.stream.fp16, []).append(job)
    begun = []
    for group in groups.values():
        try:
            steps = group[0].stream.flow_begin_many([(job.stream, job.tokens, job.finalize) for job in group])
        except Exception as exc:  # noqa: BLE001 - its take gets it, or the culprit is found below
            out_of_memory = freed_after_out_of_memory(exc)
            if len(group) == 1 and not out_of_memory:
                group[0].fail(exc)
            else:  # a lone chunk that ran out of memory begins once more, the allocator's cache given back
                log.warning("flow scheduler: a batch of %d encoders failed (%s); one by one",
                            len(group), type(exc).__name__)  # fmt: skip
                begun += [job for job in group if _begin_alone(job)]
            continue
        for job, step in zip(group, steps, strict=True):
            job.step = step
            begun.append(job)
    return begun


def _begin_alone(job: ChunkJob) -> bool:
    try:
        job.step = job.stream.flow_begin(job.tokens, job.finalize)
        return True
    except Exception as exc:  # noqa: BLE001 - this chunk's take gets it
        job.fail(exc)
        return False


@torch.inference_mode()
def launch(flow: torch.nn.Module, jobs: list[ChunkJob]) -> Tick:
    """Solve the chunks (batched per precision), then their HiFT and copies to the host; no wait."""
    groups: dict[bool, list] = {}
    for job in jobs:
        if job.step.request is not None:
            groups.setdefault(job.stream.fp16, []).append(job)
    solver = solver_for(flow.decoder)
    for group in groups.values():
        with group[0].stream.precision():
            solver.solve_many([job.step.request for job in group])
    mels = []
    for job in jobs:
        try:
            mels.append((job, job.stream.flow_end(job.step)))
        except Exception as exc:  # noqa: BLE001 - this chunk's take gets it
            job.fail(exc)
    started = time.monotonic()  # HiFT of chunks of one shape in one batch (`vocode_many`)
    try:
        vocoded = type(jobs[0].stream).vocode_many([(job.stream, mel, job.finalize) for job, mel in mels])
    except Exception as exc:  # noqa: BLE001 - (it answers each chunk itself) the tick's takes get it
        vocoded = [exc] * len(mels)
    seconds = (time.monotonic() - started) / max(1, len(mels))
    device = None
    for (job, _), speech in zip(mels, vocoded, strict=True):
        if isinstance(speech, Exception):
            job.fail(speech)
            continue
        job.hift_seconds = seconds
        if speech.is_cuda:
            device = speech.device
            job.speech = to_host_async(speech)
        else:
            job.speech = speech
    event = None if device is None else gpu_mark(flow)
    return Tick([job for job in jobs if not job.done.is_set()], event)


def deliver(tick: Tick) -> tuple[float, float]:
    """Wake the tick's takes once the GPU has finished it: (seconds waited for the GPU, the tick's GPU
    seconds from its first kernel to its last copy, 0 when unknown)."""
    waited = gpu = 0.0
    if tick.event is not None:
        started = time.monotonic()
        tick.event.synchronize()  # releases the interpreter lock while the GPU finishes
        waited = time.monotonic() - started
    for job in tick.jobs:
        job.done.set()
    if tick.start is not None and tick.event is not None:
        with suppress(RuntimeError):  # a counter: it must never fail the takes it describes
            gpu = tick.start.elapsed_time(tick.event) / 1000
    return waited, gpu
