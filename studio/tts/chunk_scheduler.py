"""One thread for the GPU work of every streamed chunk: flow encoder, batched Euler solve, HiFT.

Without it each take's thread ran its own chunk: its encoder and HiFT launched kernels beside the other
takes' (all on one CUDA stream, so each take's host wait sat behind everyone's kernels), and its Euler
solve joined whatever batch the solver happened to be running. `ChunkScheduler` is the flow's one
worker instead, as vLLM's engine is the LM's: a take hands it a chunk (`render`) and waits; each tick

1. takes the queued chunks, most urgent first (earliest deadline: a take's first chunk is due when it is
   asked for, a later one when the audio handed out so far would have played; ties in arrival order), at
   most `max_jobs` of them;
2. runs their encoders, as one batch over each take's whole token prefix (batched_encode.py;
   ``STUDIO_FLOW_BATCH_ENCODER=0``: one incremental encoder per chunk), while the GPU still works on the
   previous tick;
3. hands over the previous tick's audio once the GPU is done with it;
4. solves all of the new chunks' Euler steps in as few batches as the solver's budget allows, then runs
   their HiFT and starts the copies of their audio to the host, and does not wait for them.

It never waits while a chunk is queued and the GPU is idle, but for one case: takes started together (a
burst, or a user's takes of one line) get their first chunk's tokens within a few LM steps of each other,
and a tick of the first of them alone would make the others wait for a whole tick of GPU work that costs
about what all of them together cost. So a tick with first chunks waits up to ``STUDIO_FLOW_GATHER_MS``
(default 20) for the first chunks of takes that started no later than they did (`expect`), when they are
at most `GATHER_MAX_TAKES` in all. A tick that makes first chunks has the GPU to itself when the LM decodes
for no other take: vLLM's LM steps wait until the tick is done (tts/device/flow_turn.py) instead of
time-slicing the GPU with it. A chunk whose take is cancelled while it waits leaves the queue
(`ChunkCancelled`); a chunk that fails gets its own error, and the others in its tick go on (a failed batch
is solved again chunk by chunk). ``STUDIO_FLOW_SCHEDULER=0`` turns it off.

While it is idle (nothing queued or on the GPU, no take waiting for its first chunk, for
`IDLE_CAPTURE_SECONDS`) it captures, one at a time, the CUDA graphs of shapes that ran eagerly once
(`cuda_graphs.capture_one_pending`), so that their capture (0.2-0.5 s for a solve on the H200) is not paid
by the next take that meets them.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import weakref
from collections import deque
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

import torch

from studio import envs
from studio.tts.device import flow_turn
from studio.tts.device.cuda_graphs import capture_one_pending, pending_captures
from studio.tts.device.transfer import to_host_async
from studio.tts.flow.streaming.incremental import FlowStep
from studio.tts.flow.streaming.solver import DEFAULT_MAX_BATCH, solver_for

log = logging.getLogger(__name__)

CANCEL_POLL_SECONDS = 0.02
GPU_POLL_SECONDS = 0.0005
SIBLING_SECONDS = 0.05  # takes that started this close to (or before) a take with a first chunk: its siblings
# At most this many first chunks are gathered. Up to 16 takes a tick costs about what one take's costs (the
# solve is launch-bound); gathering more made each round's ticks differ with the LM's jitter (8, 24, 28
# takes...) and every new batch shape cost a ~1.2 s CUDA-graph capture: 32 streams went from a first chunk
# p95 of 0.79 s to 3.0 s on the H200 (benchmarks/README.md, stop 19).
GATHER_MAX_TAKES = 16
DEFAULT_GATHER_MS = 20  # ``STUDIO_FLOW_GATHER_MS`` unset
EXPECT_SECONDS = 10.0  # a take still without its first chunk this long after its start is not waited for
IDLE_CAPTURE_SECONDS = 0.2  # idle this long (between a take's chunks it is ~0.1 s), graphs are captured


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
class _Tick:
    jobs: list[ChunkJob]
    event: torch.cuda.Event | None  # recorded after the tick's last copy to the host (CUDA only)
    start: torch.cuda.Event | None = None  # recorded before the tick's first kernel (CUDA only)
    turn: bool = False  # made first chunks with the GPU's turn: the LM waits until the tick is delivered

    def ready(self) -> bool:
        return self.event is None or self.event.query()


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
        self.gather_window = max(0.0, (DEFAULT_GATHER_MS if gather_ms is None else gather_ms) / 1000)
        self._expected: dict[int, tuple[weakref.ref, float]] = {}  # id(stream) -> (stream, when it started)
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
        inflight: _Tick | None = None
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
                start = self._gpu_mark() if jobs else None
                if inflight is not None and inflight.ready():  # hand out finished audio at once
                    inflight = self._deliver(inflight)
                begun = self._begin(jobs)
                if inflight is not None:
                    inflight = self._deliver(inflight)
                if begun:
                    inflight = self._launch(begun)
                    inflight.start, inflight.turn = start, turn
            except BaseException as exc:  # noqa: BLE001 - no take may wait forever; the thread goes on
                log.exception("flow scheduler: a tick failed")
                for job in jobs + ([] if inflight is None else inflight.jobs):
                    if not job.done.is_set():
                        job.fail(exc)
                inflight = None
            if inflight is None or not inflight.turn:  # the flow's turn ends with the tick that took it
                flow_turn.release()
            self._last_work = time.monotonic()
            self.host_seconds += time.monotonic() - started - (self.wait_seconds - waited_before)

    def _wait_idle(self) -> None:
        """Wait for work (lock held); meanwhile capture pending graphs, one per wake (see module)."""
        if self._expected or pending_captures() == 0:
            self._condition.wait()
            return
        idle = time.monotonic() - self._last_work
        if idle < IDLE_CAPTURE_SECONDS:
            self._condition.wait(IDLE_CAPTURE_SECONDS - idle)
            return
        self._condition.release()  # takes may queue chunks meanwhile; they are served after this capture
        try:
            self.idle_captures += capture_one_pending()
        except Exception:  # noqa: BLE001 - a capture failure switches its graphs off; the thread goes on
            log.exception("flow scheduler: a capture while idle failed")
        finally:
            self._condition.acquire()

    def _gpu_mark(self) -> torch.cuda.Event | None:
        """A timing event on the flow's CUDA stream (None on a CPU)."""
        device = next(self.flow.parameters()).device
        if device.type != "cuda":
            return None
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(device))
        return event

    def _gather(self, inflight: _Tick | None) -> float:
        """Seconds waited (lock held) for the first chunks of takes started with those queued; see module."""
        firsts = [job for job in self._queue if job.first]
        if not firsts or self.gather_window <= 0 or self._paused:
            return 0.0
        started = time.monotonic()
        until = min(job.submitted for job in firsts) + self.gather_window
        while (left := until - time.monotonic()) > 0 and (inflight is None or not inflight.ready()):
            coming = self._siblings_coming(firsts)
            if not coming or len(firsts) + coming > GATHER_MAX_TAKES:
                break
            self._condition.wait(min(left, GPU_POLL_SECONDS * 4))
            firsts = [job for job in self._queue if job.first]
        return time.monotonic() - started

    def _siblings_coming(self, firsts: list[ChunkJob]) -> int:
        """How many takes started no later than (or with) the queued first chunks' takes have theirs to come."""
        latest = max(job.began for job in firsts)
        now, coming = time.monotonic(), 0
        for key, (ref, began) in list(self._expected.items()):
            stream = ref()
            if stream is None or now - began >= EXPECT_SECONDS:
                del self._expected[key]  # gone, or too slow to be waited for by anyone
                continue
            cancel = getattr(stream, "cancel", None)
            if began > latest + SIBLING_SECONDS or not stream.first_pending:
                continue
            if cancel is None or not cancel.is_set():
                coming += 1
        return coming

    def _takeable(self) -> bool:
        return bool(self._queue) and not self._paused

    def _pick(self) -> list[ChunkJob]:
        """The most urgent queued chunks (earliest deadline, then arrival), at most `max_jobs`."""
        self._queue.sort(key=lambda job: (job.deadline, job.seq))
        jobs, self._queue = self._queue[: self.max_jobs], self._queue[self.max_jobs :]
        self.order.extend(job.seq for job in jobs)
        return jobs

    @torch.inference_mode()
    def _begin(self, jobs: list[ChunkJob]) -> list[ChunkJob]:
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
                steps = group[0].stream.flow_begin_many(
                    [(job.stream, job.tokens, job.finalize) for job in group]
                )
            except Exception as exc:  # noqa: BLE001 - its take gets it, or the culprit is found below
                if len(group) == 1:
                    group[0].fail(exc)
                else:
                    log.warning("flow scheduler: a batch of %d encoders failed; one by one", len(group))
                    begun += [job for job in group if self._begin_alone(job)]
                continue
            for job, step in zip(group, steps, strict=True):
                job.step = step
                begun.append(job)
        return begun

    def _begin_alone(self, job: ChunkJob) -> bool:
        try:
            job.step = job.stream.flow_begin(job.tokens, job.finalize)
            return True
        except Exception as exc:  # noqa: BLE001 - this chunk's take gets it
            job.fail(exc)
            return False

    @torch.inference_mode()
    def _launch(self, jobs: list[ChunkJob]) -> _Tick:
        """Solve the chunks (batched per precision), then their HiFT and copies to the host; no wait."""
        groups: dict[bool, list] = {}
        for job in jobs:
            if job.step.request is not None:
                groups.setdefault(job.stream.fp16, []).append(job)
        solver = solver_for(self.flow.decoder)
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
        event = None if device is None else self._gpu_mark()
        self.ticks += 1
        self.jobs += len(jobs)
        return _Tick([job for job in jobs if not job.done.is_set()], event)

    def _deliver(self, tick: _Tick) -> None:
        """Wake the tick's takes once the GPU has finished it (None: nothing is in flight any more)."""
        if tick.event is not None:
            started = time.monotonic()
            tick.event.synchronize()  # releases the interpreter lock while the GPU finishes
            self.wait_seconds += time.monotonic() - started
        for job in tick.jobs:
            job.done.set()
        if tick.start is not None and tick.event is not None:
            with suppress(RuntimeError):  # a counter: it must never fail the takes it describes
                self.gpu_seconds += tick.start.elapsed_time(tick.event) / 1000


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
