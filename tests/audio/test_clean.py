"""Cleaning prompts: 16 kHz mono, -3 dBFS peak, edges trimmed to the speech, every step reported."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import soundfile as sf
from audio_signals import sparse_long_wav, synthetic_speech

from studio.audio import errors
from studio.audio.clean import CleanOptions, clean_file, clean_prompt, detect_clipping

EDGE_TOLERANCE_S = 0.1


def peak_dbfs(x: np.ndarray) -> float:
    return 20 * np.log10(np.max(np.abs(x)))


def assert_trimmed_to_speech(report, speech, cleaned_len: int) -> None:
    trim = next(step for step in report.steps if step.name == "trim").figures
    assert abs(trim["speech_start_s"] - speech.start_s) <= EDGE_TOLERANCE_S, (trim, speech.start_s)
    assert abs(trim["speech_end_s"] - speech.end_s) <= EDGE_TOLERANCE_S, (trim, speech.end_s)
    assert cleaned_len == pytest.approx((trim["speech_end_s"] - trim["speech_start_s"]) * 16000, abs=2)


@pytest.mark.parametrize(
    ("fmt", "subtype", "sr", "channels"),
    [
        ("WAV", "PCM_16", 8000, 1),
        ("WAV", "PCM_16", 22050, 2),
        ("WAV", "PCM_24", 44100, 1),
        ("WAV", "FLOAT", 48000, 6),
        ("WAV", "PCM_32", 192000, 1),
        ("FLAC", "PCM_24", 96000, 2),
        ("OGG", "VORBIS", 32000, 1),
        ("OGG", "OPUS", 48000, 1),
        ("MP3", "MPEG_LAYER_III", 44100, 2),
    ],
)
def test_clean_file_gives_a_trimmed_normalised_16k_mono_prompt(
    tmp_path, padded_speech, fmt, subtype, sr, channels
):
    import soxr

    speech = padded_speech
    x = soxr.resample(speech.samples, speech.sample_rate, sr).astype(np.float32) * 0.6
    if channels > 1:
        x = np.outer(x, np.linspace(1.0, 0.5, channels)).astype(np.float32)
    source = tmp_path / f"voice.{fmt.lower()}"
    sf.write(source, x, sr, format=fmt, subtype=subtype)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()

    report = clean_file(source, tmp_path / "voice.clean.wav")

    cleaned, rate = sf.read(tmp_path / "voice.clean.wav", dtype="float32", always_2d=True)
    assert rate == 16000 and cleaned.shape[1] == 1
    assert abs(peak_dbfs(cleaned[:, 0]) - (-3.0)) <= 0.1
    assert_trimmed_to_speech(report, speech, len(cleaned))
    assert hashlib.sha256(source.read_bytes()).hexdigest() == digest  # the original is untouched
    assert report.after.sample_rate == 16000 and report.before.sample_rate == sr
    assert [s.name for s in report.steps] == [
        "load",
        "clipping",
        "dc",
        "resample",
        "trim",
        "length",
        "normalise",
    ]


def test_trim_follows_the_speech_under_a_noise_floor(padded_speech, espeak_speech):
    speech = espeak_speech.padded(1.5, 0.7, noise=1e-3, seed=3)
    result = clean_prompt(speech.samples, speech.sample_rate)
    assert_trimmed_to_speech(result.report, speech, len(result.samples))


def test_report_is_json_with_before_and_after_figures(tmp_path, padded_speech):
    sf.write(tmp_path / "in.wav", padded_speech.samples + 0.05, padded_speech.sample_rate, subtype="FLOAT")
    report = clean_file(tmp_path / "in.wav", tmp_path / "out.flac")
    data = json.loads(report.to_json())
    assert data["before"]["dc_offset"] == pytest.approx(0.05, abs=1e-3)
    assert abs(data["after"]["dc_offset"]) < 5e-3
    assert data["after"]["peak_dbfs"] == pytest.approx(-3.0, abs=0.01)
    assert data["input"]["sample_rate"] == padded_speech.sample_rate
    assert data["output_path"].endswith("out.flac")
    dc_step = next(s for s in data["steps"] if s["name"] == "dc")
    assert dc_step["figures"]["offset_removed"] == pytest.approx(0.05, abs=1e-3)
    assert "Before:" in report.text() and "After :" in report.text()


def test_clean_file_never_overwrites_the_original_or_an_existing_output(tmp_path, padded_speech):
    source = tmp_path / "voice.wav"
    sf.write(source, padded_speech.samples, padded_speech.sample_rate)
    before = source.read_bytes()
    with pytest.raises(errors.ExportError, match="original"):
        clean_file(source, source, overwrite=True)
    (tmp_path / "taken.wav").write_bytes(b"keep me")
    with pytest.raises(errors.OutputExistsError):
        clean_file(source, tmp_path / "taken.wav")
    assert (tmp_path / "taken.wav").read_bytes() == b"keep me"
    clean_file(source, tmp_path / "taken.wav", overwrite=True)
    assert sf.info(tmp_path / "taken.wav").samplerate == 16000
    assert source.read_bytes() == before
    with pytest.raises(errors.ExportError, match=".wav or .flac"):
        clean_file(source, tmp_path / "out.mp3")


def test_short_speech_is_cleaned_with_a_warning(espeak_speech):
    sr = espeak_speech.sample_rate
    short = espeak_speech.samples[: int(1.2 * sr)]
    result = clean_prompt(short, sr)
    assert any("lasts only" in w for w in result.report.warnings)
    assert len(result.samples) / 16000 < 3.0


def _long_speech():
    """About 40 s of synthetic syllables with longer pauses every eighth syllable."""
    sylls, t = [], 0.5
    for i in range(80):
        sylls.append((t, t + 0.3))
        t += 0.45 + (0.7 if i % 8 == 7 else 0.0)
    return synthetic_speech(16000, sylls), sylls


def test_long_speech_gets_cut_offers_at_pauses_and_auto_cut(tmp_path):
    x, sylls = _long_speech()
    result = clean_prompt(x, 16000)
    offers = result.report.cut_offers
    assert len(result.samples) / 16000 > 30  # only offered, not cut
    assert offers and any("Cut at" in w for w in result.report.warnings)
    best = offers[0]
    assert 3.0 <= best["time_s"] <= 30.0 and best["kind"] == "pause"
    start = next(s for s in result.report.steps if s.name == "trim").figures["speech_start_s"]
    at = best["time_s"] + start  # in the input's time
    assert not any(a < at < b for a, b in sylls), "the cut falls inside a syllable"
    assert best["pause_s"] >= 0.7

    auto = clean_prompt(x, 16000, CleanOptions(cut="auto"))
    assert 3.0 <= len(auto.samples) / 16000 <= 30.0
    assert abs(peak_dbfs(auto.samples) + 3.0) <= 0.1
    assert [s.name for s in auto.report.steps][-2:] == ["cut", "normalise"]

    fixed = clean_prompt(x, 16000, CleanOptions(cut=12.5))
    assert len(fixed.samples) == 12.5 * 16000
    tiny = clean_prompt(x, 16000, CleanOptions(cut=2.0))
    assert any("shorter than 3 s" in w for w in tiny.report.warnings)


def test_long_file_is_read_only_up_to_the_limit(tmp_path):
    x, _ = _long_speech()
    sf.write(tmp_path / "long.wav", np.tile(x, 4), 16000)  # ~3 minutes
    report = clean_file(
        tmp_path / "long.wav", tmp_path / "out.wav", CleanOptions(max_read_s=35.0, cut="auto")
    )
    assert report.steps[0].figures["read_s"] == pytest.approx(35.0)
    assert "only its first 35 s" in report.warnings[0]


def test_two_hour_recording_is_cleaned_from_its_start_without_loading_it(tmp_path, padded_speech):
    import soxr

    head = soxr.resample(padded_speech.samples, padded_speech.sample_rate, 16000)
    sparse_long_wav(tmp_path / "two_hours.wav", 2.0, head, 16000)
    report = clean_file(tmp_path / "two_hours.wav", tmp_path / "prompt.wav")
    assert report.input["duration_s"] == pytest.approx(7200)
    assert report.steps[0].figures["read_s"] == pytest.approx(120.0)
    assert "120.0 min; only its first 120 s" in report.warnings[0]
    assert report.after.duration_s == pytest.approx(padded_speech.end_s - padded_speech.start_s, abs=0.2)


def test_clipping_is_detected_and_reported(espeak_speech):
    loud = np.clip(espeak_speech.samples * 4.0, -1.0, 1.0)
    result = clean_prompt(loud, espeak_speech.sample_rate)
    clip = next(s for s in result.report.steps if s.name == "clipping").figures
    assert clip["clipped_places"] > 10 and clip["clipped_samples"] > 3 * clip["clipped_places"] - 1
    assert any("clipped" in w for w in result.report.warnings)
    clean = clean_prompt(espeak_speech.samples * 0.5, espeak_speech.sample_rate)
    assert detect_clipping(espeak_speech.samples * 0.5) == (0, 0)
    assert not any("clipped" in w for w in clean.report.warnings)


def test_noise_without_speech_and_silence_get_their_errors():
    rng = np.random.default_rng(1)
    hiss = (0.05 * rng.standard_normal(16000 * 3)).astype(np.float32)
    with pytest.raises(errors.NoSpeechError, match="No speech"):
        clean_prompt(hiss, 16000)
    with pytest.raises(errors.SilentAudioError):
        clean_prompt(np.zeros(16000, dtype=np.float32), 16000)
    with pytest.raises(ValueError, match="mono"):
        clean_prompt(np.zeros((100, 2), dtype=np.float32), 16000)
    with pytest.raises(errors.UnsupportedAudioError, match="0 Hz"):
        clean_prompt(hiss, 0)


def test_denoise_option_lowers_the_noise_between_words(espeak_speech):
    speech = espeak_speech.padded(0.5, 0.5, noise=0.01, seed=5)
    plain = clean_prompt(speech.samples, speech.sample_rate)
    denoised = clean_prompt(speech.samples, speech.sample_rate, CleanOptions(denoise=True))
    assert "denoise" in [s.name for s in denoised.report.steps]

    def quietest_frames_db(x):
        frames = x[: len(x) // 320 * 320].reshape(-1, 320)
        return 10 * np.log10(np.percentile(np.mean(frames**2, axis=1), 10))

    assert quietest_frames_db(denoised.samples) < quietest_frames_db(plain.samples) - 6


def test_a_prompt_longer_than_synth_takes_is_never_written(tmp_path):
    from studio.audio.io import load_audio
    from studio.request import MAX_PROMPT_SECONDS

    x, _ = _long_speech()
    sparse_long_wav(tmp_path / "two_hours.wav", 2.0, np.tile(x, 4), 16000)  # 3 min of speech, then silence
    with pytest.raises(errors.PromptTooLongError, match=r"at most 30 s.*--cut auto.*nothing was written"):
        clean_file(tmp_path / "two_hours.wav", tmp_path / "prompt.wav")
    assert not (tmp_path / "prompt.wav").exists()
    with pytest.raises(errors.PromptTooLongError):
        clean_file(tmp_path / "two_hours.wav", tmp_path / "prompt.wav", CleanOptions(cut=100.0))
    uncut = clean_prompt(x, 16000)  # the studio offers cuts for the uncut speech and grades it unusable
    assert uncut.quality.verdict == "poor" and "long" in [p.code for p in uncut.quality.problems]
    report = clean_file(tmp_path / "two_hours.wav", tmp_path / "prompt.wav", CleanOptions(cut="auto"))
    assert report.after.duration_s <= MAX_PROMPT_SECONDS
    assert (
        load_audio(tmp_path / "prompt.wav", max_duration_s=MAX_PROMPT_SECONDS).duration_s <= 30.0
    )  # synth's read
