"""The runtime's own CUDA streams: one per purpose and device, never the same stream for two purposes.

``torch.cuda.Stream()`` does not create a stream: it hands out the next of a pool of 32 per device and
priority, round robin. Two purposes that each draw from the pool can therefore get one and the same stream,
and when one of them is the stream graphs are captured on, the other purpose's work lands inside the
capture: at 64 takes a take's prompt-embedding copy hit the capture stream ("Cannot copy between CPU and CUDA
tensors during CUDA graph capture"), the capture ended with unjoined work and the next replay indexed out of
bounds, which killed the CUDA context for every take (an H200 run, benchmarks/results/2026-12-05).
"""

from __future__ import annotations

import threading

import torch

CAPTURE = "capture"  # the stream every CUDA graph is captured on (and its warm-up run)
HOST_COPIES = "host copies"  # small work whose result goes to the host at once (`transfer.on_host_apart`)

_POOL_SIZE = 32  # streams torch's pool hands out per device and priority before it repeats one
_lock = threading.Lock()
_streams: dict[tuple[int, str], torch.cuda.Stream] = {}


def dedicated_stream(device: torch.device, purpose: str) -> torch.cuda.Stream:
    """The stream of `purpose` on `device` (the same one on every call): distinct from every other
    purpose's stream on that device."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    with _lock:
        stream = _streams.get((index, purpose))
        if stream is not None:
            return stream
        taken = {s.cuda_stream for (i, _), s in _streams.items() if i == index}
        for _ in range(_POOL_SIZE + 1):
            stream = torch.cuda.Stream(device=index)
            if stream.cuda_stream not in taken:
                break
        else:  # a pool smaller than documented: never share a stream silently
            raise RuntimeError(f"no CUDA stream on cuda:{index} is free for {purpose}")
        _streams[(index, purpose)] = stream
        return stream
