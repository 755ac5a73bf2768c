"""Copies between the host and the GPU that do not wait for the flow's queued GPU work."""

from __future__ import annotations

from collections.abc import Callable

import torch

from studio.tts.device.streams import HOST_COPIES, dedicated_stream


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


def on_host_apart(make: Callable[[], torch.Tensor], device: torch.device) -> torch.Tensor:
    """`make()` (small GPU work on `device`) brought to the host, its kernels and copy on a stream of their own.

    On the flow's stream they would wait for every tick queued there: at 64 takes a take's LM prompt
    embeddings waited 163 ms on average before its request could go to vLLM (an H200 trace, docs/perf-history.md).
    All takes share the one stream (their work is small); it is never the stream graphs are captured on.
    The work must read only what no other stream is still writing (weights, and what `make` creates)."""
    if device.type != "cuda":
        return make().to("cpu")
    with torch.cuda.stream(dedicated_stream(device, HOST_COPIES)):
        # Into pageable memory: it waits for this stream only (H200: 0.9-1.2 ms behind a second of queued
        # work), where a new pinned buffer's allocation waited for all of it (benchmarks/probes/side_stream_check.py)
        return make().cpu()
