"""Engine tests: every test gets its own config and data folders (the engine process inherits them)."""

from __future__ import annotations

import multiprocessing
import time

import pytest

from studio.engine.process import Engine
from studio.engine.protocol import EngineState, Error, LoadModel, State


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path, monkeypatch, offline_hub):
    monkeypatch.setenv("STUDIO_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("STUDIO_DATA_DIR", str(tmp_path / "data"))
    return tmp_path


class Events:
    """The studio's end of the engine's event pipe."""

    def __init__(self) -> None:
        self.reader, writer = multiprocessing.Pipe(duplex=False)
        self.engine = Engine(writer)

    def until(self, wanted, timeout: float = 120.0) -> list:
        """Events up to and including the first one ``wanted(event)`` accepts."""
        seen, deadline = [], time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0 and self.reader.poll(remaining), f"nothing wanted within {timeout} s: {seen}"
            event = self.reader.recv()
            seen.append(event)
            assert not isinstance(event, Error), event.message
            if wanted(event):
                return seen


@pytest.fixture
def engine_in_process(tiny_model_dir):
    """The engine in this process on the tiny model (no warm-up), its events crossing a real pipe."""
    events = Events()
    events.engine.load(LoadModel(str(tiny_model_dir), backend="pytorch", warmup=False))
    events.until(lambda e: isinstance(e, State) and e.state is EngineState.READY)
    yield events
    events.engine.shutdown()
