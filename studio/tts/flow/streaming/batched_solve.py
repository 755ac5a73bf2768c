"""The streaming estimator's Euler solve for a batch of takes, with static shapes (CUDA-graph capturable).

Each take's estimator state (`EstimatorState`, in pages of frames): the keys/values of every transformer block
at every Euler step for its two classifier-free-guidance rows, plus the causal convolutions' left context. A
state that keeps inputs (`STUDIO_FLOW_STATE_INPUTS`) holds each block's attention input instead (the output of
its first norm: a quarter of the bytes), and the solve projects the keys/values of the whole context from them
for every block (one GEMM each, inside the captured graph), so the work arena holds inputs too.
`solve_batch` runs all Euler steps for a batch of takes over a shared `WorkArena` into which their states
were copied: every row writes its new keys/values at its own absolute frames (`SolveInputs.write`),
attends through its own bias (chunk mask, and nothing at or past its last real frame), and keeps its
conv tails at its own commit point and mark (one gather per conv writes both, side by side). Padding is
exact: the convolutions are causal, the norms work per frame, and the bias hides padded keys from real
frames. `EstimatorSolver` (tts/flow/streaming/solver.py) forms the batches and replays this as CUDA graphs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from studio.tts.device.transfer import to_device
from studio.tts.flow.estimator import CausalConditionalDecoder, CausalConv1d, sinusoidal_embedding
from studio.tts.flow.masks import mask_to_bias


class Layout:
    """Where each transformer block's keys/values (or, with `inputs`, its attention input) and each causal
    conv's left context sit in a state."""

    def __init__(self, estimator: CausalConditionalDecoder, inputs: bool = False):
        self.inputs = inputs  # what `state_shape` and `bytes_per_frame` describe unless told otherwise
        blocks = [
            b
            for level in (*estimator.down_blocks, *estimator.mid_blocks, *estimator.up_blocks)
            for b in level[1]
        ]
        self.attention = {block.attn1: i for i, block in enumerate(blocks)}
        self._qkv: dict[nn.Module, tuple[tuple, torch.Tensor]] = {}
        first = blocks[0].attn1
        self.heads = first.heads
        self.head_dim = first.to_q.out_features // first.heads
        self.dim = first.to_q.in_features  # a block's attention input per frame
        convs = [m for m in estimator.modules() if isinstance(m, CausalConv1d)]
        lefts = {conv.causal_padding for conv in convs}
        if len(lefts) != 1:
            raise ValueError(f"the estimator's causal convolutions need one kernel size, got {sorted(lefts)}")
        self.left = lefts.pop()
        self.conv: dict[nn.Module, tuple[int, int]] = {}
        offset = 0
        for conv in convs:
            self.conv[conv] = (offset, offset + conv.in_channels)
            offset += conv.in_channels
        self.conv_channels = offset

    def qkv_weight(self, attn: nn.Module) -> torch.Tensor:
        """The block's q, k and v projections as one weight [3 x inner, dim]: one GEMM where three ran, its k
        and v side by side so that one scatter writes both (made on first use, again if the weights change)."""
        parts = (attn.to_q.weight, attn.to_k.weight, attn.to_v.weight)
        key = tuple((w.data_ptr(), w.dtype) for w in parts)
        cached = self._qkv.get(attn)
        if cached is None or cached[0] != key:
            cached = self._qkv[attn] = (key, torch.cat(parts, dim=0))
        return cached[1]

    def kv_weight(self, attn: nn.Module) -> torch.Tensor:
        """The block's k and v projections as one weight [2 x inner, dim] (a view of `qkv_weight`)."""
        return self.qkv_weight(attn)[attn.to_q.out_features :]

    def kv_shape(self, steps: int, rows: int, frames: int) -> tuple[int, ...]:
        """[steps, blocks, k/v, rows, heads, frames, head_dim]"""
        return (steps, len(self.attention), 2, rows, self.heads, frames, self.head_dim)

    def state_shape(self, steps: int, rows: int, frames: int, inputs: bool | None = None) -> tuple[int, ...]:
        """What a state or an arena keeps of `frames` frames: keys/values (`kv_shape`), or with `inputs` (by
        default the layout's) each block's attention input as [steps, blocks, 1, rows, 1, frames, dim] (the
        same axes, so that pages, copies and the scatter of new rows serve both)."""
        if not (self.inputs if inputs is None else inputs):
            return self.kv_shape(steps, rows, frames)
        return (steps, len(self.attention), 1, rows, 1, frames, self.dim)

    def tail_shape(self, steps: int, rows: int) -> tuple[int, ...]:
        """[steps, rows, channels, 2 x left]: the tails at the commit point, then those at the mark."""
        return (steps, rows, self.conv_channels, 2 * self.left)

    def bytes_per_frame(self, steps: int, rows: int, dtype: torch.dtype, inputs: bool | None = None) -> int:
        return (
            math.prod(self.state_shape(steps, rows, 1, inputs)) * torch.empty((), dtype=dtype).element_size()
        )


