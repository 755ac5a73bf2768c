"""The flow solver's work arena: the shapes it is sized in, and the error when one take cannot fit it."""

from __future__ import annotations

import math

from studio.tts.errors import SynthesisError


def bucket_frames(frames: int) -> int:
    """Frames padded for graph reuse: to 32 up to 256, then to 64 (a padded frame costs a real one's work)."""
    return 32 * math.ceil(frames / 32) if frames <= 256 else 64 * math.ceil(frames / 64)


def tight_context(needed: int, buckets: bool) -> int:
    """The least arena context serving `needed` frames: whole 256-frame units with buckets (graph shapes)."""
    return 256 * math.ceil(needed / 256) if buckets else needed


class ArenaTooSmallError(SynthesisError):
    """One take's chunk needs a work arena larger than the flow's whole budget (its context is too long)."""

    def __init__(self, need: int, frames: int, budget: int):
        self.need, self.frames, self.budget = need, frames, budget
        super().__init__(
            f"this take is too long for the VRAM budget: its flow solve needs a {need / 2**30:.2f} GiB work "
            f"arena for {frames} mel frames ({frames / 50:.0f} s with the prompt), the flow arena's share of "
            f"the budget is {budget / 2**30:.2f} GiB; shorten the text or raise the VRAM budget"
        )
