"""No take fails for memory (issue 34, item 2): a take is admitted by what its state can grow to (its token
bound), so takes that run to their length bound never overrun the budget; those that do not fit wait.

On the CPU the budget is simulated: every growth of a take's estimator state checks the states alive
against the gate's capacity and, beyond it, raises the CUDA allocator's out-of-memory error, as a card of
that size would."""

from __future__ import annotations

import threading
import weakref

import pytest
import torch

from studio.tts.cosyvoice2 import SynthesisSpec
from studio.tts.errors import SynthesisError
from studio.tts.flow.streaming.batched_solve import EstimatorState
from studio.tts.flow.streaming.cached_encoder import KVBuffer
from studio.tts.memory import take_state_bytes
from studio.tts.take_gate import TakeGate

TEXT = "Queued takes all finish now."  # random weights never stop: the take runs to 20 x its text tokens


class SimulatedCard:
    """The bytes held by the takes' growing states alive (estimator and encoder keys/values); growing past
    ``capacity`` is an out-of-memory. `install` hooks both kinds of state where they grow."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.states: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self.peak = 0
        self.lock = threading.Lock()

    def held(self) -> int:
        total = 0
        for state in list(self.states.values()):
            tensors = state.pages if isinstance(state, EstimatorState) else (state.k, state.v)
            total += sum(t.nbytes for t in tensors if t is not None)
        return total

    def grew(self, state) -> None:
        with self.lock:
            self.states[id(state)] = state
            held = self.held()
            self.peak = max(self.peak, held)
        if held > self.capacity:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory: {held} bytes held of {self.capacity}")

    def install(self, monkeypatch) -> None:
        reserve, extend = EstimatorState.reserve, KVBuffer.extend

        def reserve_on_card(state, end, like):
            reserve(state, end, like)
            self.grew(state)

        def extend_on_card(buffer, k, v, start):
            views = extend(buffer, k, v, start)
            self.grew(buffer)
            return views

        monkeypatch.setattr(EstimatorState, "reserve", reserve_on_card)
        monkeypatch.setattr(KVBuffer, "extend", extend_on_card)


def run_together(work, seeds, barrier: bool = False) -> list[Exception]:
    """`work(seed)` on a thread per seed (started at one moment with `barrier`), all joined: what they raised."""
    errors, start = [], threading.Barrier(len(seeds))

    def run(seed):
        try:
            if barrier:
                start.wait()
            work(seed)
        except Exception as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(seed,)) for seed in seeds]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    return errors


def simulated_budget(model, prompt_wav, monkeypatch, takes: float):
    """These tests' take (its text runs to 20 speech tokens a text token), that bound, and a simulated card,
    installed, with room for `takes` takes at their bound: (spec, bound, capacity, card)."""
    spec = dict(text=TEXT, prompt_wav=prompt_wav, prompt_text="A prompt.", stream=True, text_frontend=False)
    bound = 20 * len(model._encode(TEXT))
    capacity = int(takes * take_state_bytes(model.model, 2 * 50, bound))
    card = SimulatedCard(capacity)
    card.install(monkeypatch)
    return spec, bound, capacity, card


def test_takes_running_to_their_bound_queue_under_a_tiny_budget_and_none_fails(
    tiny_cosyvoice, prompt_wav16k, monkeypatch
):
    model = tiny_cosyvoice
    spec = dict(
        text=TEXT, prompt_wav=prompt_wav16k, prompt_text="A prompt.", stream=True, text_frontend=False
    )
    prompt_frames = 2 * 50  # 2 s of prompt: 50 speech tokens, 2 mel frames each
    text_tokens = len(model._encode(TEXT))
    bound = 20 * text_tokens
    one_take = take_state_bytes(model.model, prompt_frames, bound)
    capacity = int(2.5 * one_take)  # room for two takes at their bound at once
    card = SimulatedCard(capacity)
    card.install(monkeypatch)
    model.take_gate = TakeGate(capacity)
    lengths = {}

    def run(seed):
        chunks = list(model.synthesize(SynthesisSpec(**spec, seed=seed)))
        lengths[seed] = chunks[-1]["speech_tokens"]

    try:
        errors = run_together(run, range(5))
        assert not errors, [str(e) for e in errors]
        assert sorted(lengths) == list(range(5)) and set(lengths.values()) == {bound}  # ran to the bound
        assert model.take_gate.queued_total >= 1 and model.take_gate.used == 0
        assert 0 < card.peak <= capacity
    finally:
        model.take_gate = None


def test_takes_admitted_by_their_expected_length_grow_to_their_bound_and_none_fails(
    tiny_cosyvoice, prompt_wav16k, monkeypatch
):
    """A take is admitted by the state of its expected length (10 speech tokens a text token) and grows towards
    its bound (20) as it runs: a budget for 2.5 takes at their bound runs more than two at once; the takes that
    may not grow yet wait, every take runs to its bound, and the states alive never pass the simulated card."""
    model = tiny_cosyvoice
    spec, bound, capacity, card = simulated_budget(model, prompt_wav16k, monkeypatch, takes=2.5)
    model.take_gate = gate = TakeGate(capacity)
    lengths = {}

    def run(seed):
        lengths[seed] = list(model.synthesize(SynthesisSpec(**spec, seed=seed)))[-1]["speech_tokens"]

    try:
        errors = run_together(run, range(6), barrier=True)
        assert not errors, [str(e) for e in errors]
        assert set(lengths.values()) == {bound} and len(lengths) == 6
        assert gate.running_peak >= 3 and gate.grow_waits >= 1 and gate.used == 0
        assert 0 < card.peak <= capacity
    finally:
        model.take_gate = None


def test_growing_admission_runs_more_takes_at_once_and_none_fails(tiny_cosyvoice, prompt_wav16k, monkeypatch):
    """With ``STUDIO_GROWING_ADMISSION=1`` a take is admitted by the state of its first chunks, not of its
    expected length, and grows chunk by chunk: on the same simulated card more takes run at once than when
    admitted by their expected length, every take still runs to its bound, and the states alive never pass
    the card."""
    model = tiny_cosyvoice
    spec, bound, capacity, card = simulated_budget(model, prompt_wav16k, monkeypatch, takes=2.5)
    peaks = {}
    for growing in ("0", "1"):
        monkeypatch.setenv("STUDIO_GROWING_ADMISSION", growing)
        model.take_gate = gate = TakeGate(capacity)
        lengths = {}

        def run(seed, lengths=lengths):
            lengths[seed] = list(model.synthesize(SynthesisSpec(**spec, seed=seed)))[-1]["speech_tokens"]

        try:
            errors = run_together(run, range(6), barrier=True)
            assert not errors, [str(e) for e in errors]
            assert set(lengths.values()) == {bound} and len(lengths) == 6
            assert gate.used == 0
        finally:
            model.take_gate = None
        peaks[growing] = gate.running_peak
    assert peaks["1"] > peaks["0"], peaks
    assert 0 < card.peak <= capacity


def test_takes_reading_a_cached_prompt_in_place_give_its_share_back_so_more_run_at_once(
    tiny_cosyvoice, prompt_wav16k, monkeypatch
):
    """With the voice's prompt state cached, each take reads its prompt's frames in place and gives their
    share of its reservation back after its first chunk: a budget for two takes at their bound then runs
    three at once, none fails, the states alive never pass the simulated card, and the cache entry is pinned
    only while takes use it. The audio equals each take run alone."""
    from studio.tts.flow.streaming.prompt_cache import default_cache
    from studio.tts.memory import shared_prompt_bytes

    model = tiny_cosyvoice
    spec = dict(
        text=TEXT, prompt_wav=prompt_wav16k, prompt_text="A prompt.", stream=True, text_frontend=False
    )
    seeds = (11, 12, 13)
    alone = {  # also fills the prompt cache
        seed: torch.cat([c["tts_speech"] for c in model.synthesize(SynthesisSpec(**spec, seed=seed))], dim=1)
        for seed in seeds
    }
    cache = default_cache(torch.device("cpu"))
    assert cache.pinned() == 0
    bound = 20 * len(model._encode(TEXT))
    one_take = take_state_bytes(model.model, 2 * 50, bound)
    shared = shared_prompt_bytes(model.model, 2 * 50, bound, 50)  # the cached boundary: 25 tokens, 50 frames
    assert 0 < shared < one_take
    capacity = 3 * one_take - 2 * shared  # two takes at their bound, or three once two gave their share back
    card = SimulatedCard(capacity)
    card.install(monkeypatch)
    model.take_gate = gate = TakeGate(capacity)
    audio, pins = {}, []

    def run(seed):
        chunks = []
        for chunk in model.synthesize(SynthesisSpec(**spec, seed=seed)):
            chunks.append(chunk["tts_speech"])
            pins.append(cache.pinned())
        audio[seed] = torch.cat(chunks, dim=1)

    try:
        errors = run_together(run, seeds, barrier=True)
        assert not errors, [str(e) for e in errors]
        assert gate.running_peak == 3 and gate.released_total >= 2 * shared and gate.used == 0
        assert 0 < card.peak <= capacity and max(pins) == 1 and cache.pinned() == 0
        for seed in seeds:
            assert (audio[seed] - alone[seed]).norm() / alone[seed].norm() < 1e-4
    finally:
        model.take_gate = None


def test_a_growth_past_the_simulated_card_is_the_take_failing_for_memory(
    tiny_cosyvoice, prompt_wav16k, monkeypatch
):
    """The simulated card is a real constraint: without a gate, a budget below one take fails it."""
    card = SimulatedCard(1)
    card.install(monkeypatch)
    spec = SynthesisSpec(
        text=TEXT, prompt_wav=prompt_wav16k, prompt_text="A prompt.", stream=True, text_frontend=False, seed=0
    )
    with pytest.raises(SynthesisError, match="ran out of memory"):
        list(tiny_cosyvoice.synthesize(spec))


def test_takes_beyond_the_budget_run_lean_at_once_with_the_same_audio(
    tiny_cosyvoice, prompt_wav16k, monkeypatch
):
    """Room for one kept take: the others are admitted lean (no flow state kept) instead of waiting, none
    fails for memory, and a lean take's audio equals the same take's kept one."""
    model = tiny_cosyvoice
    spec, _, capacity, card = simulated_budget(model, prompt_wav16k, monkeypatch, takes=1.2)
    monkeypatch.setenv("STUDIO_LEAN_TAKES", "1")
    seeds = range(3, 7)
    kept = {
        seed: torch.cat([c["tts_speech"] for c in model.synthesize(SynthesisSpec(**spec, seed=seed))], dim=1)
        for seed in seeds
    }
    model.take_gate = gate = TakeGate(capacity)
    audio = {}

    def run(seed):
        chunks = list(model.synthesize(SynthesisSpec(**spec, seed=seed)))
        audio[seed] = torch.cat([c["tts_speech"] for c in chunks], dim=1)

    try:
        errors = run_together(run, seeds, barrier=True)
        assert not errors, [str(e) for e in errors]
        assert sorted(audio) == [3, 4, 5, 6] and gate.lean_total >= 2 and gate.used == 0
        assert card.peak <= capacity
        for seed in seeds:  # the lean takes' audio (and the kept one's) as each take's alone, kept
            assert audio[seed].shape == kept[seed].shape
            assert (audio[seed] - kept[seed]).norm() / kept[seed].norm() < 1e-4
    finally:
        model.take_gate = None


def test_an_exact_length_take_admitted_by_text_is_admitted_as_a_take_that_stops(
    tiny_cosyvoice, prompt_wav16k, monkeypatch
):
    """bench --admit-by-text: a take of an exact length (the benchmark's stand-in for where a model stops) is
    admitted by its text's expected length and bound, as a take that stops is; without it, by its length."""
    model = tiny_cosyvoice
    spec, bound, capacity, _ = simulated_budget(model, prompt_wav16k, monkeypatch, takes=2.5)
    model.take_gate = gate = TakeGate(capacity)
    asked, admitted = [], gate.admitted

    def spy(need, cancel=None, **kwargs):
        asked.append((need, kwargs.get("start_bytes")))
        return admitted(need, cancel, **kwargs)

    monkeypatch.setattr(gate, "admitted", spy)
    length = bound // 2  # the expected length: 10 speech tokens a text token
    try:
        for by_text in (False, True):
            take = SynthesisSpec(**spec, seed=0, exact_speech_tokens=length, admit_by_text=by_text)
            assert list(model.synthesize(take))[-1]["speech_tokens"] == length
    finally:
        model.take_gate = None
    state = lambda tokens: take_state_bytes(model.model, 2 * 50, tokens)  # noqa: E731
    assert asked == [(state(length), state(length)), (state(bound), state(length))]
    assert gate.used == 0
