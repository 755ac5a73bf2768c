"""Whether a tick with first chunks waits for the first chunks of takes started together with them.

Takes started together (a burst, or a user's takes of one line) get their first chunk's tokens within a few
LM steps of each other, and a tick of the first of them alone would make the others wait for a whole tick of
GPU work that costs about what all of them together cost. So a tick with first chunks waits up to
``STUDIO_FLOW_GATHER_MS`` (default 20) for the first chunks of takes that started no later than they did,
when they are at most `GATHER_MAX_TAKES` in all.
"""

from __future__ import annotations

import time
import weakref

from studio.tts.scheduler.jobs import ChunkJob

SIBLING_SECONDS = 0.05  # takes that started this close to (or before) a take with a first chunk: its siblings
# Up to 16 takes a tick costs about what one take's costs (the solve is launch-bound); gathering more makes
# each round's ticks differ with the LM's jitter, and every new batch shape costs a CUDA-graph capture
# (about 1.2 s): with 32 streams on an H200, gathering them all took the first chunk's p95 from 0.79 s to 3.0 s.
GATHER_MAX_TAKES = 16
DEFAULT_GATHER_MS = 20  # ``STUDIO_FLOW_GATHER_MS`` unset
EXPECT_SECONDS = 10.0  # a take still without its first chunk this long after its start is not waited for

#: id(stream) -> (the stream, when its take started): the takes whose first chunk is still to come
Expected = dict[int, tuple[weakref.ref, float]]


def worth_waiting(expected: Expected, firsts: list[ChunkJob]) -> bool:
    """Whether the queued first chunks ``firsts`` should wait for their siblings' (see the module)."""
    coming = siblings_coming(expected, firsts)
    return bool(coming) and len(firsts) + coming <= GATHER_MAX_TAKES


def siblings_coming(expected: Expected, firsts: list[ChunkJob]) -> int:
    """How many takes started no later than (or with) the queued first chunks' takes have theirs to come;
    forgets (from ``expected``) the takes gone or too slow to be waited for."""
    latest = max(job.began for job in firsts)
    now, coming = time.monotonic(), 0
    for key, (ref, began) in list(expected.items()):
        stream = ref()
        if stream is None or now - began >= EXPECT_SECONDS:
            del expected[key]  # gone, or too slow to be waited for by anyone
            continue
        cancel = getattr(stream, "cancel", None)
        if began > latest + SIBLING_SECONDS or not stream.first_pending:
            continue
        if cancel is None or not cancel.is_set():
            coming += 1
    return coming
