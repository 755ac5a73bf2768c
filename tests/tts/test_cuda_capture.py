"""`capture_graph` on a GPU: a capture does not wait for the work queued before it, and replays what it recorded.

CUDA only (skipped elsewhere); `scripts/gpu/run.sh gputests` runs it on a GPU.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from studio.tts.device.cuda_graphs import capture_graph
from studio.tts.device.streams import CAPTURE, HOST_COPIES, dedicated_stream
from studio.tts.device.transfer import on_host_apart

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_a_capture_behind_a_second_of_queued_work_neither_waits_for_it_nor_runs_it_out_of_order():
    device = torch.device("cuda")
    weight = torch.randn(64, 64, device=device)
    x = torch.randn(8, 64, device=device)
    run = lambda: (torch.relu(x @ weight) + 1,)  # noqa: E731
    capture_graph(run, device, None, warmup=1)  # cuBLAS and the stream made before timing
    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000_000)  # ~1 s of GPU work on this thread's stream, as a flow tick
    x.add_(1)  # queued behind it: the replay must see it
    started = time.monotonic()
    graph, (output,), _ = capture_graph(run, device, None, warmup=0)
    took = time.monotonic() - started
    graph.replay()
    torch.cuda.synchronize()
    assert took < 0.3, f"the capture waited {took:.2f} s for the queued work"
    assert torch.equal(output, torch.relu(x @ weight) + 1)


def test_a_capture_keeps_the_pinned_blocks_the_takes_copies_reuse():
    """Each take's next copy to or from the GPU (tts/device/transfer.py) would otherwise allocate a new pinned
    block, and such an allocation waits for the GPU's whole queue."""
    device = torch.device("cuda")
    block = torch.empty(1 << 20, dtype=torch.uint8, pin_memory=True)
    del block  # back to the caching host allocator
    freed = torch.cuda.host_memory_stats()["num_host_free"]
    x = torch.ones(4, device=device)
    capture_graph(lambda: (x * 2,), device, None, warmup=1)
    assert torch.cuda.host_memory_stats()["num_host_free"] == freed


def test_each_purpose_gets_its_own_stream_however_many_streams_were_drawn_from_torchs_pool():
    device = torch.device("cuda")
    drawn = [torch.cuda.Stream(device=device) for _ in range(40)]  # the pool repeats after 32
    assert len({s.cuda_stream for s in drawn}) < len(drawn)
    capture, copies = dedicated_stream(device, CAPTURE), dedicated_stream(device, HOST_COPIES)
    assert capture.cuda_stream != copies.cuda_stream
    assert dedicated_stream(device, CAPTURE) is capture


def test_takes_copying_to_the_host_while_graphs_are_captured_never_land_in_a_capture():
    """64 takes' threads each bring small GPU results to the host while the scheduler captures graphs: at
    an H200's 64 streams a copy landed in a capture and the CUDA context died for every take."""
    device = torch.device("cuda")
    weight = torch.randn(64, 64, device=device)
    stop = threading.Event()
    errors: list[BaseException] = []
    copied = [0]

    def take() -> None:
        try:
            while not stop.is_set():
                host = on_host_apart(lambda: weight[:4] * 2, device)
                assert torch.equal(host, weight[:4].cpu() * 2)
                copied[0] += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    threads = [threading.Thread(target=take, daemon=True) for _ in range(40)]
    for thread in threads:
        thread.start()
    try:
        for size in range(1, 21):
            x = torch.randn(size, 64, device=device)
            graph, (output,), _ = capture_graph(lambda x=x: (torch.relu(x @ weight),), device, None, warmup=1)
            x.add_(1)
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(output, torch.relu(x @ weight))
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert not errors, errors[:3]
    assert copied[0] > 0
