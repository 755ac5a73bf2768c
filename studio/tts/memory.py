"""The runtime's GPU memory: the VRAM budget planned once the LM is loaded (before vLLM starts, so vLLM
gets its share), then enforced on the loaded model (this process's cap, the flow arena, the take gate);
and what one take's flow state will hold."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from studio.model_layout import FLOW_FILE, HIFT_FILE
from studio.tts.device.vram_budget import VramPlan, cap_process, plan_for_device
from studio.tts.flow.streaming.solver import solver_for
from studio.tts.take_gate import TakeGate

log = logging.getLogger(__name__)

STATE_STEPS = 10  # Euler steps whose keys/values a take's flow state keeps (the runtime's n_timesteps)


def plan_budget(
    model_dir: Path, llm, budget_gb: float | None, with_vllm: bool, loaded_rest: bool
) -> VramPlan:
    """The plan from what is resident now: the LM (less its layers when vLLM will run them) and, unless
    ``loaded_rest``, the flow and HiFT still loading (their files' sizes)."""
    device = next(llm.parameters()).device
    pending = 0 if loaded_rest else sum((model_dir / name).stat().st_size for name in (FLOW_FILE, HIFT_FILE))
    dropped = llm.backbone_bytes() if with_vllm else 0  # freed once vLLM runs the LM's layers
    return plan_for_device(device, budget_gb, with_vllm, dropped - pending)


def enforce_budget(plan: VramPlan, parts) -> TakeGate:
    """Cap this process, size the flow's arena and admit takes against the plan."""
    cap_process(plan, parts.device)
    solver_for(parts.flow.decoder).budget_bytes = plan.flow_arena
    log.info("%s", plan.describe())
    return TakeGate(plan.takes)


def take_state_bytes(parts, prompt_frames: int, speech_tokens: int) -> int:
    """What one take's flow state holds at its end (x1.5: states grow in steps of half).

    The prompt's frames up to its reusable boundary are the prompt cache's, shared by every take of the
    voice, so they are not counted when the device has a prompt cache."""
    from studio.tts.flow.streaming.incremental import prompt_boundary
    from studio.tts.flow.streaming.prompt_cache import default_cache

    dtype = torch.float16 if parts.fp16 else torch.float32
    per_frame = solver_for(parts.flow.decoder).layout.bytes_per_frame(STATE_STEPS, 2, dtype)
    ratio = int(getattr(parts.flow, "token_mel_ratio", 2))
    shared = 0
    if default_cache(parts.device) is not None:
        shared = ratio * prompt_boundary(parts.flow, prompt_frames // ratio)
    return int(1.5 * per_frame * (prompt_frames - shared + ratio * speech_tokens))
