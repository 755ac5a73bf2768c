"""bench --workload: seeded take lengths, underruns and per-level figures with the JSON keys benchmarks read."""

from __future__ import annotations

import json
import statistics
from types import SimpleNamespace

import pytest

from studio import workloads
from studio.cli import main
from studio.commands.bench_counters import memory_counters
from studio.commands.bench_workload import text_ratio
from studio.tts.device.vram_budget import GIB, plan_vram
from studio.tts.take_gate import TakeGate


def test_workloads_are_seeded_distributions_of_take_lengths_with_texts_sized_to_the_bound():
    sentences = workloads.takes("sentences", 2000)
    assert sentences == workloads.takes("sentences", 2000)  # the same takes on every machine
    assert sentences != workloads.takes("sentences", 2000, seed=1)
    seconds = [t.seconds for t in sentences]
    assert min(seconds) >= 2.0 and max(seconds) <= 30.0 and 7.0 <= statistics.median(seconds) <= 9.0
    assert {t.voice for t in sentences} == set(range(workloads.VOICES))
    for take in sentences[:50]:
        assert take.speech_tokens == round(take.seconds * 25)
        words = len(take.text.split())  # + the full stop: the server's 20x bound lands near the length
        assert abs(20 * (words + 1) - take.speech_tokens) <= 20
    assert {t.speech_tokens for t in workloads.takes("short", 10)} == {100}
    assert {t.speech_tokens for t in workloads.takes("long", 10)} == {500}
    arrivals = workloads.poisson_arrivals(4.0, 4000)
    assert arrivals == sorted(arrivals) and arrivals[-1] / 4000 == pytest.approx(0.25, rel=0.1)


def test_an_underrun_is_a_chunk_arriving_after_the_audio_before_it_finished_playing():
    # playback starts with the first chunk at 0.2 s; chunks of (arrival s, audio s)
    assert workloads.underruns([(0.2, 1.0), (1.0, 1.0), (2.1, 1.0)]) == (0, 0.0)
    count, silence = workloads.underruns([(0.2, 0.5), (0.9, 1.0), (1.8, 0.2), (2.5, 1.0)])
    assert count == 2 and silence == pytest.approx(0.2 + 0.4)
    figures = workloads.level_figures(
        [
            {"first_audio_s": 0.3, "audio_s": 4.0, "underruns": 0},
            {"first_audio_s": 0.7, "audio_s": 4.0, "underruns": 0},  # too late for goodput
            {"first_audio_s": 0.2, "audio_s": 4.0, "underruns": 1},  # an underrun: not good either
            {"error": "SynthesisError: boom"},
        ],
        wall=2.0,
    )
    assert figures["errors"] == 1 and figures["error_messages"] == ["SynthesisError: boom"]
    assert figures["underruns"] == 1 and figures["goodput_takes_per_s"] == pytest.approx(0.5)
    assert figures["audio_seconds_per_second"] == pytest.approx(6.0)
    assert figures["first_audio_s"]["p50"] == 0.3 and figures["first_audio_s"]["p99"] == 0.7


def test_bench_workload_closed_and_open_loop_write_the_levels(tmp_path, tiny_model_dir, capsys):
    out = tmp_path / "closed.json"
    args = ["bench", "--model", str(tiny_model_dir), "--backends", "pytorch", "--workload", "short"]
    assert (
        main([*args, "--concurrency", "1,2", "--takes", "2", "--warmup-rounds", "0", "--json", str(out)]) == 0
    )
    report = json.loads(out.read_text())
    assert report["workload"] == "short" and report["arrivals"] == "closed"
    assert report["backends"][0]["voices_prepared_s"] > 0  # as the studio and the server prepare them
    assert [level["concurrency"] for level in report["levels"]] == [1, 2]
    for level in report["levels"]:
        assert level["backend"] == "pytorch" and level["takes"] == 2
        assert level["errors"] == 0 and level["underruns"] >= 0 and level["queued"] == 0
        assert level["flow_solver"]["prompt_cache_misses"] == 0  # every voice began from its prepared state
        first = level["first_audio_s"]
        assert 0 < first["p50"] <= first["p95"] <= first["p99"]
        assert level["audio_seconds_per_second"] > 0 and level["peak_vram_gib"] is None  # no GPU here
        assert level["audio_seconds"] == pytest.approx(2 * 4.0, rel=0.05)
        assert 0 <= level["goodput_share"] <= 1
        takes = level["records"]  # each take's own figures: which take was slow can be read back
        assert [take["index"] for take in takes] == [0, 1]
        assert sorted(take["first_audio_s"] for take in takes) == pytest.approx(
            [first["p50"], first["max"]], abs=1e-3
        )
    assert "pytorch" in capsys.readouterr().out
    out = tmp_path / "open.json"
    assert main([*args, "--rates", "2", "--takes", "2", "--warmup-rounds", "0", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["arrivals"] == "poisson" and report["levels"][0]["rate"] == 2.0
    assert report["levels"][0]["takes"] == 2 and report["levels"][0]["errors"] == 0


def test_bench_rates_need_a_workload(tiny_model_dir, capsys):
    assert main(["bench", "--model", str(tiny_model_dir), "--rates", "2"]) == 2
    assert "--rates needs --workload" in capsys.readouterr().err


def test_a_levels_memory_says_where_the_budget_went_and_what_the_takes_held():
    """The plan's shares (they add up to the budget), the gate's capacity (the takes' share) and the most its
    takes held at once; without CUDA no allocator peaks."""
    plan = plan_vram(24 * GIB, 80 * GIB, resident=GIB, with_vllm=True)
    gate = TakeGate(plan.takes)
    with gate.admitted(plan.takes // 4), gate.admitted(plan.takes // 2):
        pass
    model = SimpleNamespace(vram_plan=plan, take_gate=gate, model=SimpleNamespace(device=None))
    memory = memory_counters(SimpleNamespace(model=model))
    shares = memory["plan"]
    assert shares["budget"] == 24
    assert sum(shares[k] for k in ("vllm", "weights", "flow_arena", "takes", "runtime")) == pytest.approx(24)
    assert memory["gate_capacity"] == pytest.approx(shares["takes"])
    assert memory["gate_held_peak"] == pytest.approx(0.75 * shares["takes"], rel=1e-6)
    assert "allocated_peak" not in memory and shares["process_cap"] < 24


def test_takes_admitted_by_text_stop_where_their_text_is_expected_to_or_run_to_its_bound():
    """bench --admit-by-text [expected|bound]: the takes' texts sized so that a take is as long as its text is
    expected to take (admitted by its whole length), or as its text's bound (admitted by half of it, growing
    to it, as random weights run through the server); exact-length takes have texts at their bound."""
    from studio.tts.pipeline import EXPECTED_TOKENS_PER_TEXT_TOKEN

    ratios = {mode: text_ratio(SimpleNamespace(admit_by_text=mode)) for mode in (None, "expected", "bound")}
    assert ratios == {
        None: workloads.SPEECH_TOKENS_PER_TEXT_TOKEN,
        "expected": EXPECTED_TOKENS_PER_TEXT_TOKEN,
        "bound": workloads.SPEECH_TOKENS_PER_TEXT_TOKEN,
    }
    assert ratios["bound"] == 2 * ratios["expected"]
