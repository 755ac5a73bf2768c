"""The runtime's GPU memory: the VRAM budget, planned before vLLM starts (and before this process loads
anything, so vLLM gets its share) or, without vLLM, once everything is loaded; then enforced on the loaded
model (this process's cap, the flow arena, the take gate); and the most one take's streaming state can hold."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import torch

from studio import envs
from studio.model_layout import COSYVOICE2, FLOW_FILE, HIFT_FILE
from studio.tts.device.vram_budget import VramPlan, cap_process, plan_for_device
from studio.tts.flow.streaming.batched_solve import PAGE_FRAMES, stored_bytes_per_frame
from studio.tts.flow.streaming.solver import solver_for
from studio.tts.take_gate import TakeGate

log = logging.getLogger(__name__)

STATE_STEPS = 10  # Euler steps whose keys/values a take's flow state keeps (the runtime's n_timesteps)
GROWTH, GROWTH_FLOOR = 1.5, 64  # the encoder's K/V buffers grow to max(rows needed, 1.5 x before, 64 rows)


def plan_budget(device, budget_gb: float | None, arena: bool = True) -> VramPlan:
    """The plan of the PyTorch backend, from what is resident once everything has loaded (``arena``: the
    flow batches takes in a shared arena, CosyVoice2's)."""
    return plan_for_device(device, budget_gb, with_vllm=False, arena=arena)


def plan_before_vllm(
    model_dir: Path,
    skeleton,
    device,
    budget_gb: float | None,
    fp16: bool,
    vllm_options: dict,
    arena: bool = True,
) -> tuple[VramPlan, dict]:
    """The plan made before vLLM starts and before this process loads anything (NVML answers: CUDA stays
    untouched, so vLLM can fork), and vLLM's options that size it: ``gpu_memory_utilization`` and the
    bytes of its KV cache. Resident: the LM without its layers
    (vLLM runs them) in the dtype it will run, and flow.pt and hift.pt at their files' sizes; ``skeleton``
    is the LM on the meta device. vLLM's share is never more than it can use (`VllmMemory.need`)."""
    from studio.tts.llm.vllm.memory import vllm_memory

    kept = sum(p.numel() for p in skeleton.parameters()) - skeleton.backbone_bytes() // 4  # meta: float32
    pending = sum((model_dir / name).stat().st_size for name in (FLOW_FILE, HIFT_FILE))
    resident = kept * (2 if fp16 else 4) + pending
    memory = vllm_memory(skeleton, **vllm_options)
    plan = plan_for_device(device, budget_gb, True, resident=resident, vllm_need=memory.need, arena=arena)
    sizes = {
        "gpu_memory_utilization": plan.gpu_memory_utilization,
        "kv_cache_memory_bytes": memory.kv_cache_bytes(plan.vllm),
    }
    return plan, sizes


def enforce_budget(plan: VramPlan, parts) -> TakeGate:
    """Cap this process, size the flow's arena (either family's batched solve) and admit takes against the plan."""
    cap_process(plan, parts.device)
    if parts.family == COSYVOICE2:
        solver_for(parts.flow.decoder).budget_bytes = plan.flow_arena
    elif (dit_solver := getattr(parts.flow.decoder, "dit_solver", None)) is not None:
        dit_solver.budget_bytes = plan.flow_arena  # CosyVoice3's graphed solve (0: every call eagerly)
    log.info("%s", plan.describe())
    return TakeGate(plan.takes)


def take_state_bytes(parts, prompt_frames: int, speech_tokens: int) -> int:
    """The most one take's streaming state can hold with ``speech_tokens`` after its prompt: an upper bound,
    so that takes admitted by it never overrun the budget however long they run.

    Per mel frame: every estimator block's keys/values at every Euler step for both CFG rows, in whole pages
    (`PAGE_FRAMES`; a take grows a page at a time and never holds its rows twice), and the encoder's
    keys/values (the up-sampled blocks per frame, the others per token), which grow by x1.5 from 64 rows by
    copying: 1.5 x their frames, and the old buffer beside the new one while they grow. The conv tails (and
    those at the mark) are fixed. The prompt's frames count in full: a voice whose prompt state is not cached
    yet computes them itself."""
    flow = parts.flow
    size = torch.empty((), dtype=_state_dtype(parts)).element_size()
    ratio = int(getattr(flow, "token_mel_ratio", 2))
    encoder = flow.encoder
    frames = _take_frames(parts, prompt_frames, speech_tokens)
    width = 2 * encoder.output_size() * size  # a key and a value per position
    encoder_per_frame = width * (len(encoder.up_encoders) + len(encoder.encoders) / ratio)
    encoder_bytes = encoder_per_frame * (1 + GROWTH) * max(GROWTH_FLOOR * ratio, math.ceil(frames))
    return _estimator_bytes(parts, frames) + int(encoder_bytes)


def shared_prompt_bytes(parts, prompt_frames: int, speech_tokens: int, shared_frames: int) -> int:
    """What a take admitted by `take_state_bytes(parts, prompt_frames, speech_tokens)` never holds when it reads
    `shared_frames` of its prompt's estimator state in place (a pinned prompt cache entry): the pages of those
    frames (its own frames start after them). Its encoder state is its own copy, so it counts in full."""
    frames = _take_frames(parts, prompt_frames, speech_tokens)
    shared = min(int(shared_frames), frames)
    return _estimator_bytes(parts, frames) - _estimator_bytes(parts, frames - shared) if shared > 0 else 0


def _take_frames(parts, prompt_frames: int, speech_tokens: int) -> int:
    """Mel frames of a take's state at its bound: its prompt's and its speech tokens' (reserved and given back
    by the same count)."""
    return int(prompt_frames) + int(getattr(parts.flow, "token_mel_ratio", 2)) * int(speech_tokens)


def lean_take_state_bytes(parts, prompt_frames: int) -> int:
    """What a take that keeps no estimator state holds (`IncrementalFlow(keep_estimator=False)`): the pages
    of its prompt's frames while its first call keeps them for the prompt cache, and the conv tails; its
    encoder is recomputed each call, and each call's keys and values live in the solver's arena."""
    return _estimator_bytes(parts, int(prompt_frames))


def _state_dtype(parts) -> torch.dtype:
    return torch.float16 if parts.fp16 else torch.float32


def _estimator_bytes(parts, frames: int) -> int:
    """An `EstimatorState` holding `frames` own frames: the pages covering them (float8 with their scales under
    ``STUDIO_FLOW_STATE_FP8``) and the causal convolutions' left context at the commit point and at the mark
    (float32 under autocast)."""
    layout = solver_for(parts.flow.decoder).layout  # what its takes keep: keys/values or attention inputs
    per_frame = stored_bytes_per_frame(
        layout, STATE_STEPS, 2, _state_dtype(parts), envs.FLOW_STATE_FP8.enabled()
    )
    tails = 2 * math.prod((STATE_STEPS, 2, layout.conv_channels, layout.left)) * 4
    return per_frame * PAGE_FRAMES * math.ceil(frames / PAGE_FRAMES) + tails
