"""CosyVoice3's streamed flow, incrementally: each call computes only the frames that are new or unsettled.

Upstream streams a take by re-running `CausalMaskedDiffWithDiT.inference(streaming=True)` over the prompt
and every token so far at each hop and keeping the frames after the last hop's: its cost per hop grows
with the take. In streaming mode the flow is chunk-causal, which makes most of that work a repeat:

- the DiT's attention sees a frame's own 50-frame chunk and every chunk before it (chunks counted from
  the prompt's first frame), its position embedding is two causal convolutions, and the rest is per frame;
- the starting noise is indexed by frame, and both CFG rows start from the same x;
- a token's features (`PreLookaheadLayer`) depend on the two tokens before it and the three after it;
  when not finalizing, every token that yields frames has its three lookahead tokens, so its features are
  final.

So once a call has every frame of a chunk, that chunk's keys and values at every Euler step, block and
CFG row never change again. `DiTFlowStream` keeps them (and each step's position-convolution inputs
just before the kept frames) and computes, per call, only the frames from the first chunk it has not kept:
a chunk the last call ended inside is recomputed, since its early frames now attend to later ones, as in
upstream's re-run. Results equal the re-run's frames up to float rounding, for any sequence of calls.

Cost per call: the new frames (plus at most one chunk recomputed) through every block, Euler step and CFG
row; only attention also reads the kept keys and values (a term linear in the take's length, small
beside the projections and feed-forward until the take is long: at the official width a frame's
projections and feed-forward cost as much as its attention over about 4,000 frames, 80 s).

With a per-voice `DiTPromptCache` (flow_prompt_cache.py) a take's first call starts after the prompt's
chunks that depend on the voice alone, copied from the cache (or computed first and cached). Several
takes' calls run together through `render_calls` (flow_batch.mel_many): their new frames share each
Euler step's and block's matrix products (flow_solve.py), replayed as CUDA graphs on a GPU (flow_graphs.py).

State per take (`state_bytes`): keys and values of every kept frame, for 10 steps x 22 blocks x 2 CFG
rows x 2 (keys, values) x 1024 channels = 901,120 numbers per frame, 45.1 M per second of audio (50
frames): 90 MB/s in fp16, 180 MB/s in fp32 (5.4 GB per minute of fp16 audio). Held in buffers grown
by half their size when full, so up to 1.5 x that. Fixed per take: the position convolutions' left
frames (10 x 2 x 2 x 1024 x 30 = 1.2 M numbers) and the time modulations of every block and step
(10 x (22 x 6 + 2) x 1024 = 1.4 M numbers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from studio.tts.cosyvoice3.dit import DiT, static_chunk_mask
from studio.tts.cosyvoice3.flow import CausalMaskedDiffWithDiT
from studio.tts.cosyvoice3.flow_graphs import solve_calls
from studio.tts.cosyvoice3.flow_prompt_cache import (
    DiTPromptCache,
    PromptEntry,
    cached_prompt_frames,
    prompt_key,
)
from studio.tts.cosyvoice3.flow_solve import CFG_ROWS, DiTStreamState, FramePlan
from studio.tts.flow.cfm import NOISE_FRAMES

#: a full key/value buffer grows to this many times its size (whole chunks), so growth copies are rare
BUFFER_GROWTH = 1.5
DEFAULT_STEPS = 10  # upstream's Euler steps for CosyVoice3's flow


@dataclass(frozen=True)
class FlowCall:
    """One checked `mel` call of a stream: what it asks for and the frames it reaches."""

    stream: DiTFlowStream
    tokens: torch.Tensor  # [1, N] on the flow's device
    finalize: bool
    voiced: int  # prompt and take tokens that yield frames
    total: int  # prompt and take tokens
    frames: int  # mel frames (prompt included) the call reaches


class DiTFlowStream:
    """One take's streamed flow: `mel(tokens, finalize)` returns the frames new since the last call, equal
    to upstream's re-run `flow.inference(tokens, ..., streaming=True, finalize=finalize)` from there on."""

    def __init__(
        self,
        flow: CausalMaskedDiffWithDiT,
        prompt_token: torch.Tensor,
        prompt_feat: torch.Tensor,
        embedding: torch.Tensor,
        n_timesteps: int = DEFAULT_STEPS,
        prompt_cache: DiTPromptCache | None = None,
    ):
        """flow: a CausalMaskedDiffWithDiT; prompt_token [1, P] int; prompt_feat [1, 2P, 80];
        embedding [1, 192] (the speaker vector). With a `prompt_cache`, the first call starts after the
        prompt's chunks cached for this voice, or computes them first and caches them."""
        estimator = getattr(getattr(flow, "decoder", None), "estimator", None)
        if not isinstance(estimator, DiT):
            raise ValueError("DiTFlowStream needs a CosyVoice3 flow (a DiT estimator)")
        if estimator.static_chunk_size < 1:
            raise ValueError("DiTFlowStream needs a DiT with static chunks (static_chunk_size >= 1)")
        if prompt_token.dim() != 2 or prompt_token.shape[0] != 1:
            raise ValueError(f"prompt_token must be [1, P], got {tuple(prompt_token.shape)}")
        if prompt_feat.shape[:2] != (1, prompt_token.shape[1] * flow.token_mel_ratio):
            raise ValueError(
                f"the prompt mel has shape {tuple(prompt_feat.shape)}; {prompt_token.shape[1]} prompt "
                f"tokens need [1, {prompt_token.shape[1] * flow.token_mel_ratio}, 80]"
            )
        self.flow = flow
        self.estimator = estimator
        self.n_timesteps = max(1, int(n_timesteps))
        self.dtype = estimator.proj_out.weight.dtype
        self.device = estimator.proj_out.weight.device
        self.prompt_token = prompt_token.to(self.device)
        self.prompt_feat = prompt_feat.to(self.device, self.dtype)
        self.prompt_tokens = prompt_token.shape[1]
        self.chunk = estimator.static_chunk_size
        #: mel frames this stream has run through the DiT so far (the prompt's included)
        self.computed_frames = 0
        self._state: DiTStreamState | None = self._initial_state(embedding)
        self._prompt_cache = prompt_cache
        self._prompt_frames = cached_prompt_frames(
            self.prompt_tokens, flow.pre_lookahead_len, flow.token_mel_ratio, self.chunk
        )
        self._prompt_key: tuple | None = None  # set until the first call has used or filled the cache
        if prompt_cache is not None and self._prompt_frames > 0:
            self._prompt_key = prompt_key(flow, self.n_timesteps, prompt_token, prompt_feat, embedding)

    # -- public -------------------------------------------------------------------------------------------
    @property
    def state_bytes(self) -> int:
        """Bytes this take's state holds now (0 once closed or finalized)."""
        return 0 if self._state is None else self._state.nbytes

    def close(self) -> None:
        """Free the cached state; the stream takes no more calls."""
        self._state = None

    def mel(self, tokens: torch.Tensor, finalize: bool) -> torch.Tensor:
        """tokens [1, N]: every speech token of the take so far (prompt excluded), N never shrinking.

        -> the mel frames new since the last call [1, 80, F] float32. When not `finalize`, the last
        `pre_lookahead_len` tokens are lookahead only (2 (N - 3) frames in all so far); `finalize` returns
        the rest, then frees the state.
        """
        return render_calls([self.check(tokens, finalize)])[0]

    def check(self, tokens: torch.Tensor, finalize: bool) -> FlowCall:
        """Validate a `mel` call without running it (raises ValueError or RuntimeError as `mel` would)."""
        state = self._state
        if state is None:
            raise RuntimeError("this flow stream is closed (finalized or closed): start a new one")
        if tokens.dim() != 2 or tokens.shape[0] != 1:
            raise ValueError(f"tokens must be [1, N], got {tuple(tokens.shape)}")
        count, lookahead = tokens.shape[1], self.flow.pre_lookahead_len
        if count < state.tokens:
            raise ValueError(f"a take's tokens only grow: got {count} after {state.tokens}")
        if not finalize and count < lookahead:
            raise ValueError(f"a call that does not finalize needs at least {lookahead} tokens, got {count}")
        total = self.prompt_tokens + count
        voiced = total if finalize else total - lookahead
        frames = voiced * self.flow.token_mel_ratio
        if frames > NOISE_FRAMES:
            raise ValueError(
                f"a flow stream of {frames} mel frames is longer than the supported "
                f"{NOISE_FRAMES} ({NOISE_FRAMES // 50} s)"
            )
        return FlowCall(self, tokens.to(self.device), bool(finalize), voiced, total, frames)

    # -- a call's pieces (render_calls runs them) -----------------------------------------------------------
    def _prompt_plan(self, call: FlowCall) -> FramePlan | None:
        """Before the first call's frames: restore the voice's cached prompt chunks (None), or plan them
        (their frames computed first and then cached by `_keep_prompt`); nothing while calls reach no
        new frame."""
        if self._prompt_key is None or call.frames <= self._state.returned:
            return None
        state, cache = self._state, self._prompt_cache
        self._reserve(state, call.frames)
        entry = cache.get(self._prompt_key)
        if entry is None:
            return self._prompt_frames_plan()
        self._prompt_key = None
        state.keys[:, :, :, :, : entry.frames] = entry.keys
        state.values[:, :, :, :, : entry.frames] = entry.values
        state.position_left.copy_(entry.position_left)
        state.kept = entry.frames
        return None

    def _prompt_frames_plan(self) -> FramePlan:
        """The prompt's cacheable frames, from frame 0 (the buffers hold them)."""
        voiced = self._prompt_frames // self.flow.token_mel_ratio
        no_tokens = torch.zeros(1, 0, dtype=torch.long, device=self.device)
        return self._plan_frames(no_tokens, 0, self._prompt_frames, voiced, self.prompt_tokens)

    def _keep_prompt(self) -> None:
        """After the prompt plan's solve: cache its chunks' state for the voice's later takes."""
        state, frames = self._state, self._prompt_frames
        key, self._prompt_key = self._prompt_key, None
        keys, values = state.keys[:, :, :, :, :frames], state.values[:, :, :, :, :frames]
        if self._prompt_cache.fits(2 * keys.numel() * keys.element_size() + state.position_left.nbytes):
            entry = PromptEntry(frames, keys.clone(), values.clone(), state.position_left.clone())
            self._prompt_cache.put(key, entry)

    def _plan(self, call: FlowCall) -> FramePlan | None:
        """The call's frames from the first chunk not kept (None when it reaches no new frame)."""
        state = self._state
        if call.frames <= state.returned:
            return None
        self._reserve(state, call.frames)
        return self._plan_frames(call.tokens, state.kept, call.frames, call.voiced, call.total, call.finalize)

    def _finish(self, call: FlowCall, solved: torch.Tensor | None) -> torch.Tensor:
        """The call's new frames [1, 80, F] float32 from its solved ones (None: nothing solved)."""
        state = self._state
        state.tokens = call.tokens.shape[1]
        new = torch.zeros(1, 80, 0, device=self.device)
        if solved is not None:
            new = solved[:, :, state.returned - (call.frames - solved.shape[2]) :].float()
            state.returned = call.frames
        if call.finalize:
            self.close()
        return new

    def _plan_frames(
        self,
        tokens: torch.Tensor,
        start: int,
        frames: int,
        voiced: int,
        total: int,
        finalize: bool = False,
    ) -> FramePlan:
        """Frames start..frames (`voiced` tokens yield frames out of `total`); the buffers hold them."""
        state = self._state
        kept = start if finalize else max(start, frames // self.chunk * self.chunk)
        count = frames - start
        mu = self._token_features(tokens, start, voiced, total, finalize)
        cond = torch.zeros(1, count, 80, device=self.device, dtype=self.dtype)
        prompt_end = self.prompt_feat.shape[1]
        if start < prompt_end:
            cond[:, : min(frames, prompt_end) - start] = self.prompt_feat[:, start : min(frames, prompt_end)]
        conditions = torch.cat(
            [
                torch.cat([cond, torch.zeros_like(cond)]),
                torch.cat([mu, torch.zeros_like(mu)]),
                state.speaker.expand(-1, count, -1),
            ],
            dim=2,
        )
        noise = self.flow.decoder.rand_noise[:, :, start:frames]
        self.computed_frames += count
        return FramePlan(
            state=state,
            start=start,
            frames=frames,
            kept=kept,
            x=noise.to(self.device, self.dtype).transpose(1, 2),
            conditions=conditions,
            angles=self.estimator.rotary_embed(frames, start).to(self.dtype),
            mask=self._attention_mask(start, frames),
        )

    # -- the state ----------------------------------------------------------------------------------------
    @torch.inference_mode()
    def _initial_state(self, embedding: torch.Tensor) -> DiTStreamState:
        dit, rows, steps = self.estimator, CFG_ROWS, self.n_timesteps
        blocks = dit.transformer_blocks
        attention = blocks[0].attn if len(blocks) else None
        heads, dim_head = (attention.heads, attention.dim_head) if attention else (0, 0)
        width = dit.proj_out.in_features
        cache = torch.empty(
            steps, len(blocks), rows, heads, 0, dim_head, device=self.device, dtype=self.dtype
        )
        kernel = dit.input_embed.conv_pos_embed.kernel_size
        like = torch.empty(0, device=self.device, dtype=self.dtype)
        times, step_sizes = self._schedule(like)
        time = dit.time_embed(torch.stack(times))  # [steps, dim]: the same for both CFG rows
        block_modulation = torch.stack(
            [torch.stack(block.attn_norm.modulation(time), dim=1) for block in blocks], dim=1
        ).unsqueeze(3)
        final_modulation = torch.stack(dit.norm_out.modulation(time), dim=1).unsqueeze(2)
        affine = self.flow.spk_embed_affine_layer
        speaker = affine(F.normalize(embedding.float().to(self.device), dim=1).to(affine.weight.dtype))
        return DiTStreamState(
            keys=cache,
            values=cache.clone(),
            position_left=torch.zeros(
                steps, 2, rows, width, kernel - 1, device=self.device, dtype=self.dtype
            ),
            block_modulation=block_modulation,
            final_modulation=final_modulation,
            step_sizes=torch.stack(step_sizes),
            speaker=torch.cat([speaker, torch.zeros_like(speaker)]).unsqueeze(1).to(self.dtype),
            returned=self.prompt_tokens * self.flow.token_mel_ratio,
        )

    def _schedule(self, like: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Each Euler step's time and increment, by the CFM's own arithmetic (`solve_euler`)."""
        t_span = self.flow.decoder.time_span(self.n_timesteps, like)
        t, dt = t_span[0], t_span[1] - t_span[0]
        times, step_sizes = [], []
        for step in range(1, self.n_timesteps + 1):
            times.append(t)
            step_sizes.append(dt)
            t = t + dt
            if step < self.n_timesteps:
                dt = t_span[step + 1] - t
        return times, step_sizes

    def _attention_mask(self, start: int, frames: int) -> torch.Tensor | None:
        """[Tq, Tk] bool for queries start..frames over keys 0..frames (the chunk mask's rows; `start` is a
        chunk boundary); None when the queries lie in one chunk (they see every key)."""
        if frames - start <= self.chunk:
            return None
        return static_chunk_mask(frames, self.chunk, -1, self.device, first_row=start)

    def _reserve(self, state: DiTStreamState, frames: int) -> None:
        """Grow the key/value buffers to hold `frames`, keeping the kept frames."""
        capacity = state.keys.shape[4]
        if frames <= capacity:
            return
        wanted = max(frames, int(capacity * BUFFER_GROWTH))
        capacity = math.ceil(wanted / self.chunk) * self.chunk
        for name in ("keys", "values"):
            old = getattr(state, name)
            grown = old.new_empty(*old.shape[:4], capacity, old.shape[5])
            grown[:, :, :, :, : state.kept] = old[:, :, :, :, : state.kept]
            setattr(state, name, grown)

    def _token_features(
        self, tokens: torch.Tensor, start: int, voiced: int, total: int, finalize: bool
    ) -> torch.Tensor:
        """mu for frames start..2*voiced [1, F, 80]: the lookahead layer's features of the tokens they
        come from, computed from a window of token ids as `inference` computes them over all."""
        ratio, layer = self.flow.token_mel_ratio, self.flow.pre_lookahead_layer
        first = start // ratio
        left = min(layer.left_context, first)
        end = min(total, voiced + layer.pre_lookahead_len)
        ids = self._token_ids(tokens, first - left, end)
        window = self.flow.input_embedding(ids.clamp(min=0).long())
        features = layer.span(window, left, voiced + layer.pre_lookahead_len - end)
        return features.repeat_interleave(ratio, dim=1)[:, start - first * ratio :]

    def _token_ids(self, tokens: torch.Tensor, begin: int, end: int) -> torch.Tensor:
        """Ids at positions begin..end of prompt + take tokens [1, end - begin]."""
        prompt = self.prompt_tokens
        parts = [self.prompt_token[:, begin:end], tokens[:, max(0, begin - prompt) : max(0, end - prompt)]]
        return torch.cat([part.to(self.device, torch.long) for part in parts], dim=1)


@torch.inference_mode()
def warm_prompt_cache(
    flow: CausalMaskedDiffWithDiT,
    prompt_token: torch.Tensor,
    prompt_feat: torch.Tensor,
    embedding: torch.Tensor,
    prompt_cache: DiTPromptCache,
    n_timesteps: int = 10,
) -> bool:
    """Compute a voice's cacheable prompt chunks into `prompt_cache` ahead of its first take (when the
    voice is loaded, say), unless it holds them already. True when the cache holds them afterwards; False
    when the prompt has no whole chunk to cache or the cache refused the entry."""
    stream = DiTFlowStream(flow, prompt_token, prompt_feat, embedding, n_timesteps, prompt_cache)
    key = stream._prompt_key
    if key is None:
        return False
    if key not in prompt_cache:
        stream._reserve(stream._state, stream._prompt_frames)
        solve_calls(flow, [stream._prompt_frames_plan()])
        stream._keep_prompt()
    stream.close()
    return key in prompt_cache


@torch.inference_mode()
def render_calls(calls: Sequence[FlowCall]) -> list[torch.Tensor]:
    """Run checked calls of distinct streams of one flow and Euler schedule together -> each call's new
    frames [1, 80, F] float32: first the prompt chunks of the voices not cached yet (once per voice, when
    the cache keeps them), then every call's frames, each in one batched solve (flow_solve.py)."""
    if not calls:
        return []
    flow = calls[0].stream.flow
    # a voice's prompt chunks are computed once per batch: its other takes then find them cached
    first_of_voice, later_of_voice, voices = [], [], set()
    for call in calls:
        key = call.stream._prompt_key
        (later_of_voice if key is not None and key in voices else first_of_voice).append(call)
        voices.add(key)
    for group in (first_of_voice, later_of_voice):
        prompt_plans = [(call, call.stream._prompt_plan(call)) for call in group]
        prompt_plans = [(call, plan) for call, plan in prompt_plans if plan is not None]
        if prompt_plans:
            solve_calls(flow, [plan for _, plan in prompt_plans])
            for call, _ in prompt_plans:
                call.stream._keep_prompt()
    plans = [call.stream._plan(call) for call in calls]
    solved = iter(solve_calls(flow, [plan for plan in plans if plan is not None]))
    return [
        call.stream._finish(call, None if plan is None else next(solved))
        for call, plan in zip(calls, plans, strict=True)
    ]


def max_state_bytes(
    flow: CausalMaskedDiffWithDiT, prompt_frames: int, max_tokens: int, n_timesteps: int = DEFAULT_STEPS
) -> int:
    """The most a `DiTFlowStream`'s state can hold (the `TakeGate` reserves it): keys and values of every DiT
    block for every mel frame (prompt and take), Euler step and guidance row, in the flow's dtype, in buffers
    that grow by half their size in whole chunks; plus each take's fixed part (time modulations, the position
    convolutions' left frames)."""
    estimator = flow.decoder.estimator
    blocks = len(estimator.transformer_blocks)
    width = estimator.proj_out.in_features
    chunk = int(estimator.static_chunk_size)
    element = next(flow.parameters()).element_size()
    frames = prompt_frames + max_tokens * int(flow.token_mel_ratio)
    rows = math.ceil(BUFFER_GROWTH * frames) + chunk
    per_frame = blocks * 2 * width * CFG_ROWS * n_timesteps * element
    modulations = n_timesteps * (blocks * 6 + 2) * width * element
    conv_frames = estimator.input_embed.conv_pos_embed.kernel_size - 1
    conv_context = n_timesteps * 2 * CFG_ROWS * width * conv_frames * element
    return rows * per_frame + modulations + conv_context
