"""What the runtime counts while `bench` runs, read off a loaded model: the streaming flow's batches, graph
captures and scheduler ticks (either family), the prompt cache's hits and misses, and the take gate's queue."""

from __future__ import annotations

from studio.model_layout import COSYVOICE3


def flow_counters(loaded) -> dict[str, int]:
    """The streaming flow's counters (how chunks batched, graphs captured, scheduler ticks), if any."""
    from studio.tts.flow.streaming.solver import solver_stats
    from studio.tts.scheduler import scheduler_stats

    parts = getattr(loaded.model, "model", None)
    flow = getattr(parts, "flow", None)
    if flow is None:
        return {}
    if getattr(parts, "family", None) == COSYVOICE3:
        from studio.tts.cosyvoice3.flow_graphs import dit_flow_stats

        return {**dit_flow_stats(flow, getattr(parts, "hift", None)), **prompt_cache_counters(parts)}
    encoder, hift = (
        getattr(flow, "encoder_graphs", None),
        getattr(getattr(parts, "hift", None), "graphs", None),
    )
    captures = {  # the encoder's and HiFT's CUDA graphs (the solver's are `captures`)
        "encoder_captures": 0 if encoder is None else encoder.captures,
        "hift_captures": 0 if hift is None else hift.captures,
    }
    return {**solver_stats(flow), **scheduler_stats(flow), **captures, **prompt_cache_counters(parts)}


def prompt_cache_counters(parts) -> dict[str, int]:
    """The family's per-voice prompt cache on the model's device: hits, misses, evictions and refusals (a voice
    whose prompt state was evicted computes it again in its take's first chunk)."""
    if getattr(parts, "family", None) == COSYVOICE3:
        from studio.tts.cosyvoice3.flow_prompt_cache import default_prompt_cache as default
    else:
        from studio.tts.flow.streaming.prompt_cache import default_cache as default
    cache = default(parts.device)
    if cache is None:
        return {}
    stats = cache.stats()
    return {f"prompt_cache_{key}": stats[key] for key in ("hits", "misses", "evictions", "rejected")}


def gate_counters(loaded) -> dict:
    gate = getattr(loaded.model, "take_gate", None)
    if gate is None:
        return {}
    return {
        "queued_takes": gate.queued_total,
        "lean_takes": gate.lean_total,
        "released_bytes": gate.released_total,  # given back by takes reading a cached prompt in place
        "grow_waits": gate.grow_waits,  # times a take waited to grow its state towards its bound
        "capacity_bytes": gate.capacity,
    }


def restart_memory_peaks(loaded) -> None:
    """The process's CUDA allocator peaks count from now (a benchmark's next level)."""
    device = _cuda_device(loaded)
    if device is not None:
        import torch

        torch.cuda.reset_peak_memory_stats(device)


def memory_counters(loaded) -> dict:
    """Where a level's memory went, in GiB: the VRAM plan's shares, the take gate's capacity and the most its takes
    held at once, and this process's CUDA allocator peaks (allocated: tensors alive; reserved: its segments) since
    `restart_memory_peaks`. What the plan kept for the runtime but the allocator never reached is what a smaller
    reserve could give the takes."""
    gib = 2**30
    out: dict = {}
    plan = getattr(loaded.model, "vram_plan", None)
    if plan is not None:
        out["plan"] = {
            "budget": plan.budget / gib,
            "vllm": plan.vllm / gib,
            "weights": plan.resident / gib,
            "flow_arena": plan.flow_arena / gib,
            "takes": plan.takes / gib,
            "runtime": plan.reserved / gib,
            "process_cap": plan.process_fraction * plan.total / gib,
        }
    gate = getattr(loaded.model, "take_gate", None)
    if gate is not None:
        out["gate_capacity"] = gate.capacity / gib
        out["gate_held_peak"] = gate.used_peak / gib
    device = _cuda_device(loaded)
    if device is not None:
        import torch

        out["allocated_peak"] = torch.cuda.max_memory_allocated(device) / gib
        out["reserved_peak"] = torch.cuda.max_memory_reserved(device) / gib
    return out


def _cuda_device(loaded):
    parts = getattr(loaded.model, "model", None)
    device = getattr(parts, "device", None)
    return device if device is not None and getattr(device, "type", None) == "cuda" else None
