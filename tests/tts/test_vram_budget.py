"""One VRAM budget (issue 11, item 3): how it splits, and that takes beyond it queue instead of failing;
an out-of-memory fails its own take and the next take runs."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from studio.tts.cosyvoice2 import SynthesisSpec
from studio.tts.device.prompt_caches import budget_bytes
from studio.tts.device.vram_budget import ACTIVATIONS, GIB, GRAPH_POOLS, VramBudgetError, plan_vram
from studio.tts.errors import SynthesisError
from studio.tts.memory import take_state_bytes
from studio.tts.take_gate import TakeGate


def test_a_24_gib_budget_on_an_h200_sizes_vllm_the_arena_and_the_takes():
    plan = plan_vram(24 * GIB, 140 * GIB, resident=int(1.2 * GIB), with_vllm=True)
    assert plan.vllm + plan.resident + plan.flow_arena + plan.takes + plan.reserved == pytest.approx(
        24 * GIB, abs=2
    )
    # the runtime's own: CUDA outside PyTorch and slack, the graphs' pools, activations and the prompt cache
    assert plan.reserved == 1.5 * GIB + 0.5 * GIB + GRAPH_POOLS + ACTIVATIONS + budget_bytes("cuda")
    assert 3 * GIB <= plan.vllm <= 8 * GIB and plan.gpu_memory_utilization == pytest.approx(
        plan.vllm / (140 * GIB)
    )
    cap = plan.process_fraction * 140 * GIB  # PyTorch's share: the rest less what CUDA holds outside it
    assert cap == pytest.approx(24 * GIB - plan.vllm - 1.5 * GIB)
    # the takes' states and the arena may fill their shares: the activations still have room under the cap
    assert plan.resident + plan.flow_arena + plan.takes + ACTIVATIONS < cap
    # a budget of a 32 GB card or less: a fifth of the rest for the arena, the takes' states the other four
    assert plan.takes > 8.5 * GIB and plan.takes == pytest.approx(4 * plan.flow_arena, abs=4)
    assert "takes" in plan.describe()
    large = plan_vram(80 * GIB, 140 * GIB, resident=int(1.2 * GIB), with_vllm=True)
    assert large.takes == pytest.approx(large.flow_arena, abs=1)  # beyond it, half each
    no_vllm = plan_vram(24 * GIB, 140 * GIB, resident=int(1.2 * GIB), with_vllm=False)
    assert no_vllm.vllm == 0 and no_vllm.takes > plan.takes


def test_the_prompt_caches_budget_is_planned_for(monkeypatch):
    """The voices' cached prompt states live beside the takes: what their budget holds is not the takes'."""
    monkeypatch.setenv("STUDIO_PROMPT_CACHE_MB", "2048")
    large = plan_vram(24 * GIB, 140 * GIB, resident=GIB, with_vllm=True)
    monkeypatch.setenv("STUDIO_PROMPT_CACHE_MB", "0")
    none = plan_vram(24 * GIB, 140 * GIB, resident=GIB, with_vllm=True)
    assert none.takes + none.flow_arena - (large.takes + large.flow_arena) == pytest.approx(2 * GIB, abs=2)


def test_the_arena_share_moves_memory_between_the_arena_and_the_takes(monkeypatch):
    monkeypatch.setenv("STUDIO_FLOW_ARENA_SHARE", "0.5")
    half = plan_vram(24 * GIB, 140 * GIB, resident=GIB, with_vllm=True)
    monkeypatch.setenv("STUDIO_FLOW_ARENA_SHARE", "0.25")
    quarter = plan_vram(24 * GIB, 140 * GIB, resident=GIB, with_vllm=True)
    assert quarter.flow_arena + quarter.takes == half.flow_arena + half.takes
    assert quarter.takes == pytest.approx(3 * quarter.flow_arena, abs=4)
    for bad in ("1", "0", "-0.5", "half"):
        monkeypatch.setenv("STUDIO_FLOW_ARENA_SHARE", bad)
        with pytest.raises(ValueError, match="STUDIO_FLOW_ARENA_SHARE"):
            plan_vram(24 * GIB, 140 * GIB, resident=GIB, with_vllm=True)


def test_a_flow_without_an_arena_leaves_the_takes_all_of_it(monkeypatch):
    """CosyVoice3's eager batched solve (CUDA graphs off) reads takes' states in place: its plan has no arena,
    the takes get the rest; its graphed solve copies them into an arena, as CosyVoice2's does."""
    from studio.tts.cosyvoice2 import CosyVoice2
    from studio.tts.cosyvoice3.voice import CosyVoice3

    shared = plan_vram(24 * GIB, 140 * GIB, resident=GIB, with_vllm=True)
    monkeypatch.setenv("STUDIO_FLOW_ARENA_SHARE", "not read without an arena")
    alone = plan_vram(24 * GIB, 140 * GIB, resident=GIB, with_vllm=True, arena=False)
    assert alone.flow_arena == 0 and alone.takes == shared.flow_arena + shared.takes
    bare = object.__new__(CosyVoice3)  # the property reads no loaded model
    monkeypatch.delenv("STUDIO_CUDA_GRAPHS", raising=False)
    assert (CosyVoice2.flow_arena, bare.flow_arena) == (True, True)
    monkeypatch.setenv("STUDIO_CUDA_GRAPHS", "0")
    assert not bare.flow_arena


