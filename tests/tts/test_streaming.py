"""Streaming on the tiny model: seamless chunks, speed, concurrency, error propagation, cancellation."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from studio.tts.cosyvoice2 import SynthesisSpec

LLM_THREAD = "cosyvoice2-llm"
TOKENS = 60  # with the 2 s prompt (50 tokens): first chunk at 25 + 0 pad + 3 lookahead, then 25 more


def _spec(prompt, **kwargs) -> SynthesisSpec:
    base = dict(
        text="Hello.",
        mode="cross_lingual",
        prompt_wav=prompt,
        prompt_sr=16000,
        seed=7,
        exact_speech_tokens=TOKENS,
    )
    base.update(kwargs)
    return SynthesisSpec(**base)


def _llm_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == LLM_THREAD]


def _chunks(model, spec) -> list[torch.Tensor]:
    return [out["tts_speech"] for out in model.synthesize(spec)]


class ScriptedBackend:
    """Wraps the real backend: optional delay per token, an optional error after some tokens."""

    def __init__(self, inner, fail_after: int | None = None, delay: float = 0.0):
        self.inner, self.fail_after, self.delay = inner, fail_after, delay
        self.raised_at: float | None = None
        self.cancelled = threading.Event()

    def generate(self, prompt_embeds, **kwargs):
        cancel = kwargs["cancel"]
        for count, token in enumerate(self.inner.generate(prompt_embeds, **kwargs)):
            if self.fail_after is not None and count == self.fail_after:
                self.raised_at = time.monotonic()
                raise RuntimeError("injected LM failure")
            time.sleep(self.delay)
            if cancel.is_set():
                self.cancelled.set()
            yield token
        if cancel.is_set():
            self.cancelled.set()


def test_streamed_chunks_join_without_gaps(tiny_cosyvoice, prompt_wav16k):
    streamed = _chunks(tiny_cosyvoice, _spec(prompt_wav16k, stream=True))
    whole = _chunks(tiny_cosyvoice, _spec(prompt_wav16k, stream=False))
    assert len(streamed) >= 2 and len(whole) == 1
    joined = torch.cat(streamed, dim=1)
    assert joined.shape == whole[0].shape  # same tokens -> same number of samples, nothing lost or doubled
    assert torch.isfinite(joined).all() and joined.dtype == torch.float32
    step = joined[0].diff().abs()
    typical = torch.quantile(step, 0.999).item()
    boundary = 0
    for chunk in streamed[:-1]:
        boundary += chunk.shape[1]
        assert step[boundary - 2 : boundary + 1].max().item() <= 2 * typical + 1e-6  # no click at the join
        assert joined[0, boundary - 240 : boundary + 240].abs().max() > 0  # no silent gap


def test_speed_applies_when_streaming(tiny_cosyvoice, prompt_wav16k):
    normal = torch.cat(_chunks(tiny_cosyvoice, _spec(prompt_wav16k, stream=True)), dim=1)
    fast = torch.cat(_chunks(tiny_cosyvoice, _spec(prompt_wav16k, stream=True, speed=2.0)), dim=1)
    assert abs(fast.shape[1] - normal.shape[1] / 2) <= 2 * 480


def test_concurrent_streams_with_seeds_equal_their_solo_runs(tiny_cosyvoice, prompt_wav16k):
    specs = {"a": dict(seed=1, exact_speech_tokens=55), "b": dict(seed=2, exact_speech_tokens=65)}
    solo = {k: _chunks(tiny_cosyvoice, _spec(prompt_wav16k, stream=True, **v)) for k, v in specs.items()}
    together: dict[str, list[torch.Tensor]] = {}
    errors: list[BaseException] = []

    def worker(key):
        try:
            together[key] = _chunks(tiny_cosyvoice, _spec(prompt_wav16k, stream=True, **specs[key]))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in specs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and set(together) == set(specs)
    for key in specs:
        assert [c.shape for c in together[key]] == [c.shape for c in solo[key]]
        for mine, alone in zip(together[key], solo[key], strict=True):
            torch.testing.assert_close(mine, alone, rtol=0, atol=1e-5)
    assert not _llm_threads()


@pytest.mark.parametrize("stream", [True, False])
def test_lm_error_reaches_the_caller_within_a_second(tiny_cosyvoice, prompt_wav16k, monkeypatch, stream):
    backend = ScriptedBackend(tiny_cosyvoice.backend, fail_after=5)
    monkeypatch.setattr(tiny_cosyvoice, "backend", backend)
    with pytest.raises(RuntimeError, match="injected LM failure"):
        _chunks(tiny_cosyvoice, _spec(prompt_wav16k, stream=stream))
    assert time.monotonic() - backend.raised_at < 1.0
    assert not _llm_threads()


def test_closing_a_stream_cancels_its_work(tiny_cosyvoice, prompt_wav16k, monkeypatch):
    backend = ScriptedBackend(tiny_cosyvoice.backend, delay=0.02)
    monkeypatch.setattr(tiny_cosyvoice, "backend", backend)
    generator = tiny_cosyvoice.synthesize(_spec(prompt_wav16k, stream=True, exact_speech_tokens=2000))
    first = next(generator)
    assert first["tts_speech"].shape[1] > 0
    generator.close()
    assert not _llm_threads()  # close() joined the LM thread
    assert backend.cancelled.is_set()


def test_cancel_event_stops_a_request(tiny_cosyvoice, prompt_wav16k, monkeypatch):
    monkeypatch.setattr(tiny_cosyvoice, "backend", ScriptedBackend(tiny_cosyvoice.backend, delay=0.02))
    cancel = threading.Event()
    generator = tiny_cosyvoice.synthesize(
        _spec(prompt_wav16k, stream=True, exact_speech_tokens=2000, cancel=cancel)
    )
    next(generator)
    cancel.set()
    assert list(generator) == []  # ends without another chunk
    assert not _llm_threads()


def test_a_stream_shorter_than_one_hop_gives_one_final_chunk(tiny_cosyvoice, prompt_wav16k):
    chunks = _chunks(tiny_cosyvoice, _spec(prompt_wav16k, stream=True, exact_speech_tokens=10))
    assert len(chunks) == 1 and chunks[0].shape == (1, 10 * 960)


def test_chunks_grow_as_upstreams_schedule_and_join_whole(tiny_cosyvoice, prompt_wav16k):
    """Per take, as upstream CosyVoice2Model meant (25 + prompt pad, then 50, 100, 100 ...), never shared
    between takes: fewer flow calls for a long take, the same audio length, joins without a click."""
    tokens = 320
    spec = dict(exact_speech_tokens=tokens)
    streamed = _chunks(tiny_cosyvoice, _spec(prompt_wav16k, stream=True, **spec))
    whole = _chunks(tiny_cosyvoice, _spec(prompt_wav16k, stream=False, **spec))
    samples_per_token = whole[0].shape[1] // tokens
    # the 2 s prompt is 50 tokens: no pad; HiFT holds back 8 mel frames (4 tokens) until the next chunk
    hops = [25, 50, 100, 100]
    held = 4 * samples_per_token
    expected = [hops[0] * samples_per_token - held] + [h * samples_per_token for h in hops[1:]]
    assert [c.shape[1] for c in streamed[: len(hops)]] == expected
    assert len(streamed) == len(hops) + 1  # and the rest (45 tokens) at the end
    assert torch.cat(streamed, dim=1).shape == whole[0].shape
    # the next take starts again from 25 (upstream's defect 1 kept the grown hop on the shared model)
    again = _chunks(tiny_cosyvoice, _spec(prompt_wav16k, stream=True, **spec))
    assert [c.shape[1] for c in again] == [c.shape[1] for c in streamed]


def test_a_short_first_hop_gives_early_audio_then_returns_to_the_chunk_grid(
    tiny_cosyvoice, prompt_wav16k, monkeypatch
):
    """A take asking for its first chunk after 10 tokens (+3 lookahead), as the studio's "Start playing
    sooner" does: the next ends at 50 on the grid of 25-token chunks, then the usual growth; nothing lost or
    doubled, no click at the joins. STUDIO_FIRST_HOP_TOKENS sets it for every take."""
    from studio.engine.protocol import Synthesize
    from studio.runtime.runner import build_spec

    tokens = 210
    whole = _chunks(tiny_cosyvoice, _spec(prompt_wav16k, stream=False, exact_speech_tokens=tokens))
    request = Synthesize("Hello.", mode="cross-lingual", prompt_wav=prompt_wav16k, prompt_sr=16000,
                         seed=7, exact_speech_tokens=tokens, first_hop_tokens=10)  # fmt: skip
    streamed = _chunks(tiny_cosyvoice, build_spec(request))
    per_token = whole[0].shape[1] // tokens
    held = 4 * per_token  # HiFT's 8 mel frames wait for the next chunk
    assert [c.shape[1] for c in streamed[:4]] == [10 * per_token - held, 40 * per_token, 50 * per_token,
                                                  100 * per_token]  # fmt: skip
    joined = torch.cat(streamed, dim=1)
    assert joined.shape == whole[0].shape
    step = joined[0].diff().abs()
    boundary = streamed[0].shape[1]
    assert step[boundary - 2 : boundary + 1].max() <= 2 * torch.quantile(step, 0.999) + 1e-6
    monkeypatch.setenv("STUDIO_FIRST_HOP_TOKENS", "10")
    from_environment = _chunks(tiny_cosyvoice, _spec(prompt_wav16k, stream=True, exact_speech_tokens=tokens))
    assert [c.shape[1] for c in from_environment] == [c.shape[1] for c in streamed]
    monkeypatch.setenv("STUDIO_FIRST_HOP_TOKENS", "-1")
    with pytest.raises(ValueError, match="STUDIO_FIRST_HOP_TOKENS"):
        _chunks(tiny_cosyvoice, _spec(prompt_wav16k, stream=True))
