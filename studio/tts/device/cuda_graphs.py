"""Capturing one CUDA graph the way every graph of the runtime is captured (flow, streaming solve, HiFT)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TypeVar

import torch

T = TypeVar("T")


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
    """
    context = context if context is not None else nullcontext()
    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side), context:
        for _ in range(warmup):
            run()
    torch.cuda.current_stream(device).wait_stream(side)
    if pool is None:
        pool = torch.cuda.graph_pool_handle()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"), context:
        output = run()
    return graph, output, pool
