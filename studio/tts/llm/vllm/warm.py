"""vLLM's first request, sent during the start: the one-off costs of a process's first request (kernels vLLM
loads or builds on first use, the RAS logits processor's first pass) fall beside the flow's warm-up, not
into the first take."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from studio.tts.llm.vllm.backend import VllmTokenBackend

log = logging.getLogger(__name__)


def warm_first_request(backend: VllmTokenBackend, tokens: int = 4) -> None:
    """Send vLLM one short RAS request of zero prompt embeddings; a failure is only logged (the first take
    then pays instead)."""
    import torch

    from studio.tts.llm.sampling import RasSampling

    started = time.perf_counter()
    try:
        request = backend.generate(
            torch.zeros(4, backend.hidden_size),
            min_len=tokens,
            max_len=tokens,
            sampling=RasSampling(),
            seed=0,
            cancel=threading.Event(),
            ignore_stop=True,
        )
        produced = sum(1 for _ in request)
    except Exception:  # noqa: BLE001 - a head start only
        log.warning("vLLM's warm-up request failed", exc_info=True)
        return
    log.info("vLLM's first request (%d tokens) took %.2f s", produced, time.perf_counter() - started)
