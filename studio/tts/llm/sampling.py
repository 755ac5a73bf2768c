"""Repetition-aware sampling (RAS) of speech tokens, upstream CosyVoice2's `ras_sampling` with explicit RNG.

The maths is upstream's (nucleus sampling over the top_p / top_k head, falling back to plain sampling from the
full distribution when the pick repeats too often in the recent window), but every random draw comes from the
request's own `torch.Generator`, so concurrent requests with fixed seeds are reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class RasSampling:
    """RAS parameters as in the official yaml; `top_k=1` means greedy decoding (no randomness at all)."""

    top_p: float = 0.8
    top_k: int = 25
    win_size: int = 10
    tau_r: float = 0.1

    def __post_init__(self) -> None:
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"RasSampling.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 1:
            raise ValueError(f"RasSampling.top_k must be >= 1, got {self.top_k}")
        if self.win_size < 0 or self.tau_r < 0:
            raise ValueError(
                f"RasSampling.win_size and tau_r must be >= 0, got {self.win_size}, {self.tau_r}"
            )

    @property
    def is_greedy(self) -> bool:
        return self.top_k == 1

    def sample(
        self,
        logp: torch.Tensor,
        decoded: Sequence[int],
        generator: torch.Generator | None = None,
    ) -> int:
        """Pick one token id from `logp` ([V] log-probabilities or logits) given the tokens decoded so far."""
        if self.is_greedy:
            return int(logp.argmax())
        top_id = nucleus_sampling(logp, self.top_p, self.top_k, generator)
        window = decoded[-self.win_size :] if self.win_size > 0 else ()
        repeats = sum(1 for token in window if token == top_id)
        if repeats >= self.win_size * self.tau_r:
            top_id = random_sampling(logp, generator)
        return top_id

    def sample_avoiding(
        self,
        logp: torch.Tensor,
        decoded: Sequence[int],
        forbidden: Sequence[int],
        generator: torch.Generator | None = None,
        max_trials: int = 100,
    ) -> int:
        """Sample like upstream's `sampling_ids(ignore_eos=True)`: redraw while a forbidden id (a stop id) comes out.

        Upstream gives up with an error after `max_trials`; we mask the forbidden ids instead, so a run
        that must reach a minimum length (or the benchmark's exact length) never fails.
        """
        for _ in range(max_trials):
            token = self.sample(logp, decoded, generator)
            if token not in forbidden:
                return token
            if self.is_greedy:
                break
        masked = logp.clone()
        masked[list(forbidden)] = float("-inf")
        return self.sample(masked, decoded, generator)


def nucleus_sampling(
    logp: torch.Tensor, top_p: float, top_k: int, generator: torch.Generator | None = None
) -> int:
    """Draw from the smallest head of the sorted distribution whose mass reaches `top_p`, at most `top_k` ids."""
    import torch

    probs = logp.float().softmax(dim=0)
    head = min(top_k, probs.numel())
    sorted_probs, sorted_ids = probs.sort(descending=True, stable=True)
    sorted_probs, sorted_ids = sorted_probs[:head], sorted_ids[:head]
    # upstream keeps id i while the mass before it is still below top_p (so at least one id is kept)
    mass_before = torch.cat([sorted_probs.new_zeros(1), torch.cumsum(sorted_probs, dim=0)[:-1]])
    keep = int((mass_before < top_p).sum())
    pick = sorted_probs[:keep].multinomial(1, replacement=True, generator=generator)
    return int(sorted_ids[pick])


def random_sampling(logp: torch.Tensor, generator: torch.Generator | None = None) -> int:
    """Draw from the full distribution (upstream's fallback when the nucleus pick repeats)."""
    return int(logp.float().softmax(dim=0).multinomial(1, replacement=True, generator=generator))
