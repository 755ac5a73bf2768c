"""Capturing CUDA graphs the way every graph of the runtime is captured (flow encoder and solve, HiFT, RAS)."""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TypeVar

import torch

from studio.tts.device.streams import CAPTURE, dedicated_stream

log = logging.getLogger(__name__)

T = TypeVar("T")

# A key whose capture ran out of memory runs eagerly this many more times before it is captured again (a full
# budget frees as takes end; trying at every call would pay a failed capture's cost each time)
OOM_RETRY_AFTER = 8
CAPTURE_TIMES_KEPT = 16  # the recent captures whose mean host time a key's eager calls must pay first


def autocast_dtype(device_type: str = "cuda") -> torch.dtype | None:
    """The dtype autocast computes in on `device_type` on this thread now; None where it is off."""
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None


def autocast_context(dtype: torch.dtype | None) -> AbstractContextManager:
    """CUDA autocast at `dtype` (None: off) for a warm-up and capture.

    Autocast's weight-cast cache is off: it must not keep tensors from the capture alive outside the graph.
    """
    if dtype is None:
        return torch.autocast("cuda", enabled=False)
    return torch.autocast("cuda", dtype=dtype, cache_enabled=False)


def capture_graph(
    run: Callable[[], T],
    device: torch.device,
    pool,
    context: AbstractContextManager | None = None,
    warmup: int = 1,
) -> tuple[torch.cuda.CUDAGraph, T, object]:
    """Run `run` eagerly `warmup` times on a side stream (lazy initialisation such as cuBLAS handles or FFT
    plans must not be captured), then capture it into a graph drawing on `pool` (a new pool when None).

    Returns (graph, what the captured call returned, the pool). Capture is thread-local: other takes'
    threads keep launching work (LM, flow, HiFT) while this thread captures.

    Not through ``torch.cuda.graph``: its entry synchronises the device and empties both caching allocators.
    Under load that waits for every queued tick, and the next pinned copy of every take (`transfer`) then
    allocates anew, which waits for the GPU's whole queue again. A capture records kernels without running
    them, so nothing queued needs to finish first; its stream is the same for every capture of the device,
    as pools shared between graphs want, and one capture at a time uses it (a process-wide lock).
    """
    context = context if context is not None else nullcontext()
    current = torch.cuda.current_stream(device)
    with _capture_lock:
        side = dedicated_stream(device, CAPTURE)
        if warmup:
            side.wait_stream(current)
            with torch.cuda.stream(side), context:
                for _ in range(warmup):
                    run()
            current.wait_stream(side)
        if pool is None:
            pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(side), context:
            graph.capture_begin(pool=pool, capture_error_mode="thread_local")
            try:
                output = run()
            finally:
                graph.capture_end()
    return graph, output, pool


_capture_lock = threading.RLock()


def bucket_batch(size: int) -> int:
    """Rows padded for graph reuse: 1, 2, 4, then multiples of 4 (a power of two padded 9 takes to 16)."""
    return 1 << (size - 1).bit_length() if size <= 4 else 4 * math.ceil(size / 4)


def batch_pieces(size: int) -> list[tuple[int, int]]:
    """A batch of `size` rows as pieces (real rows, rows padded to): each piece a power of two, padded by at most
    a fifth of its real rows, else split (21 -> 16 + 4 + 1, 15 -> 16 padded). For a graph per shape where the rows
    are independent (HiFT's): eight row counts cover batches of 1-128 (`bucket_batch` makes one per multiple of
    four), and no piece computes more than a fifth of padding (`bucket_batch` pads 9 rows to 12)."""
    pieces = []
    while size > 0:
        padded = 1 << (size - 1).bit_length()
        if padded - size > size / 5:
            padded //= 2
        real = min(size, padded)
        pieces.append((real, padded))
        size -= real
    return pieces


def in_pieces(items: Sequence[T]) -> Iterator[tuple[Sequence[T], int]]:
    """`items` cut as `batch_pieces` cuts their count: each piece's items and the rows it is padded to."""
    start = 0
    for real, rows in batch_pieces(len(items)):
        yield items[start : start + real], rows
        start += real


def bucket_frames(frames: int) -> int:
    """Frames padded for graph reuse: to 32 up to 256, then to 64 (a padded frame costs a real one's work)."""
    return 32 * math.ceil(frames / 32) if frames <= 256 else 64 * math.ceil(frames / 64)


MIN_CONTEXT = 512  # the least key/value context a batched solve's arena view holds (10 s of audio)


def bucket_context(frames: int) -> int:
    """Key/value context a batch's graph attends over: `MIN_CONTEXT` frames at least, then 768, 1024, 1536,
    2048, 3072, ... (each at most 1.5 times the one before: few shapes, little padded attention or arena)."""
    context = MIN_CONTEXT
    while context < frames:
        context = context * 3 // 2 if context & (context - 1) == 0 else context * 4 // 3
    return context


def grown_size(held: int, need: int, limit: int) -> int:
    """Elements of a graphed work buffer that holds `held` and must hold `need`: twice `held` at least, within
    `limit` (each growth drops every graph captured over the buffer, so it grows seldom), never below `need`."""
    return max(need, min(2 * held, limit))


