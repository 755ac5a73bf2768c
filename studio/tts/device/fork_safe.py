"""CPU work in a process that will fork vLLM's engine core afterwards, done without PyTorch's thread pool.

PyTorch's CPU kernels share out large tensors over GNU OpenMP's thread pool, and that pool does not survive
a fork: a child forked after the pool has run hangs at its own first parallel operation. This is what hung
vLLM's engine core on the H200 when it was forked right after the studio had cast its 2 GB export
(reproduced on a CPU by tests/tts/test_vllm_start.py). Work done inside `without_thread_pool()` runs on the
calling thread only, so the pool is never started and a later fork is safe.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def without_thread_pool() -> Iterator[None]:
    """PyTorch's CPU operations inside this block use one thread (process-wide; restored after it)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
