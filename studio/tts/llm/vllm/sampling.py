"""Repetition-aware sampling (RAS) as a vLLM V1 logits processor, batched over requests.

Upstream's RAS draws from the nucleus (top-p, top-k); if the draw occurred in the last `win_size`
tokens at least `win_size * tau_r` times, it redraws from the full distribution. That is the mixture
    P(y) = p_nuc(y) * [y not repeated] + (sum of p_nuc over repeated tokens) * p(y),
from which this processor draws by inverse CDF, with a uniform number derived from the request's seed and
its step (splitmix64): reproducible per request whatever else is in the batch, and batched on the device.
The logits row then becomes one-hot on the draw, and the request runs greedy in vLLM (temperature 0),
which skips vLLM's per-request generator loop. Before `min_len` tokens upstream redraws until no stop
id comes out: P conditioned on "not a stop id", so stop ids are masked in the mixture. Requests
without our `extra_args` key pass through untouched.
"""

from __future__ import annotations

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

EXTRA_ARGS_KEY = "cosyvoice_ras"
PROCESSOR_PATH = "studio.tts.llm.vllm.sampling:RasLogitsProcessor"


_MASK64 = (1 << 64) - 1


def ras_extra_args(
    *,
    top_p: float,
    top_k: int,
    win_size: int,
    tau_r: float,
    min_len: int,
    stop_token_ids: list[int],
    seed: int,
) -> dict:
    """The SamplingParams.extra_args that switch RAS on for one request (run it at temperature 0)."""
    return {
        EXTRA_ARGS_KEY: {
            "seed": int(seed),
            "top_p": float(top_p),
            "top_k": int(top_k),
            "win_size": int(win_size),
            "tau_r": float(tau_r),
            "min_len": int(min_len),
            "stop_token_ids": [int(t) for t in stop_token_ids],
        }
    }


def step_uniform(seed: int, step: int) -> float:
    """A uniform number in [0, 1) for (seed, step): splitmix64, so draws never depend on the batch."""
    x = (seed * 0x9E3779B97F4A7C15 + (step + 1) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return ((x ^ (x >> 31)) >> 11) * 2.0**-53


class _RasRequest:
    __slots__ = ("seed", "top_p", "top_k", "win_size", "threshold", "min_len", "stop_ids", "output_ids")

    def __init__(self, args: dict, output_ids: list[int]):
        self.seed = args["seed"]
        self.top_p, self.top_k = args["top_p"], args["top_k"]
        self.win_size = args["win_size"]
        self.threshold = args["win_size"] * args["tau_r"]
        self.min_len, self.stop_ids = args["min_len"], args["stop_token_ids"]
        self.output_ids = output_ids  # vLLM's live list of this request's output tokens


class RasLogitsProcessor(LogitsProcessor):
    """Turns each RAS request's logits into log P of upstream's RAS draw (see the module doc)."""

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool) -> None:
        self.requests: dict[int, _RasRequest] = {}
        self._batch: tuple | None = None  # per-batch tensors, rebuilt when the batch changes

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        args = (sampling_params.extra_args or {}).get(EXTRA_ARGS_KEY)
        if args is not None and (not 0.0 < args["top_p"] <= 1.0 or args["top_k"] < 1):
            raise ValueError(f"invalid RAS parameters: {args}")

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        self._batch = None
        for index in batch_update.removed:
            self.requests.pop(index, None)
        for index, params, _prompt_ids, output_ids in batch_update.added:
            args = (params.extra_args or {}).get(EXTRA_ARGS_KEY) if params is not None else None
            if args is None:
                self.requests.pop(index, None)
            else:
                self.requests[index] = _RasRequest(args, output_ids)
        for a_index, b_index, direction in batch_update.moved:
            a_entry = self.requests.pop(a_index, None)
            b_entry = self.requests.pop(b_index, None)
            if a_entry is not None:
                self.requests[b_index] = a_entry
            if b_entry is not None and direction == MoveDirectionality.SWAP:
                self.requests[a_index] = b_entry

    def _batch_tensors(self, device: torch.device) -> tuple:
        if self._batch is None:
            rows = sorted(self.requests)
            reqs = [self.requests[i] for i in rows]
            column = lambda values: torch.tensor(values, device=device).unsqueeze(1)  # noqa: E731
            self._batch = (
                rows,
                reqs,
                torch.tensor(rows, device=device),
                column([r.top_p for r in reqs]),
                column([r.top_k for r in reqs]),
                column([float(r.threshold) for r in reqs]),
                max(r.top_k for r in reqs),
                max(r.win_size for r in reqs),
                sorted({s for r in reqs for s in r.stop_ids}),
            )
        return self._batch

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Draw each RAS request's token and leave its logits row one-hot on it (greedy picks it)."""
        if not self.requests:
            return logits
        row_index, mixture = self.mixture(logits)
        reqs = self._batch[1]
        uniforms = torch.tensor([step_uniform(r.seed, len(r.output_ids)) for r in reqs], dtype=torch.float64)
        cdf = mixture.double().cumsum(dim=-1)
        targets = (uniforms.to(logits.device, non_blocking=True) * cdf[:, -1]).unsqueeze(1)
        drawn = torch.searchsorted(cdf, targets, right=True).clamp_(max=mixture.shape[-1] - 1)
        one_hot = torch.full_like(mixture, float("-inf")).scatter_(1, drawn, 0.0)
        logits[row_index] = one_hot.to(logits.dtype)
        return logits

    def mixture(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch rows, RAS probabilities [rows, V]) of the requests this processor serves."""
        device = logits.device
        rows, reqs, row_index, top_p, top_k, threshold, k_max, width, stop_ids = self._batch_tensors(device)
        probs = torch.softmax(logits.index_select(0, row_index).float(), dim=-1)
        vocab = probs.shape[-1]

        # Nucleus: sorted descending, keep while the mass before a token is < top_p and rank < top_k;
        # only the top_k head can be kept, so a top-k replaces the full sort.
        head_probs, head_ids = probs.topk(min(k_max, vocab), dim=-1, sorted=True)
        mass_before = head_probs.cumsum(dim=-1) - head_probs
        ranks = torch.arange(head_probs.shape[-1], device=device).unsqueeze(0)
        keep = (mass_before < top_p) & (ranks < top_k)
        keep[:, 0] = True
        nucleus = torch.zeros_like(probs).scatter_(1, head_ids, head_probs * keep)
        nucleus = nucleus / nucleus.sum(dim=-1, keepdim=True)

        # Tokens repeated often enough in the window trigger a redraw from the full distribution.
        if width > 0:
            window = torch.full((len(reqs), width), -1, dtype=torch.long)
            for row, req in enumerate(reqs):
                recent = req.output_ids[-req.win_size :] if req.win_size > 0 else []
                if recent:
                    window[row, : len(recent)] = torch.as_tensor(recent, dtype=torch.long)
            window = window.to(device, non_blocking=True)
            counts = torch.zeros_like(probs).scatter_add_(1, window.clamp(min=0), (window >= 0).float())
            repeated = counts >= threshold
        else:
            repeated = (threshold <= 0).expand_as(probs)
        redraw_mass = (nucleus * repeated).sum(dim=-1, keepdim=True)
        mixture = nucleus * ~repeated + redraw_mass * probs

        short = [row for row, req in enumerate(reqs) if len(req.output_ids) < req.min_len]
        if short and stop_ids:
            stops = torch.tensor([s for s in stop_ids if s < vocab], device=device)
            short_rows = torch.tensor(short, device=device)
            mixture[short_rows.unsqueeze(1), stops.unsqueeze(0)] = 0.0
        return row_index, mixture
