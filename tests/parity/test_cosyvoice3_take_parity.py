"""Whole CosyVoice3 takes through our public API against the parity reference (vllm-omni 0.30.0's port of
upstream's classes) holding the same folder's weights.

The tiny fabricated CosyVoice3 folder is opened with `open_model`; the reference's classes are built from the
same folder's yaml and load its ``flow.pt``, ``hift.pt`` and ``llm.pt`` strictly (`cv3_reference_take`). Our
frontend's prompt features (speech tokens, mel, speaker embedding) feed both sides: the frontend is not under
test here. Everything runs in float32.

- Offline take: our audio equals the reference flow's offline call then its HiFT's ``finalize`` call, from
  the same starting noise and HiFT noise table (ours are fixed tables; the reference is handed them).
- The LM of a zero-shot take: the prompt embeddings our pipeline hands the token backend are the reference's
  layout, and greedy decoding with our `TorchTokenBackend` gives the reference head's greedy tokens on the
  stock Qwen2 body, with the stop ids avoided (an exact token count) and allowed (upstream's length bounds).
- Streamed take, vocoder part: the mel our streamed flow hands the vocoder at each hop, run through the
  reference HiFT upstream's streamed way (re-run over all mel so far, ``finalize`` at the last hop, the new
  samples kept), gives our streamed take's audio. The flow's streamed half cannot be checked against this
  reference: its DiT builds no chunk mask and its CFM drops ``streaming``, so its flow attends over the
  whole sequence in both modes (docs/COSYVOICE3.md). Our chunk-masked flow is checked against the reference
  where the mask changes nothing (test_cosyvoice3_flow_parity.py) and against upstream's streamed algorithm
  written out on our modules (tests/tts/cosyvoice3/test_cv3_takes.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from studio.tts.cosyvoice2 import END_OF_PROMPT
from studio.tts.cosyvoice3.hift_stream import CausalHiftStream
from studio.tts.cosyvoice3.voice import SYSTEM_PROMPT
from studio.tts.llm.sampling import RasSampling
from studio.tts.llm.torch_backend import TorchTokenBackend
from studio.tts.models import open_model
from studio.tts.synthesis import PromptConditioning, SynthesisSpec
from tests.parity import cv3_reference_take as reference_take
from tests.parity.conftest import relative_error

pytestmark = pytest.mark.parity

TOLERANCE = 1e-4  # fp32 whole-take parity, as for CosyVoice2
SR = 16000
SAMPLES_PER_MEL_FRAME = 480
TEXT = "One line."
PROMPT_TEXT = "Hello there"
GREEDY = RasSampling(top_k=1)


class RecordingTokens:
    """A token backend that keeps the prompt embeddings and bounds it is given, then yields either fixed
    tokens or our `TorchTokenBackend`'s greedy decoding of the prompt (recording what it yields)."""

    def __init__(self, tokens: list[int] | None = None, llm=None):
        self.tokens, self.llm = tokens, llm
        self.prompts: list[torch.Tensor] = []
        self.bounds: list[tuple[int, int, bool]] = []
        self.yielded: list[int] = []

    def generate(self, prompt_embeds, *, min_len, max_len, sampling, seed, cancel, ignore_stop=False):
        self.prompts.append(prompt_embeds.detach().clone())
        self.bounds.append((min_len, max_len, ignore_stop))
        if self.tokens is not None:
            source = iter(self.tokens)
        else:
            source = TorchTokenBackend(self.llm).generate(
                prompt_embeds,
                min_len=min_len,
                max_len=max_len,
                sampling=GREEDY,
                seed=seed,
                cancel=cancel,
                ignore_stop=ignore_stop,
            )
        for token in source:
            if cancel.is_set():
                return
            self.yielded.append(token)
            yield token


@pytest.fixture(scope="module")
def voice(tiny_cosyvoice3_dir):
    model = open_model(tiny_cosyvoice3_dir)
    yield model
    model.close()


@pytest.fixture(scope="module")
def reference_model(cosyvoice3_reference, tiny_cosyvoice3_dir):
    return reference_take.build_reference_model(tiny_cosyvoice3_dir)


@pytest.fixture(scope="module")
def prompt_wav():
    """1.7 s (42 speech tokens: the first streamed hop is padded to the 25-token grid)."""
    t = np.arange(int(1.7 * SR)) / SR
    return (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)


def _tokens(count: int, seed: int) -> list[int]:
    return torch.randint(0, 6561, (count,), generator=torch.Generator().manual_seed(seed)).tolist()


def _take(voice, spec: SynthesisSpec) -> tuple[torch.Tensor, PromptConditioning]:
    """Our take's audio [1, N] and the prompt conditioning its token-to-waveform stage was given."""
    conditioning = []
    token2wav_stream = voice.token2wav_stream

    def recording(spec, prompt, seed, cancel, *rest):
        conditioning.append(prompt)
        return token2wav_stream(spec, prompt, seed, cancel, *rest)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(voice, "token2wav_stream", recording)
        chunks = list(voice.synthesize(spec))
    assert len(conditioning) == 1, "one sentence, one token-to-waveform stage"
    return torch.cat([chunk["tts_speech"] for chunk in chunks], dim=1), conditioning[0]


def _spec(prompt_wav, backend, **fields) -> SynthesisSpec:
    return SynthesisSpec(
        text=TEXT,
        mode="zero_shot",
        prompt_text=PROMPT_TEXT,
        prompt_wav=prompt_wav,
        prompt_sr=SR,
        token_backend=backend,
        **fields,
    )


def _hift_noise(voice, reference_model, samples: int) -> None:
    """The reference HiFT reads our vocoder's fixed noise table (drawn by now as far as our take reached)."""
    noise = voice.model.hift.m_source.noise
    assert noise.shape[1] >= samples, "our take drew its noise table as far as its samples"
    reference_take.set_hift_noise(reference_model.hift, noise)


