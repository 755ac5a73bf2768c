"""What both families' per-voice prompt caches share: what a cached flow state is keyed by (a number per model
module that is never reused within the process, as ``id()`` is; digests of tensors' contents, remembered per
tensor, since hashing a GPU tensor reads it back, which waits for the GPU), the budget
(``STUDIO_PROMPT_CACHE_MB``) and one process-wide cache per device type."""

from __future__ import annotations

import hashlib
import itertools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

import torch

from studio import envs

# On CUDA: four voices of 3-6 s prompts (the server's usual library, `bench --workload`'s) in fp16 hold about
# 1.6 GB (CosyVoice2, 2.3 MB a mel frame) or 1.3 GB (CosyVoice3, 1.8 MB): 1 GiB made them evict each other.
DEFAULT_BUDGET_MB = {"cuda": 2048, "cpu": 256}

_module_numbers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_module_counter = itertools.count(1)
_numbers_lock = threading.Lock()

_digests: OrderedDict[tuple, tuple[torch.Tensor, str]] = OrderedDict()
_digests_lock = threading.Lock()
DIGESTS_KEPT = 64


def module_number(module: torch.nn.Module) -> int:
    """A number that stands for this module as long as the process lives."""
    with _numbers_lock:
        number = _module_numbers.get(module)
        if number is None:
            number = _module_numbers[module] = next(_module_counter)
        return number


def tensor_digest(tensor: torch.Tensor) -> str:
    """A digest of the tensor's dtype, shape and values (a GPU tensor is read back to the host)."""
    digest = hashlib.blake2b(digest_size=16)
    host = tensor.detach().to("cpu").contiguous()
    digest.update(repr((host.dtype, tuple(host.shape))).encode())
    digest.update(host.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def remembered_digest(tensor: torch.Tensor) -> str:
    """`tensor_digest`, remembered for the last `DIGESTS_KEPT` tensors.

    The memo holds the tensor itself, so its memory cannot be reused by another tensor while the entry
    lives, and the version counter catches in-place writes; a voice's tensors are the same from take to
    take (the frontend caches them), so later takes hash nothing.
    """
    if tensor.is_inference():  # no version counter to tell an in-place write: hash it every time
        return tensor_digest(tensor)
    key = (
        str(tensor.device),
        tensor.dtype,
        tuple(tensor.shape),
        tensor.stride(),
        tensor.storage_offset(),
        tensor.untyped_storage().data_ptr(),
        tensor._version,
    )
    with _digests_lock:
        entry = _digests.get(key)
        if entry is not None:
            _digests.move_to_end(key)
            return entry[1]
    digest = tensor_digest(tensor)
    with _digests_lock:
        _digests[key] = (tensor, digest)
        while len(_digests) > DIGESTS_KEPT:
            _digests.popitem(last=False)
    return digest


def contents_digest(*tensors: torch.Tensor) -> str:
    """One digest of several tensors' contents (each remembered)."""
    return hashlib.blake2b(
        "/".join(remembered_digest(t) for t in tensors).encode(), digest_size=16
    ).hexdigest()


def budget_bytes(device_type: str) -> int:
    """``$STUDIO_PROMPT_CACHE_MB`` (0 disables), else 2048 MB on CUDA and 256 MB elsewhere."""
    megabytes = envs.PROMPT_CACHE_MB.number()
    if megabytes is None:
        megabytes = DEFAULT_BUDGET_MB.get(device_type, DEFAULT_BUDGET_MB["cpu"])
    return max(0, int(megabytes * 2**20))


C = TypeVar("C")


class CachePerDevice(Generic[C]):
    """One process-wide cache per device type, made by ``make(budget_bytes)`` on first use; None when the
    budget is 0."""

    def __init__(self, make: Callable[[int], C]):
        self._make = make
        self._caches: dict[str, C | None] = {}
        self._lock = threading.Lock()

    def get(self, device: torch.device | str) -> C | None:
        device_type = torch.device(device).type
        with self._lock:
            if device_type not in self._caches:
                budget = budget_bytes(device_type)
                self._caches[device_type] = self._make(budget) if budget > 0 else None
            return self._caches[device_type]
