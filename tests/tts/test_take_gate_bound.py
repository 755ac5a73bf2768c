"""No take fails for memory (issue 34, item 2): a take is admitted small and grows its holding before each
chunk, as long as every running take can still reach its token bound (take_gate.py); a take whose growth would
break that waits (its chunk is deferred), so takes that run to their length bound never overrun the budget.

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
from studio.tts.flow.streaming.incremental import KVBuffer
from studio.tts.memory import take_state_bytes
from studio.tts.take_gate import TakeGate
from tests.tts.test_incremental_flow import relative_error

TEXT = "Queued takes all finish now."  # random weights never stop: the take runs to 20 x its text tokens


class SimulatedCard:
    """The bytes held by the takes' growing states alive (estimator pages, encoder keys/values); growing past
    ``capacity`` is an out-of-memory, the copy of a growing encoder buffer included (old and new both alive
    while it runs). `install` hooks both kinds of state where they grow."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.states: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self.peak = 0
        self.lock = threading.Lock()

    def held(self) -> int:
        total = 0
        for state in list(self.states.values()):
            if isinstance(state, EstimatorState):
                total += sum(page.nbytes for page in state.pages)
            else:
                total += sum(t.nbytes for t in (state.k, state.v) if t is not None)
        return total

    def grew(self, state, copied: int = 0) -> None:
        with self.lock:
            self.states[id(state)] = state
            held = self.held() + copied
            self.peak = max(self.peak, held)
        if held > self.capacity:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory: {held} bytes held of {self.capacity}")

    def install(self, monkeypatch) -> None:
        reserve, extend = EstimatorState.reserve, KVBuffer.extend

        def reserve_on_card(state, end, like):
            reserve(state, end, like)
            self.grew(state)

        def extend_on_card(buffer, k, v, start):
            before = buffer.k
            copied = 0 if before is None else before.nbytes + buffer.v.nbytes
            views = extend(buffer, k, v, start)
            self.grew(buffer, copied if buffer.k is not before else 0)
            return views

        monkeypatch.setattr(EstimatorState, "reserve", reserve_on_card)
        monkeypatch.setattr(KVBuffer, "extend", extend_on_card)


def run_takes(model, seeds, spec) -> tuple[dict, dict, list]:
    """Each seed's take on a thread of its own: (audio, speech tokens made, errors)."""
    audio, lengths, errors = {}, {}, []

    def run(seed):
        try:
            chunks = list(model.synthesize(SynthesisSpec(**spec, seed=seed)))
            audio[seed] = torch.cat([c["tts_speech"] for c in chunks], dim=1)
            lengths[seed] = chunks[-1]["speech_tokens"]
        except Exception as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(seed,)) for seed in seeds]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    return audio, lengths, errors


@pytest.mark.parametrize("scheduled", ["0", "1"], ids=["own-threads", "chunk-scheduler"])
def test_takes_running_to_their_bound_grow_under_a_tiny_budget_none_fails_and_deferral_keeps_the_audio(
    tiny_cosyvoice, prompt_wav16k, monkeypatch, scheduled
):
    """Takes are admitted small and grow chunk by chunk: more run at once than admission by the bound allows,
    some wait for memory before a chunk (deferred), none fails, and each one's audio is the take alone's."""
    monkeypatch.setenv("STUDIO_FLOW_SCHEDULER", scheduled)
    model = tiny_cosyvoice
    spec = dict(
        text=TEXT, prompt_wav=prompt_wav16k, prompt_text="A prompt.", stream=True, text_frontend=False
    )
    prompt_frames = model._prepare_prompt(SynthesisSpec(**spec)).flow_feat.shape[1]
    bound = 20 * len(model._encode(TEXT))
    one_take = take_state_bytes(model.model, prompt_frames, bound)
    capacity = int(1.9 * one_take)  # admission by the bound: one take at a time
    seeds = range(4)
    alone = {seed: run_takes(model, [seed], spec)[0][seed] for seed in seeds}
    card = SimulatedCard(capacity)
    card.install(monkeypatch)
    gate = model.take_gate = TakeGate(capacity)
    try:
        audio, lengths, errors = run_takes(model, seeds, spec)
    finally:
        model.take_gate = None
    assert not errors, [str(e) for e in errors]
    assert sorted(lengths) == list(seeds) and set(lengths.values()) == {bound}  # ran to the bound
    assert gate.peak_running > capacity // one_take  # more at once than admission by the bound
    assert gate.deferred_total >= 1  # at least one chunk waited for memory
    assert gate.used == 0 and gate.running == 0 and gate.waiting == 0
    assert 0 < card.peak <= capacity
    for seed in seeds:  # deferral does not change the audio
        assert relative_error(audio[seed], alone[seed]) < 1e-5, seed


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