def let_go_of_buffer(graphs: ShapeGraphs, device: torch.device) -> None:
    """After a graphed work buffer's last reference is gone: forget the graphs captured over it, and give the
    allocator's cached blocks back on CUDA (a larger buffer cannot reuse the old one's block)."""
    graphs.drop()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def replayable_context(graphs: ShapeGraphs, key: tuple, fits: Callable[[int], bool]) -> int:
    """The context a batch of the solve `key` (rows, frames, context, then the rest) runs at: the smallest
    context, at most twice its own, of a captured graph whose key differs only there and whose arena view
    `fits`; else its own. A new shape costs an eager call or a capture on a take's path, a padded context only
    a little attention (it is masked)."""
    need = key[2]
    larger = sorted(
        other[2]
        for other in graphs.keys()
        if other[:2] == key[:2] and other[3:] == key[3:] and need < other[2] <= 2 * need
    )
    return next((context for context in larger if fits(context)), need)


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    inputs: tuple[torch.Tensor, ...]  # static copies the graph reads
    outputs: tuple[torch.Tensor, ...]  # what the graph writes (cloned before anyone else replays)
    replays: int = 0  # since it was captured, halved at each eviction (`ShapeGraphs._evict`)


class ShapeGraphs:
    """CUDA graphs of one function of tensors, one per key (its shapes, dtype, precision), replayed for calls.

    - The first `eager_first` calls of a key run eagerly: a shape seen once (a long prompt, an odd batch)
      costs no capture; one that recurs is captured at its next call, without a warm-up pass.
    - With `capture_when_paid`, a key is captured only once its eager calls have cost as much host time as a
      capture costs (the mean of this cache's captures so far; the rule of renting until the rent paid equals
      the price): under mixed lengths most shapes (a take's last chunk) recur a few times and never repay a
      capture, while a steady shape is captured after a few calls. Under load, its host time is what the
      scheduler's tick spends: 51 HiFT captures of 0.13-0.38 s each in one 64-stream level.
    - Or earlier, while the GPU's worker is idle (`capture_one_pending`): a key that ran eagerly keeps a
      copy of its inputs, and is captured from them without a warm-up pass, off any take's path.
    - At most `max_graphs` are kept: the one replayed least lately goes (`_evict`), so a steady shape outlives
      the one-off shapes (a take's last chunk) captured around it. They share one memory pool, which is safe
      because calls are serialised and outputs are cloned before the next replay.
    - New weights (`fingerprint`: moved or cast) drop every graph.
    - A capture that runs out of memory (the budget is full of takes) leaves graphs on: its call runs eagerly
      and the key is tried again after `OOM_RETRY_AFTER` more eager calls (or while idle). Any other failed
      capture switches graphs off for good: calls run eagerly (logged once).

    `run(inputs)` returns a tuple of tensors and must not read device values back to the host.
    `capture` is `capture_graph`'s signature (injectable so the policy can be tested off CUDA).
    """

    def __init__(
        self,
        name: str,
        run: Callable[[tuple[torch.Tensor, ...]], tuple[torch.Tensor, ...]],
        max_graphs: int = 16,
        eager_first: int = 0,
        capture=capture_graph,
        capture_when_paid: bool = False,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.name = name
        self.run = run
        self.max_graphs = max_graphs
        self.eager_first = eager_first
        self.capture_when_paid = capture_when_paid
        self._clock = clock
        self._capture_s: list[float] = []  # the host time of each capture so far
        self._eager_s: dict[tuple, float] = {}  # host time of a key's eager calls, while it has no graph
        self.enabled = True
        self.captures = 0
        self.out_of_memory = 0  # captures that found no memory (graphs stayed on)
        self._capture = capture
        self._graphs: OrderedDict[tuple, _Captured] = OrderedDict()
        self._seen: OrderedDict[tuple, int] = OrderedDict()  # eager calls per key not captured yet
        # key -> (inputs, context, inference mode): for a capture while idle, as the eager call ran
        self._pending: OrderedDict[tuple, tuple] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = None
        self._fingerprint: tuple | None = None
        _all.add(self)

    def __call__(
        self,
        key: tuple,
        fingerprint: tuple,
        inputs: tuple[torch.Tensor, ...],
        context: Callable[[], AbstractContextManager] | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """`run(inputs)`, replayed from the key's graph once it has one; `context()` is entered around the
        warm-up and capture (e.g. `autocast_context`), as the caller is inside it when calling."""
        if not self.enabled or (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
            return self.run(inputs)
        with self._lock:
            if fingerprint != self._fingerprint:
                self.drop()
                self._fingerprint = fingerprint
            captured = self._graphs.get(key)
            if captured is None:
                seen = self._seen.pop(key, 0)
                if seen < self.eager_first or not self._paid(key):
                    self._seen[key] = seen + 1
                    while len(self._seen) > 8 * self.max_graphs:
                        self._eager_s.pop(self._seen.popitem(last=False)[0], None)
                    inference = torch.is_inference_mode_enabled()
                    self._pending[key] = (tuple(tensor.clone() for tensor in inputs), context, inference)
                    self._pending.move_to_end(key)
                    while len(self._pending) > self.max_graphs:
                        self._pending.popitem(last=False)
                    started = self._clock()
                    outputs = self.run(inputs)
                    self._eager_s[key] = self._eager_s.get(key, 0.0) + self._clock() - started
                    return outputs
                self._pending.pop(key, None)
                self._eager_s.pop(key, None)
                captured = self._new_graph(key, inputs, context, warmup=0 if seen else 1)
                if captured is None:
                    return self.run(inputs)
            self._graphs.move_to_end(key)
            for static, value in zip(captured.inputs, inputs, strict=True):
                static.copy_(value)
            captured.graph.replay()
            captured.replays += 1
            return tuple(tensor.clone() for tensor in captured.outputs)

    def _paid(self, key: tuple) -> bool:
        """Whether `key`'s eager calls have cost a capture's host time (always, without `capture_when_paid`
        or before a first capture has measured one) (lock held)."""
        if not self.capture_when_paid or not self._capture_s:
            return True
        return self._eager_s.get(key, 0.0) >= sum(self._capture_s) / len(self._capture_s)

    def __len__(self) -> int:
        """Graphs kept."""
        return len(self._graphs)

    def keys(self) -> list[tuple]:
        """The keys of the graphs kept."""
        with self._lock:
            return list(self._graphs)

    def pending(self) -> int:
        """Keys that ran eagerly and could be captured now (`capture_pending`)."""
        return len(self._pending) if self.enabled else 0

    def capture_pending(self) -> bool:
        """Capture the most recent key that ran eagerly, from its inputs then and in its inference mode (the
        function may write into inference tensors, e.g. the solver's arena), without a warm-up pass (the eager
        call made its lazy state). False when there was none. Call it only where no take waits for the GPU."""
        with self._lock:
            if not self.enabled or not self._pending:
                return False
            key, (inputs, context, inference) = self._pending.popitem(last=True)
            self._seen.pop(key, None)
            self._eager_s.pop(key, None)
            if key not in self._graphs:
                with torch.inference_mode(inference):
                    self._new_graph(key, inputs, context, warmup=0)
            return True

    def drop(self) -> None:
        """Forget every graph (a pool whose graphs are all gone cannot take a new capture: a new one)."""
        self._graphs.clear()
        self._seen.clear()
        self._eager_s.clear()
        self._pending.clear()
        self._pool = None

    def _evict(self, keep: tuple) -> None:
        """Drop the graph replayed least since the last evictions (of those, the least recently used), never
        `keep` (just captured); then halve every count, so that a shape no longer called goes in time. Under
        mixed lengths a least-recently-used rule lets one-row last chunks, which seldom come back, push steady
        shapes out to be captured again (benchmarks/results/2026-12-05, the second H100's 64-stream log)."""
        victim = min((k for k in self._graphs if k != keep), key=lambda k: self._graphs[k].replays)
        del self._graphs[victim]
        for captured in self._graphs.values():
            captured.replays //= 2

    def _new_graph(
        self, key: tuple, inputs: tuple[torch.Tensor, ...], context, warmup: int
    ) -> _Captured | None:
        """Capture `run` for `key`; without a warm-up pass when the key ran eagerly before (its lazy state,
        such as kernel choices, is made)."""
        static = tuple(tensor.clone() for tensor in inputs)
        started = self._clock()
        try:
            graph, outputs, self._pool = self._capture(
                lambda: self.run(static), static[0].device, self._pool, context() if context else None, warmup
            )
        except torch.OutOfMemoryError:
            self.out_of_memory += 1
            self._seen[key] = self.eager_first - OOM_RETRY_AFTER
            log.warning(
                "%s: no memory to capture %s now; it runs eagerly and is tried again later", self.name, key
            )
            return None
        except Exception:  # noqa: BLE001 - a bug in `run` raises again from the eager call that follows
            log.warning(
                "%s: CUDA-graph capture failed; it runs eagerly from now on", self.name, exc_info=True
            )
            self.enabled = False
            self.drop()
            return None
        took = self._clock() - started
        self._capture_s = (self._capture_s + [took])[-CAPTURE_TIMES_KEPT:]
        captured = self._graphs[key] = _Captured(graph, static, tuple(outputs))
        self.captures += 1
        while len(self._graphs) > self.max_graphs:
            self._evict(keep=key)
        log.info(
            "%s: CUDA graph captured for %s in %.3f s (%d kept)",
            self.name,
            key,
            took,
            len(self._graphs),
        )
        return captured


_all: weakref.WeakSet[ShapeGraphs] = weakref.WeakSet()


def pending_captures() -> int:
    """Keys of every `ShapeGraphs` of this process that ran eagerly and could be captured now."""
    return sum(graphs.pending() for graphs in list(_all))


def capture_one_pending() -> bool:
    """Capture one key that ran eagerly, of whichever `ShapeGraphs` has one (the flow's scheduler calls this
    while idle, so that a shape's capture is not paid by the next take that meets it). False: none."""
    return any(graphs.capture_pending() for graphs in list(_all))
