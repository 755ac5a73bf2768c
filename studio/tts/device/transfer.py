"""Host-to-GPU copies that do not wait for the GPU."""

from __future__ import annotations

import torch


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device` without waiting for the GPU: through pinned memory, not blocking.

    A plain ``.to("cuda")`` of pageable memory synchronises the stream, so a take preparing its next
    chunk would wait for every other take's queued GPU work, and concurrent takes would never meet in
    the solver to form a batch. (The caching host allocator keeps the pinned block until the copy ran.)
    """
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)
