"""The LM steps aside while the flow makes the first chunks it waits for: the GPU's turn, across processes.

vLLM's engine core is another process, so it and the studio's flow share the GPU by time-slicing: on the
H200 a take's first chunk took 142-151 ms of flow and HiFT while vLLM decoded beside it, 87 ms with the LM
waiting (docs/perf-history.md). The LM runs 20 times faster than real time at one stream: when
every take it decodes for is having its first chunk made, nobody needs its next tokens during those
milliseconds, and the listeners lose them. So the flow takes the GPU for such a tick.

How: a small file in shared memory holds one number, the time (``CLOCK_MONOTONIC``, the same clock in every
process of the machine) until which the flow holds its turn; 0 when it holds none. The studio's process
creates it before vLLM starts (`share`); vLLM's processes find it through ``STUDIO_FLOW_TURN_FILE`` and map
it while they start, after which its name is removed (`FlowTurn.started`). The chunk scheduler asks for the
turn (`hold`) for a tick of first chunks and gives it back (`release`) once the tick is delivered. The RAS
logits processor, which runs in every LM step of vLLM's engine core, waits there (`TurnWaiter.wait`) until
the turn ends, so vLLM launches nothing after the forward pass in flight. A turn ends when the flow gives it
back or when its time runs out, whichever comes first: a studio that dies holding it cannot stall the LM for
longer. No torch here.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from studio import envs

log = logging.getLogger(__name__)

FILE_VARIABLE = envs.FLOW_TURN_FILE.name
_LAYOUT = struct.Struct("=d")  # seconds on CLOCK_MONOTONIC until which the flow holds the GPU (0: none)
_SIZE = 64  # one cache line
POLL_SECONDS = 0.0002
WAIT_LIMIT_SECONDS = 10.0  # a waiter's own bound, whatever the file says (a turn is bounded by its holder)
DEFAULT_MAX_MS = 250.0


def max_turn_seconds() -> float:
    """How long one turn may keep the LM waiting (``STUDIO_FLOW_TURN_MS``; 0: the LM never waits)."""
    value = envs.FLOW_TURN_MS.number()
    ms = DEFAULT_MAX_MS if value is None else value
    if ms < 0:
        raise ValueError(f"{envs.FLOW_TURN_MS.name} must be 0 or more milliseconds, got {ms:g}")
    return ms / 1000


class FlowTurn:
    """The studio's side of one vLLM engine's turn file: `hold` the GPU for the flow, `release` it."""

    def __init__(self, path: Path, max_seconds: float) -> None:
        self.path = path
        self.max_seconds = max_seconds
        # The LM's requests in flight (set by its backend; None: unknown). The flow takes the GPU only when
        # each of them is a take whose first chunk is being made: then nobody else waits for the LM's tokens.
        self.lm_requests: Callable[[], int] | None = None
        self._lock = threading.Lock()
        with open(path, "r+b") as file:
            self._map = mmap.mmap(file.fileno(), _SIZE)
        self.held = False

    def hold(self) -> None:
        """Ask the LM to wait from its next step on, for at most `max_seconds` from now (extends a turn)."""
        with self._lock:
            if not self._map.closed:
                _LAYOUT.pack_into(self._map, 0, time.monotonic() + self.max_seconds)
                self.held = True

    def release(self) -> None:
        with self._lock:
            if self.held and not self._map.closed:
                _LAYOUT.pack_into(self._map, 0, 0.0)
            self.held = False

    def started(self) -> None:
        """vLLM has started (its processes mapped the file): remove the file's name and the variable, so
        nothing is left behind in /dev/shm, whatever becomes of this process."""
        if envs.FLOW_TURN_FILE.raw() == str(self.path):
            os.environ.pop(FILE_VARIABLE, None)
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def close(self) -> None:
        """Give the turn back for good (the engine shut down)."""
        self.release()
        with _live_lock:
            _live.discard(self)
        with self._lock:
            self._map.close()
        self.started()


class TurnWaiter:
    """The LM's side, in vLLM's engine core: `wait` blocks while the flow holds its turn."""

    def __init__(self, path: str | os.PathLike) -> None:
        with open(path, "rb") as file:
            self._map = mmap.mmap(file.fileno(), _SIZE, access=mmap.ACCESS_READ)

    @classmethod
    def from_environment(cls) -> TurnWaiter | None:
        """The waiter for the studio that started this vLLM, or None (no studio asked, or its file is gone)."""
        path = envs.FLOW_TURN_FILE.raw()
        if not path:
            return None
        try:
            return cls(path)
        except (OSError, ValueError) as exc:
            log.warning("the flow's GPU turn is not shared with this process (%s): the LM never waits", exc)
            return None

    def until(self) -> float:
        return _LAYOUT.unpack_from(self._map, 0)[0]

    def wait(self, limit: float = WAIT_LIMIT_SECONDS) -> float:
        """Block while the flow holds the GPU (at most `limit` s, whatever the file says); seconds waited."""
        until = self.until()
        if until <= 0.0:
            return 0.0
        started = now = time.monotonic()
        while now < until and now - started < limit:
            time.sleep(min(POLL_SECONDS, until - now))
            until, now = self.until(), time.monotonic()
        return now - started


_live: set[FlowTurn] = set()  # one per vLLM engine of this process
_live_lock = threading.Lock()


def share() -> FlowTurn | None:
    """A new turn for the vLLM engine about to start, its file named in ``STUDIO_FLOW_TURN_FILE`` for the
    processes started next; None when the LM never waits (``STUDIO_FLOW_TURN_MS=0``). Call `started()`
    once the engine is up, `close()` when it shuts down."""
    seconds = max_turn_seconds()
    if seconds <= 0:
        os.environ.pop(FILE_VARIABLE, None)
        return None
    folder = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    handle, name = tempfile.mkstemp(prefix="studio-flow-turn-", dir=folder)
    with os.fdopen(handle, "wb") as file:
        file.write(bytes(_SIZE))
    turn = FlowTurn(Path(name), seconds)
    with _live_lock:
        _live.add(turn)
    os.environ[FILE_VARIABLE] = name
    log.info("the LM waits up to %.0f ms while the flow makes first chunks", seconds * 1000)
    return turn


def hold(first_chunks: int) -> bool:
    """The flow, about to make `first_chunks` takes' first chunks, takes the GPU from each vLLM engine of this
    process that decodes for no other take; whether any LM now waits.

    An LM decoding for a take still short of its first chunk's tokens goes on: that take's listener waits
    too. So at many takes started together (the first chunks of a tick rarely are all of them) the turn is
    seldom taken; on the H200 taking it there anyway changed each round's batch shapes, and each new shape
    cost the flow a CUDA-graph capture (1.2 s) in the middle of the round."""
    with _live_lock:
        turns = list(_live)
    held = False
    for turn in turns:
        if turn.lm_requests is None or turn.lm_requests() <= first_chunks:
            turn.hold()
            held = True
    return held


def release() -> None:
    with _live_lock:
        turns = list(_live)
    for turn in turns:
        turn.release()
