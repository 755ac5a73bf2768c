"""Whole CosyVoice3 takes through the public API on the tiny fabricated folder: the prompt formats the LM
sees, offline and streamed audio against upstream's own algorithm (CosyVoice3Model.tts and token2wav, written
out below on the same modules), the silent-token limit, and the family's class."""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from studio.tts.cosyvoice2 import CosyVoice2
from studio.tts.cosyvoice3.voice import SYSTEM_PROMPT, CosyVoice3
from studio.tts.errors import ModelFolderError, SynthesisError
from studio.tts.models import open_model
from studio.tts.synthesis import SynthesisSpec

END = "<|endofprompt|>"
SR = 16000


class FixedTokens:
    """A token backend that yields the given speech tokens and keeps the prompt embeddings it was given."""

    def __init__(self, tokens: list[int]):
        self.tokens = tokens
        self.prompts: list[torch.Tensor] = []

    def generate(self, prompt_embeds, *, min_len, max_len, sampling, seed, cancel, ignore_stop=False):
        self.prompts.append(prompt_embeds.detach().clone())
        for token in self.tokens:
            if cancel.is_set():
                return
            yield token


@pytest.fixture(scope="module")
def voice(tiny_cosyvoice3_dir):
    model = open_model(tiny_cosyvoice3_dir)
    yield model
    model.close()


@pytest.fixture(scope="module")
def prompt_wav():
    t = np.arange(int(2.0 * SR)) / SR
    return (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)


def _tokens(count: int, seed: int = 3) -> list[int]:
    return torch.randint(0, 6561, (count,), generator=torch.Generator().manual_seed(seed)).tolist()


def _audio(voice, spec) -> tuple[torch.Tensor, list[dict]]:
    chunks = list(voice.synthesize(spec))
    return torch.cat([c["tts_speech"] for c in chunks], dim=1), chunks


def _prompt(voice, prompt_wav):
    tokens, feat, embedding = voice._prompt_features(prompt_wav, SR)
    return torch.tensor([tokens], dtype=torch.int32), feat, embedding


def _flow(voice, tokens, prompt, streaming, finalize):
    prompt_token, feat, embedding = prompt
    token = torch.tensor([tokens], dtype=torch.int32)
    mel, _ = voice.model.flow.inference(
        token=token,
        token_len=torch.tensor([token.shape[1]], dtype=torch.int32),
        prompt_token=prompt_token,
        prompt_token_len=torch.tensor([prompt_token.shape[1]], dtype=torch.int32),
        prompt_feat=feat,
        prompt_feat_len=torch.tensor([feat.shape[1]], dtype=torch.int32),
        embedding=embedding,
        streaming=streaming,
        finalize=finalize,
    )
    return mel


def upstream_streamed(voice, tokens: list[int], prompt) -> torch.Tensor:
    """Upstream CosyVoice3Model.tts (stream=True) once every token is decoded: at each hop the flow re-runs over
    all tokens so far (chunk-masked), HiFT over all mel so far; the new samples are kept."""
    hop_len, lookahead, offset = 25, 3, 0
    pad = math.ceil(prompt[0].shape[1] / hop_len) * hop_len - prompt[0].shape[1]
    mel_so_far, speech_offset, pieces = None, 0, []

    def token2wav(prefix, finalize):
        nonlocal mel_so_far, speech_offset
        mel = _flow(voice, prefix, prompt, True, finalize)[:, :, offset * 2 :]
        mel_so_far = mel if mel_so_far is None else torch.cat([mel_so_far, mel], dim=2)
        speech, _ = voice.model.hift.inference(mel_so_far, finalize=finalize)
        speech = speech[:, speech_offset:]
        speech_offset += speech.shape[1]
        pieces.append(speech)

    while True:
        this_hop = hop_len + pad if offset == 0 else hop_len
        if len(tokens) - offset < this_hop + lookahead:
            break
        token2wav(tokens[: offset + this_hop + lookahead], finalize=False)
        offset += this_hop
        hop_len = min(100, hop_len * 2)
    token2wav(tokens, finalize=True)
    return torch.cat(pieces, dim=1)


def test_a_cosyvoice3_folder_opens_with_its_class(tiny_cosyvoice3_dir, voice):
    assert type(voice) is CosyVoice3 and voice.model.family.name == "CosyVoice3"
    with pytest.raises(ModelFolderError, match="CosyVoice3 folder"):
        CosyVoice2(tiny_cosyvoice3_dir)


