"""Incremental streaming flow: each streamed chunk computes only its new mel frames (fixes upstream defect 6).

Upstream re-runs the whole flow (encoder, 10 Euler steps x CFG of the estimator) over the full token prefix
for every streamed chunk, so streaming cost grows with the square of the text length. In streaming mode the
flow is chunk-causal: attention sees only up to the end of its own chunk (25 tokens in the encoder, 50 mel
frames in the estimator, chunks counted from the first prompt token), convolutions are causal or see real
lookahead tokens, and the sampler's noise is indexed by absolute frame. So once a whole chunk is computed
its values never change; `IncrementalFlow` keeps, per request, what later frames need from it:

- encoder: per-layer attention keys/values of the committed tokens (both Conformer stacks) and the
  upsampling convolution's left context; the pre-lookahead convolutions are recomputed from token ids
  (cached_encoder.py);
- estimator: for each Euler step, the keys/values of every transformer block (CFG rows batched; or their
  attention inputs, `STUDIO_FLOW_STATE_INPUTS`) and the last ``kernel - 1`` input frames of every causal
  convolution, in one `EstimatorState`; the Euler solve itself runs in the flow's `EstimatorSolver`
  (tts/flow/streaming/solver.py), batched with concurrent takes' chunks and replayed as CUDA graphs on a GPU.

Results equal the full-prefix re-run (`CausalMaskedDiffWithXvec.inference`) up to float rounding. The cache
is committed only up to the last complete chunk, so any hop schedule stays exact (an unaligned tail is
recomputed next call); finalize never commits, so it can be repeated.

With a `PromptFlowCache` (tts/flow/streaming/prompt_cache.py) a request starts from the cached state of its prompt's
exactly reusable frames (computed once per voice) instead of recomputing them.

A request made with ``recompute_encoder=True`` keeps no encoder state: `begin_many` encodes its whole token
prefix anew each call, in one batch with the other such requests' chunks (batched_encode.py; what the
chunk scheduler does on a GPU, where the encoder's launches, not its arithmetic, are the cost).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from studio import envs
from studio.tts.device.transfer import to_device
from studio.tts.flow.encoder import UpsampleConformerEncoder
from studio.tts.flow.estimator import CausalConditionalDecoder, CausalConv1d
from studio.tts.flow.streaming.batched_encode import Prefix, encode_prefixes
from studio.tts.flow.streaming.batched_solve import EstimatorState
from studio.tts.flow.streaming.cached_encoder import Window, encode_window
from studio.tts.flow.streaming.solver import SolveRequest, solver_for


# -- the request's state -----------------------------------------------------------------------------------
def commit_quantum(flow: nn.Module) -> int:
    """Tokens per commit granule: a whole chunk of both the encoder and the estimator."""
    encoder, estimator = flow.encoder, flow.decoder.estimator
    est_chunk = estimator.static_chunk_size // math.gcd(estimator.static_chunk_size, flow.token_mel_ratio)
    return math.lcm(encoder.static_chunk_size, est_chunk)


def prompt_boundary(flow: nn.Module, prompt_tokens: int) -> int:
    """Prompt tokens whose cached state depends on the prompt alone: the last commit boundary at or before
    ``P - lookahead`` (a later chunk mixes prompt and target tokens in attention or lookahead)."""
    usable = prompt_tokens - flow.pre_lookahead_len
    return max(0, usable // commit_quantum(flow) * commit_quantum(flow))


@dataclass
class FlowStep:
    """A `begin`-ed chunk: the solve to run (None when there are no new frames), then `complete` it."""

    request: SolveRequest | None
    frame0: int
    mel: torch.Tensor | None = None  # the result when there is no solve
    committed: list[int] = field(default_factory=list)
    cache: object = None  # the PromptFlowCache to store into once complete (with `key`)
    key: tuple | None = None


class IncrementalFlow:
    """One streaming request's flow caches; `mel(tokens, finalize)` returns only the frames not yet cached."""

    def __init__(
        self,
        flow: nn.Module,
        prompt_token: torch.Tensor,
        prompt_feat: torch.Tensor,
        embedding,
        cache=None,
        recompute_encoder: bool = False,
        keep_estimator: bool = True,
        pin_prompt: bool = False,
    ):
        self.flow = flow
        # False: keeps no estimator keys/values between calls; each call solves the take's frames again from
        # the prompt's cached state (or frame 0), upstream's way, in the solver's shared arena: what a take
        # does when the memory for its kept state is short. Its encoder is then recomputed too.
        self.keep_estimator = keep_estimator
        # True: every call runs the encoder over the whole prefix, batched with other requests' chunks
        # (`begin_many`, batched_encode.py), and keeps no encoder state; the estimator stays incremental
        self.recompute_encoder = recompute_encoder or not keep_estimator
        self.restored = None  # the prompt cache's snapshot this request started from, if any
        self.state_fp8 = envs.FLOW_STATE_FP8.enabled()  # its estimator states keep float8 pages
        # its estimator states keep the blocks' attention inputs, as the flow's solver runs them
        self.state_inputs = solver_for(flow.decoder).keeps_inputs
        self.cache = cache  # a PromptFlowCache (or None): consulted once, before the first frames
        # True: a prompt state restored from the cache stays in it (pinned) until `release_prompt`, so a take
        # need not count the prompt's frames it reads in place (`shared_prompt_frames`) against its budget
        self.pin_prompt = pin_prompt
        self.pinned: tuple | None = None  # (cache, key) of the pinned prompt state
        self.mark: int | None = (
            None  # token position whose state the next call also keeps (see `cached_encoder.Window`)
        )
        self.prompt_ids = [int(i) for i in prompt_token.reshape(-1).tolist()]
        self.prompt_feat = prompt_feat  # [1, 2P, 80]
        self.embedding = embedding
        self._spks: torch.Tensor | None = None  # the speaker projection: the same for every call
        self.quantum = commit_quantum(flow)  # tokens per commit granule
        self._reset()

    @staticmethod
    def supports(flow: nn.Module, prompt_token: torch.Tensor, prompt_feat: torch.Tensor) -> bool:
        """True when the flow is chunk-causal in the way this path relies on (CosyVoice2's configuration)."""
        encoder = getattr(flow, "encoder", None)
        estimator = getattr(getattr(flow, "decoder", None), "estimator", None)
        if not isinstance(encoder, UpsampleConformerEncoder) or not isinstance(
            estimator, CausalConditionalDecoder
        ):
            return False
        single_level = all(
            isinstance(level[2], CausalConv1d) for level in (*estimator.down_blocks, *estimator.up_blocks)
        )
        return (
            single_level
            and encoder.static_chunk_size > 0
            and estimator.static_chunk_size > 0
            and encoder.up_layer.stride == flow.token_mel_ratio
            and prompt_feat.shape[1] == flow.token_mel_ratio * prompt_token.shape[1]
        )

    def _reset(self) -> None:
        self.committed: list[int] = []  # token ids (prompt first) whose frames are cached
        self.encoder_store: dict = {}
        self.token_store: dict = {}
        self.estimator_state = EstimatorState(fp8=self.state_fp8, inputs=self.state_inputs)
        self.valid = True

    def _rewind(self) -> None:
        """The state before the take's first frame: the prompt cache's snapshot it started from, or none."""
        if self.restored is None:
            self._reset()
            return
        from studio.tts.flow.streaming.prompt_cache import restore  # prompt_cache imports this module

        restore(self, self.restored)

    @property
    def shared_prompt_frames(self) -> int:
        """Frames of the pinned prompt state this request reads in place and never holds itself (0: none)."""
        return self.estimator_state.base_length if self.pinned is not None else 0

    def release_prompt(self) -> None:
        """The request ended: its pinned prompt state may leave the cache again."""
        if self.pinned is not None:
            cache, key = self.pinned
            self.pinned = None
            cache.unpin(key)

    def prompt_boundary(self) -> int:
        """Prompt tokens whose cached state depends on the prompt alone (`prompt_boundary`)."""
        return prompt_boundary(self.flow, len(self.prompt_ids))

    def kept_mark(self) -> bool:
        """Whether the last call kept the state at its mark (the prompt cache's boundary)."""
        if self.recompute_encoder:  # no encoder state: the estimator's tails are all there is
            return self.estimator_state.mark_tails is not None
        return any(isinstance(k, tuple) and k[0] == "mark" for k in self.token_store)

    @torch.inference_mode()
    def mel(self, tokens: list[int], finalize: bool, n_timesteps: int = 10) -> tuple[torch.Tensor, int]:
        """(mel [1, 80, n] in the compute dtype, absolute frame index of its first column; prompt frames count).

        When not `finalize`, the last `pre_lookahead_len` tokens are lookahead only, as in the full path.
        `begin` + the solve + `complete`, for callers that batch the solve themselves (`ChunkScheduler`).
        """
        step = self.begin(tokens, finalize, n_timesteps)
        if step.request is not None:
            step.request.result = solver_for(self.flow.decoder).solve(step.request)
        return self.complete(step)

    @torch.inference_mode()
    def begin(self, tokens: list[int], finalize: bool, n_timesteps: int = 10) -> FlowStep:
        """The encoder part of `mel`: its `FlowStep` holds the Euler solve still to run (None: no frames)."""
        return begin_many([(self, tokens, finalize)], n_timesteps)[0]

    def _consult_cache(self, n_timesteps: int) -> tuple[object, tuple | None]:
        """First call: restore the prompt's state from the cache, or (cache, key) to keep it under."""
        key, cache = None, self.cache
        if cache is not None and not self.committed:
            self.cache = None  # consulted once per request: a restart recomputes
            key = cache.start(self, n_timesteps)
            self.mark = None if key is None else self.prompt_boundary()
        return cache, key

    def complete(self, step: FlowStep) -> tuple[torch.Tensor, int]:
        """Commit a `begin` whose solve has run (`step.request.result` set); (mel, first frame) as `mel`."""
        mel = step.mel
        if step.request is not None:
            if step.request.error is not None:
                raise step.request.error
            mel = step.request.result
            self.committed = step.committed
            self.valid = True
        if step.key is not None:
            step.cache.store(step.key, self)
        return mel, step.frame0

    def _plan(self, ids: list[int], finalize: bool, n_timesteps: int) -> _Plan | FlowStep:
        """Which tokens this call computes, on the host (a `FlowStep` without a solve when there are none)."""
        flow = self.flow
        lookahead = flow.pre_lookahead_len
        if not finalize and len(ids) <= lookahead:
            raise ValueError(f"a non-final flow chunk needs more than {lookahead} tokens")
        end = len(ids) if finalize else len(ids) - lookahead
        if not self.keep_estimator and self.valid:
            self._rewind()  # back to the prompt's state: this call solves the take's frames again
        start = len(self.committed)
        if not self.valid or ids[:start] != self.committed:  # interrupted or not a continuation: start over
            self._reset()
            start = 0
        if end <= start:
            device = flow.input_embedding.weight.device
            return FlowStep(
                None, start * flow.token_mel_ratio, torch.zeros(1, flow.output_size, 0, device=device)
            )
        keeps = self.keep_estimator and not finalize
        commit = max(start, end // self.quantum * self.quantum) if keeps else start
        mark, self.mark = self.mark, None
        if mark is not None and not start <= mark <= end:
            mark = None
        self.valid = False  # until `complete`: a solve that never finishes leaves the caches inconsistent
        return _Plan(ids, start, end, commit, mark, n_timesteps)

    def _encode(self, plan: _Plan) -> torch.Tensor:
        """The incremental encoder: mu [1, 80, n] of the plan's new tokens over this request's caches."""
        flow, ids = self.flow, plan.ids
        start, end, commit, mark = plan.start, plan.end, plan.commit, plan.mark
        ratio = flow.token_mel_ratio
        device = flow.input_embedding.weight.device
        lo = max(0, start - (flow.encoder.pre_lookahead_layer.conv2.kernel_size[0] - 1))
        token = to_device(torch.tensor([ids[lo:end]], dtype=torch.long), device).clamp_min(0)
        emb = flow.input_embedding(token)
        context = None
        if end < len(ids):
            context = flow.input_embedding(
                to_device(torch.tensor([ids[end:]], dtype=torch.long), device).clamp_min(0)
            )
        h = encode_window(
            flow.encoder,
            emb,
            lo,
            context,
            Window(start, end, commit, self.token_store, mark),
            Window(start * ratio, end * ratio, commit * ratio, self.encoder_store, mark and mark * ratio),
        )
        return flow.encoder_proj(h).transpose(1, 2).contiguous()  # [1, 80, n]

    def _request(self, plan: _Plan, mu: torch.Tensor) -> FlowStep:
        """The plan's Euler solve over its new frames' encoder output `mu` [1, 80, n]."""
        flow, ratio = self.flow, self.flow.token_mel_ratio
        device = mu.device
        spks = self._spks
        if spks is None or spks.device != device or spks.dtype != mu.dtype:
            dtype = flow.spk_embed_affine_layer.weight.dtype
            embedding = F.normalize(to_device(self.embedding, device).float(), dim=1).to(dtype)
            spks = self._spks = flow.spk_embed_affine_layer(embedding).to(mu.dtype)
        frame0, frames = plan.start * ratio, mu.shape[2]
        cond = torch.zeros_like(mu)
        prompt_frames = self.prompt_feat.shape[1]
        if frame0 < prompt_frames:
            part = to_device(self.prompt_feat[:, frame0 : frame0 + frames], device).to(mu.dtype)
            cond[:, :, : part.shape[1]] = part.transpose(1, 2)
        # `CausalConditionalCFM.solve_euler` (Euler steps, classifier-free guidance) on the new frames only,
        # batched with other takes' chunks by the flow's `EstimatorSolver`.
        request = SolveRequest(
            self.estimator_state,
            mu,
            spks,
            cond,
            frame0,
            plan.commit * ratio,
            plan.mark and plan.mark * ratio,
            plan.n_timesteps,
        )
        return FlowStep(request, frame0, committed=plan.ids[: plan.commit])


@dataclass
class _Plan:
    """What one call of an `IncrementalFlow` computes: tokens [start, end) of `ids`, keeping [0, commit)."""

    ids: list[int]
    start: int
    end: int
    commit: int
    mark: int | None
    n_timesteps: int


@torch.inference_mode()
def begin_many(
    chunks: list[tuple[IncrementalFlow, list[int], bool]], n_timesteps: int = 10
) -> list[FlowStep]:
    """`IncrementalFlow.begin` of several requests' chunks (request, tokens, finalize) of one flow, in order.

    Requests that recompute their encoder (`recompute_encoder`) run it as one batch (`encode_prefixes`);
    the others each run their own incremental encoder.
    """
    steps: list[FlowStep | None] = [None] * len(chunks)
    batched: list[tuple[int, IncrementalFlow, _Plan]] = []
    caches = []
    for i, (request, tokens, finalize) in enumerate(chunks):
        caches.append(request._consult_cache(n_timesteps))
        plan = request._plan(request.prompt_ids + [int(t) for t in tokens], finalize, n_timesteps)
        if isinstance(plan, FlowStep):
            steps[i] = plan
        elif request.recompute_encoder:
            batched.append((i, request, plan))
        else:
            steps[i] = request._request(plan, request._encode(plan))
    if batched:
        prefixes = [Prefix(plan.ids, plan.end) for _, _, plan in batched]
        mus = encode_prefixes(batched[0][1].flow, prefixes, [plan.start for _, _, plan in batched])
        for (i, request, plan), mu in zip(batched, mus, strict=True):
            steps[i] = request._request(plan, mu)
    for step, (cache, key) in zip(steps, caches, strict=True):
        step.cache, step.key = cache, key
    return steps
