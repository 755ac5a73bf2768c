"""A finished take has left the engine's running list before its outcome is sent, so a take started on
hearing it is counted alone (the engine once said "busy 2 take(s)" while one ran)."""

from __future__ import annotations

import threading

import numpy as np

from studio.engine.process import Engine
from studio.engine.protocol import EngineState, State, Synthesize, TakeFinished
from studio.runtime import runner


class QuickClient:
    """Records events; on the first take's TakeFinished it starts the next take at once, from another
    thread, and gives it half a second to get in before the finishing take goes on."""

    def __init__(self):
        self.events: list = []
        self.engine: Engine | None = None
        self.next_take: Synthesize | None = None
        self.done = threading.Event()

    def send(self, event):
        self.events.append(event)
        if isinstance(event, TakeFinished) and self.next_take is not None:
            request, self.next_take = self.next_take, None
            starter = threading.Thread(target=self.engine.synthesize, args=(request,))
            starter.start()
            starter.join(0.5)
        elif isinstance(event, TakeFinished):
            self.done.set()


def _take(seed):
    voice = np.sin(np.linspace(0, 300, 24000)).astype(np.float32) * 0.3
    return Synthesize("Hello.", mode="cross-lingual", prompt_wav=voice, prompt_sr=24000, seed=seed,
                      exact_speech_tokens=10, stream=False)  # fmt: skip


def test_a_take_started_on_hearing_another_finish_is_counted_alone(tiny_model_dir):
    client = QuickClient()
    engine = Engine(client)
    client.engine = engine
    engine.loaded = runner.load_model(str(tiny_model_dir), "pytorch")
    try:
        client.next_take = _take(2)
        engine.synthesize(_take(1))
        assert client.done.wait(120), "the second take did not finish"
    finally:
        engine.shutdown()
    busy = [e.active_requests for e in client.events if isinstance(e, State) and e.state is EngineState.BUSY]
    assert busy == [1, 1]
