"""Which small GPU operations of a take wait behind work queued on the flow's stream.

Queues ~1 s of GPU work (torch.cuda._sleep) on this thread's current stream, then times each operation on
a stream of its own: a host wait longer than a few ms means it waited for the queued work.
Usage: python benchmarks/probes/side_stream_check.py
"""

from __future__ import annotations

import time

import torch

from studio.tts.device.transfer import on_host_apart, to_device


def timed(name: str, operation) -> None:
    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000_000)
    stream = torch.cuda.Stream()
    started = time.monotonic()
    with torch.cuda.stream(stream):
        operation()
        stream.synchronize()
    print(f"{name:48} {1000 * (time.monotonic() - started):8.1f} ms")


def queued_behind(name: str, operation) -> None:
    """The host time of `operation` on the stream that holds ~1 s of queued work (what a flow tick does)."""
    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000_000)
    started = time.monotonic()
    operation()
    print(f"same stream: {name:48} {1000 * (time.monotonic() - started):8.1f} ms")
    torch.cuda.synchronize()


def pinned_copy(rows: torch.Tensor) -> torch.Tensor:
    """What on_host_apart did before it used pageable memory: a copy into a pinned buffer allocated for it."""
    host = torch.empty(rows.shape, dtype=rows.dtype, pin_memory=True)
    return host.copy_(rows, non_blocking=True)


def main() -> None:
    device = torch.device("cuda")
    weight = torch.randn(6564, 896, device=device)
    ids = list(range(100))
    for _ in range(2):  # the second round has the caching host allocator warm
        timed("pageable upload torch.tensor(list, device)", lambda: torch.tensor(ids, device=device))
        timed("pinned upload (to_device)", lambda: to_device(torch.tensor(ids), device))
        timed("pinned host buffer torch.empty(pin_memory)", lambda: torch.empty(100, 896, pin_memory=True))
        timed(
            "gather + copy to a new pinned host buffer",
            lambda: pinned_copy(weight[to_device(torch.tensor(ids), device)]),
        )
        timed(
            "gather + .cpu() (on_host_apart, the take's path)",
            lambda: on_host_apart(lambda: weight[to_device(torch.tensor(ids), device)], device),
        )
    # on the flow's own stream, behind its queued work: the host must not wait for it (ticks overlap)
    for size in (100, 300, 5000, 100):  # new pinned block sizes, then one the caching host allocator has
        queued_behind(
            f"pinned upload (to_device) of {size} ids", lambda n=size: to_device(torch.arange(n), device)
        )
        queued_behind(
            f"pageable upload, non_blocking, of {size} ids",
            lambda n=size: torch.arange(n).to(device, non_blocking=True),
        )
        queued_behind(
            f"new pinned host buffer of {size} x 896", lambda n=size: torch.empty(n, 896, pin_memory=True)
        )
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