def test_the_lm_sees_upstreams_prompt_formats(voice, prompt_wav):
    encode = voice.model.frontend.text.encode
    tokens = _tokens(30)
    prompt_speech = _prompt(voice, prompt_wav)[0].reshape(-1).tolist()
    llm = voice.model.llm
    cases = [
        (
            dict(mode="zero_shot", prompt_text="Hello there"),
            SYSTEM_PROMPT + END + "Hello there",
            prompt_speech,
        ),
        (
            dict(mode="zero_shot", prompt_text=f"Be kind.{END}Hello there"),
            f"Be kind.{END}Hello there",
            prompt_speech,
        ),
        (dict(mode="cross_lingual"), SYSTEM_PROMPT + END, []),
        (dict(mode="instruct", instruct_text="Speak slowly."), f"{SYSTEM_PROMPT} Speak slowly.{END}", []),
    ]
    for fields, prompt_text, llm_speech in cases:
        backend = FixedTokens(tokens)
        spec = SynthesisSpec(
            text="One line.", prompt_wav=prompt_wav, prompt_sr=SR, token_backend=backend, **fields
        )
        list(voice.synthesize(spec))
        expected = llm.build_prompt_embeds(encode("One line."), encode(prompt_text), llm_speech)[0]
        torch.testing.assert_close(backend.prompts[0], expected, rtol=0, atol=0, msg=str(fields))


def test_an_offline_take_is_upstreams_offline_call(voice, prompt_wav):
    tokens = _tokens(60)
    spec = SynthesisSpec(
        text="One line.",
        mode="cross_lingual",
        prompt_wav=prompt_wav,
        prompt_sr=SR,
        token_backend=FixedTokens(tokens),
    )
    audio, chunks = _audio(voice, spec)
    prompt = _prompt(voice, prompt_wav)
    expected, _ = voice.model.hift.inference(_flow(voice, tokens, prompt, False, True), finalize=True)
    assert len(chunks) == 1 and audio.shape == expected.shape
    torch.testing.assert_close(audio, expected, rtol=0, atol=1e-5)
    assert torch.isfinite(audio).all() and audio.abs().max() > 1e-4


@pytest.mark.parametrize("count", [40, 137, 260])
def test_a_streamed_take_is_upstreams_streamed_take(voice, prompt_wav, count):
    tokens = _tokens(count, seed=count)
    spec = SynthesisSpec(
        text="One line.",
        mode="cross_lingual",
        prompt_wav=prompt_wav,
        prompt_sr=SR,
        stream=True,
        token_backend=FixedTokens(tokens),
    )
    audio, chunks = _audio(voice, spec)
    expected = upstream_streamed(voice, tokens, _prompt(voice, prompt_wav))
    assert audio.shape == expected.shape
    torch.testing.assert_close(audio, expected, rtol=0, atol=1e-4)
    assert len(chunks) >= 2 and chunks[-1]["speech_tokens"] == count


def test_long_silences_keep_five_tokens(voice, prompt_wav):
    silent = voice.model.llm.silent_tokens
    tokens = [100, *[silent[0]] * 4, *[silent[1]] * 5, 200, *[silent[2]] * 3]
    backend = FixedTokens(tokens)
    spec = SynthesisSpec(
        text="One line.", mode="cross_lingual", prompt_wav=prompt_wav, prompt_sr=SR, token_backend=backend
    )
    _, chunks = _audio(voice, spec)
    assert chunks[-1]["speech_tokens"] == 1 + 5 + 1 + 3  # a run of 9 silent tokens keeps 5


def test_a_saved_voice_without_end_of_prompt_is_refused(voice, prompt_wav):
    voice.add_zero_shot_spk("Hello there", prompt_wav, "kept", prompt_sr=SR)
    end_id = voice.model.frontend.text.encode(END)[-1]
    assert (
        end_id in voice.spk2info["kept"]["prompt_text"].reshape(-1).tolist()
    )  # saved with the system prompt
    stale = dict(voice.spk2info["kept"])
    stale["prompt_text"] = torch.tensor([voice.model.frontend.text.encode("Hello there")], dtype=torch.int32)
    voice.spk2info["stale"] = stale
    with pytest.raises(SynthesisError, match="endofprompt"):
        voice.synthesize(
            SynthesisSpec(text="One line.", spk_id="stale", token_backend=FixedTokens(_tokens(5)))
        )
    cancel = threading.Event()
    spec = SynthesisSpec(
        text="One line.", spk_id="kept", token_backend=FixedTokens(_tokens(30)), cancel=cancel
    )
    assert torch.isfinite(_audio(voice, spec)[0]).all()