PAGE_FRAMES = 64  # a take's own rows are kept in pages of this many frames (keys/values: about 147 MB, fp16)
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # the largest finite float8 e4m3 value


def stored_bytes_per_frame(
    layout: Layout, steps: int, rows: int, dtype: torch.dtype, fp8: bool, inputs: bool | None = None
) -> int:
    """Bytes of one frame of a take's kept keys/values (or, with `inputs`, by default the layout's, its blocks'
    attention inputs): in `dtype`, or in float8 with a float32 scale per vector (a key, a value or an input: one
    per head or block, step and CFG row)."""
    if not fp8:
        return layout.bytes_per_frame(steps, rows, dtype, inputs)
    shape = layout.state_shape(steps, rows, 1, inputs)
    return layout.bytes_per_frame(steps, rows, FP8, inputs) + 4 * math.prod(shape) // shape[-1]


@dataclass
class EstimatorState:
    """One take's estimator cache: K/V rows [0, length) for its 2 CFG rows, and the conv tails at `length`.

    Rows [0, base_length) may be a prompt cache's tensor (`base`), read by every take of that voice and
    never written; the take's own rows after them sit in `pages` of `PAGE_FRAMES` frames (own row i is
    frame base_length + i, in page i // PAGE_FRAMES). A take grows by a page at a time: what it holds is
    never copied to grow, so it never needs its bytes twice, and every page is the same size, so a finished
    take's pages serve the next take without fragmenting the allocator. Tails are in the compute dtype,
    float32 under autocast (which may hand a convolution float32 activations).

    With `fp8` the pages hold float8 (e4m3) values, each key or value vector scaled by its largest magnitude
    (a float32 per vector, in `scales`): 53% of the fp16 bytes, and the solve reads them back in its dtype.
    With `inputs` every row (pages and base alike) holds the blocks' attention inputs (`Layout.state_shape`).
    """

    pages: list[torch.Tensor] = field(default_factory=list)  # each [steps, blocks, 2, 2, heads, PAGE, d]
    length: int = 0
    written: int = 0  # rows holding computed values (>= length when a mark lay past the commit)
    tails: torch.Tensor | None = None  # [steps, 2, channels, left]; None: the zeros before frame 0
    mark_tails: torch.Tensor | None = None  # tails at the request's mark (prompt cache), when it had one
    base: torch.Tensor | None = None  # shared rows [0, base_length) (a prompt cache's, read only)
    base_length: int = 0
    fp8: bool = False
    scales: list[torch.Tensor] = field(default_factory=list)  # with fp8: each [..., PAGE, 1] float32
    compute_dtype: torch.dtype | None = None  # the solve's dtype, which the pages' values were written in
    inputs: bool = False  # rows hold attention inputs, not keys/values

    def reserve(self, end: int, like: torch.Tensor) -> None:
        """Pages up to frame `end` for values like `like` (pages of another compute dtype are converted)."""
        if not self.fp8 and self.pages and self.pages[0].dtype != like.dtype:
            self.pages = [page.to(like.dtype) for page in self.pages]
        self.compute_dtype = like.dtype
        while len(self.pages) * PAGE_FRAMES < end - self.base_length:
            self.pages.append(self.new_page(like))
            if self.fp8:
                self.scales.append(like.new_empty(*like.shape[:5], PAGE_FRAMES, 1, dtype=torch.float32))

    def new_page(self, like: torch.Tensor) -> torch.Tensor:
        return like.new_empty(
            *like.shape[:5], PAGE_FRAMES, like.shape[6], dtype=FP8 if self.fp8 else like.dtype
        )

    def _spans(self, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
        """(page index, first row in it, rows, absolute frame) covering own frames [start, end)."""
        row = start - self.base_length
        while row < end - self.base_length:
            page, first = divmod(row, PAGE_FRAMES)
            rows = min(PAGE_FRAMES - first, end - self.base_length - row)
            yield page, first, rows, row + self.base_length
            row += rows

    def write(self, source: torch.Tensor, start: int, end: int, step: int | None = None) -> None:
        """Store frames [start, end) of `source` ([..., frames, vector], absolute frames) as own rows; with
        `step`, `source` holds that Euler step alone (its first axis 1: the pages were reserved before)."""
        if start < self.base_length:
            raise RuntimeError(f"frame {start} lies in the shared prompt rows (< {self.base_length})")
        if step is None:
            self.reserve(end, source)
        steps, offset = _steps(step), 0
        if self.fp8:  # the chunk's rows quantised at once; each page then takes its part as a plain copy
            source, offset = source[:, :, :, :, :, start:end], start
            scales = source.abs().amax(dim=-1, keepdim=True).float().clamp_min_(1e-12).div_(FP8_MAX)
            source = (source.float() / scales).to(FP8)
        for index, first, rows, frame in self._spans(start, end):
            part = slice(frame - offset, frame - offset + rows)
            self.pages[index][steps, :, :, :, :, first : first + rows].copy_(source[:, :, :, :, :, part])
            if self.fp8:
                self.scales[index][steps, :, :, :, :, first : first + rows].copy_(scales[:, :, :, :, :, part])

    def copy_prefix(self, target: torch.Tensor, frames: int, step: int | None = None) -> None:
        """Write frames [0, frames) into `target` ([..., frames, vector], absolute frames); with `step`,
        that Euler step's alone (`target`'s first axis 1)."""
        shared, steps = min(frames, self.base_length), _steps(step)
        if shared:
            target[:, :, :, :, :, :shared] = self.base[steps, :, :, :, :, :shared]
        for index, first, rows, frame in self._spans(shared, frames):
            into = target[:, :, :, :, :, frame : frame + rows]
            into.copy_(self.pages[index][steps, :, :, :, :, first : first + rows])
            if self.fp8:
                into.mul_(self.scales[index][steps, :, :, :, :, first : first + rows])

    def prefix(self, frames: int) -> torch.Tensor:
        """A new tensor holding frames [0, frames), in the solve's dtype."""
        source = self.pages[0] if self.pages else self.base
        dtype = self.base.dtype if self.base is not None else self.compute_dtype
        out = source.new_empty(*source.shape[:5], frames, source.shape[6], dtype=dtype)
        self.copy_prefix(out, frames)
        return out

    def own_rows(self) -> int:
        return max(0, self.length - self.base_length)

    @property
    def nbytes(self) -> int:
        """What this take holds itself: its pages, their scales and tails (shared prompt rows not counted)."""
        held = (*self.pages, *self.scales, self.tails, self.mark_tails)
        return sum(t.nbytes for t in held if t is not None)


def _steps(step: int | None) -> slice:
    """The Euler steps a copy covers: all, or one (kept as an axis of 1)."""
    return slice(None) if step is None else slice(step, step + 1)


@dataclass
class SolveInputs:
    """Per-batch inputs of `_solve`, all tensors so a captured graph reads them by address."""

    x0: torch.Tensor  # [B, 80, n] noise
    mu: torch.Tensor  # [B, 80, n]
    cond: torch.Tensor  # [B, 80, n]
    spks: torch.Tensor  # [B, 80]
    bias: torch.Tensor  # [2B, 1, n, cap] additive attention bias
    write: torch.Tensor  # [2B, n] int64: absolute frame of each query (where its K/V row goes)
    tail_columns: torch.Tensor  # [2B, 2 x left] int64: conv-tail columns at the commit point, then the mark
    t: torch.Tensor  # [steps] time at each Euler step
    dt: torch.Tensor  # [steps] its step size


@dataclass
class WorkArena:
    kv: torch.Tensor  # [steps, blocks, 2, 2B, heads, cap, head_dim]; with `inputs`, `Layout.state_shape`'s
    tails: torch.Tensor  # [steps, 2B, channels, 2 x left]: at the commit point, then at the mark
    inputs: bool = False  # `kv` holds the blocks' attention inputs; keys/values are projected from them


def _conv(layout: Layout, tails, io: SolveInputs, conv: CausalConv1d, x: torch.Tensor):
    """The causal convolution over the tails and `x` ([rows, channels, n]), as one GEMM over its windows.

    cuDNN ran it in NHWC, converting input, weight and output around the convolution (3 more kernels each:
    a first chunk 12,559 kernels on an H200, 10,197 as GEMMs); here the windows are gathered in one copy and multiplied in one GEMM with the
    bias. The output is [rows, n, out] in memory, handed on transposed: the LayerNorm and attention after it
    read the channels contiguously, without the copies they made of a [rows, out, n] tensor.
    """
    c0, c1 = layout.conv[conv]
    full = torch.cat([tails[:, c0:c1, : layout.left].to(x.dtype), x], dim=2)  # no cast in the tails' dtype
    tails[:, c0:c1] = full.gather(2, io.tail_columns[:, None, :].expand(-1, c1 - c0, -1))
    rows, _, frames = x.shape
    windows = full.unfold(2, layout.left + 1, 1).transpose(1, 2).reshape(rows, frames, -1)  # [rows, n, C x k]
    return F.linear(windows, conv.weight.view(conv.out_channels, -1), conv.bias).transpose(1, 2)


def _pointwise(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """A 1x1 convolution as a GEMM over the channels (no copy when `x` is [rows, n, C] in memory)."""
    return F.linear(x.transpose(1, 2), conv.weight.view(conv.out_channels, -1), conv.bias).transpose(1, 2)


def _block(ctx, block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """CausalBlock1D (its masks are all ones when streaming)."""
    for module in block.block:
        x = _conv(*ctx, module, x) if isinstance(module, CausalConv1d) else module(x)
    return x


def _resnet(ctx, resnet: nn.Module, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    h = _block(ctx, resnet.block1, x) + resnet.mlp(t).unsqueeze(-1)
    return _block(ctx, resnet.block2, h) + _pointwise(resnet.res_conv, x)


def _attend(layout: Layout, kv: torch.Tensor, inputs: bool, io: SolveInputs, blocks: nn.ModuleList, x):
    x = x.transpose(1, 2)
    rows, n, _ = x.shape
    cap = kv.shape[-2]
    where = io.write[None, :, None, :, None].expand(kv.shape[1], -1, kv.shape[3], -1, kv.shape[-1])
    for block in blocks:
        attn = block.attn1
        cache = kv[layout.attention[attn]]  # [2, 2B, heads, cap, head_dim]; inputs: [1, 2B, 1, cap, dim]
        normed = block.norm1(x)
        if inputs:  # this step's inputs at their frames, then every context frame's keys/values from them
            cache.scatter_(3, where, normed[None, :, None].to(cache.dtype))
            q = F.linear(normed, attn.to_q.weight).view(rows, n, attn.heads, -1).transpose(1, 2)
            projected = F.linear(cache[0, :, 0].to(q.dtype), layout.kv_weight(attn)).view(
                rows, cap, 2, attn.heads, -1
            )
            k, v = projected[:, :, 0].transpose(1, 2), projected[:, :, 1].transpose(1, 2)
        else:
            # q, k, v in one GEMM: [rows, n, 3, heads, head_dim] -> [3, rows, heads, n, head_dim] (views)
            qkv = F.linear(normed, layout.qkv_weight(attn)).view(rows, n, 3, attn.heads, -1)
            qkv = qkv.permute(2, 0, 3, 1, 4)
            cache.scatter_(3, where, qkv[1:].to(cache.dtype))  # this step's keys and values at their frames
            q = qkv[0]
            k, v = cache[0].to(q.dtype), cache[1].to(q.dtype)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=io.bias)
        x = x + attn.to_out[0](out.transpose(1, 2).reshape(rows, n, -1))
        x = x + block.ff(block.norm3(x))
    return x.transpose(1, 2)


def _estimate(estimator, layout: Layout, arena: WorkArena, step: int, io: SolveInputs, x, mu, t, spks, cond):
    """The estimator's streaming forward for one Euler step over the batch's new frames."""
    kv = arena.kv[step]
    ctx = (layout, arena.tails[step], io)
    t = estimator.time_mlp(sinusoidal_embedding(t, estimator.in_channels).to(t.dtype))
    x = torch.cat([x, mu, spks.unsqueeze(-1).expand(-1, -1, x.shape[-1]), cond], dim=1)
    hiddens = []
    for resnet, blocks, down in estimator.down_blocks:
        x = _attend(layout, kv, arena.inputs, io, blocks, _resnet(ctx, resnet, x, t))
        hiddens.append(x)
        x = _conv(*ctx, down, x)
    for resnet, blocks in estimator.mid_blocks:
        x = _attend(layout, kv, arena.inputs, io, blocks, _resnet(ctx, resnet, x, t))
    for resnet, blocks, up in estimator.up_blocks:
        x = torch.cat([x, hiddens.pop()], dim=1)
        x = _attend(layout, kv, arena.inputs, io, blocks, _resnet(ctx, resnet, x, t))
        x = _conv(*ctx, up, x)
    return estimator.final_proj(_block(ctx, estimator.final_block, x))


def _interleave(conditional: torch.Tensor) -> torch.Tensor:
    """[B, ...] -> [2B, ...]: each row followed by its unconditional (zero) twin."""
    return torch.stack([conditional, torch.zeros_like(conditional)], dim=1).flatten(0, 1)


def solve_batch(estimator, layout: Layout, rate: float, arena: WorkArena, io: SolveInputs) -> torch.Tensor:
    """Euler steps with classifier-free guidance for every row; writes K/V and tails into the arena."""
    x = io.x0
    batch = x.shape[0]
    mu, spks, cond = _interleave(io.mu), _interleave(io.spks), _interleave(io.cond)
    for step in range(io.t.shape[0]):
        t = io.t[step].expand(2 * batch)
        twice = x.unsqueeze(1).expand(-1, 2, -1, -1).reshape(2 * batch, *x.shape[1:])  # no host sync
        velocity = _estimate(estimator, layout, arena, step, io, twice, mu, t, spks, cond)
        velocity = velocity.view(batch, 2, *velocity.shape[1:])
        x = x + io.dt[step] * ((1.0 + rate) * velocity[:, 0] - rate * velocity[:, 1])
    return x


def euler_times(cfm: nn.Module, steps: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """t and dt per Euler step, accumulated exactly as `CausalConditionalCFM.solve_euler` does."""
    t_span = cfm.time_span(steps, like)
    t, dt = t_span[0], t_span[1] - t_span[0]
    ts, dts = [], []
    for step in range(1, steps + 1):
        ts.append(t)
        dts.append(dt)
        t = t + dt
        if step < steps:
            dt = t_span[step + 1] - t
    return torch.stack(ts), torch.stack(dts)


def batch_inputs(
    cfm: nn.Module, layout: Layout, requests: list, rows: int, frames: int, cap: int, device: torch.device
) -> SolveInputs:
    """A batch's inputs, padded to `rows` takes of `frames` frames attending over `cap` context frames.

    `requests` are `SolveRequest`s; padded rows have no frames and see nothing but themselves.
    """
    n, dtype = frames, requests[0].mu.dtype
    x0 = torch.zeros(rows, 80, n, device=device, dtype=dtype)
    mu, cond = torch.zeros_like(x0), torch.zeros_like(x0)
    spks = torch.zeros(rows, 80, device=device, dtype=dtype)
    start = torch.zeros(rows, dtype=torch.int64)
    end = torch.zeros(rows, dtype=torch.int64)
    keep = torch.zeros(rows, dtype=torch.int64)  # the commit point, relative to the chunk's first frame
    mark = torch.zeros(rows, dtype=torch.int64)
    noise = cfm.rand_noise
    for b, request in enumerate(requests):
        count = request.frames
        if request.frame0 + count > noise.shape[2]:
            raise ValueError(
                f"flow input of {request.frame0 + count} mel frames is longer than the fixed noise buffer"
            )
        x0[b, :, :count] = noise[0, :, request.frame0 : request.frame0 + count].to(device=device, dtype=dtype)
        mu[b, :, :count] = request.mu[0]
        cond[b, :, :count] = request.cond[0]
        spks[b] = request.spks[0].to(dtype)
        start[b], end[b] = request.frame0, request.frame0 + count
        keep[b] = request.commit - request.frame0
        mark[b] = keep[b] if request.mark is None else request.mark - request.frame0
    queries = start[:, None] + torch.arange(n)  # [rows, n] absolute frames
    chunk = cfm.estimator.static_chunk_size
    chunk_end = (torch.div(queries, chunk, rounding_mode="trunc") + 1) * chunk
    limit = torch.minimum(chunk_end, torch.maximum(end[:, None], queries + 1))
    visible = torch.arange(cap) < limit[:, :, None]  # [rows, n, cap]
    bias = mask_to_bias(visible, dtype)[:, None].repeat_interleave(2, dim=0)
    left = torch.arange(layout.left)
    columns = torch.cat([keep[:, None] + left, mark[:, None] + left], dim=1)
    t, dt = euler_times(cfm, requests[0].steps, x0)
    return SolveInputs(
        x0,
        mu,
        cond,
        spks,
        to_device(bias, device),
        to_device(queries.repeat_interleave(2, dim=0), device),
        to_device(columns.repeat_interleave(2, dim=0), device),
        t,
        dt,
    )
