"""A flow scheduler's worker waiting for work captures, meanwhile, the CUDA graphs of shapes that ran eagerly.

A shape's solve runs eagerly at its first call and is captured at its next (`ShapeGraphs`); capturing it
while the worker is idle instead (nothing queued, no take waiting for its first chunk, for
`IDLE_CAPTURE_SECONDS`) keeps that capture (0.2-0.5 s for a solve on an H200) off the next take's path.
CosyVoice2's `ChunkScheduler` and CosyVoice3's `DiTFlowScheduler` both wait this way.
"""

from __future__ import annotations

import logging
import threading
import time

from studio.tts.device.cuda_graphs import capture_one_pending, pending_captures

log = logging.getLogger(__name__)

IDLE_CAPTURE_SECONDS = 0.2  # idle this long (between a take's chunks it is ~0.1 s), graphs are captured


def wait_or_capture(condition: threading.Condition, last_work: float, takes_starting: bool) -> int:
    """Wait on `condition` (held) for work, or capture one pending graph once idle since `last_work`
    (monotonic) for `IDLE_CAPTURE_SECONDS`, the condition released meanwhile (calls queued then are served
    after it). No capture while `takes_starting` (a take waits for its first chunk). -> graphs captured."""
    if takes_starting or pending_captures() == 0:
        condition.wait()
        return 0
    idle = time.monotonic() - last_work
    if idle < IDLE_CAPTURE_SECONDS:
        condition.wait(IDLE_CAPTURE_SECONDS - idle)
        return 0
    condition.release()
    try:
        return int(capture_one_pending())
    except Exception:  # noqa: BLE001 - a capture failure switches its graphs off; the worker goes on
        log.exception("flow scheduler: a capture while idle failed")
        return 0
    finally:
        condition.acquire()
