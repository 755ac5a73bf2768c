"""CosyVoice3's speech tokens to waveform for one take: the DiT flow, then the causal HiFT.

Offline (not streamed) takes run upstream's calls once: the flow with full attention, HiFT with
``finalize``. Streamed takes follow upstream's CosyVoice3Model chunking (the take's `HopSchedule`: the
first hop padded to the prompt's 25-token grid, later hops 50 then 100, 3 lookahead tokens), but where
upstream re-runs the flow and HiFT over everything so far at every hop (quadratic in the take's length),
`DiTFlowStream` computes only the new mel frames over its cached chunks and `CausalHiftStream` only the new
samples over a bounded left context: the same audio at a flat cost per chunk. A voice's prompt chunks come
from the process-wide prompt cache after its first take; on CUDA the chunks of takes due together run as one
batched solve on the flow's scheduler thread (`flow_scheduler`), as CosyVoice2's do: most urgent first (the
stream's `first_pending` and `deadline`), and a chunk whose take's `cancel` is set while it waits leaves the
queue unrun with `ChunkCancelled`, which the pipeline reads as the take's quiet end. There the chunk's vocoder
push also runs on the scheduler thread, batched with the other takes' pushes of the same solve
(`hift_batch`), so takes no longer run HiFT each on its own thread.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import torch

from studio.tts.cosyvoice3.flow_jobs import FlowCallCancelled
from studio.tts.cosyvoice3.flow_prompt_cache import default_prompt_cache
from studio.tts.cosyvoice3.flow_scheduler import flow_scheduler_for
from studio.tts.cosyvoice3.flow_stream import DiTFlowStream
from studio.tts.cosyvoice3.hift_stream import CausalHiftStream
from studio.tts.flow.streaming.hops import TOKEN_HOP_LEN, ChunkedTake, HopSchedule
from studio.tts.scheduler import ChunkCancelled
from studio.tts.token2wav import StageTimes, scheduled_default


@dataclass
class DiTWavStream(ChunkedTake):
    """One take's token-to-waveform state: a `ChunkedTake`, as CosyVoice2's `Token2WavStream`."""

    flow: torch.nn.Module
    hift: torch.nn.Module
    prompt_token: torch.Tensor  # [1, P] int32
    prompt_feat: torch.Tensor  # [1, 2P, 80]
    embedding: torch.Tensor  # [1, 192]
    streaming: bool
    speed: float = 1.0
    fp16: bool = False
    token_hop_len: int = TOKEN_HOP_LEN
    first_hop: int | None = None  # tokens of a shorter first chunk (None or 0: upstream's)
    prompt_cache: bool = True  # start from the voice's cached prompt chunks (`STUDIO_PROMPT_CACHE_MB`)
    scheduled: bool | None = None  # the flow's scheduler batches the chunks (None: on CUDA, as CosyVoice2's)
    cancel: threading.Event | None = None  # set: a chunk still waiting for the scheduler leaves its queue
    schedule: HopSchedule = field(init=False)

    def __post_init__(self) -> None:
        self.device = next(self.flow.parameters()).device
        self.mel_ratio = int(self.flow.token_mel_ratio)
        self.schedule = HopSchedule(
            prompt_tokens=int(self.prompt_token.shape[1]),
            lookahead=int(self.flow.pre_lookahead_len),
            token_hop_len=self.token_hop_len,
            first_hop=self.first_hop or 0,
        )
        self._flow_stream: DiTFlowStream | None = None
        self._hift_stream: CausalHiftStream | None = None
        self._scheduler = None
        if self.streaming:
            with self.autocast():
                self._flow_stream = DiTFlowStream(  # the prompt on the host: its cache key reads it there
                    self.flow,
                    self.prompt_token.cpu(),
                    self.prompt_feat.cpu(),
                    self.embedding.cpu(),
                    prompt_cache=default_prompt_cache(self.device) if self.prompt_cache else None,
                )
            if self.scheduled is None:
                self.scheduled = scheduled_default(self.device)
            if self.scheduled:  # the takes' chunks due together run as one batched solve
                self._scheduler = flow_scheduler_for(self.flow)
                self._scheduler.expect(self)  # takes started together may share their first batch
            self._hift_stream = CausalHiftStream(self.hift)

    def close(self) -> None:
        """The take ended (done, cancelled or failed): its cached flow and vocoder state go."""
        if self._scheduler is not None:
            self._scheduler.forget(self)
        for stream in (self._flow_stream, self._hift_stream):
            if stream is not None:
                stream.close()

    @property
    def state_bytes(self) -> int:
        """Bytes of device state the take holds now."""
        return sum(s.state_bytes for s in (self._flow_stream, self._hift_stream) if s is not None)

    @torch.inference_mode()
    def _render(self, tokens: list[int], finalize: bool) -> tuple[torch.Tensor, StageTimes]:
        token = torch.tensor([tokens], dtype=torch.int32, device=self.device)
        if self._scheduler is not None:
            speech, times = self._scheduled_speech(token, finalize)
        else:
            speech, times = self._own_speech(token, finalize)
        self._handed_out(speech)
        return speech, times

    def _own_speech(self, token: torch.Tensor, finalize: bool) -> tuple[torch.Tensor, StageTimes]:
        """The chunk's flow and vocoder run on the take's thread."""
        times = StageTimes()
        started = time.perf_counter()
        with self.autocast():
            if self._flow_stream is not None:
                mel = self._flow_stream.mel(token, finalize)
            else:
                mel = self._offline_mel(token)
            mel = self._speed(mel.float())
            times.flow = time.perf_counter() - started
            started = time.perf_counter()
            if self._hift_stream is not None:
                speech = self._hift_stream.push(mel, finalize)
            elif mel.shape[2] > 0:
                speech, _ = self.hift.inference(mel, finalize=True)
            else:
                speech = torch.zeros(1, 0, device=self.device)
        speech = speech.float().cpu()
        times.hift = time.perf_counter() - started
        return speech, times

    def _scheduled_speech(self, token: torch.Tensor, finalize: bool) -> tuple[torch.Tensor, StageTimes]:
        """The chunk's samples from the flow's scheduler, queued by the take's urgency: its batched solve,
        the speed stretch, then its batched vocoder push. `StageTimes.hift` is the worker's time on the
        vocoder batch plus the copy to the host; `flow` the rest (the wait in the queue included)."""
        started = time.perf_counter()
        with self.autocast():
            try:
                chunk = self._scheduler.render_speech(
                    self._flow_stream,
                    token,
                    finalize,
                    self._hift_stream,
                    shape_mel=lambda mel: self._speed(mel.float()),
                    cancel=self.cancel,
                    first=self.first_pending,
                    deadline=self.deadline(time.monotonic()),
                    take=self,
                )
            except FlowCallCancelled as cancelled:
                raise ChunkCancelled(str(cancelled)) from None
        vocoded = time.perf_counter()
        speech = chunk.speech.float().cpu()
        done = time.perf_counter()
        hift = chunk.hift_seconds + (done - vocoded)
        return speech, StageTimes(flow=max(0.0, done - started - hift), hift=hift)

    def _offline_mel(self, token: torch.Tensor) -> torch.Tensor:
        if token.shape[1] == 0:
            return torch.zeros(1, 80, 0, device=self.device)
        device = self.device
        mel, _ = self.flow.inference(
            token=token,
            token_len=torch.tensor([token.shape[1]], dtype=torch.int32, device=device),
            prompt_token=self.prompt_token.to(device),
            prompt_token_len=torch.tensor([self.prompt_token.shape[1]], dtype=torch.int32, device=device),
            prompt_feat=self.prompt_feat.to(device),
            prompt_feat_len=torch.tensor([self.prompt_feat.shape[1]], dtype=torch.int32, device=device),
            embedding=self.embedding.to(device),
            streaming=False,
            finalize=True,
        )
        return mel
