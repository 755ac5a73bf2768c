"""A take's path through the runtime: per sentence, the LM's speech tokens on a thread of their own
(`SpeechTokenProducer`) and the flow and HiFT turning them into audio (`Token2WavStream`), chunk by chunk
when streamed.

Each take owns its state (tokens, streaming offsets, HiFT cache, random generators), re-raises its LM
thread's errors promptly, and stops and joins that thread when the caller closes the generator or sets
``spec.cancel``. With a VRAM budget a take waits at the `TakeGate` until its states fit.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

from studio import envs
from studio.tts.errors import SynthesisError
from studio.tts.flow.streaming.hops import TOKEN_HOP_LEN
from studio.tts.llm.backend import prompt_embeds_for
from studio.tts.scheduler import ChunkCancelled
from studio.tts.synthesis import LinkedEvent, PromptConditioning, SpeechTokenProducer, SynthesisSpec

# Speech tokens a take is admitted for per text token of its sentence: speech runs at 25 tokens a second and
# reads about 3-4 of the LM's text tokens a second (English and Chinese alike), about 7-8 speech tokens each; the
# margin above it spares most takes a wait to grow. Upstream's bound, what a take may grow to, is 20.
EXPECTED_TOKENS_PER_TEXT_TOKEN = 10
# With growing admission (`STUDIO_GROWING_ADMISSION`): the speech tokens a take is admitted for, 4 s of audio:
# its first two chunks (25 + 25 tokens after the prompt's pad to the 25-token grid) and their lookahead.
GROWING_START_TOKENS = 4 * TOKEN_HOP_LEN

if TYPE_CHECKING:
    from studio.tts.cosyvoice2 import CosyVoice2


def run_take(
    voice: CosyVoice2, spec: SynthesisSpec, prompt: PromptConditioning, sentences: list[str]
) -> Iterator[dict]:
    """The take's chunks, sentence by sentence (one seed per sentence, speech tokens counted over all)."""
    seed = spec.seed if spec.seed is not None else secrets.randbits(31)
    total_tokens = 0
    for index, sentence in enumerate(sentences):
        if spec.cancel is not None and spec.cancel.is_set():
            return
        chunks = _sentence(voice, spec, prompt, sentence, seed + index)
        try:
            for out in chunks:
                total_tokens += out.pop("_new_tokens")
                out["speech_tokens"] = total_tokens
                yield out
        except torch.cuda.OutOfMemoryError as exc:  # this take fails; the engine and other takes go on
            torch.cuda.empty_cache()
            budget = f" (VRAM budget {voice.vram_plan.budget / 2**30:.1f} GiB)" if voice.vram_plan else ""
            raise SynthesisError(
                f"the GPU ran out of memory during this take{budget}; it was stopped and the engine goes "
                "on: run fewer takes at once, shorter texts, or raise the VRAM budget"
            ) from exc
        finally:
            chunks.close()  # joins the sentence's LM thread even when our caller stops early


