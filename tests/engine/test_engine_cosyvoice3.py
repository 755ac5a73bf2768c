"""The real engine process on a tiny CosyVoice3 folder: it loads, says which model it runs, and streams a take
(zero-shot and instructed) as it does for CosyVoice2."""

from __future__ import annotations

import numpy as np
import pytest
from engine_helpers import chunks_of, collect_takes, finished_of, states_until

from studio.engine.client import EngineClient
from studio.engine.protocol import EngineState, LoadModel, Synthesize
from studio.gui.engine.engine_status import describe_state
from studio.request import Mode
from studio.runtime.warmup import WARMUP_PROMPT_TEXT, synthetic_voice

PROMPT = synthetic_voice(16000, 2.0)


@pytest.fixture(scope="module")
def engine(tiny_cosyvoice3_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("engine-cv3")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STUDIO_DATA_DIR", str(folder / "data"))
        client = EngineClient(log_path=folder / "engine.log")
        client.start()
    client.load_model(LoadModel(str(tiny_cosyvoice3_dir), backend="pytorch"))
    states = states_until(client, EngineState.READY)
    yield client, states
    client.shutdown()


def test_the_engine_says_it_runs_cosyvoice3(engine):
    ready = engine[1][-1]
    assert (
        ready.model == "Fun-CosyVoice3-0.5B" and "Fun-CosyVoice3-0.5B on the pytorch backend" in ready.detail
    )
    assert describe_state(ready).startswith("Ready · Fun-CosyVoice3-0.5B on pytorch")


@pytest.mark.parametrize(
    "fields", [dict(prompt_text=WARMUP_PROMPT_TEXT), dict(mode=Mode.INSTRUCT, instruct="Speak slowly.")]
)
def test_a_cosyvoice3_take_streams(engine, fields):
    client = engine[0]
    request = Synthesize(
        "Hello there, studio.", prompt_wav=PROMPT, prompt_sr=16000, stream=True, seed=2, exact_speech_tokens=60,
        **fields,
    )  # fmt: skip
    request_id = client.synthesize(request)
    per_take, _ = collect_takes(client, [request_id])
    chunks = chunks_of(per_take[request_id])
    stats = finished_of(per_take[request_id]).stats
    assert len(chunks) >= 2 and stats.speech_tokens == 60
    audio = np.concatenate([c.samples for c in chunks])
    assert audio.size / chunks[0].sample_rate == pytest.approx(60 / 25, rel=0.02) and np.isfinite(audio).all()
