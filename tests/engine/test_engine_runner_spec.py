"""Requests become runtime specs: modes map to upstream names, saved voices come from the voice library."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from studio.engine.protocol import Synthesize
from studio.runtime.runner import build_spec
from studio.settings import data_dir
from studio.voices import VoiceLibrary


@pytest.mark.parametrize(
    ("mode", "expected", "extra"),
    [
        ("zero-shot", "zero_shot", {}),
        ("cross-lingual", "cross_lingual", {}),
        ("instruct", "instruct2", {"instruct": "calm"}),
    ],
)
def test_modes_and_knobs_carry_over(mode, expected, extra):
    cancel = threading.Event()
    request = Synthesize("Hi.", mode=mode, prompt_wav=np.ones(100), prompt_sr=22050, prompt_text="p",
                         speed=1.5, seed=9, stream=False, exact_speech_tokens=12, **extra)  # fmt: skip
    spec = build_spec(request, cancel)
    spec.validate()
    assert (
        spec.mode.upstream_name == expected
        and spec.prompt_sr == 22050
        and spec.speed == 1.5
        and spec.seed == 9
    )
    assert spec.stream is False and spec.exact_speech_tokens == 12 and spec.cancel is cancel
    assert spec.instruct_text == extra.get("instruct", "")


def test_a_saved_voice_supplies_prompt_and_transcript():
    prompt = np.sin(np.linspace(0, 200, 16000)).astype(np.float32) * 0.3
    VoiceLibrary(data_dir() / "voices").save("Ada Reads", prompt, 16000, transcript="hello from ada")
    spec = build_spec(Synthesize("Hi.", voice_id="ada-reads"))
    assert spec.prompt_sr == 16000 and spec.prompt_text == "hello from ada" and spec.spk_id == ""
    np.testing.assert_allclose(spec.prompt_wav, prompt, atol=1e-6)


def test_an_unknown_voice_is_passed_on_as_the_models_speaker_id():
    spec = build_spec(Synthesize("Hi.", voice_id="spk-7"))
    assert spec.spk_id == "spk-7" and spec.prompt_wav is None


class PacedModel:
    """Yields 0.1 s chunks at set moments (the model is the boundary; run_take's accounting is the test)."""

    sample_rate = 24000

    def __init__(self, delays: list[float]):
        self.delays = delays

    def synthesize(self, spec):
        import time

        for delay in self.delays:
            time.sleep(delay)
            yield {"tts_speech": np.zeros(2400, dtype=np.float32), "speech_tokens": 3}


def test_stall_is_how_long_playback_from_the_first_chunk_would_wait():
    from studio.runtime.runner import run_take

    request = Synthesize("Hi.", mode="zero-shot", prompt_wav=np.ones(100), prompt_sr=16000, prompt_text="p")
    ahead = run_take(PacedModel([0.0, 0.02, 0.02, 0.02]), request)
    assert ahead.stall_seconds == 0.0 and ahead.audio_seconds == pytest.approx(0.4)
    # the second chunk comes 0.25 s after the first, whose 0.1 s have played by then: 0.15 s of silence;
    # the third arrives at once, while the second still plays
    late = run_take(PacedModel([0.0, 0.25, 0.0]), request)
    assert late.stall_seconds == pytest.approx(0.15, abs=0.04)