def _sentence(
    voice: CosyVoice2, spec: SynthesisSpec, prompt: PromptConditioning, sentence: str, seed: int
) -> Iterator[dict]:
    llm = voice.model.llm
    text_ids = list(voice.model.frontend.text.encode(sentence))  # split: never empty
    token_backend = spec.token_backend or voice.backend
    embeds = prompt_embeds_for(  # vLLM's on the host at once, never behind the flow's queued work
        token_backend,
        lambda: llm.build_prompt_embeds(text_ids, prompt.prompt_text_ids, prompt.llm_speech_tokens)[0],
        llm.speech_embedding.weight.device,
        key=(tuple(text_ids), tuple(prompt.prompt_text_ids), tuple(prompt.llm_speech_tokens)),
    )
    n_prompt = len(prompt.prompt_text_ids)
    text_min, text_max = min_len, max_len = llm.length_bounds(n_prompt + len(text_ids), n_prompt)
    ignore_stop = spec.exact_speech_tokens is not None
    if ignore_stop:
        min_len = max_len = int(spec.exact_speech_tokens)
    cancel = LinkedEvent(spec.cancel)

    def generate():
        return token_backend.generate(
            embeds,
            min_len=min_len,
            max_len=max_len,
            sampling=llm.sampling,
            seed=seed,
            cancel=cancel,
            ignore_stop=ignore_stop,
        )

    if voice.take_gate is not None:  # beyond the budget the take queues here, it never fails for it
        # admitted by the state of the length its text is expected to take, it may grow to the longest it can
        # take (its token bound); the gate lets it grow only while some take can always finish (take_gate.py)
        prompt_frames = prompt.flow_feat.shape[1]
        if ignore_stop and not spec.admit_by_text:  # an exact length: admitted by it
            bound = start_tokens = max_len
        else:  # a stopping take's (or one admitted as it would be): by its text's bounds
            bound = max(max_len, text_max)
            start_tokens = min(bound, max(text_min, EXPECTED_TOKENS_PER_TEXT_TOKEN * len(text_ids)))
        if envs.GROWING_ADMISSION.enabled():  # opt-in until measured on a GPU: by its first chunks only
            start_tokens = min(start_tokens, GROWING_START_TOKENS)
        need = voice.take_state_bytes(prompt_frames, bound)
        start = voice.take_state_bytes(prompt_frames, start_tokens)
        lean = None
        if spec.stream and envs.LEAN_TAKES.enabled():  # opt-in: measured slower at 24 GiB (perf-history.md)
            lean = voice.lean_take_state_bytes(prompt_frames)
        with voice.take_gate.admitted(need, cancel, lean_bytes=lean, start_bytes=start) as admission:
            if admission:
                shared_bytes = 0

                def shared(stream) -> None:  # its prompt's frames read in place: not the take's to hold
                    nonlocal shared_bytes
                    shared_bytes = voice.shared_prompt_bytes(stream, prompt_frames, max_len)
                    admission.release(shared_bytes)

                def grow(tokens: int) -> bool:  # before its state holds `tokens` speech tokens' frames
                    held = voice.take_state_bytes(prompt_frames, tokens) - shared_bytes
                    return admission.lean or admission.grow_to(held, cancel)

                keep = not admission.lean
                yield from _sentence_audio(voice, spec, prompt, generate, cancel, seed, keep, shared, grow)
        return
    yield from _sentence_audio(voice, spec, prompt, generate, cancel, seed)


def _sentence_audio(
    voice: CosyVoice2,
    spec: SynthesisSpec,
    prompt: PromptConditioning,
    generate,
    cancel,
    seed: int,
    keep_flow_state: bool = True,
    on_first_chunk=None,
    grow=None,
) -> Iterator[dict]:
    """The take's audio chunks; `on_first_chunk(stream)` runs once its first chunk is made (the prompt's state
    then restored from the cache or computed); `grow(tokens)` before each flow call on that many speech tokens
    (it may wait for memory; False: the take was cancelled meanwhile)."""
    # the LM's request first: the first chunk waits for its tokens, not for the flow's setup below
    producer = SpeechTokenProducer(
        generate, cancel, intra_op_threads=voice.llm_threads, keep=voice.token_filter()
    ).start()
    stream, used = None, 0
    try:
        stream = voice.token2wav_stream(spec, prompt, seed, cancel, keep_flow_state)
        while spec.stream:
            available = producer.wait_for(stream.tokens_needed())
            if cancel.is_set():
                return
            if not stream.ready(available):
                break
            tokens = producer.snapshot()
            # the chunk renders the tokens it needs, however far the LM has run ahead: its state grows by those
            if grow is not None and not grow(min(len(tokens), stream.tokens_needed())):
                return
            speech, times = stream.chunk(tokens)
            if on_first_chunk is not None:
                on_first_chunk(stream)
                on_first_chunk = None
            new, used = stream.token_offset - used, stream.token_offset
            yield _chunk(speech, times, producer.take_llm_seconds(), new)
        producer.wait_for(None)
        if cancel.is_set():
            return
        tokens = producer.snapshot()
        if grow is not None and not grow(len(tokens)):
            return
        speech, times = stream.finish(tokens)
        yield _chunk(speech, times, producer.take_llm_seconds(), len(tokens) - used)
    except ChunkCancelled:  # cancelled while its chunk waited for the flow: the take just ends
        return
    finally:
        producer.close()
        if stream is not None:
            stream.close()


def _chunk(speech: torch.Tensor, times, llm_seconds: float, new_tokens: int) -> dict:
    timings = {"llm": llm_seconds, "flow": times.flow, "hift": times.hift}
    return {"tts_speech": speech.float().cpu(), "_new_tokens": new_tokens, "timings": timings}
