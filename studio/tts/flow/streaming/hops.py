"""A streamed take's token schedule: how many speech tokens each chunk advances by, shared by both families.

Upstream's CosyVoice2Model and CosyVoice3Model stream alike: the first chunk covers the prompt's pad to the
25-token grid plus one hop, later hops grow 25 -> 50 -> 100, and each chunk waits for the lookahead tokens
after it. The schedule here is per take (upstream keeps the growing hop on the model, shared by every take).
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

TOKEN_HOP_LEN = 25
# Upstream's schedule (token_max_hop_len = 4 * hop, stream_scale_factor = 2): later chunks are larger, so a
# take makes fewer flow and vocoder calls, each on more frames (a step costs about the same).
HOP_SCALE = 2
MAX_HOP_LEN = 4 * TOKEN_HOP_LEN
SAMPLE_RATE = 24000  # both families' audio


@dataclass
class HopSchedule:
    """Where a streamed take stands: `token_offset` tokens rendered, and the hop of the next chunk.

    ``first_hop`` (0 < first_hop < the aligned first hop) asks for a shorter first chunk; the chunk after it
    then ends on the chunk grid again, so every later chunk commits whole chunks."""

    prompt_tokens: int
    lookahead: int
    token_hop_len: int = TOKEN_HOP_LEN
    hop_scale: int = HOP_SCALE
    max_hop_len: int = MAX_HOP_LEN
    first_hop: int = 0
    token_offset: int = 0
    _hop_len: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.hop_scale < 1 or self.max_hop_len < self.token_hop_len:
            raise ValueError("hop_scale must be >= 1 and max_hop_len >= token_hop_len")
        self.prompt_pad = (
            math.ceil(self.prompt_tokens / self.token_hop_len) * self.token_hop_len - self.prompt_tokens
        )
        aligned = self.token_hop_len + self.prompt_pad
        self.first_hop_len = self.first_hop if 0 < self.first_hop < aligned else aligned
        self._hop_len = self.token_hop_len  # the hop of the next chunk after the first (grows per chunk)

    @property
    def hop(self) -> int:
        """Tokens the next streamed chunk advances by (the first one also covers the prompt pad)."""
        if self.token_offset == 0:
            return self.first_hop_len
        if self.realigning:
            return 2 * self.token_hop_len + self.prompt_pad - self.token_offset
        return self._hop_len

    @property
    def realigning(self) -> bool:
        """The chunk after a short first one: it ends on the chunk grid again (and does not grow the hop)."""
        return self.token_offset == self.first_hop_len < self.token_hop_len + self.prompt_pad

    def tokens_needed(self) -> int:
        """How many decoded tokens the next streamed chunk needs (hop plus lookahead)."""
        return self.token_offset + self.hop + self.lookahead

    def advance(self) -> int:
        """The next chunk was rendered: move past its hop (and grow the hop); return the hop."""
        hop = self.hop
        self.token_offset += hop
        if not self.realigning:  # a short first chunk's successor keeps the first hop size
            self._hop_len = min(self.max_hop_len, self._hop_len * self.hop_scale)
        return hop


class ChunkedTake:
    """What a take's token-to-waveform stream offers the pipeline, in both families: `ready(n)` says whether
    ``n`` decoded tokens allow another streamed chunk, `chunk(tokens)` renders it and moves the `schedule`
    on, `finish(tokens)` renders the rest once the LM is done (the whole take when not streaming). The
    rendering, ``_render(tokens, finalize) -> (speech [1, N] float32, stage times)``, is the stream's own; it
    reports what it hands out (`_handed_out`), which tells a scheduler how urgent the take is (`deadline`)."""

    schedule: HopSchedule
    streaming: bool
    speed: float
    fp16: bool
    device: torch.device
    _first_out: float | None = None  # when the first chunk was handed out (monotonic)
    _audio_out: float = 0.0  # seconds of audio handed out so far

    @property
    def token_offset(self) -> int:
        """Tokens rendered by the streamed chunks so far."""
        return self.schedule.token_offset

    @property
    def hop(self) -> int:
        """Tokens the next streamed chunk advances by."""
        return self.schedule.hop

    def tokens_needed(self) -> int:
        """How many decoded tokens the next streamed chunk needs (hop plus lookahead)."""
        return self.schedule.tokens_needed()

    def ready(self, n_tokens: int) -> bool:
        return self.streaming and n_tokens >= self.tokens_needed()

    def chunk(self, tokens: list[int]):
        """Render the next streamed chunk from the token prefix (needs `ready`)."""
        rendered = self._render(tokens[: self.tokens_needed()], finalize=False)
        self.schedule.advance()
        return rendered

    def finish(self, tokens: list[int]):
        """Render everything after the last streamed chunk (the whole take when not streaming)."""
        return self._render(tokens, finalize=True)

    def _render(self, tokens: list[int], finalize: bool):
        raise NotImplementedError

    def _handed_out(self, speech: torch.Tensor) -> None:
        """A chunk of ``speech`` [1, N] (at `SAMPLE_RATE`) goes to the listener."""
        if self._first_out is None:
            self._first_out = time.monotonic()
        self._audio_out += speech.shape[1] / SAMPLE_RATE

    @property
    def first_pending(self) -> bool:
        """Nothing of the take was handed out yet: its listener waits for the first sound."""
        return self._first_out is None

    def deadline(self, now: float) -> float:
        """When the take's next chunk is due (monotonic): now for its first, else when the audio handed
        out so far would have played from the first chunk on (schedulers serve the earliest first)."""
        return now if self._first_out is None else self._first_out + self._audio_out

    def autocast(self):
        """float16 autocast when the take asked for fp16 on CUDA (upstream's precision for the flow)."""
        if self.fp16 and self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.float16)
        return nullcontext()

    def _speed(self, mel: torch.Tensor) -> torch.Tensor:
        """``speed`` stretches the chunk's mel [1, 80, T] in time."""
        if self.speed != 1.0 and mel.shape[2] > 0:
            mel = F.interpolate(mel, size=max(1, int(mel.shape[2] / self.speed)), mode="linear")
        return mel
