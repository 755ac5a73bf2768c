"""One thread for the GPU work of every streamed chunk: flow encoder, batched Euler solve, HiFT.

`ChunkScheduler` is the flow's one worker, as vLLM's engine is the LM's: a take hands it a chunk (`render`)
and waits; each tick

1. takes the queued chunks, most urgent first (earliest deadline: a take's first chunk is due when it is
   asked for, a later one when the audio handed out so far would have played; ties in arrival order), at
   most `max_jobs` of them;
2. runs their encoders, as one batch over each take's whole token prefix (batched_encode.py;
   ``STUDIO_FLOW_BATCH_ENCODER=0``: one incremental encoder per chunk), while the GPU still works on the
   previous tick;
3. hands over the previous tick's audio once the GPU is done with it;
4. solves all of the new chunks' Euler steps in as few batches as the solver's budget allows, then runs
   their HiFT and starts the copies of their audio to the host, and does not wait for them (gpu_work.py).

Each take's encoder and HiFT would otherwise launch kernels beside the other takes' (all on one CUDA
stream, so each take's host wait sits behind everyone's kernels), and its Euler solve would join whatever
batch the solver happened to be running.

It never waits while a chunk is queued and the GPU is idle, but for one case: a tick with first chunks may
wait a few milliseconds for the first chunks of takes started together with them (gather.py). A tick that
makes first chunks has the GPU to itself when the LM decodes for no other take: vLLM's LM steps wait until
the tick is done (tts/device/flow_turn.py) instead of time-slicing the GPU with it. A chunk whose take is
cancelled while it waits leaves the queue (`ChunkCancelled`); a chunk that fails gets its own error, and the
others in its tick go on (a failed batch is solved again chunk by chunk). ``STUDIO_FLOW_SCHEDULER=0`` turns
it off.

While it is idle (nothing queued or on the GPU, no take waiting for its first chunk, for
`IDLE_CAPTURE_SECONDS`) it captures, one at a time, the CUDA graphs of shapes that ran eagerly once
(`cuda_graphs.capture_one_pending`), so that their capture (0.2-0.5 s for a solve on an H200) is not paid
by the next take that meets them.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import weakref
from collections import deque
from contextlib import contextmanager

import torch

from studio import envs
from studio.tts.device import flow_turn
from studio.tts.device.vram_budget import freed_after_out_of_memory
from studio.tts.flow.streaming.solver import DEFAULT_MAX_BATCH
from studio.tts.scheduler import gather, gpu_work
from studio.tts.scheduler.idle_capture import wait_or_capture
from studio.tts.scheduler.jobs import ChunkCancelled, ChunkJob, Tick

log = logging.getLogger(__name__)

CANCEL_POLL_SECONDS = 0.02
GPU_POLL_SECONDS = 0.0005


class ChunkScheduler:
    """Runs the streamed chunks of all takes of one flow (and its HiFT) on one thread, see the module."""

    def __init__(self, flow: torch.nn.Module, max_jobs: int | None = None):
        self.flow = flow
        self.max_jobs = int(max_jobs or envs.FLOW_MAX_BATCH.count() or DEFAULT_MAX_BATCH)
        if self.max_jobs < 1:
            raise ValueError(f"{envs.FLOW_MAX_BATCH.name} must be at least 1")
        self._queue: list[ChunkJob] = []
        self._condition = threading.Condition()
        self._seq = itertools.count()
        self._paused = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self.ticks = 0  # ticks run, and chunks served (batching shows as jobs > ticks)
        self.jobs = 0
        # where the thread's time goes: launching work, waiting for the GPU, idle; and the GPU's time per
        # tick (first kernel to last copy, time-sliced waits included): host-bound or GPU-bound at a glance
        self.host_seconds = self.wait_seconds = self.idle_seconds = self.gpu_seconds = 0.0
        self.turn_ticks = 0  # ticks for which the LM waited (first chunks, and no other take needed the LM)
        self.gather_seconds = 0.0  # waited for the first chunks of takes started together
        gather_ms = envs.FLOW_GATHER_MS.number()
        self.gather_window = max(0.0, (gather.DEFAULT_GATHER_MS if gather_ms is None else gather_ms) / 1000)
        self._expected: gather.Expected = {}
        self.order: deque[int] = deque(maxlen=1024)  # `seq` of the chunks in the order taken (recent)
        self.idle_captures = 0  # CUDA graphs captured while idle
        self._last_work = time.monotonic()

    # -- the take's side --------------------------------------------------------------------------
    def expect(self, stream) -> None:
        """A take started: its first chunk will come (ticks with first chunks may wait for it, see module)."""
        with self._condition:
            self._expected[id(stream)] = (weakref.ref(stream), time.monotonic())
            self._condition.notify_all()  # an idle thread re-reads what it may do meanwhile

    def forget(self, stream) -> None:
        """The take ended (or its first chunk came): no tick waits for it."""
        with self._condition:
            if self._expected.pop(id(stream), None) is not None:
                self._condition.notify_all()

    def render(self, stream, tokens: list[int], finalize: bool) -> tuple[torch.Tensor, float, float]:
        """(speech [1, N] float32 on the host, seconds of flow incl. waiting, seconds of HiFT launches)."""
        now = time.monotonic()
        job = ChunkJob(
            stream,
            list(tokens),
            finalize,
            stream.deadline(now),
            next(self._seq),
            now,
            first=stream.first_pending,
        )
        with self._condition:
            if self._closed:
                raise RuntimeError("the chunk scheduler was closed")
            expected = self._expected.pop(id(stream), None)
            job.began = now if expected is None else expected[1]
            self._queue.append(job)
            self._start()
            self._condition.notify_all()
        cancel = stream.cancel
        while not job.done.wait(CANCEL_POLL_SECONDS):
            if cancel is not None and cancel.is_set() and self._withdraw(job):
                raise ChunkCancelled("the take was cancelled")
        if job.error is not None:
            raise job.error
        took = time.monotonic() - job.submitted
        return job.speech, took - job.hift_seconds, job.hift_seconds

    def _withdraw(self, job: ChunkJob) -> bool:
        with self._condition:
            if job in self._queue:
                self._queue.remove(job)
                return True
        return False

    def queued(self) -> int:
        with self._condition:
            return len(self._queue)

    @contextmanager
    def paused(self):
        """Take no new chunk until the block ends (what queues meanwhile then goes by urgency)."""
        with self._condition:
            self._paused += 1
        try:
            yield self
        finally:
            with self._condition:
                self._paused -= 1
                self._condition.notify_all()

    def close(self) -> None:
        """Stop the thread once the queue is empty (new chunks are refused)."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)

    # -- the scheduler's thread -------------------------------------------------------------------
    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="flow-scheduler", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        inflight: Tick | None = None
        while True:
            asked = time.monotonic()
            with self._condition:
                while inflight is None and not self._takeable() and not self._closed:
                    self._wait_idle()
                idle_until = time.monotonic()
                while inflight is not None and not self._takeable() and not inflight.ready():
                    self._condition.wait(GPU_POLL_SECONDS)  # the GPU works; a new chunk may come
                if inflight is None and self._closed and not self._queue:
                    return
                gathered = self._gather(inflight)
                jobs = self._pick() if self._takeable() else []
            started = time.monotonic()
            self.idle_seconds += idle_until - asked
            self.wait_seconds += started - idle_until - gathered
            self.gather_seconds += gathered
            waited_before = self.wait_seconds
            first = sum(job.first for job in jobs)
            try:
                # before the tick's first kernel: the LM's next step waits (only the tick's takes need it)
                turn = bool(first) and flow_turn.hold(first)
                self.turn_ticks += turn
                start = gpu_work.gpu_mark(self.flow) if jobs else None
                if inflight is not None and inflight.ready():  # hand out finished audio at once
                    inflight = self._deliver(inflight)
                begun = gpu_work.begin(jobs)
                if inflight is not None:
                    inflight = self._deliver(inflight)
                if begun:
                    inflight = self._launch(begun)
                    inflight.start, inflight.turn = start, turn
            except BaseException as exc:  # noqa: BLE001 - no take may wait forever; the thread goes on
                log.exception("flow scheduler: a tick failed")
                freed_after_out_of_memory(exc)  # the next ticks allocate anew
                for job in jobs + ([] if inflight is None else inflight.jobs):
                    if not job.done.is_set():
                        job.fail(exc)
                inflight = None
            if inflight is None or not inflight.turn:  # the flow's turn ends with the tick that took it
                flow_turn.release()
            self._last_work = time.monotonic()
            self.host_seconds += time.monotonic() - started - (self.wait_seconds - waited_before)

    def _wait_idle(self) -> None:
        """Wait for work (lock held); meanwhile capture pending graphs, one per wake (idle_capture.py)."""
        self.idle_captures += wait_or_capture(self._condition, self._last_work, bool(self._expected))

    def _gather(self, inflight: Tick | None) -> float:
        """Seconds waited (lock held) for the first chunks of takes started with those queued (gather.py)."""
        firsts = [job for job in self._queue if job.first]
        if not firsts or self.gather_window <= 0 or self._paused:
            return 0.0
        started = time.monotonic()
        until = min(job.submitted for job in firsts) + self.gather_window
        while (left := until - time.monotonic()) > 0 and (inflight is None or not inflight.ready()):
            if not gather.worth_waiting(self._expected, firsts):
                break
            self._condition.wait(min(left, GPU_POLL_SECONDS * 4))
            firsts = [job for job in self._queue if job.first]
        return time.monotonic() - started

    def _takeable(self) -> bool:
        return bool(self._queue) and not self._paused

    def _pick(self) -> list[ChunkJob]:
        """The most urgent queued chunks (earliest deadline, then arrival), at most `max_jobs`."""
        self._queue.sort(key=lambda job: (job.deadline, job.seq))
        jobs, self._queue = self._queue[: self.max_jobs], self._queue[self.max_jobs :]
        self.order.extend(job.seq for job in jobs)
        return jobs

    def _launch(self, jobs: list[ChunkJob]) -> Tick:
        """The tick's solves, HiFT and copies to the host, launched (`gpu_work.launch`), counted."""
        tick = gpu_work.launch(self.flow, jobs)
        self.ticks += 1
        self.jobs += len(jobs)
        return tick

    def _deliver(self, tick: Tick) -> None:
        """Wake the tick's takes once the GPU has finished it (None: nothing is in flight any more)."""
        waited, gpu = gpu_work.deliver(tick)
        self.wait_seconds += waited
        self.gpu_seconds += gpu