def test_a_streamed_takes_state_stays_within_what_the_gate_reserves(voice, prompt_wav):
    from studio.tts.cosyvoice3.flow_stream import max_state_bytes
    from studio.tts.cosyvoice3.token2wav import DiTWavStream

    prompt_token, feat, embedding = _prompt(voice, prompt_wav)
    tokens = _tokens(400, seed=9)
    bound = max_state_bytes(voice.model.flow, feat.shape[1], len(tokens))
    stream = DiTWavStream(voice.model.flow, voice.model.hift, prompt_token, feat, embedding, streaming=True)
    held = []
    while stream.ready(len(tokens)):
        stream.chunk(tokens)
        held.append(stream.state_bytes)
    assert len(held) >= 4 and max(held) <= bound
    assert max(held) > bound / 3  # the bound is not a wild overestimate
    stream.finish(tokens)
    stream.close()
    assert stream.state_bytes == 0


def test_a_saved_voices_first_streamed_take_starts_from_the_prompt_cache(voice, prompt_wav):
    from studio.tts.cosyvoice3.flow_prompt_cache import default_prompt_cache

    cache = default_prompt_cache("cpu")
    tokens = _tokens(120, seed=5)

    def streamed(**fields):
        spec = SynthesisSpec(text="One line.", stream=True, token_backend=FixedTokens(tokens), **fields)
        return _audio(voice, spec)[0]

    cache.clear()
    cold = streamed(mode="cross_lingual", prompt_wav=prompt_wav, prompt_sr=SR)
    cache.clear()
    voice.add_zero_shot_spk("Hello there", prompt_wav, "cached", prompt_sr=SR)
    assert cache.stats()["entries"] == 1  # saving the voice computed its prompt chunks
    hits = cache.stats()["hits"]
    warm = streamed(mode="cross_lingual", spk_id="cached")
    assert cache.stats()["hits"] == hits + 1
    torch.testing.assert_close(warm, cold, rtol=0, atol=1e-6)


def _streamed_takes(voice, prompt_wav, token_lists: list[list[int]], threads: int) -> list[torch.Tensor]:
    """Streamed cross-lingual takes of these tokens, on `threads` threads at once -> each take's audio."""

    def take(tokens):
        spec = SynthesisSpec(
            text="One line.", mode="cross_lingual", prompt_wav=prompt_wav, prompt_sr=SR, stream=True,
            token_backend=FixedTokens(tokens),
        )  # fmt: skip
        return _audio(voice, spec)[0]

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(take, token_lists))


def test_takes_on_the_flow_scheduler_equal_their_own(voice, prompt_wav, monkeypatch):
    """With the scheduler (CUDA's default) two takes' chunks run as batched solves; the audio is the same."""
    from studio.tts.cosyvoice3.flow_scheduler import flow_scheduler_for

    token_lists = [_tokens(130, seed=11), _tokens(90, seed=12)]
    alone = _streamed_takes(voice, prompt_wav, token_lists, threads=1)
    monkeypatch.setenv("STUDIO_FLOW_SCHEDULER", "1")
    together = _streamed_takes(voice, prompt_wav, token_lists, threads=2)
    assert flow_scheduler_for(voice.model.flow).stats()["calls"] >= 4
    for mine, theirs in zip(together, alone, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-5)


@pytest.mark.parametrize("stepwise", [False, True], ids=["one-pass", "stepwise"])
def test_takes_through_the_graphed_flow_solve_equal_their_own(voice, prompt_wav, monkeypatch, stepwise):
    """The flow's solve graphed (`DiTGraphSolver`, as the loader attaches it on CUDA; here its stand-in capture)
    under the scheduler: two takes at once, then again (replayed shapes), each equal to its take without it; with
    an arena budget of one Euler step for two takes, a step at a time."""
    from studio.tts.cosyvoice3.flow_graphs import attach_dit_graphs
    from studio.tts.device.cuda_graphs import MIN_CONTEXT
    from tests.tts.cosyvoice3.test_cv3_flow_graphs import keep_arena_on_capture
    from tests.tts.test_encoder_graphs import replaying_capture

    token_lists = [_tokens(120, seed=13), _tokens(70, seed=14)]
    alone = _streamed_takes(voice, prompt_wav, token_lists, threads=1)
    monkeypatch.setenv("STUDIO_FLOW_SCHEDULER", "1")
    solver = keep_arena_on_capture(attach_dit_graphs(voice.model.flow, capture=replaying_capture))
    if stepwise:
        solver.budget_bytes = solver.arena_bytes(4, MIN_CONTEXT, 1, torch.float32)
    try:
        runs = [_streamed_takes(voice, prompt_wav, token_lists, threads=2) for _ in range(2)]
    finally:
        attach_dit_graphs(voice.model.flow, enabled=False)
    assert solver.requests >= 8 and solver.captures >= 1
    assert (solver.stepwise_batches == solver.batches) if stepwise else solver.stepwise_batches == 0
    for together in runs:
        for mine, theirs in zip(together, alone, strict=True):
            torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-4)
