"""The words about a reference recording: one length advice everywhere (`PROMPT_LENGTH_ADVICE`), and error
messages that embed a name read as sentences ("No speech was found in the recording", "The audio is silent")."""

from __future__ import annotations

import numpy as np
import pytest
from audio_signals import synthetic_speech

from studio.audio import errors
from studio.audio.clean import clean_prompt
from studio.audio.io import validate_samples
from studio.audio.quality import SPEECH_S, assess_reference
from studio.request import BEST_PROMPT_SECONDS, MAX_PROMPT_SECONDS, PROMPT_LENGTH_ADVICE

RATE = 16000


def _hiss(seconds: float = 3.0) -> np.ndarray:
    return (0.05 * np.random.default_rng(1).standard_normal(int(RATE * seconds))).astype(np.float32)


def test_the_length_advice_names_the_best_range_and_the_limit():
    low, high = BEST_PROMPT_SECONDS
    assert PROMPT_LENGTH_ADVICE == f"{low:g}-{high:g} s works best ({MAX_PROMPT_SECONDS:g} s at most)"
    assert SPEECH_S[0] == low  # the quality check calls less speech than the advised least "short"


def test_too_little_speech_gets_the_one_length_advice():
    short = synthetic_speech(RATE, [(0.2, 0.5), (0.7, 1.0), (1.2, 1.6)]) * 0.8
    quality = assess_reference(short, RATE)
    (too_short,) = [p for p in quality.problems if p.code == "short"]
    assert PROMPT_LENGTH_ADVICE in too_short.advice
    result = clean_prompt(short, RATE)
    (warning,) = [w for w in result.report.warnings if "lasts only" in w]
    assert PROMPT_LENGTH_ADVICE in warning


def test_a_name_reads_as_part_of_the_sentence():
    with pytest.raises(errors.NoSpeechError) as caught:
        clean_prompt(_hiss(), RATE)
    message = str(caught.value)
    assert message.startswith("No speech was found in the recording;"), message
    assert PROMPT_LENGTH_ADVICE in message
    # a file keeps its name as written; a generic name is capitalised where it starts a sentence
    with pytest.raises(errors.NoSpeechError, match=r"^No speech was found in my voice\.wav;"):
        clean_prompt(_hiss(), RATE, name="my voice.wav")
    with pytest.raises(errors.SilentAudioError, match=r"^The audio is silent"):
        validate_samples(np.zeros(RATE, dtype=np.float32))
    with pytest.raises(errors.SilentAudioError, match=r"^The recording is silent"):
        clean_prompt(np.zeros(RATE, dtype=np.float32), RATE)
    with pytest.raises(errors.EmptyAudioError, match=r"^notes\.wav holds no audio samples"):
        validate_samples(np.zeros(0, dtype=np.float32), name="notes.wav")
    with pytest.raises(errors.UnsupportedAudioError, match=r"^The recording is sampled at 0 Hz"):
        clean_prompt(_hiss(), 0)
