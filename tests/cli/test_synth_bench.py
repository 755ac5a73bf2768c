"""synth writes a valid 24 kHz WAV and reports latency and RTF; bench reports per-concurrency statistics."""

from __future__ import annotations

import json

import pytest
import soundfile as sf

from studio.cli import main
from studio.runtime.warmup import WARMUP_PROMPT_TEXT, synthetic_voice


@pytest.fixture
def prompt_wav(tmp_path):
    path = tmp_path / "prompt.wav"
    sf.write(path, synthetic_voice(22050, 3.0), 22050)  # not 16 kHz on purpose: synth resamples
    return path


def test_synth_writes_a_24k_wav_and_prints_latency_and_rtf(tmp_path, tiny_model_dir, prompt_wav, capsys):
    out = tmp_path / "takes" / "hello.wav"
    rc = main([
        "synth", "--model", str(tiny_model_dir), "--text", "Hello there, studio.",
        "--prompt-wav", str(prompt_wav), "--prompt-text", WARMUP_PROMPT_TEXT,
        "--stream", "--seed", "4", "--tokens", "50", "--out", str(out),
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert rc == 0, printed
    info = sf.info(out)
    assert info.samplerate == 24000 and info.channels == 1 and info.subtype == "PCM_16"
    assert info.duration == pytest.approx(50 / 25, rel=0.05)  # 25 speech tokens per second
    audio, _ = sf.read(out, dtype="float32")
    assert audio.std() > 1e-4  # not silence
    assert "backend: pytorch" in printed
    assert "first-chunk latency:" in printed and "RTF:" in printed
    assert "50 speech tokens" in printed


def test_synth_writes_the_format_of_its_suffix_at_the_rate_and_loudness_asked(
    tmp_path, tiny_model_dir, prompt_wav
):
    import pyloudnorm

    out = tmp_path / "hello.mp3"
    rc = main([
        "synth", "--model", str(tiny_model_dir), "--text", "Hello there, studio.", "--prompt-wav", str(prompt_wav),
        "--prompt-text", WARMUP_PROMPT_TEXT, "--seed", "4", "--tokens", "50", "--out", str(out),
        "--sample-rate", "44100", "--loudness", "-23",
    ])  # fmt: skip
    assert rc == 0
    audio, rate = sf.read(out, dtype="float64")
    assert sf.info(out).format == "MP3" and rate == 44100
    assert abs(pyloudnorm.Meter(rate).integrated_loudness(audio) + 23) < 0.5


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model", "/nonexistent/model", "--prompt-wav", "p.wav"], "model folder not found"),
        (["--prompt-wav", "p.wav", "--out", "take.aiff"], "end it in .wav, .flac, .mp3, .ogg, .opus"),
        (
            ["--prompt-wav", "p.wav", "--out", "take.opus", "--sample-rate", "44100"],
            "Opus needs a sample rate",
        ),
        (["--prompt-text", "x"], "--prompt-wav"),
        (["--prompt-wav", "/nonexistent/p.wav"], "p.wav"),
    ],
)
def test_synth_bad_input_is_a_clear_error(tmp_path, tiny_model_dir, capsys, extra, message):
    args = (
        ["synth", "--text", "Hi."] + ([] if "--out" in extra else ["--out", str(tmp_path / "o.wav")]) + extra
    )
    if "--model" not in extra:
        args += ["--model", str(tiny_model_dir)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and message in err and "Traceback" not in err
    assert not (tmp_path / "o.wav").exists()


def test_bench_reports_each_concurrency_with_fixed_token_counts(tmp_path, tiny_model_dir, capsys):
    report_path = tmp_path / "bench.json"
    rc = main([
        "bench", "--model", str(tiny_model_dir), "--backends", "pytorch", "--concurrency", "1,2",
        "--runs", "1", "--tokens", "30", "--json", str(report_path), "--first-hop", "10",
        "--first-hop-levels", "1",
    ])  # fmt: skip
    assert rc == 0
    report = json.loads(report_path.read_text())
    (backend,) = report["backends"]
    assert backend["backend"] == "pytorch" and backend["warmup_seconds"] > 0
    # the levels as asked, then level 1 again with its first chunk after 10 tokens
    levels = [(level["concurrency"], level["first_hop_tokens"]) for level in backend["levels"]]
    assert levels == [(1, 0), (2, 0), (1, 10)]
    for level in backend["levels"]:
        assert level["takes"] == level["concurrency"] and level["stall_s"]["min"] >= 0.0
        assert level["speech_tokens_per_take"] == 30
        assert level["audio_seconds_per_take"] == pytest.approx(30 / 25, rel=0.05)
        latency = level["first_chunk_latency_s"]
        assert 0 < latency["min"] <= latency["avg"] <= latency["max"] and latency["p95"] <= latency["max"]
        assert level["audio_seconds_per_second"]["avg"] > 0
        assert sum(level["stage_share"].values()) == pytest.approx(1.0)
        assert {"llm", "flow", "hift"} <= set(level["stage_seconds"])
    assert backend["peak_vram_bytes"] is None  # no GPU here: reported as unknown, not zero
    printed = capsys.readouterr().out
    assert "pytorch  x1" in printed and "pytorch  x2" in printed and "hop10 x1 " in printed
    assert "pytorch: peak VRAM n/a (no GPU)" in printed


def test_synth_to_a_full_disk_keeps_the_take_in_the_recovery_folder(
    tmp_path, tiny_model_dir, prompt_wav, capsys, small_disk
):
    from studio.recovery import recovery_store

    out = small_disk(16) / "hello.wav"
    rc = main([
        "synth", "--model", str(tiny_model_dir), "--text", "Hello there, studio.",
        "--prompt-wav", str(prompt_wav), "--prompt-text", WARMUP_PROMPT_TEXT,
        "--seed", "4", "--tokens", "50", "--out", str(out),
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert "is full (ENOSPC)" in err and str(out.parent) in err and "kept as" in err
    (kept,) = recovery_store().list()
    assert kept.duration_s == pytest.approx(2.0, rel=0.05) and str(recovery_store().wav_path(kept.id)) in err
    assert not out.exists()


def test_bench_asks_the_gpu_its_name_only_after_the_engines_started(tmp_path, tiny_model_dir, monkeypatch):
    # A CUDA call before vLLM starts makes vLLM spawn its engine process (~20 s slower) instead of forking.
    import torch

    from studio.commands import bench

    order = []
    monkeypatch.setattr(
        bench, "bench_backend", lambda args, backend: order.append(backend) or {"backend": backend}
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: order.append("cuda") or "GPU")
    out = tmp_path / "bench.json"
    assert main(["bench", "--model", str(tiny_model_dir), "--backends", "pytorch", "--json", str(out)]) == 0
    assert order == ["pytorch", "cuda"] and json.loads(out.read_text())["cuda_device"] == "GPU"


def test_bench_logs_the_flows_work_arena_and_counts_every_graph_cache(
    tmp_path, tiny_model_dir, capsys, monkeypatch
):
    monkeypatch.setenv("STUDIO_FLOW_SCHEDULER", "1")  # the scheduled flow, as on a GPU
    report_path = tmp_path / "bench.json"
    rc = main([
        "bench", "--model", str(tiny_model_dir), "--backends", "pytorch", "--concurrency", "2",
        "--runs", "1", "--tokens", "30", "--json", str(report_path), "--log-graphs",
    ])  # fmt: skip
    assert rc == 0
    assert "flow: work arena of" in capsys.readouterr().err  # when a take would have stalled, and why
    (level,) = json.loads(report_path.read_text())["backends"][0]["levels"]
    counters = level["flow_solver"]
    assert counters["jobs"] >= 2 and counters["captures"] == counters["encoder_captures"] == 0  # no GPU
    assert counters["hift_captures"] == 0
    # the voice's prompt state, computed in the untimed rounds, is found by both timed takes
    assert counters["prompt_cache_hits"] >= 2 and counters["prompt_cache_evictions"] == 0


def test_synth_runs_without_a_writable_config_folder(
    tmp_path, tiny_model_dir, prompt_wav, monkeypatch, capsys
):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("STUDIO_CONFIG_DIR", str(blocker / "config"))
    out = tmp_path / "take.wav"
    prompt = ["--prompt-wav", str(prompt_wav), "--prompt-text", WARMUP_PROMPT_TEXT]
    rc = main(["synth", "--model", str(tiny_model_dir), "--text", "Hello there.", *prompt, "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    assert sf.info(out).frames > 0


def test_a_long_synth_shows_progress_and_a_too_long_one_is_refused_before_loading(
    tmp_path, tiny_model_dir, prompt_wav, capsys, monkeypatch
):
    from studio.commands import synth
    from studio.runtime import runner

    prompt = ["--prompt-wav", str(prompt_wav), "--prompt-text", WARMUP_PROMPT_TEXT]
    long_text = tmp_path / "long.txt"
    long_text.write_text("x" * (synth.MAX_TEXT_CHARS + 1), encoding="utf-8")
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("the model loaded"))
    for text in (["--text", "y" * (synth.MAX_TEXT_CHARS + 1)], ["--text-file", str(long_text)]):
        rc = main(["synth", "--model", str(tiny_model_dir), *text, *prompt, "--out", str(tmp_path / "t.wav")])
        err = capsys.readouterr().err
        assert rc == 2 and "at most 50,000 characters" in err and "render" in err
    monkeypatch.undo()

    text = " ".join(f"This is sentence number {n} of a long text for the progress test." for n in range(9))
    assert len(text) >= synth.PROGRESS_FROM_CHARS
    out = tmp_path / "long.wav"
    rc = main(
        [
            "synth",
            "--model",
            str(tiny_model_dir),
            "--text",
            text,
            *prompt,
            "--seed",
            "1",
            "--tokens",
            "10",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 0, err
    lines = [line for line in err.splitlines() if line.startswith("progress: ")]
    assert len(lines) >= 2 and lines[1].startswith("progress: segment 2, ") and "s of audio in" in lines[-1]
