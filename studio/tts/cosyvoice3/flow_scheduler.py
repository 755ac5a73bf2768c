"""One thread for the streamed flow calls of every CosyVoice3 take: calls queued together run as one batch.

A take's thread hands its call to `DiTFlowScheduler.render(stream, tokens, finalize)` and waits. The worker
takes everything queued when it wakes (at most `max_takes` calls, one per stream), groups the calls that
can share a solve (one flow module, Euler schedule and autocast setting), and runs each group as one
batched solve (`render_calls`, as `flow_batch.mel_many`); calls that arrive meanwhile make the next batch.
So takes whose chunks fall due at the same time share each Euler step's and block's matrix products, and
their kernels no longer interleave on the device.

When more calls are queued than `max_takes`, the most urgent go first, as in CosyVoice2's chunk scheduler:
takes with no audio out yet (their listeners wait for the first sound), then the earliest deadline (when the
audio a take handed out so far will have played), then arrival order. A call whose take is cancelled while it
waits leaves the queue without running and raises `FlowCallCancelled` (the take's stream raises it on as `ChunkCancelled`: the take ends quietly).
A batch that makes first chunks has the GPU to itself while the LM decodes for no other take: vLLM's LM
steps wait from its start to its end (`flow_turn.hold`, as CosyVoice2's ticks of first chunks).

A call made with `render_speech` also carries the take's vocoder stream: once the group's mels are solved,
each is shaped by the take's own function (its speed stretch) and the group's vocoder pushes run as one
batched push (`hift_batch.vocode_pushes`) on the worker, so the take gets its new samples, not its mel.

A call that is invalid on its own (closed stream, shrinking tokens, ...) fails alone, with the error `mel`
would raise, before its batch runs; a failure inside a batch's solve reaches every call of that batch (their
streams' states are then unknown: the takes should end). With `gather_seconds` > 0 the worker, once it has
a call, waits up to that long for more (until `max_takes` are queued) before it runs them. Takes announce
themselves (`expect`) when they start: a batch with first calls waits up to ``STUDIO_FLOW_GATHER_MS`` (20) for
the first calls of takes started no later than theirs (CosyVoice2's rule, `studio.tts.scheduler.gather`), since
one solve of their first chunks costs about what one take's does. While idle, the worker captures the CUDA graphs
of solve shapes that ran eagerly (`studio.tts.scheduler.idle_capture`, as CosyVoice2's scheduler does).
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager

import torch

from studio import envs
from studio.tts.cosyvoice3.flow_jobs import FlowCallCancelled, FlowJob, VocodedChunk, caller_autocast
from studio.tts.cosyvoice3.flow_stream import DiTFlowStream, FlowCall, render_calls
from studio.tts.cosyvoice3.hift_batch import HiftPush, vocode_pushes
from studio.tts.cosyvoice3.hift_stream import CausalHiftStream
from studio.tts.device import flow_turn
from studio.tts.scheduler import gather
from studio.tts.scheduler.idle_capture import wait_or_capture

DEFAULT_MAX_TAKES = 32  # as CosyVoice2's chunk scheduler (STUDIO_FLOW_MAX_BATCH)
CANCEL_POLL_SECONDS = 0.02  # how late a waiting take notices its cancel
GATHER_POLL_SECONDS = 0.002  # while gathering first calls: how often the worker re-reads who is still coming


class DiTFlowScheduler:
    """The worker thread that runs CosyVoice3 takes' flow calls in batches (started on first use)."""

    def __init__(self, max_takes: int | None = None, gather_seconds: float = 0.0):
        """max_takes: calls per batch (None: ``$STUDIO_FLOW_MAX_BATCH``, else 32)."""
        if max_takes is None:
            configured = envs.FLOW_MAX_BATCH.count()
            max_takes = DEFAULT_MAX_TAKES if configured is None else configured
        if max_takes < 1:
            raise ValueError(
                f"a flow scheduler needs max_takes >= 1 ({envs.FLOW_MAX_BATCH.name}), got {max_takes}"
            )
        self.max_takes = int(max_takes)
        self.gather_seconds = max(0.0, float(gather_seconds))
        # first calls wait up to this long for those of takes started with theirs (CosyVoice2's gather.py)
        gather_ms = envs.FLOW_GATHER_MS.number()
        self.gather_window = max(0.0, (gather.DEFAULT_GATHER_MS if gather_ms is None else gather_ms) / 1000)
        self.gathered_seconds = 0.0
        self._expected: gather.Expected = {}
        self._queue: list[FlowJob] = []
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._paused = 0
        self._seq = itertools.count()
        self.batches = self.calls = self.largest_batch = 0
        self.cancelled = 0  # calls that left the queue unrun because their take was cancelled
        self.turn_batches = 0  # batches during which the LM waited (first chunks, no other take decoding)
        self.idle_captures = 0  # CUDA graphs captured while idle
        self._last_work = time.monotonic()
        self.order: deque[int] = deque(maxlen=1024)  # `seq` of the calls in the order the worker took them

    def render(
        self,
        stream: DiTFlowStream,
        tokens: torch.Tensor,
        finalize: bool,
        *,
        cancel: threading.Event | None = None,
        first: bool = False,
        deadline: float | None = None,
        take: object | None = None,
    ) -> torch.Tensor:
        """`stream.mel(tokens, finalize)`, run by the worker in a batch with other takes' calls; blocks
        until it ran and returns its mel [1, 80, F] float32, or raises its error.

        first: the take has no audio out yet; deadline: when the take needs this audio (monotonic; None:
        now); both order the queue when more calls wait than a batch takes. cancel: once set while the
        call waits, the call leaves the queue unrun and raises `FlowCallCancelled`. take: the take the call is of,
        when it was announced by `expect` (its first call then gathers with those of takes started with it)."""
        job = self._job(stream, tokens, finalize, cancel, first, deadline)
        return self._submit(job, take)

    def render_speech(
        self,
        stream: DiTFlowStream,
        tokens: torch.Tensor,
        finalize: bool,
        vocoder: CausalHiftStream,
        *,
        shape_mel: Callable[[torch.Tensor], torch.Tensor] | None = None,
        cancel: threading.Event | None = None,
        first: bool = False,
        deadline: float | None = None,
        take: object | None = None,
    ) -> VocodedChunk:
        """As `render`, then `vocoder.push(shape_mel(mel), finalize)` in one batched push with the other
        vocoded calls of the batch (under the same autocast): returns the push's new samples. A push that
        fails on its own raises its error here alone."""
        job = self._job(stream, tokens, finalize, cancel, first, deadline)
        job.vocoder, job.shape_mel = vocoder, shape_mel
        return self._submit(job, take)

    def expect(self, take) -> None:
        """A take started (an object with `first_pending` and `cancel`): first calls queued meanwhile may wait
        a little for its first call (`gather_window`)."""
        with self._wake:
            self._expected[id(take)] = (weakref.ref(take), time.monotonic())
            self._wake.notify_all()

    def forget(self, take) -> None:
        """The take ended: no first call waits for it."""
        with self._wake:
            if self._expected.pop(id(take), None) is not None:
                self._wake.notify_all()

    def _job(self, stream, tokens, finalize, cancel, first, deadline) -> FlowJob:
        now = time.monotonic()
        return FlowJob(
            stream,
            tokens,
            finalize,
            caller_autocast(stream.device),
            first=first,
            deadline=time.monotonic() if deadline is None else deadline,
            seq=next(self._seq),
            cancel=cancel,
            began=now,
            submitted=now,
        )

    def _submit(self, job: FlowJob, take: object | None = None):
        cancel = job.cancel
        with self._wake:
            if self._closed:
                raise RuntimeError("this flow scheduler is closed")
            if job.cancelled:
                self.cancelled += 1
                raise FlowCallCancelled("the take was cancelled before its flow call was queued")
            expected = None if take is None else self._expected.pop(id(take), None)
            if expected is not None:
                job.began = expected[1]
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="cv3-flow-scheduler", daemon=True)
                self._thread.start()
            self._queue.append(job)
            self._wake.notify_all()
        if cancel is None:
            return job.result.result()
        while True:
            try:
                return job.result.result(timeout=CANCEL_POLL_SECONDS)
            except FutureTimeout:
                if cancel.is_set() and self._withdraw(job):
                    raise FlowCallCancelled("the take was cancelled while its flow call waited") from None

    def _withdraw(self, job: FlowJob) -> bool:
        """Take a cancelled call out of the queue; False once the worker has it (it then runs)."""
        with self._wake:
            if job not in self._queue:
                return False
            self._queue.remove(job)
            self.cancelled += 1
            return True

    def queued(self) -> int:
        with self._wake:
            return len(self._queue)

    @contextmanager
    def paused(self):
        """The worker takes no new call until the block ends (what queues meanwhile then goes by urgency)."""
        with self._wake:
            self._paused += 1
        try:
            yield self
        finally:
            with self._wake:
                self._paused -= 1
                self._wake.notify_all()

    def stats(self) -> dict:
        with self._wake:
            return {
                "batches": self.batches,
                "calls": self.calls,
                "largest_batch": self.largest_batch,
                "queued": len(self._queue),
                "cancelled": self.cancelled,
                "turn_batches": self.turn_batches,
            }

    def close(self) -> None:
        """Stop the worker after its batch in progress; queued and later calls raise RuntimeError."""
        with self._wake:
            self._closed = True
            pending = list(self._queue)
            self._queue.clear()
            self._wake.notify_all()
            thread = self._thread
        for job in pending:
            job.result.set_exception(RuntimeError("the flow scheduler closed before this call ran"))
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    # -- the worker -----------------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            jobs = self._next_jobs()
            if jobs is None:
                return
            if not jobs:
                continue
            groups: dict[tuple, list[FlowJob]] = {}
            for job in jobs:
                groups.setdefault(job.group, []).append(job)
            first_chunks = sum(job.first for job in jobs)
            # before the batch's first kernel: the LM's next step waits (only this batch's takes need it)
            held = bool(first_chunks) and flow_turn.hold(first_chunks)
            self.turn_batches += held
            try:
                for group in groups.values():
                    self._run_group(group)
            finally:
                if held:
                    flow_turn.release()
                for job in jobs:  # a take that gets its result finds the LM's turn given back
                    job.settle()
                self._last_work = time.monotonic()

    def _next_jobs(self) -> list[FlowJob] | None:
        """Wait for calls (and, with `gather_seconds`, for more of them); take the `max_takes` most urgent,
        one per stream (a stream's second call waits for the next batch). Calls of cancelled takes leave
        with `FlowCallCancelled`; an empty list when only those were queued. None once closed."""
        with self._wake:
            while (not self._queue or self._paused) and not self._closed:
                if self._paused:
                    self._wake.wait()
                else:  # meanwhile the graphs of shapes that ran eagerly are captured (idle_capture.py)
                    self.idle_captures += wait_or_capture(self._wake, self._last_work, bool(self._expected))
            if self._closed:
                return None
            deadline = time.monotonic() + self.gather_seconds
            while len(self._queue) < self.max_takes and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._wake.wait(left)
            self._gather_firsts()
            self._queue.sort(key=lambda job: job.urgency)
            taken, later, streams = [], [], set()
            for job in self._queue:
                if job.cancelled:
                    self.cancelled += 1
                    job.result.set_exception(
                        FlowCallCancelled("the take was cancelled while its flow call waited")
                    )
                elif len(taken) < self.max_takes and id(job.stream) not in streams:
                    taken.append(job)
                    streams.add(id(job.stream))
                else:
                    later.append(job)
            self._queue = later
            if taken:
                self.batches += 1
                self.calls += len(taken)
                self.largest_batch = max(self.largest_batch, len(taken))
                self.order.extend(job.seq for job in taken)
            return taken

    def _gather_firsts(self) -> None:
        """(Lock held.) Wait up to the gather window for the first calls of takes that started no later than
        the queued first calls' takes (their solve costs about what one take's does: gather.py)."""
        firsts = [job for job in self._queue if job.first]
        if not firsts or self.gather_window <= 0 or self._paused:
            return
        started = time.monotonic()
        until = min(job.submitted for job in firsts) + self.gather_window
        while (left := until - time.monotonic()) > 0 and not self._closed:
            if len(self._queue) >= self.max_takes or not gather.worth_waiting(self._expected, firsts):
                break
            self._wake.wait(min(left, GATHER_POLL_SECONDS))
            firsts = [job for job in self._queue if job.first]
        self.gathered_seconds += time.monotonic() - started

    @staticmethod
    def _run_group(jobs: list[FlowJob]) -> None:
        """Check each call alone (an invalid one fails by itself), then solve the valid ones together."""
        valid: list[tuple[FlowJob, FlowCall]] = []
        for job in jobs:
            try:
                valid.append((job, job.stream.check(job.tokens, job.finalize)))
            except Exception as error:  # noqa: BLE001 - the call's own error goes back to its take
                job.fail(error)
        if not valid:
            return
        kind, dtype = valid[0][0].autocast
        with torch.autocast(kind, dtype=dtype, enabled=dtype is not None):
            try:
                mels = render_calls([call for _, call in valid])
            except Exception as error:  # noqa: BLE001 - every call of the failed batch gets its error
                for job, _ in valid:
                    job.fail(error)
                return
            vocoded = []
            for (job, _), mel in zip(valid, mels, strict=True):
                if job.vocoder is None:
                    job.succeed(mel)
                else:
                    vocoded.append((job, mel))
            if vocoded:
                DiTFlowScheduler._vocode(vocoded)

    @staticmethod
    def _vocode(jobs_and_mels: list[tuple[FlowJob, torch.Tensor]]) -> None:
        """Push each job's shaped mel through its vocoder, all in one batched push; each job gets its
        samples or its own push's error (a failure of the batch itself reaches all of them)."""
        started = time.perf_counter()
        jobs, pushes = [], []
        for job, mel in jobs_and_mels:
            try:
                shaped = mel if job.shape_mel is None else job.shape_mel(mel)
            except Exception as error:  # noqa: BLE001 - the job's own error goes back to its take
                job.fail(error)
                continue
            jobs.append(job)
            pushes.append(HiftPush(job.vocoder, shaped, job.finalize))
        try:
            results = vocode_pushes(pushes)
        except Exception as error:  # noqa: BLE001 - every push of the failed batch gets its error
            for job in jobs:
                job.fail(error)
            return
        seconds = time.perf_counter() - started
        for job, result in zip(jobs, results, strict=True):
            if isinstance(result, Exception):
                job.fail(result)
            else:
                job.succeed(VocodedChunk(result, seconds))


_schedulers_lock = threading.Lock()


def flow_scheduler_for(flow: torch.nn.Module) -> DiTFlowScheduler:
    """The CosyVoice3 flow's one scheduler, made on first use (and again after `close_flow_scheduler`)."""
    with _schedulers_lock:
        scheduler = getattr(flow, "_dit_flow_scheduler", None)
        if scheduler is None or scheduler._closed:
            scheduler = DiTFlowScheduler()
            flow._dit_flow_scheduler = scheduler
        return scheduler


def close_flow_scheduler(flow: torch.nn.Module) -> None:
    """Stop the flow's scheduler thread (the model shuts down); calls queued then raise RuntimeError."""
    if (scheduler := getattr(flow, "_dit_flow_scheduler", None)) is not None:
        scheduler.close()