@pytest.mark.parametrize(("budget", "message"), [(4 * GIB, "too small"), (200 * GIB, "more than the card"),
                                                 (0, "positive")])  # fmt: skip
def test_a_budget_that_cannot_work_says_why(budget, message):
    with pytest.raises(VramBudgetError, match=message):
        plan_vram(budget, 140 * GIB, resident=GIB, with_vllm=True)


def test_the_gate_queues_in_order_admits_what_fits_and_lets_a_cancelled_take_go():
    gate = TakeGate(100)
    order, running, peak = [], [0], [0]
    lock = threading.Lock()

    def take(name, need, hold):
        with gate.admitted(need) as admitted:
            assert admitted
            with lock:
                order.append(name)
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            time.sleep(hold)
            with lock:
                running[0] -= 1

    first = threading.Thread(target=take, args=("a", 60, 0.3))
    first.start()
    time.sleep(0.05)
    others = [threading.Thread(target=take, args=(n, 60, 0.05)) for n in ("b", "c")]
    for thread in others:
        thread.start()
        time.sleep(0.02)
    cancel = threading.Event()
    cancelled = []

    def waiting_then_cancelled():
        with gate.admitted(60, cancel) as admitted:
            cancelled.append(admitted)

    loser = threading.Thread(target=waiting_then_cancelled)
    loser.start()
    time.sleep(0.05)
    assert gate.queues(loser.ident) and not gate.queues(first.ident)  # who waits (render says so)
    cancel.set()
    for thread in (first, *others, loser):
        thread.join(5)
    assert order == ["a", "b", "c"] and peak[0] == 1  # 60 + 60 > 100: one at a time, first come first served
    assert cancelled == [None] and gate.used == 0 and gate.running == 0 and gate.waiting == 0
    assert not any(gate.queues(t.ident) for t in (first, *others, loser))
    assert gate.queued_total >= 2
    with gate.admitted(500) as admitted:  # larger than the whole budget: runs alone, never refused
        assert admitted


