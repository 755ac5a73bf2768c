"""The command line transcribes a reference, builds test Whisper folders, and lets zero-shot synth go
without a typed transcript; bad input is a clear message and exit status 2."""

from __future__ import annotations

import json

import pytest
import soundfile as sf

from studio.cli import main
from studio.runtime.warmup import synthetic_voice


@pytest.fixture
def reference(tmp_path):
    path = tmp_path / "me.wav"
    sf.write(path, synthetic_voice(22050, 6.0), 22050)
    return path


def test_make_asr_model_writes_a_folder_transformers_loads(tmp_path, capsys):
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    assert main(["make-asr-model", "--size", "tiny", str(tmp_path / "whisper")]) == 0
    assert "wrote tiny Whisper model" in capsys.readouterr().out
    WhisperForConditionalGeneration.from_pretrained(tmp_path / "whisper")
    WhisperProcessor.from_pretrained(tmp_path / "whisper")


def test_transcribe_prints_json_with_the_text_and_language(reference, tiny_asr_dir, capsys):
    assert main(["transcribe", str(reference), "--asr-model", str(tiny_asr_dir), "--json"]) == 0
    heard = json.loads(capsys.readouterr().out)
    assert heard["text"] and len(heard["language"]) <= 3 and heard["seconds"] > 0


def test_transcribe_bad_input_says_what_is_wrong(tmp_path, reference, tiny_asr_dir, capsys):
    import numpy as np

    sf.write(tmp_path / "silence.wav", np.zeros(16000 * 3, np.float32), 16000)
    from audio.audio_signals import sparse_long_wav  # tests/audio (tests/ is on the path: its conftest)

    sparse_long_wav(tmp_path / "two-hours.wav", 2.0, synthetic_voice(16000, 1.0), 16000)
    for audio, model, message in [
        (tmp_path / "silence.wav", tiny_asr_dir, "silent"),
        (tmp_path / "two-hours.wav", tiny_asr_dir, "2"),
        (reference, tmp_path / "missing", "type the transcript"),
    ]:
        assert main(["transcribe", str(audio), "--asr-model", str(model)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_zero_shot_synth_without_a_transcript_transcribes_the_prompt(
    tmp_path, reference, tiny_model_dir, tiny_asr_dir, capsys
):
    out = tmp_path / "take.wav"
    rc = main([
        "synth", "--model", str(tiny_model_dir), "--text", "Hello there.", "--prompt-wav", str(reference),
        "--asr-model", str(tiny_asr_dir), "--tokens", "25", "--seed", "1", "--out", str(out),
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert rc == 0 and "heard in the prompt" in printed and out.is_file()


def test_zero_shot_synth_without_transcript_or_model_is_a_clear_error(
    tmp_path, reference, tiny_model_dir, capsys
):
    rc = main([
        "synth", "--model", str(tiny_model_dir), "--text", "Hello there.", "--prompt-wav", str(reference),
        "--asr-model", str(tmp_path / "missing"), "--out", str(tmp_path / "take.wav"),
    ])  # fmt: skip
    assert rc == 2 and "give --prompt-text" in capsys.readouterr().err