def _max_error(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    assert ours.shape == theirs.shape, f"shape {tuple(ours.shape)} != reference {tuple(theirs.shape)}"
    return float((ours.double() - theirs.double()).abs().max())


def test_offline_take_matches_the_reference(voice, reference_model, prompt_wav, monkeypatch, record_property):
    """Our offline take's mel (what our flow hands the vocoder) and audio against the reference flow's
    ``finalize`` call and its HiFT's. The tiny folder's vocoder is quiet (peaks near 3e-3), so the audio is
    also held to 1e-4 relative to its own size, CosyVoice2's parity measure."""
    our_mels = []
    hift_inference = voice.model.hift.inference

    def recording_inference(mel, finalize=True):
        our_mels.append(mel.detach().clone())
        return hift_inference(mel, finalize=finalize)

    monkeypatch.setattr(voice.model.hift, "inference", recording_inference)
    tokens = _tokens(60, seed=1)
    audio, prompt = _take(voice, _spec(prompt_wav, RecordingTokens(tokens)))
    frames = (prompt.flow_token.shape[1] + len(tokens)) * 2  # prompt and take: the flow's noise covers both
    mel = reference_take.offline_mel(
        reference_model.flow,
        torch.tensor([tokens], dtype=torch.int32),
        prompt.flow_token,
        prompt.flow_feat,
        prompt.embedding,
        voice.model.flow.decoder.rand_noise[:, :, :frames],
    )
    assert mel.shape == (1, 80, 2 * len(tokens)) and len(our_mels) == 1
    _hift_noise(voice, reference_model, mel.shape[2] * SAMPLES_PER_MEL_FRAME)
    expected, _, _ = reference_model.hift.inference(speech_feat=mel, finalize=True)
    errors = {
        "mel_max_abs_error": _max_error(our_mels[0], mel),
        "audio_max_abs_error": _max_error(audio, expected),
        "audio_relative_error": relative_error(audio, expected),
    }
    for name, value in errors.items():
        record_property(name, value)
    print(f"offline take of {len(tokens)} tokens: {errors}")
    assert expected.abs().max() > 1e-3  # audio, not silence on both sides
    assert max(errors.values()) <= TOLERANCE


@pytest.mark.parametrize("exact_tokens", [24, None], ids=["stop-avoided", "stop-allowed"])
def test_zero_shot_lm_prompt_and_greedy_tokens_match_the_reference(
    voice, reference_model, prompt_wav, exact_tokens
):
    backend = RecordingTokens(llm=voice.model.llm)
    _, prompt = _take(voice, _spec(prompt_wav, backend, exact_speech_tokens=exact_tokens))
    encode = voice.model.frontend.text.encode
    prompt_speech = prompt.flow_token.reshape(-1).tolist()  # the frontend's tokens of the prompt recording
    expected = reference_take.prompt_embeds(
        reference_model.llm, encode(TEXT), encode(SYSTEM_PROMPT + END_OF_PROMPT + PROMPT_TEXT), prompt_speech
    )
    assert len(backend.prompts) == 1 and len(prompt_speech) > 0
    assert _max_error(backend.prompts[0].unsqueeze(0), expected) == 0.0

    min_len, max_len, ignore_stop = backend.bounds[0]
    assert ignore_stop == (exact_tokens is not None)
    theirs = reference_take.greedy_tokens(
        reference_model.llm, expected, min_len=min_len, max_len=max_len, ignore_stop=ignore_stop
    )
    print(f"greedy, bounds {backend.bounds[0]}: ours {len(backend.yielded)}, the reference's {len(theirs)}")
    assert backend.yielded == theirs
    assert len(set(theirs)) > 1, "greedy decoding gives several ids, not one id repeated"
    if exact_tokens is not None:
        assert len(theirs) == exact_tokens


@pytest.mark.parametrize("count", [137, 260])
def test_streamed_take_vocoder_matches_the_references_rerun(
    voice, reference_model, prompt_wav, monkeypatch, record_property, count
):
    pushed: list[tuple[torch.Tensor, bool, torch.Tensor]] = []
    push = CausalHiftStream.push

    def recording_push(self, mel, finalize):
        speech = push(self, mel, finalize)
        pushed.append((mel.detach().clone(), finalize, speech.detach().clone()))
        return speech

    monkeypatch.setattr(CausalHiftStream, "push", recording_push)
    tokens = _tokens(count, seed=count)
    audio, _ = _take(voice, _spec(prompt_wav, RecordingTokens(tokens), stream=True))
    assert len(pushed) >= 3 and [f for _, f, _ in pushed] == [False] * (len(pushed) - 1) + [True]
    mel_chunks = [mel for mel, _, _ in pushed]
    assert sum(mel.shape[2] for mel in mel_chunks) == 2 * count
    _hift_noise(voice, reference_model, 2 * count * SAMPLES_PER_MEL_FRAME)
    theirs = reference_take.streamed_hift(reference_model.hift, mel_chunks)
    hop_errors = [_max_error(ours, piece) for (_, _, ours), piece in zip(pushed, theirs, strict=True)]
    errors = {
        "audio_max_abs_error": _max_error(audio, torch.cat(theirs, dim=1)),
        "audio_relative_error": relative_error(audio, torch.cat(theirs, dim=1)),
    }
    for name, value in errors.items():
        record_property(name, value)
    print(f"streamed take of {count} tokens, mel frames per hop {[m.shape[2] for m in mel_chunks]}: {errors}")
    assert max(hop_errors) <= TOLERANCE
    assert max(errors.values()) <= TOLERANCE
    assert audio.shape[1] == 2 * count * SAMPLES_PER_MEL_FRAME