def test_bytes_a_take_gives_back_let_a_waiting_take_in_at_once():
    """A take that will hold less than it was admitted by (its prompt read in place from the cache) gives the
    rest back; the take waiting behind it runs while it still does. No more than it holds is given back."""
    gate = TakeGate(100)
    released, admitted_second = threading.Event(), threading.Event()

    def first():
        with gate.admitted(80) as admission:
            admission.release(30)
            admission.release(500)  # more than it holds: it holds nothing more, never a negative
            assert admission.held == 0
            released.set()
            assert admitted_second.wait(5)  # the second runs beside this one

    def second():
        released.wait(5)
        with gate.admitted(60):
            admitted_second.set()

    threads = [threading.Thread(target=f) for f in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert admitted_second.is_set() and gate.running_peak == 2
    assert gate.used == 0 and gate.released_total == 80


def test_the_gate_reports_the_most_bytes_its_takes_held_at_once_from_each_restart():
    gate = TakeGate(10)
    with gate.admitted(4), gate.admitted(8, start_bytes=3) as growing:
        assert gate.used_peak == 7
        assert growing.grow_to(5)
        assert gate.used_peak == 9
    assert gate.used == 0 and gate.used_peak == 9  # a peak outlives the takes that made it
    gate.restart_peak()  # a benchmark's next level
    assert gate.used_peak == 0
    with gate.admitted(2):
        pass
    assert gate.used_peak == 2


def test_takes_grow_only_while_some_take_can_still_reach_its_bound():
    """The banker's rule for one resource: takes of bound 8 starting at 2 in a gate of 10. Two run (each could
    grow in turn), a third waits; one grows to its bound at once; the other's growth waits until it ends."""
    gate = TakeGate(10)
    log: list[str] = []
    steps = {name: threading.Event() for name in ("a grow", "a end", "b grow", "b end")}

    def take(name: str, grow: int | None) -> None:
        with gate.admitted(8, start_bytes=2) as admission:
            log.append(f"{name} in")
            if grow is None:
                return
            steps[f"{name} grow"].wait(5)
            assert admission.grow_to(grow)
            log.append(f"{name} grew to {admission.held}")
            steps[f"{name} end"].wait(5)

    def until(entry: str) -> bool:
        deadline = time.monotonic() + 5
        while entry not in log and time.monotonic() < deadline:
            time.sleep(0.01)
        return entry in log

    threads = [threading.Thread(target=take, args=args) for args in (("a", 8), ("b", 5))]
    for thread in threads:
        thread.start()
    assert until("a in") and until("b in")
    threads.append(threading.Thread(target=take, args=("c", None)))
    threads[-1].start()
    time.sleep(0.2)
    assert "c in" not in log and gate.waiting == 1  # 4 held, 6 free: three would leave none a way out
    steps["a grow"].set()
    assert until("a grew to 8") and gate.used == 10  # the other can still finish once this one has
    steps["b grow"].set()
    time.sleep(0.2)
    assert "b grew to 5" not in log and gate.grow_waits == 1  # nothing free: it waits, holding its 2
    steps["a end"].set()
    assert until("b grew to 5") and until("c in")  # a's 8 freed: b grows, and c fits beside b's headroom
    steps["b end"].set()
    for thread in threads:
        thread.join(5)
    assert log.index("a grew to 8") < log.index("b grew to 5") and gate.used == 0 and gate.running == 0


def test_a_pinned_cache_entry_stays_until_its_last_user_unpins_it():
    from studio.recent import RecentlyUsedBytes

    class Value:
        def __init__(self, nbytes):
            self.nbytes = nbytes

    cache = RecentlyUsedBytes(100)
    assert cache.put("a", Value(60)) and cache.pin("a") and cache.pin("a")
    assert not cache.pin("missing")
    assert not cache.put("b", Value(60))  # only by dropping the pinned "a": not kept instead
    assert "a" in cache and "b" not in cache and cache.rejected == 1 and cache.evictions == 0
    cache.unpin("a")
    assert not cache.put("b", Value(60)) and cache.pinned() == 1  # one user left
    cache.unpin("a")
    assert cache.put("b", Value(60)) and "a" not in cache and cache.pinned() == 0 and cache.evictions == 1


def test_takes_beyond_the_budget_queue_and_all_finish(tiny_cosyvoice, prompt_wav16k):
    model = tiny_cosyvoice
    spec = dict(text="Queued takes all finish.", prompt_wav=prompt_wav16k, prompt_text="A prompt.",
                exact_speech_tokens=20, stream=True, text_frontend=False)  # fmt: skip
    one_take = take_state_bytes(model.model, 200, 20)
    model.take_gate = TakeGate(int(one_take * 1.5))  # room for one take at a time
    results, errors = {}, []

    def run(seed):
        try:
            chunks = list(model.synthesize(SynthesisSpec(**spec, seed=seed)))
            results[seed] = np.concatenate([c["tts_speech"].numpy()[0] for c in chunks])
        except Exception as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    try:
        threads = [threading.Thread(target=run, args=(seed,)) for seed in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        assert not errors and sorted(results) == [0, 1, 2]
        assert all(audio.size == 20 * 960 for audio in results.values())
        assert model.take_gate.queued_total >= 1 and model.take_gate.used == 0
    finally:
        model.take_gate = None


def _solves_out_of_memory(monkeypatch, times: int) -> list[int]:
    """The batched solve refuses its first `times` runs as a CUDA OOM does; returns the runs' log."""
    import torch

    from studio.tts.flow.streaming import solver as solver_module

    real_run = solver_module.EstimatorSolver._run
    calls: list[int] = []

    def run(self, batch):
        calls.append(len(batch.requests))
        if len(calls) <= times:  # the GPU's allocator refusing a block
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_run(self, batch)

    monkeypatch.setattr(solver_module.EstimatorSolver, "_run", run)
    return calls


OOM_SPEC = dict(text="Memory runs out.", prompt_text="A prompt.", exact_speech_tokens=20, stream=True,
                text_frontend=False, seed=1)  # fmt: skip


def test_an_out_of_memory_fails_its_take_clearly_and_the_next_take_runs(
    tiny_cosyvoice, prompt_wav16k, monkeypatch
):
    _solves_out_of_memory(monkeypatch, times=2)  # the solve and its one retry
    with pytest.raises(SynthesisError, match="ran out of memory during this take.*engine goes on"):
        list(tiny_cosyvoice.synthesize(SynthesisSpec(prompt_wav=prompt_wav16k, **OOM_SPEC)))
    chunks = list(tiny_cosyvoice.synthesize(SynthesisSpec(prompt_wav=prompt_wav16k, **OOM_SPEC)))
    assert sum(c["tts_speech"].shape[1] for c in chunks) == 20 * 960


def test_a_solve_that_ran_out_of_memory_once_runs_again_and_its_take_is_whole(
    tiny_cosyvoice, prompt_wav16k, monkeypatch
):
    """Freed blocks scattered in the allocator's cache made a 24 GiB server fail takes that a retry with the
    cache given back could serve; the retried take is the same audio as one never refused."""
    clean = list(tiny_cosyvoice.synthesize(SynthesisSpec(prompt_wav=prompt_wav16k, **OOM_SPEC)))
    calls = _solves_out_of_memory(monkeypatch, times=1)
    retried = list(tiny_cosyvoice.synthesize(SynthesisSpec(prompt_wav=prompt_wav16k, **OOM_SPEC)))
    assert calls[:2] == [1, 1]  # refused, then run again alone
    assert len(retried) == len(clean)
    for a, b in zip(retried, clean, strict=True):
        assert np.allclose(np.asarray(a["tts_speech"]), np.asarray(b["tts_speech"]), atol=1e-5)


def test_a_batched_solve_keeps_every_euler_step_down_to_four_takes_then_goes_a_step_at_a_time():
    from studio.tts.device.vram_budget import arena_tries

    assert arena_tries(32, 10) == [
        (10, 32), (10, 16), (10, 8), (10, 4), (1, 32), (1, 16), (1, 8), (1, 4), (1, 2), (1, 1)
    ]  # fmt: skip
    assert arena_tries(3, 10) == [(10, 3), (1, 3), (1, 1)]
    assert arena_tries(2, 1) == [(1, 2), (1, 1)]  # one Euler step: one kind


def test_expandable_segments_stay_off_where_the_user_configured_the_allocator_or_turned_them_off(monkeypatch):
    from studio.tts.device.vram_budget import use_expandable_segments

    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:512")
    assert use_expandable_segments() is False
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    monkeypatch.setenv("STUDIO_EXPANDABLE_SEGMENTS", "0")
    assert use_expandable_segments() is False


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_memory_grows_in_expandable_segments_and_graphs_still_capture(monkeypatch):
    import torch

    from studio.tts.device.cuda_graphs import capture_graph
    from studio.tts.device.vram_budget import use_expandable_segments

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    assert use_expandable_segments() is True
    torch.cuda.empty_cache()  # no cached fixed segment of earlier tests may serve the block
    block = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")
    segments = [
        s
        for s in torch.cuda.memory_snapshot()
        if s["address"] <= block.data_ptr() < s["address"] + s["total_size"]
    ]
    assert segments and segments[0].get("is_expandable") is True
    x = torch.randn(8, 64, device="cuda")
    graph, (output,), _ = capture_graph(lambda: (x * 2 + 1,), torch.device("cuda"), None, warmup=1)
    x.add_(1)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(output, x * 2 + 1)


def test_takes_holding_the_same_bytes_leave_the_gate_each_as_itself():
    """Two takes admitted alike are two: the one that ends first leaves, the other stays counted, grows and
    leaves in turn (found on an H100: the first to end took its twin's place out of the gate's list)."""
    gate = TakeGate(100)
    with gate.admitted(8, start_bytes=2) as first:
        with gate.admitted(8, start_bytes=2):
            assert gate.running == 2 and gate.used == 4
        assert gate._admitted == [first] and first.grow_to(5) and gate.used == 5
    assert gate.used == 0 and gate.running == 0 and gate._admitted == []
