"""The status bar names every engine state, ticks while loading, and offers Restart after a failure."""

from __future__ import annotations

import pytest

from studio.engine.protocol import EngineState, Error, Progress, State
from studio.gui.engine.engine_status import EngineStatus

pytestmark = pytest.mark.gui


def test_states_progress_and_restart(qtbot):
    status = EngineStatus()
    qtbot.addWidget(status)
    status.show()
    restarts = []
    status.sig_restart.connect(lambda: restarts.append(True))

    status.on_state(State(EngineState.STARTING, "engine started; no model loaded"))
    assert "no model loaded" in status.label.text()
    assert not status.progress.isVisible() and not status._clock.isActive()
    status.on_state(State(EngineState.LOADING, "loading /models/x (vllm asked)"))
    assert status.label.text().startswith("Loading /models/x") and status.progress.isVisible()
    status.on_progress(Progress(None, "reading llm.pt", 0.5))
    assert (status.progress.maximum(), status.progress.value()) == (1000, 500)
    with qtbot.waitSignal(status._clock.timeout, timeout=3000):
        pass
    assert status.label.text().endswith(" s")  # elapsed time while loading

    status.on_state(State(EngineState.READY, backend="pytorch", backend_reason="vLLM is not installed",
                          load_seconds=4.0, warmup_seconds=2.5))  # fmt: skip
    text = status.label.text()
    assert (
        "Ready" in text
        and "ready in 6.5 s (load 4.0 s, warm-up 2.5 s)" in text
        and "vLLM is not installed" in text
    )
    assert not status.progress.isVisible() and not status._clock.isActive()
    assert not status.restart_button.isVisible()
    status.on_state(State(EngineState.READY, backend="vllm", model="Fun-CosyVoice3-0.5B", load_seconds=4.0))
    assert status.label.text().startswith("Ready · Fun-CosyVoice3-0.5B on vllm · ready in 4.0 s")

    status.on_engine_error(Error(None, "the engine process was killed by SIGKILL", "last log lines"))
    status.on_state(State(EngineState.CRASHED, "killed; restart the engine"))
    assert "crashed" in status.label.text().lower()
    assert status.restart_button.isVisible() and status.details_button.isVisible()
    status.restart_button.click()
    assert restarts == [True]
    status.stop()
