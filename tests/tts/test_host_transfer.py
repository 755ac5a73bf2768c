"""The LM prompt embeddings a vLLM take sends: made on the host at once, never behind the flow's queued work."""

from __future__ import annotations

import time

import pytest
import torch

from studio.recent import RecentlyUsed
from studio.tts.device.transfer import on_host_apart, to_device
from studio.tts.llm.backend import prompt_embeds_for


class HostBackend:
    prompt_embeds_on_host = True


class DeviceBackend:
    pass


def test_a_host_backend_gets_host_embeddings_equal_to_the_device_ones():
    weight = torch.randn(50, 8)
    make = lambda: weight[torch.tensor([3, 1, 4, 1, 5])] * 2  # noqa: E731
    on_host = prompt_embeds_for(HostBackend(), make, weight.device)
    assert on_host.device.type == "cpu" and torch.equal(on_host, make())
    assert torch.equal(prompt_embeds_for(DeviceBackend(), make, weight.device), make())


def test_takes_of_one_text_and_voice_make_their_embeddings_once():
    weight = torch.randn(50, 8)
    made = []

    def maker(ids: list[int]):
        return lambda: made.append(ids) or weight[torch.tensor(ids)]

    backend = HostBackend()
    backend.host_embeds = RecentlyUsed(capacity=2)
    first = prompt_embeds_for(backend, maker([3, 1]), weight.device, key=(3, 1))
    again = prompt_embeds_for(backend, maker([3, 1]), weight.device, key=(3, 1))
    assert again is first and made == [[3, 1]] and backend.host_embeds.hits == 1
    other = prompt_embeds_for(backend, maker([4, 2]), weight.device, key=(4, 2))
    assert torch.equal(other, weight[torch.tensor([4, 2])]) and len(made) == 2
    prompt_embeds_for(backend, maker([3, 1]), weight.device, key=(3, 1))  # used last: (4, 2) goes first
    prompt_embeds_for(backend, maker([5]), weight.device, key=(5,))
    prompt_embeds_for(backend, maker([3, 1]), weight.device, key=(3, 1))
    prompt_embeds_for(backend, maker([4, 2]), weight.device, key=(4, 2))
    assert made == [[3, 1], [4, 2], [5], [4, 2]]  # at most two kept, the least recently used dropped
    assert prompt_embeds_for(DeviceBackend(), maker([3, 1]), weight.device, key=(3, 1)) is not first


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_the_copy_does_not_wait_for_the_work_queued_on_the_flows_stream():
    device = torch.device("cuda")
    weight = torch.randn(50, 8, device=device)
    on_host_apart(
        lambda: weight[to_device(torch.tensor([1, 0]), device)], device
    )  # its stream, pinned blocks
    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000_000)  # ~1 s of GPU work queued on this thread's stream, as a flow tick
    started = time.monotonic()
    rows = on_host_apart(lambda: weight[to_device(torch.tensor([4, 2]), device)], device)
    took = time.monotonic() - started
    torch.cuda.synchronize()
    assert torch.equal(rows, weight[[4, 2]].cpu())
    assert took < 0.2, f"the copy waited {took:.2f} s behind the queued work"
