"""Speech tokens to waveform (flow then HiFT), with all streaming state owned by one request.

`Token2WavStream` reproduces upstream CosyVoice2's chunking (hop 25 tokens, the first hop padded
to align the prompt, later hops growing 50 then 100 per request, 3 lookahead tokens, 8 cached mel frames, HiFT source cache and a Hamming
cross-fade of the output) but keeps every piece of state on the request, applies ``speed`` in
streaming too, and draws HiFT's randomness from the request's own generator.

Streaming renders each chunk incrementally (`IncrementalFlow`: only the new frames, over cached left
context) instead of upstream's re-run of the flow over the whole token prefix; both give the same mel.
``incremental=None`` (the default) follows ``STUDIO_INCREMENTAL_FLOW`` (``0``: full-prefix path, else
incremental). The incremental step's Euler solve runs in the flow's `EstimatorSolver`: batched with the
chunks of other takes rendering at the same moment, and replayed as CUDA graphs on a GPU. On a GPU every
chunk (encoder, solve, HiFT) is run by the flow's `ChunkScheduler` thread instead of the take's own
(``STUDIO_FLOW_SCHEDULER``; off on a CPU, where the takes' threads use the cores better).
It starts from the prompt's cached flow state when an earlier request used the same voice
(`PromptFlowCache`; ``prompt_cache=True``, the default, uses the process-wide one sized by
``STUDIO_PROMPT_CACHE_MB``, 0 disables it).
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np
import torch

from studio import envs
from studio.tts.device.cuda_graphs import in_pieces
from studio.tts.device.transfer import to_device
from studio.tts.flow.streaming.hops import (
    HOP_SCALE,
    MAX_HOP_LEN,
    TOKEN_HOP_LEN,
    ChunkedTake,
    HopSchedule,
)
from studio.tts.flow.streaming.incremental import FlowStep, IncrementalFlow, begin_many
from studio.tts.flow.streaming.prompt_cache import PromptFlowCache, default_cache
from studio.tts.flow.streaming.solver import solver_for
from studio.tts.scheduler import scheduler_for

log = logging.getLogger(__name__)

# Mel frames of one batched HiFT call (`Token2WavStream.vocode_many`, `STUDIO_HIFT_BATCH_FRAMES`): an estimated
# ~150 KB of activations a frame, ~0.3 GB at most, outside the VRAM budget's plan; 16 first chunks fit
HIFT_BATCH_FRAMES = 2048
MEL_CACHE_LEN = 8
SAMPLES_PER_MEL_FRAME = 480
SOURCE_CACHE_LEN = MEL_CACHE_LEN * SAMPLES_PER_MEL_FRAME
_HAMMING = torch.from_numpy(np.hamming(2 * SOURCE_CACHE_LEN)).float()  # the chunks' cross-fade window


def _incremental_default() -> bool:
    return envs.INCREMENTAL_FLOW.enabled()


def batched_encoder(scheduled: bool) -> bool:
    """Whether takes run by the chunk scheduler recompute their encoder in its batches (batched_encode.py)."""
    return scheduled and envs.FLOW_BATCH_ENCODER.raw() != "0"


def scheduled_default(device: torch.device) -> bool:
    """The chunk scheduler's default: on with CUDA; on a CPU the takes' own threads use its cores better."""
    asked = envs.FLOW_SCHEDULER.raw()
    return device.type == "cuda" if asked is None else asked != "0"


@dataclass
class StageTimes:
    """Seconds spent per stage for one yielded chunk."""

    flow: float = 0.0
    hift: float = 0.0


@dataclass
class _HiftCache:
    mel: torch.Tensor
    source: torch.Tensor
    speech: torch.Tensor


@dataclass
class Token2WavStream(ChunkedTake):
    """One request's token-to-waveform state: the prompt, the offset reached, the HiFT cache.

    Call `ready(n)` to learn whether ``n`` decoded tokens allow another streamed chunk, `chunk(tokens)`
    to render it, and `finish(tokens)` once the LM is done (also the whole job when not streaming).
    """

    flow: torch.nn.Module
    hift: torch.nn.Module
    prompt_token: torch.Tensor  # [1, P] int32
    prompt_feat: torch.Tensor  # [1, 2P, 80]
    embedding: torch.Tensor  # [1, 192]
    streaming: bool
    speed: float = 1.0
    generator: torch.Generator | None = None
    fp16: bool = False
    token_hop_len: int = TOKEN_HOP_LEN
    hop_scale: int = HOP_SCALE  # each streamed chunk after the first grows the hop by this factor...
    max_hop_len: int = MAX_HOP_LEN  # ...up to this many tokens (upstream: 25 -> 50 -> 100)
    first_hop: int | None = None  # tokens of a shorter first chunk (0: upstream's; None: the environment's)
    incremental: bool | None = None  # streaming: cached flow, new frames only (None: the environment's)
    prompt_cache: PromptFlowCache | bool = True  # incremental: reuse prompt state (True: process-wide cache)
    cancel: threading.Event | None = None  # set: a chunk still waiting for the scheduler leaves its queue
    scheduled: bool | None = None  # incremental: the flow's ChunkScheduler runs its chunks (None: see below)
    # incremental: False keeps no estimator state (each chunk solves the take again)
    keep_flow_state: bool = True
    _cache: _HiftCache | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.lookahead = int(getattr(self.flow, "pre_lookahead_len", 3))
        self.mel_ratio = int(getattr(self.flow, "token_mel_ratio", 2))
        if self.first_hop is None:
            self.first_hop = envs.FIRST_HOP_TOKENS.count() or 0
        self.schedule = HopSchedule(
            prompt_tokens=int(self.prompt_token.shape[1]),
            lookahead=self.lookahead,
            token_hop_len=self.token_hop_len,
            hop_scale=self.hop_scale,
            max_hop_len=self.max_hop_len,
            first_hop=self.first_hop,
        )
        self.device = next(self.flow.parameters()).device
        self.window = to_device(_HAMMING, self.device)  # never waits for the flow's queued GPU work
        if self.scheduled is None:
            self.scheduled = scheduled_default(self.device)
        self._incremental = None
        if self.incremental is None:
            self.incremental = _incremental_default()
        if self.streaming and self.incremental:
            if IncrementalFlow.supports(self.flow, self.prompt_token, self.prompt_feat):
                cache = self.prompt_cache
                if isinstance(cache, bool):  # an empty PromptFlowCache is falsy (len 0): test for bool
                    cache = default_cache(self.device) if cache else None
                self._incremental = IncrementalFlow(
                    self.flow,
                    self.prompt_token,
                    self.prompt_feat,
                    self.embedding,
                    cache=cache,
                    recompute_encoder=batched_encoder(self.scheduled),
                    keep_estimator=self.keep_flow_state,
                    pin_prompt=self.keep_flow_state,  # a kept take gives back its prompt's share (pipeline)
                )
            else:
                self.incremental = False
        if self._incremental is not None and self.scheduled:
            scheduler_for(self.flow).expect(self)  # takes started together may share their first tick

    def close(self) -> None:
        """The take ended (done, cancelled or failed): the flow's scheduler stops expecting its first chunk,
        and the prompt state it read from the cache may be dropped again."""
        if self._incremental is not None:
            self._incremental.release_prompt()
            if self.scheduled:
                scheduler_for(self.flow).forget(self)

    @property
    def shared_prompt_frames(self) -> int:
        """Prompt frames this take reads in place from the pinned prompt cache (`IncrementalFlow`)."""
        return 0 if self._incremental is None else self._incremental.shared_prompt_frames

    # -- rendering (`ChunkedTake` schedules the chunks) ------------------------------------------
    def _render(self, tokens: list[int], finalize: bool) -> tuple[torch.Tensor, StageTimes]:
        times = StageTimes()
        if self._incremental is not None and self.scheduled:
            speech, times.flow, times.hift = scheduler_for(self.flow).render(self, tokens, finalize)
        else:
            started = time.perf_counter()
            mel = self._flow_mel(tokens, finalize)
            times.flow = time.perf_counter() - started
            started = time.perf_counter()
            speech = self.vocode(mel, finalize).cpu()
            times.hift = time.perf_counter() - started
        self._handed_out(speech)
        return speech, times

    def precision(self):
        """The incremental flow's precision (encoder and Euler solve; the scheduler enters it too)."""
        return flow_precision(self.flow, self.fp16)

    def flow_begin(self, tokens: list[int], finalize: bool) -> FlowStep:
        """The incremental flow's encoder part of a chunk; its solve is the caller's (`flow_end` after)."""
        return self.flow_begin_many([(self, tokens, finalize)])[0]

    @staticmethod
    def flow_begin_many(chunks: list[tuple[Token2WavStream, list[int], bool]]) -> list[FlowStep]:
        """`Token2WavStream.flow_begin` of chunks (stream, tokens, finalize) of takes of one flow and precision;
        the encoders of takes that recompute theirs run as one batch (`begin_many`)."""
        steps: list[FlowStep | None] = [None] * len(chunks)
        todo = []
        for i, (stream, tokens, _) in enumerate(chunks):
            if tokens:
                todo.append(i)
            else:  # no tokens: nothing to compute (`flow_end` passes the empty mel through)
                steps[i] = FlowStep(None, -1, torch.zeros(1, 80, 0, device=stream.device))
        if todo:
            with chunks[todo[0]][0].precision():
                begun = begin_many([(chunks[i][0]._incremental, chunks[i][1], chunks[i][2]) for i in todo])
            for i, step in zip(todo, begun, strict=True):
                steps[i] = step
        return steps

    def flow_end(self, step: FlowStep) -> torch.Tensor:
        """The chunk's new mel [1, 80, n] float32 (speed applied) once its solve has run."""
        if step.frame0 < 0:  # no tokens
            return step.mel
        mel, first_frame = self._incremental.complete(step)
        skip = self.prompt_feat.shape[1] + self.token_offset * self.mel_ratio - first_frame
        if skip < 0:
            raise RuntimeError(f"incremental flow skipped {-skip} frames still to be emitted")
        return self._speed(mel.float()[:, :, skip:])

    @torch.inference_mode()
    def _flow_mel(self, tokens: list[int], finalize: bool) -> torch.Tensor:
        device = self.device
        if self._incremental is not None:
            step = self.flow_begin(tokens, finalize)
            if step.request is not None:
                with self.precision():
                    step.request.result = solver_for(self.flow.decoder).solve(step.request)
            return self.flow_end(step)
        if not tokens:
            return torch.zeros(1, 80, 0, device=device)
        token = torch.tensor([tokens], dtype=torch.int32, device=device)
        prompt_token = self.prompt_token.to(device)
        prompt_feat = self.prompt_feat.to(device)
        with self.autocast():
            mel, _ = self.flow.inference(
                token=token,
                token_len=torch.tensor([token.shape[1]], dtype=torch.int32, device=device),
                prompt_token=prompt_token,
                prompt_token_len=torch.tensor([prompt_token.shape[1]], dtype=torch.int32, device=device),
                prompt_feat=prompt_feat,
                prompt_feat_len=torch.tensor([prompt_feat.shape[1]], dtype=torch.int32, device=device),
                embedding=self.embedding.to(device),
                streaming=self.streaming,
                finalize=finalize,
            )
        return self._speed(mel.float()[:, :, self.token_offset * self.mel_ratio :])

    @torch.inference_mode()
    def vocode(self, mel: torch.Tensor, finalize: bool) -> torch.Tensor:
        """HiFT on the chunk's mel with the take's cache and cross-fade: speech [1, N] float32, on the device."""
        mel, cache_source = self._hift_inputs(mel)
        if mel.shape[2] == 0:
            return torch.zeros(1, 0, device=mel.device)
        speech, source = self.hift.inference(
            speech_feat=mel, cache_source=cache_source, generator=self.generator
        )
        return self._vocoded(mel, speech, source, finalize)

    @staticmethod
    @torch.inference_mode()
    def vocode_many(
        chunks: list[tuple[Token2WavStream, torch.Tensor, bool]],
    ) -> list[torch.Tensor | Exception]:
        """`vocode` of several takes' chunks (stream, mel, finalize): those of one HiFT whose inputs have one
        shape (first chunks of one voice, steady chunks) run as one batch (`_vocode_batch`) of at most
        `HIFT_BATCH_FRAMES` mel frames in all. Each chunk gets its speech or its own error (a batch that
        fails runs again chunk by chunk)."""
        out: list[torch.Tensor | Exception | None] = [None] * len(chunks)
        inputs = [stream._hift_inputs(mel) for stream, mel, _ in chunks]
        groups: dict[tuple, list[int]] = {}
        for i, ((stream, _, _), (mel, source)) in enumerate(zip(chunks, inputs, strict=True)):
            key = (id(stream.hift), mel.device, mel.dtype, mel.shape[2], source.shape[2])
            groups.setdefault(key, []).append(i)
        limit = envs.HIFT_BATCH_FRAMES.count()
        limit = HIFT_BATCH_FRAMES if limit is None else limit
        batches = []
        for members in groups.values():
            per_batch = max(1, limit // max(1, inputs[members[0]][0].shape[2]))
            batches += [members[i : i + per_batch] for i in range(0, len(members), per_batch)]
        for members in batches:
            if len(members) > 1 and inputs[members[0]][0].shape[2] > 0:
                try:
                    _vocode_batch(chunks, inputs, members, out)
                    continue
                except Exception:  # noqa: BLE001 - chunk by chunk below, each gets its own result
                    log.warning("HiFT: a batch of %d chunks failed; one by one", len(members), exc_info=True)
            for i in (i for i in members if out[i] is None):
                stream, mel, finalize = chunks[i]
                try:
                    out[i] = stream.vocode(mel, finalize)
                except Exception as exc:  # noqa: BLE001 - this chunk's take gets it
                    out[i] = exc
        return out

    def _hift_inputs(self, mel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """HiFT's input: the chunk's mel after the take's cached mel, and the cached source tail."""
        if self._cache is None:
            return mel, torch.zeros(1, 1, 0, device=mel.device)
        return torch.cat([self._cache.mel, mel], dim=2), self._cache.source

    def _vocoded(
        self, mel: torch.Tensor, speech: torch.Tensor, source: torch.Tensor, finalize: bool
    ) -> torch.Tensor:
        """HiFT's output cross-faded with the take's cached tail; the cache kept for the next chunk."""
        speech = speech.float()
        if self._cache is not None:
            speech = _cross_fade(speech, self._cache.speech, self.window)
        if not finalize:
            self._cache = _HiftCache(
                mel=mel[:, :, -MEL_CACHE_LEN:],
                source=source[:, :, -SOURCE_CACHE_LEN:],
                speech=speech[:, -SOURCE_CACHE_LEN:],
            )
            speech = speech[:, :-SOURCE_CACHE_LEN]
        return speech.contiguous()


def _vocode_batch(chunks: list, inputs: list, members: list[int], out: list) -> None:
    """HiFT for the chunks `members` (inputs of one shape), in pieces of `batch_pieces` rows (a few row counts:
    few graphs under any load; padded rows repeat a piece's first); each chunk's speech into `out`."""
    for piece, rows in in_pieces(members):
        padded = piece + [piece[0]] * (rows - len(piece))
        speech, source = chunks[piece[0]][0].hift.inference_rows(
            torch.cat([inputs[i][0] for i in padded]),
            torch.cat([inputs[i][1] for i in padded]),
            [chunks[i][0].generator for i in piece],
        )
        for row, i in enumerate(piece):  # a chunk's result is set as its take's cache moves on
            stream, _, finalize = chunks[i]
            out[i] = stream._vocoded(inputs[i][0], speech[row : row + 1], source[row : row + 1], finalize)


def warm_prompt_cache(
    flow: torch.nn.Module,
    prompt_token: torch.Tensor,
    prompt_feat: torch.Tensor,
    embedding: torch.Tensor,
    fp16: bool = False,
    cache: PromptFlowCache | None = None,
) -> bool:
    """Compute a voice's reusable prompt flow state ahead of its first streamed take (e.g. on saving it).

    Uses the process-wide cache unless `cache` is given; True when a new entry was stored.
    """
    device = next(flow.parameters()).device
    cache = default_cache(device) if cache is None else cache
    if cache is None or not IncrementalFlow.supports(flow, prompt_token, prompt_feat):
        return False
    with torch.inference_mode(), flow_precision(flow, fp16):
        recompute = batched_encoder(scheduled_default(device))  # the mode its streamed takes will use
        return cache.warm(
            IncrementalFlow(flow, prompt_token, prompt_feat, embedding, recompute_encoder=recompute)
        )


def flow_precision(flow: torch.nn.Module, fp16: bool):
    """The incremental flow's precision context for a take that asked for `fp16`.

    With fp16 on CUDA the loader has halved the flow's weights, and they run as they are. Upstream's float16
    autocast on top only adds work: LayerNorm and GroupNorm run in float32 under it, each casting its input,
    weight and bias, and the linear after it casting back. On the H200 one first chunk took 14,239 kernels
    without it against 19,813 (61.8 against 72.0 ms), as far from float32 as before (2.2e-2 both;
    benchmarks/probes/autocast_check.py). A flow whose weights are still float32 keeps the autocast.
    """
    weight = next(flow.parameters())
    if fp16 and weight.device.type == "cuda" and weight.dtype != torch.float16:
        return torch.autocast("cuda", dtype=torch.float16)
    return nullcontext()


def _cross_fade(fade_in: torch.Tensor, fade_out: torch.Tensor, window: torch.Tensor) -> torch.Tensor:
    """Blend the head of ``fade_in`` with the tail of ``fade_out`` (upstream's Hamming overlap)."""
    overlap = window.shape[0] // 2
    overlap = min(overlap, fade_in.shape[-1], fade_out.shape[-1])
    if overlap == 0:
        return fade_in
    out = fade_in.clone()
    out[..., :overlap] = (
        fade_in[..., :overlap] * window[:overlap] + fade_out[..., -overlap:] * window[-overlap:]
    )
    return out
