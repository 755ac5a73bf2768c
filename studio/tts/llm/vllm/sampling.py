"""Repetition-aware sampling (RAS) as a vLLM V1 logits processor, batched over requests, on the device.

Upstream's RAS draws from the nucleus (top-p, top-k); if the draw occurred in the last `win_size`
tokens at least `win_size * tau_r` times, it redraws from the full distribution. That is the mixture
    P(y) = p_nuc(y) * [y not repeated] + (sum of p_nuc over repeated tokens) * p(y),
from which this processor draws by inverse CDF, with a uniform number derived from the request's seed and
its step (splitmix64, on the host, vectorised): reproducible per request whatever else is in the batch.
The logits row then becomes one-hot on the draw, and the request runs greedy in vLLM (temperature 0),
which skips vLLM's per-request generator loop. Before `min_len` tokens upstream redraws until no stop
id comes out: P conditioned on "not a stop id", so stop ids are masked in the mixture. Requests
without our `extra_args` key pass through untouched.

Nothing of a step's sampling goes through the host: because the row is one-hot, the token vLLM samples
is the processor's own draw, so the processor keeps each request's recent tokens in a ring on the
device (token and the step it was drawn at) and records each draw there itself. The host only tells
the step of each row, `len(output_ids)`, whose length vLLM keeps right even while its entries are still
placeholders of asynchronous scheduling, and the row's uniform number: one pinned copy per step.

A step is launch-bound (one row of 6,564 logits), so it is written in few kernels: the nucleus and the
repetition test work on the top-k head only (only head tokens can be in the nucleus), and when the RAS
rows are the batch's first rows (the usual case) they are read and written in place, without gathers.
A draw vLLM throws away (a row
still in chunked prefill) is overwritten by the next draw at the same step, and the ring is rebuilt
from vLLM's list when a request (re)enters the batch.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

from studio import envs
from studio.tts.device.flow_turn import TurnWaiter
from studio.tts.llm.vllm import plugin
from studio.tts.llm.vllm.ras_graphs import RasGraphs

EXTRA_ARGS_KEY = "cosyvoice_ras"
PROCESSOR_PATH = "studio.tts.llm.vllm.sampling:RasLogitsProcessor"

_MASK64 = (1 << 64) - 1
_GOLDEN, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_EMPTY_STEP = -(1 << 62)  # ring slots never written: outside every window


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
    x = (seed * _GOLDEN + (step + 1) * _MIX1) & _MASK64
    x = ((x ^ (x >> 30)) * _MIX1) & _MASK64
    x = ((x ^ (x >> 27)) * _MIX2) & _MASK64
    return ((x ^ (x >> 31)) >> 11) * 2.0**-53


def host_uniforms(seeds: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """`step_uniform` for arrays of seeds (uint64) and steps, as float64 (numpy's uint64 wraps mod 2^64)."""
    golden, mix1, mix2 = np.uint64(_GOLDEN), np.uint64(_MIX1), np.uint64(_MIX2)
    x = seeds * golden + (steps.astype(np.uint64) + np.uint64(1)) * mix1
    x = (x ^ (x >> np.uint64(30))) * mix1
    x = (x ^ (x >> np.uint64(27))) * mix2
    return ((x ^ (x >> np.uint64(31))) >> np.uint64(11)).astype(np.float64) * 2.0**-53


class _RasRequest:
    __slots__ = ("seed", "top_p", "top_k", "win_size", "threshold", "min_len", "stop_ids", "output_ids")

    def __init__(self, args: dict, output_ids: list[int]):
        self.seed = args["seed"]
        self.top_p, self.top_k = args["top_p"], args["top_k"]
        self.win_size = args["win_size"]
        self.threshold = args["win_size"] * args["tau_r"]
        self.min_len, self.stop_ids = args["min_len"], args["stop_token_ids"]
        self.output_ids = output_ids  # vLLM's live list of this request's output tokens

    @property
    def row_params(self) -> list[float]:
        return [self.top_p, self.top_k, self.threshold, self.win_size, self.min_len]


_TOP_P, _TOP_K, _THRESHOLD, _WIN, _MIN_LEN = range(5)


class _Batch(NamedTuple):
    """The served rows' tensors, rebuilt when the batch changes (columns [rows, 1] on the device)."""

    reqs: list[_RasRequest]
    row_index: torch.Tensor
    leading: bool  # the rows are 0..n-1: read and written as slices, no gathers
    seeds: np.ndarray  # uint64, on the host: the uniforms are drawn there
    top_p: torch.Tensor
    threshold: torch.Tensor
    window: torch.Tensor
    slots: torch.Tensor  # ring slots per row (the window, at least 1)
    min_len: torch.Tensor
    head_allowed: torch.Tensor  # [rows, k_max]: rank < the row's top_k
    stop_row: torch.Tensor  # [1, V] bool: the stop ids inside the vocabulary


class RasLogitsProcessor(LogitsProcessor):
    """Turns each RAS request's logits into a one-hot row on its RAS draw (see the module doc).

    Per persistent-batch row it keeps on the device: the parameters and a ring of the last draws
    (`ring_tokens`, with the step of each in `ring_steps`)."""

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool) -> None:
        # Built by vLLM's model runner before its sampler warm-up: the stock Qwen2 class that serves
        # CosyVoice3 does not say it serves a CosyVoice model, this processor does (plugin).
        plugin.SERVING_COSYVOICE.set()
        self.device = torch.device(device)
        self.pin_memory = bool(is_pin_memory) and self.device.type == "cuda"
        self.requests: dict[int, _RasRequest] = {}
        self._batch: _Batch | None = None  # per-batch tensors, rebuilt when the batch changes
        self.params = torch.zeros(0, 5, dtype=torch.float64, device=self.device)
        self.ring_tokens = torch.zeros(0, 1, dtype=torch.int64, device=self.device)
        self.ring_steps = torch.zeros(0, 1, dtype=torch.int64, device=self.device)
        self._step_buffers: list[tuple[torch.Tensor, torch.cuda.Event | None]] = []
        self._turn = 0
        self.vocab = 0  # the logits' width, known at the first step (stop ids beyond it are dropped)
        self._stop_row = torch.zeros(1, 0, dtype=torch.bool, device=self.device)  # rewritten in place
        # The draw of leading rows replayed as one CUDA graph per batch size (STUDIO_RAS_GRAPHS=0: eager).
        self.graphs = (
            RasGraphs(self.device) if self.device.type == "cuda" and envs.RAS_GRAPHS.enabled() else None
        )
        # The studio's flow may ask for the GPU while it makes a first chunk: each step waits for it here
        # (this runs after the step's forward pass, before anything else of the step is launched).
        self.flow_turn = TurnWaiter.from_environment()

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        args = (sampling_params.extra_args or {}).get(EXTRA_ARGS_KEY)
        if args is not None and (not 0.0 < args["top_p"] <= 1.0 or args["top_k"] < 1):
            raise ValueError(f"invalid RAS parameters: {args}")

    def is_argmax_invariant(self) -> bool:
        return False

    # -- batch changes (rare: a request joins, leaves or moves) -----------------------------------------
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
                self._add(index, _RasRequest(args, output_ids))
        for a_index, b_index, direction in batch_update.moved:
            self._move(a_index, b_index, direction == MoveDirectionality.SWAP)

    def _add(self, index: int, request: _RasRequest) -> None:
        self.requests[index] = request
        self._ensure(index + 1, request.win_size)
        self.params[index] = self._upload(request.row_params, torch.float64)
        # The ring from vLLM's list: empty for a new request, its last tokens for a resumed one.
        tokens = torch.full((self.ring_tokens.shape[1],), -1, dtype=torch.int64)
        steps = torch.full_like(tokens, _EMPTY_STEP)
        window = max(request.win_size, 1)
        for step in range(max(0, len(request.output_ids) - request.win_size), len(request.output_ids)):
            token = request.output_ids[step]
            if token >= 0:  # not a placeholder
                tokens[step % window], steps[step % window] = token, step
        self.ring_tokens[index] = self._upload(tokens, torch.int64)
        self.ring_steps[index] = self._upload(steps, torch.int64)

    def _move(self, a: int, b: int, swap: bool) -> None:
        a_entry, b_entry = self.requests.pop(a, None), self.requests.pop(b, None)
        if a_entry is not None:
            self.requests[b] = a_entry
        if b_entry is not None and swap:
            self.requests[a] = b_entry
        self._ensure(max(a, b) + 1, 0)
        source = self._upload([a, b] if swap else [a], torch.int64)
        target = self._upload([b, a] if swap else [b], torch.int64)
        for table in (self.params, self.ring_tokens, self.ring_steps):
            table[target] = table[source]

    def _see_vocab(self, vocab: int) -> None:
        if vocab != self.vocab:
            self.vocab, self._batch = vocab, None

    def _upload(self, values, dtype: torch.dtype) -> torch.Tensor:
        """A host list or tensor on the device without waiting for the GPU: through pinned memory on CUDA.

        (A copy from ordinary host memory waits for the work queued before it; so would indexing by a
        mask, whose size only the device knows: nothing in a step does either.)"""
        host = torch.as_tensor(values, dtype=dtype)
        if not self.pin_memory:
            return host.to(self.device)
        return host.pin_memory().to(self.device, non_blocking=True)

    def _ensure(self, rows: int, window: int) -> None:
        """Grow the per-row tables to `rows` rows and the rings to `window` slots (new ones empty)."""
        have, width = self.params.shape[0], self.ring_tokens.shape[1]
        if rows <= have and window <= width:
            return
        rows, width = max(rows, 2 * have, 8) if rows > have else have, max(window, width)

        def grown(table: torch.Tensor, fill: int, columns: int) -> torch.Tensor:
            out = torch.full((rows, columns), fill, dtype=table.dtype, device=self.device)
            out[: table.shape[0], : table.shape[1]] = table
            return out

        self.params = grown(self.params, 0, self.params.shape[1])
        self.ring_tokens = grown(self.ring_tokens, -1, width)
        self.ring_steps = grown(self.ring_steps, _EMPTY_STEP, width)

    def _batch_tensors(self) -> _Batch:
        if self._batch is None:
            rows = sorted(self.requests)
            reqs = [self.requests[i] for i in rows]
            row_index = self._upload(rows, torch.int64)
            params = self.params.index_select(0, row_index)
            column = lambda i: params[:, i : i + 1]  # noqa: E731
            k_max = min(max(r.top_k for r in reqs), self.vocab)
            ranks = torch.arange(k_max, device=self.device).unsqueeze(0)
            stop_ids = sorted({s for r in reqs for s in r.stop_ids if s < self.vocab})
            if self._stop_row.shape[1] != self.vocab:
                self._stop_row = torch.zeros(1, self.vocab, dtype=torch.bool, device=self.device)
            stop_row = self._stop_row.fill_(False)  # in place: a captured draw reads it where it is
            stop_row[:, self._upload(stop_ids, torch.int64)] = True
            window = column(_WIN).long()
            self._batch = _Batch(
                reqs,
                row_index,
                rows == list(range(len(rows))),
                np.array([r.seed & _MASK64 for r in reqs], dtype=np.uint64),
                column(_TOP_P),
                column(_THRESHOLD),
                window,
                window.squeeze(1).clamp(min=1),
                column(_MIN_LEN),
                ranks < column(_TOP_K),
                stop_row,
            )
        return self._batch

    def _rows(self, batch: _Batch, table: torch.Tensor) -> torch.Tensor:
        """The batch's rows of `table`: a slice when they lead, else a gather."""
        return table[: len(batch.reqs)] if batch.leading else table.index_select(0, batch.row_index)

    def _steps(self, batch: _Batch, into: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's step (tokens it has output) and uniform number, on the device: one copy, through
        pinned memory on CUDA (the uniforms travel as the bits of float64 in the int64 buffer), into the
        front of the device buffer `into` when given."""
        lengths = np.fromiter((len(r.output_ids) for r in batch.reqs), dtype=np.int64, count=len(batch.reqs))
        n = len(lengths)
        uniforms = host_uniforms(batch.seeds, lengths).view(np.int64)
        if not self.pin_memory:
            both = torch.from_numpy(np.concatenate([lengths, uniforms])).to(self.device)
            both = both if into is None else into[: 2 * n].copy_(both)
        else:
            if not self._step_buffers or self._step_buffers[0][0].shape[0] < 2 * n:
                size = 2 * max(n, 64)
                self._step_buffers = [
                    (torch.empty(size, dtype=torch.int64, pin_memory=True), None) for _ in range(2)
                ]
            self._turn ^= 1
            buffer, copied = self._step_buffers[self._turn]
            if copied is not None:
                copied.synchronize()  # its copy of two steps ago has long finished: no wait in practice
            host = buffer.numpy()
            host[:n], host[n : 2 * n] = lengths, uniforms
            if into is None:
                both = buffer[: 2 * n].to(self.device, non_blocking=True)
            else:
                both = into[: 2 * n].copy_(buffer[: 2 * n], non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            self._step_buffers[self._turn] = (buffer, event)
        return both[:n], both[n:].view(torch.float64)

    # -- one step ---------------------------------------------------------------------------------------
    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Draw each RAS request's token and leave its logits row one-hot on it (greedy picks it)."""
        if self.flow_turn is not None:
            self.flow_turn.wait()
        if not self.requests:
            return logits
        self._see_vocab(logits.shape[-1])
        batch = self._batch_tensors()
        if batch.leading:  # in place: the rows are 0..n-1
            if self.graphs is not None:
                drawn = self.graphs.draw(self, batch, logits)
            else:
                steps, uniforms = self._steps(batch)
                drawn = self.draw_leading(batch, logits[: len(batch.reqs)], steps, uniforms)
            logits[: len(batch.reqs)].fill_(float("-inf")).scatter_(1, drawn, 0.0)
            return logits
        steps, uniforms = self._steps(batch)
        mixture = self._mixture(batch, logits, steps)
        drawn = self._draw(mixture, uniforms)
        slot = steps % batch.slots  # the draw is the token vLLM takes: into the ring, at this step's slot
        one_hot = torch.full_like(mixture, float("-inf")).scatter_(1, drawn, 0.0)
        logits[batch.row_index] = one_hot.to(logits.dtype)
        self.ring_tokens[batch.row_index, slot] = drawn.squeeze(1)
        self.ring_steps[batch.row_index, slot] = steps
        return logits

    def draw_leading(
        self, batch: _Batch, rows: torch.Tensor, steps: torch.Tensor, uniforms: torch.Tensor
    ) -> torch.Tensor:
        """The draws [n, 1] of the batch's leading rows (`rows`: their logits), recorded in the ring in place;
        nothing here waits for the device or reads the host, so it can be captured as a graph."""
        n = len(batch.reqs)
        drawn = self._draw(self._mixture(batch, rows, steps), uniforms)
        slot = (steps % batch.slots).unsqueeze(1)
        self.ring_tokens[:n].scatter_(1, slot, drawn)
        self.ring_steps[:n].scatter_(1, slot, steps.unsqueeze(1))
        return drawn

    def resident_batch(self, batch: _Batch) -> _Batch:
        """`batch` with its columns computed from the leading rows of the per-row table, which stays where it
        is while the batch changes: what a captured draw reads stays valid for every batch of its size."""
        params = self.params[: len(batch.reqs)]
        column = lambda i: params[:, i : i + 1]  # noqa: E731
        window = column(_WIN).long()
        ranks = torch.arange(batch.head_allowed.shape[1], device=self.device).unsqueeze(0)
        return batch._replace(
            top_p=column(_TOP_P),
            threshold=column(_THRESHOLD),
            window=window,
            slots=window.squeeze(1).clamp(min=1),
            min_len=column(_MIN_LEN),
            head_allowed=ranks < column(_TOP_K),
        )

    @staticmethod
    def _draw(mixture: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
        """Inverse CDF: each row's token for its uniform number, [rows, 1]."""
        cdf = torch.cumsum(mixture, dim=-1, dtype=torch.float64)
        targets = (uniforms * cdf[:, -1]).unsqueeze(1)
        return torch.searchsorted(cdf, targets, right=True).clamp_(max=mixture.shape[-1] - 1)

    def mixture(
        self, logits: torch.Tensor, steps: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch rows, RAS probabilities [rows, V]) of the requests this processor serves.

        `steps`: each row's step on the device (default: the lengths of vLLM's output lists)."""
        self._see_vocab(logits.shape[-1])
        batch = self._batch_tensors()
        if steps is None:
            steps = self._steps(batch)[0]
        return batch.row_index, self._mixture(batch, logits, steps)

    def _mixture(self, batch: _Batch, logits: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(self._rows(batch, logits), dim=-1, dtype=torch.float32)

        # Nucleus: sorted descending, keep while the mass before a token is < top_p and rank < top_k.
        # Only the top_k head can be kept, so a top-k replaces the full sort, and the head is all the
        # nucleus there is. (The first token is always kept: its mass before is 0 < top_p.)
        head_probs, head_ids = probs.topk(batch.head_allowed.shape[1], dim=-1, sorted=True)
        mass_before = head_probs.cumsum(dim=-1) - head_probs
        head = head_probs * ((mass_before < batch.top_p) & batch.head_allowed)
        head = head / head.sum(dim=-1, keepdim=True)

        # A head token drawn often enough in the window triggers a redraw from the full distribution.
        age = steps.unsqueeze(1) - self._rows(batch, self.ring_steps)  # 1 for the last step's draw
        in_window = (age > 0) & (age <= batch.window)
        seen = (
            head_ids.unsqueeze(2) == self._rows(batch, self.ring_tokens).unsqueeze(1)
        ) & in_window.unsqueeze(1)
        repeated_mass = head * (seen.sum(dim=-1) >= batch.threshold)
        mixture = (probs * repeated_mass.sum(dim=-1, keepdim=True)).scatter_add_(
            1, head_ids, head - repeated_mass
        )

        # Before min_len no stop id may come out.
        return mixture.masked_fill_(batch.stop_row & (steps.unsqueeze(1) < batch.min_len), 0.0)
