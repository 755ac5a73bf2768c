"""The public CosyVoice3 API: upstream's ``CosyVoice3`` entry points on our runtime.

It is the CosyVoice2 class with CosyVoice3's prompt formats and take parts. CosyVoice3's LM was trained
with a system prompt ending in ``<|endofprompt|>`` before the prompt transcript, the instruction, or (in
cross-lingual takes) the text itself; upstream asks every caller to write it (its LM refuses text without
``<|endofprompt|>``). Here a transcript or instruction without it gets upstream's own system prompt, so the
studio's fields stay plain text; text that already holds ``<|endofprompt|>`` is taken as the caller wrote it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import nullcontext

import torch

from studio import envs
from studio.model_layout import COSYVOICE3
from studio.request import Mode
from studio.tts.cosyvoice2 import END_OF_PROMPT, CosyVoice2
from studio.tts.cosyvoice3.flow_prompt_cache import default_prompt_cache
from studio.tts.cosyvoice3.flow_scheduler import close_flow_scheduler
from studio.tts.cosyvoice3.flow_stream import max_state_bytes, warm_prompt_cache
from studio.tts.cosyvoice3.token2wav import DiTWavStream
from studio.tts.errors import SynthesisError
from studio.tts.synthesis import PromptConditioning, SynthesisSpec

#: Upstream's system prompt (its examples and its instruct format start with it).
SYSTEM_PROMPT = "You are a helpful assistant."


class CosyVoice3(CosyVoice2):
    """Fun-CosyVoice3-0.5B on our runtime, shaped like upstream's ``cosyvoice.cli.cosyvoice.CosyVoice3``."""

    family = COSYVOICE3

    @property
    def flow_arena(self) -> bool:
        """Whether the VRAM plan gives the flow an arena: its graphed solve (`DiTGraphSolver`, on with CUDA
        graphs) copies takes' states into one; its eager solve reads them in place (the takes get it all)."""
        return envs.CUDA_GRAPHS.enabled()

    def _prepare_prompt(self, spec: SynthesisSpec) -> PromptConditioning:
        prompt = super()._prepare_prompt(spec)
        if END_OF_PROMPT in spec.text and spec.mode is Mode.CROSS_LINGUAL:
            prompt.prompt_text_ids = []  # upstream's format: the system prompt is in the text itself
        self._check_end_of_prompt(prompt, spec.text)
        return prompt

    def _check_end_of_prompt(self, prompt: PromptConditioning, text: str) -> None:
        """CosyVoice3's LM needs ``<|endofprompt|>`` in its prompt text or text (upstream asserts it)."""
        if (
            self.model.frontend.text.token_id(END_OF_PROMPT) in prompt.prompt_text_ids
            or END_OF_PROMPT in text
        ):
            return
        raise SynthesisError(
            f"CosyVoice3 needs {END_OF_PROMPT} in the prompt text or the text; this saved voice's "
            "transcript lacks it (save the voice again with this model)",
            field="prompt_text",
        )

    def _prompt_text_ids(self, prompt_text: str, text_frontend: bool) -> list[int]:
        if END_OF_PROMPT in prompt_text:
            return self._encode(prompt_text)
        transcript = super()._prompt_text_ids(prompt_text, text_frontend)
        return self._encode(SYSTEM_PROMPT + END_OF_PROMPT) + transcript

    def _cross_lingual_text_ids(self) -> list[int]:
        return self._encode(SYSTEM_PROMPT + END_OF_PROMPT)

    def _instruct_ids(self, instruct_text: str) -> list[int]:
        if END_OF_PROMPT in instruct_text:
            return super()._instruct_ids(instruct_text)
        return self._encode(f"{SYSTEM_PROMPT} {instruct_text.strip()}{END_OF_PROMPT}")

    def close(self) -> None:
        super().close()
        close_flow_scheduler(self.model.flow)

    def _warm_saved_voice(self, token: torch.Tensor, feat: torch.Tensor, embedding: torch.Tensor) -> bool:
        """The voice's prompt chunks go into the prompt cache now, so its first streamed take skips them; under
        the precision the takes use (it is part of the cache's key)."""
        flow = self.model.flow
        device = next(flow.parameters()).device
        cache = default_prompt_cache(device)
        if cache is None:
            return False
        precision = (
            torch.autocast("cuda", dtype=torch.float16)
            if self.fp16 and device.type == "cuda"
            else nullcontext()
        )
        with precision:
            return warm_prompt_cache(flow, token.reshape(1, -1).to(torch.int32), feat, embedding, cache)

    def token2wav_stream(
        self,
        spec: SynthesisSpec,
        prompt: PromptConditioning,
        seed: int,
        cancel: threading.Event,
        keep_flow_state: bool = True,
    ) -> DiTWavStream:
        if not keep_flow_state:
            raise ValueError("a CosyVoice3 take always keeps its flow state (it has no lean mode)")
        return DiTWavStream(**self._stream_fields(spec, prompt), cancel=cancel)

    def token_filter(self) -> Callable[[int], bool] | None:
        """At most five silent or breath tokens in a row are kept (upstream's ``llm_job``)."""
        from studio.tts.cosyvoice3.llm import SilentRunLimiter

        return SilentRunLimiter(self.model.llm.silent_tokens).keep

    def take_state_bytes(self, prompt_frames: int, max_tokens: int) -> int:
        return max_state_bytes(self.model.flow, prompt_frames, max_tokens)

    def lean_take_state_bytes(self, prompt_frames: int) -> int | None:
        return None  # the DiT stream keeps its keys and values: a take waits for them to fit

    def shared_prompt_bytes(self, stream, prompt_frames: int, max_tokens: int) -> int:
        return 0  # a take's DiT state holds its prompt's frames itself, cached or not
