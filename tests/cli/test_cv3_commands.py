"""A CosyVoice3 folder through the real entry points, as for CosyVoice2: ``synth`` (offline and streamed),
``bench``, ``render`` (zero-shot and instructed lines), ``serve`` through the official OpenAI SDK, and ``synth
--backend vllm`` (vLLM's stock Qwen2 class on this CPU)."""

from __future__ import annotations

import io
import json

import numpy as np
import openai
import pytest
import soundfile as sf

from studio.cli import main
from studio.runtime.warmup import WARMUP_PROMPT_TEXT, synthetic_voice


@pytest.fixture
def prompt_wav(tmp_path):
    path = tmp_path / "prompt.wav"
    sf.write(path, synthetic_voice(16000, 3.0), 16000)
    return path


def _synth(model, prompt_wav, out, *extra):
    return main([
        "synth", "--model", str(model), "--text", "Hello there, studio.", "--prompt-wav", str(prompt_wav),
        "--prompt-text", WARMUP_PROMPT_TEXT, "--seed", "4", "--tokens", "60", "--out", str(out), *extra,
    ])  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
def test_synth_speaks_with_a_cosyvoice3_folder(tmp_path, tiny_cosyvoice3_dir, prompt_wav, capsys, stream):
    out = tmp_path / "take.wav"
    rc = _synth(tiny_cosyvoice3_dir, prompt_wav, out, *(["--stream"] if stream else []))
    printed = capsys.readouterr().out
    assert rc == 0, printed
    audio, rate = sf.read(out, dtype="float32")
    assert rate == 24000 and len(audio) / rate == pytest.approx(60 / 25, rel=0.05)
    assert np.isfinite(audio).all() and audio.std() > 1e-4
    assert "60 speech tokens" in printed and "backend: pytorch" in printed


def test_bench_reports_a_cosyvoice3_folder(tmp_path, tiny_cosyvoice3_dir, monkeypatch):
    monkeypatch.setenv("STUDIO_FLOW_SCHEDULER", "1")  # the scheduled flow, as on a GPU
    report = tmp_path / "bench.json"
    rc = main([
        "bench", "--model", str(tiny_cosyvoice3_dir), "--backends", "pytorch", "--concurrency", "1,2",
        "--tokens", "40", "--runs", "1", "--warmup-rounds", "0", "--json", str(report),
    ])  # fmt: skip
    assert rc == 0
    written = json.loads(report.read_text())
    assert written["family"] == "CosyVoice3"
    levels = written["backends"][0]["levels"]
    assert [level["concurrency"] for level in levels] == [1, 2]
    assert all(
        level["takes"] == level["concurrency"] and level["audio_seconds_per_second"]["avg"] > 0
        for level in levels
    )
    counters = levels[1]["flow_solver"]  # CosyVoice3's flow: its scheduler's batches, no graphs off CUDA
    assert counters["dit_calls"] >= 2 and counters["requests"] == counters["dit_calls"]
    assert counters["captures"] == counters["eager_calls"] == 0


def test_render_reads_a_script_with_a_cosyvoice3_folder(tmp_path, tiny_cosyvoice3_dir):
    alice = tmp_path / "alice.wav"
    sf.write(alice, 0.4 * synthetic_voice(16000, 3.0), 16000)
    script = tmp_path / "script.txt"
    script.write_text(
        "[Alice] A first line.\n\n[Alice|Speak slowly] A second line, said slowly.\n", encoding="utf-8"
    )
    rc = main([
        "render", str(script), "--model", str(tiny_cosyvoice3_dir), "--out", str(tmp_path / "out"),
        "--voice", f"Alice={alice}:A calm voice reads a few words.", "--seed", "7",
    ])  # fmt: skip
    assert rc == 0
    manifest = json.loads((tmp_path / "out" / "script.json").read_text())
    files = [tmp_path / "out" / line["file"] for line in manifest["lines"]]
    assert len(files) == 2 and all(sf.info(f).duration > 0.2 for f in files)


@pytest.fixture(scope="module")
def cv3_server(tiny_cosyvoice3_dir, tmp_path_factory):
    import torch

    from studio.serve.service import SpeechService
    from studio.voices import VoiceLibrary
    from tests.serve.conftest import running_server

    torch.set_num_threads(1)
    voices = VoiceLibrary(tmp_path_factory.mktemp("voices"))
    service = SpeechService(str(tiny_cosyvoice3_dir), voices, backend="pytorch", warmup=False)
    yield from running_server(service)


def test_serve_answers_the_openai_sdk_with_a_cosyvoice3_folder(cv3_server):
    from tests.serve.conftest import API_KEY, register_voice

    voice = register_voice(cv3_server, "Narrator CV3")
    with openai.OpenAI(base_url=f"{cv3_server}/v1", api_key=API_KEY, max_retries=0, timeout=120) as sdk:
        whole = sdk.audio.speech.create(model="tts-1", voice=voice, input="Hello from CosyVoice3.")
        audio, rate = sf.read(io.BytesIO(whole.content), dtype="float32")
        assert rate == 24000 and audio.size > rate // 4 and np.isfinite(audio).all()
        with sdk.audio.speech.with_streaming_response.create(
            model="tts-1", voice=voice, input="A streamed answer.", response_format="pcm"
        ) as answer:
            pcm = b"".join(answer.iter_bytes())
        assert len(pcm) > 2 * rate // 4


@pytest.mark.vllm
def test_synth_on_vllm_with_a_cosyvoice3_folder(tmp_path, tiny_cosyvoice3_dir, prompt_wav, capsys):
    out = tmp_path / "take.wav"
    rc = _synth(tiny_cosyvoice3_dir, prompt_wav, out, "--vllm", "--stream")
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert "backend: vllm" in printed
    audio, rate = sf.read(out, dtype="float32")
    assert len(audio) / rate == pytest.approx(60 / 25, rel=0.05) and np.isfinite(audio).all()
