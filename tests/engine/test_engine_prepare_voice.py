"""`PrepareVoice`: the engine makes a voice's prompt state in the background, so the voice's first take finds
it in the prompt cache instead of making it before its first chunk. The engine's own path (`Engine` ->
`CosyVoice2.prepare_voice` -> the frontend and the prompt flow cache) runs here on the tiny model."""

from __future__ import annotations

import time

import numpy as np
import pytest

from studio.engine.protocol import PrepareVoice, Synthesize, TakeFinished
from studio.runtime.warmup import WARMUP_PROMPT_TEXT, synthetic_voice
from studio.tts.errors import SynthesisError
from studio.tts.flow.streaming.prompt_cache import default_cache

VOICE = 0.4 * synthetic_voice(16000, 2.5, f0=171.0, seed=4711)  # a voice no other test prepares


@pytest.fixture
def engine(engine_in_process):
    return engine_in_process


def cache_counts() -> tuple[int, int]:
    stats = default_cache("cpu").stats()
    return stats["hits"], stats["misses"]


def until_prepared(engine, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while engine.engine._preparer is not None:
        assert time.monotonic() < deadline, "the voice was not prepared in time"
        time.sleep(0.05)


def test_a_prepared_voice_starts_its_first_take_from_the_prompt_cache(engine):
    model = engine.engine.loaded.model
    engine.engine.prepare_voice(PrepareVoice(prompt_wav=VOICE, prompt_sr=16000))
    until_prepared(engine)
    assert not model.prepare_voice(VOICE, 16000)  # made already: nothing to make again
    hits, misses = cache_counts()

    request = Synthesize(
        "Hello there, studio.",
        prompt_wav=VOICE,
        prompt_sr=16000,
        prompt_text=WARMUP_PROMPT_TEXT,
        seed=5,
        exact_speech_tokens=30,
    )
    engine.engine.synthesize(request)
    engine.until(lambda e: isinstance(e, TakeFinished) and e.request_id == request.request_id)
    assert cache_counts() == (hits + 1, misses)  # its first chunk began from the prepared state


def test_voices_sent_while_one_is_prepared_leave_only_the_newest_to_prepare_next(engine):
    voices = [0.4 * synthetic_voice(16000, 2.0, f0=150.0 + 9 * i, seed=900 + i) for i in range(4)]
    for voice in voices:
        engine.engine.prepare_voice(PrepareVoice(prompt_wav=voice, prompt_sr=16000))
    until_prepared(engine)
    model = engine.engine.loaded.model
    assert not model.prepare_voice(voices[-1], 16000)  # the newest was made
    made_now = [model.prepare_voice(voice, 16000) for voice in voices[:-1]]
    assert sum(made_now) >= 2  # skipped while another was made: clicking through voices costs no queue


def test_a_voice_that_cannot_be_prepared_fails_nothing_and_its_take_says_why(engine):
    with pytest.raises(ValueError, match="prompt_wav"):
        PrepareVoice()
    silent = np.zeros(800, np.float32)  # 50 ms: too short for a prompt
    with pytest.raises(SynthesisError):
        engine.engine.loaded.model.prepare_voice(silent, 16000)
    engine.engine.prepare_voice(PrepareVoice(prompt_wav=silent, prompt_sr=16000))  # logged, nothing sent
    until_prepared(engine)
    engine.engine.prepare_voice(PrepareVoice(voice_id="no-such-voice"))
    until_prepared(engine)
    assert not engine.reader.poll(0.2)
