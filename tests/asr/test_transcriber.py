"""Automatic transcripts on the tiny random Whisper: the folder loads like a real one, a recording becomes
text and a language, and every way it cannot work is a clear sentence, never an empty transcript."""

from __future__ import annotations

import io

import numpy as np
import pytest

from studio.asr.transcriber import AsrError, AsrUnavailable, Transcriber, language_names, resolve_model
from studio.runtime.warmup import synthetic_voice

RATE = 16000


@pytest.fixture(scope="module")
def transcriber(tiny_asr_dir):
    return Transcriber(tiny_asr_dir, device="cpu")


@pytest.fixture(scope="module")
def reference():
    return synthetic_voice(RATE, 10.0)


def test_the_folder_has_the_official_layout_and_loads_with_transformers(tiny_asr_dir):
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    names = {p.name for p in tiny_asr_dir.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "preprocessor_config.json",
            "tokenizer_config.json", "vocab.json", "merges.txt"} <= names  # fmt: skip
    model = WhisperForConditionalGeneration.from_pretrained(tiny_asr_dir)
    processor = WhisperProcessor.from_pretrained(tiny_asr_dir)
    assert len(model.generation_config.lang_to_id) == len(language_names())
    assert processor.tokenizer.convert_tokens_to_ids("<|en|>") == model.generation_config.lang_to_id["<|en|>"]


def test_a_recording_becomes_text_and_a_detected_language(transcriber, reference):
    heard = transcriber.transcribe(reference, RATE)
    assert (
        heard.text
        and heard.language in language_names()
        and heard.language_name == language_names()[heard.language]
    )
    assert heard.seconds > 0 and heard.model


def test_a_given_language_is_used_and_a_rate_other_than_16k_is_resampled(transcriber, reference):
    import soxr

    heard = transcriber.transcribe(soxr.resample(reference, RATE, 44100), 44100, language="German")
    assert heard.language == "de" and heard.text


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: np.zeros(RATE * 5, np.float32), "no speech"),
        (lambda: synthetic_voice(RATE, 40.0), "at most 30 s"),
        (lambda: np.zeros(0, np.float32), "empty"),
    ],
    ids=["silence", "too-long", "empty"],
)
def test_what_cannot_be_transcribed_says_why(transcriber, make, message):
    with pytest.raises(AsrError, match=message):
        transcriber.transcribe(make(), RATE)


def test_an_unknown_language_is_refused(transcriber, reference):
    with pytest.raises(AsrError, match="unknown language 'klingon'"):
        transcriber.transcribe(reference, RATE, language="klingon")


def test_no_model_here_means_type_the_transcript(tmp_path, monkeypatch):
    import huggingface_hub.constants

    with pytest.raises(AsrUnavailable, match="does not exist"):
        resolve_model(str(tmp_path / "no-such-whisper"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(AsrUnavailable, match="not a Whisper model folder"):
        resolve_model(str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # the hub is out of reach here
    with pytest.raises(AsrUnavailable, match="could not be downloaded.*type the transcript"):
        resolve_model("openai/whisper-tiny")


def test_download_progress_is_reported_in_steps():
    from studio.asr.transcriber import progress_bars

    said = []
    bars = progress_bars("openai/whisper-tiny", said.append, step=0.25)(total=8, file=io.StringIO())
    for _ in range(8):
        bars.update(1)
    bars.close()
    assert said == [
        f"downloading the ASR model openai/whisper-tiny: {p}% of 8 files" for p in (12, 38, 62, 88, 100)
    ]
