"""Copies between the host and the GPU that do not wait for the flow's queued GPU work."""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device` without waiting for the GPU: through pinned memory, not blocking.

    A plain ``.to("cuda")`` of pageable memory synchronises the stream, so a take preparing its next
    chunk would wait for every other take's queued GPU work, and concurrent takes would never meet in
    the solver to form a batch. (The caching host allocator keeps the pinned block until the copy ran.)
    """
    if device.type != "cuda" or tensor.device.type == "cuda":
        return tensor.to(device, non_blocking=True)
    return tensor.pin_memory().to(device, non_blocking=True)


def to_host_async(tensor: torch.Tensor) -> torch.Tensor:
    """A copy of a GPU tensor into pinned host memory, started on the current stream and not waited for:
    its contents are valid once the stream has run up to here (a CUDA event recorded after it)."""
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    return host.copy_(tensor, non_blocking=True)


_streams = threading.local()


def on_host_apart(make: Callable[[], torch.Tensor], device: torch.device) -> torch.Tensor:
    """`make()` (small GPU work on `device`) brought to the host, its kernels and copy on a stream of their own.

    On the flow's stream they would wait for every tick queued there: at 64 takes a take's LM prompt
    embeddings waited 163 ms on average before its request could go to vLLM (an H200 trace, docs/perf-history.md).
    The work must read only what no other stream is still writing (weights, and what `make` creates)."""
    if device.type != "cuda":
        return make().to("cpu")
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    stream = getattr(_streams, "stream", None)
    if stream is None or stream.device != device:
        stream = _streams.stream = torch.cuda.Stream(device)
    with torch.cuda.stream(stream):
        # Into pageable memory: it waits for this stream only (H200: 0.9-1.2 ms behind a second of queued
        # work), where a new pinned buffer's allocation waited for all of it (benchmarks/probes/side_stream_check.py)
        return make().cpu()
