"""The public CosyVoice2 API: upstream-compatible ``inference_*`` generators plus `CosyVoice2.synthesize`.

The class loads the model, keeps the saved voices and turns a request into its prompt conditioning and
sentences; `studio.tts.pipeline` runs the take. Saved voices live in the user's data folder, never in the
(possibly read-only) model folder.
"""

from __future__ import annotations

import functools
import importlib
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from studio.atomic_files import atomic_path
from studio.model_layout import COSYVOICE2, SPK2INFO_FILE
from studio.request import Mode
from studio.tts.errors import BackendUnavailableError, ModelFolderError, SynthesisError
from studio.tts.loader import load_model_folder_beside, load_spk2info
from studio.tts.memory import (
    enforce_budget,
    lean_take_state_bytes,
    plan_before_vllm,
    plan_budget,
    shared_prompt_bytes,
    take_state_bytes,
)
from studio.tts.pipeline import run_take
from studio.tts.scheduler import close_scheduler
from studio.tts.synthesis import PromptConditioning, SynthesisSpec
from studio.tts.take_gate import TakeGate
from studio.tts.token2wav import Token2WavStream, warm_prompt_cache
from studio.user_dirs import voices_dir

__all__ = ["CosyVoice2", "SynthesisSpec"]

log = logging.getLogger(__name__)

END_OF_PROMPT = "<|endofprompt|>"


def _vllm_backend_module():
    """`studio.tts.llm.vllm.backend`, or a clear error when the vLLM backend cannot be imported."""
    try:
        return importlib.import_module("studio.tts.llm.vllm.backend")
    except ImportError as exc:
        raise BackendUnavailableError(f"vLLM backend not available: {exc}") from exc


class CosyVoice2:
    """CosyVoice2-0.5B on our runtime, shaped like upstream's ``cosyvoice.cli.cosyvoice.CosyVoice2``."""

    family = COSYVOICE2  # the model family this class runs (`studio.tts.models.open_model` picks the class)
    # the flow's batched solve copies takes' states into a shared arena (the budget gives it one)
    flow_arena = True

    def __init__(
        self,
        model_dir: str | Path,
        load_jit: bool = False,
        load_trt: bool = False,
        load_vllm: bool = False,
        fp16: bool = False,
        vram_budget_gb: float = 0.0,
        warm_beside: Callable[[CosyVoice2], None] | None = None,
        **vllm_options: Any,
    ):
        """Load ``model_dir`` (errors name the bad file) and pick the LM backend.

        ``load_jit`` / ``load_trt`` are accepted so upstream code runs unchanged, but this runtime has no
        TorchScript or TensorRT path: they log a warning and the PyTorch modules run (on CUDA the flow
        estimator replays CUDA graphs instead). ``load_vllm`` needs the vLLM backend (`BackendUnavailableError`
        otherwise, before any weights load); ``vllm_options`` go to its engine, which starts first (the
        weights load meanwhile, once it has forked). ``fp16`` is CUDA only. On CUDA, ``vram_budget_gb``
        (0: 80% of the free memory; negative: no budget, the vLLM options as given) sizes vLLM's share,
        its KV cache, the flow's arena and the takes admitted at once. ``warm_beside(self)`` runs on the loading
        thread once the weights are in, while vLLM still starts (e.g. a take with replayed tokens)."""
        if load_jit or load_trt:
            log.warning(
                "load_jit/load_trt are not supported by this runtime (no TorchScript or TensorRT path); "
                "running the PyTorch modules"
            )
        self.model_dir = Path(model_dir)
        vllm = _vllm_backend_module() if load_vllm else None  # fail fast, before loading weights
        self.vram_plan = None
        self.take_gate: TakeGate | None = None  # admits takes by the memory their states will need
        budget = vram_budget_gb or None  # 0: the default share of the free memory

        def start_vllm(skeleton, device):  # on this thread, before this process touches CUDA
            if device.type == "cuda" and vram_budget_gb >= 0:
                self.vram_plan, sizes = plan_before_vllm(
                    self.model_dir, skeleton, device, budget, fp16, vllm_options, arena=self.flow_arena
                )
                vllm_options.update(sizes)  # vLLM's share of the card and its KV cache's bytes
            return vllm.create_vllm_backend(skeleton, self.model_dir, **vllm_options)

        self.model, backend = load_model_folder_beside(
            self.model_dir,
            fp16=fp16,
            beside=start_vllm if vllm is not None else None,
            beside_forks=vllm is not None and vllm.engine_forks,
            lm_backbone=vllm is None,  # vLLM runs the transformer: only the embeddings load here
            then=functools.partial(self._adopt, warm=warm_beside if vllm is not None else None),
        )
        if backend is not None:
            self.backend = backend
            self.backend_name = "vllm"
        else:
            from studio.tts.llm.torch_backend import TorchTokenBackend

            self.backend = TorchTokenBackend(self.model.llm)
            self.backend_name = "pytorch"
            if self.model.device.type == "cuda" and vram_budget_gb >= 0:
                self.vram_plan = plan_budget(self.model.device, budget, arena=self.flow_arena)
        if self.vram_plan is not None:
            self.take_gate = enforce_budget(self.vram_plan, self.model)

    def _adopt(self, parts, warm: Callable[[CosyVoice2], None] | None) -> None:
        """Take the loaded parts (on the loading thread, while vLLM may still start), then ``warm(self)``."""
        if parts.family != self.family:
            raise ModelFolderError(
                parts.model_dir / parts.family.yaml_file,
                f"is a {parts.family.name} folder: open it with {parts.family.name} "
                f"(studio.tts.models.open_model picks the class), not {type(self).__name__}",
            )
        self.model, self.fp16 = parts, parts.fp16
        self.sample_rate, self.token_hop_len = parts.config.sample_rate, parts.config.chunk_size
        self.llm_threads = 1 if parts.device.type == "cpu" else None
        self.voices_file = voices_dir(self.model_dir) / SPK2INFO_FILE
        self.spk2info: dict[str, dict] = {**parts.spk2info, **load_spk2info(self.voices_file)}
        self._voices_lock = threading.Lock()
        if warm is not None:
            try:
                warm(self)
            except Exception:  # noqa: BLE001 - a head start only: the first take warms up instead
                log.warning("the warm-up beside vLLM's start failed", exc_info=True)

    def close(self) -> None:
        """Shut the token backend down (the vLLM engine holds processes and GPU memory) and the flow's
        scheduler thread; idempotent."""
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()
        close_scheduler(self.model.flow)

    # -- saved voices ------------------------------------------------------------------------------
    def list_available_spks(self) -> list[str]:
        return list(self.spk2info)

    def add_zero_shot_spk(
        self, prompt_text: str, prompt_wav: Any, zero_shot_spk_id: str, prompt_sr: int | None = None
    ) -> bool:
        """Remember a voice (prompt features and transcript) under ``zero_shot_spk_id``."""
        if not zero_shot_spk_id:
            raise SynthesisError("a saved voice needs a non-empty id")
        text_ids = self._prompt_text_ids(prompt_text, True)
        tokens, feat, embedding = self._prompt_features(prompt_wav, prompt_sr)
        token = torch.tensor([tokens], dtype=torch.int32)
        entry = {
            "prompt_text": torch.tensor([text_ids], dtype=torch.int32),
            "prompt_text_len": torch.tensor([len(text_ids)], dtype=torch.int32),
            "llm_prompt_speech_token": token,
            "llm_prompt_speech_token_len": torch.tensor([len(tokens)]),
            "flow_prompt_speech_token": token,
            "flow_prompt_speech_token_len": torch.tensor([len(tokens)]),
            "prompt_speech_feat": feat,
            "prompt_speech_feat_len": torch.tensor([feat.shape[1]]),
            "llm_embedding": embedding,
            "flow_embedding": embedding,
        }
        with self._voices_lock:
            self.spk2info[zero_shot_spk_id] = entry
        try:
            self._warm_saved_voice(token, feat, embedding)
        except Exception:  # noqa: BLE001 - an optimisation: never fail saving a voice over it
            log.warning("could not warm the prompt flow cache for voice %r", zero_shot_spk_id, exc_info=True)
        return True

    def _warm_saved_voice(self, token: torch.Tensor, feat: torch.Tensor, embedding: torch.Tensor) -> bool:
        """The voice's first streamed take then skips its prompt frames (STUDIO_PROMPT_CACHE_MB=0: off); True
        when its state was computed now."""
        return warm_prompt_cache(self.model.flow, token, feat, embedding, fp16=self.fp16)

    def prepare_voice(self, prompt_wav, prompt_sr: int | None = None) -> bool:
        """Make a reference recording's prompt features and its prompt flow state now, ahead of its first take
        (the studio calls it when the user picks or cleans a voice): that take then starts as fast as the
        voice's later ones. True when the flow state was computed now (False: it was cached already, or the
        prompt cache is off); bad audio raises `SynthesisError`, as a take with it would."""
        tokens, feat, embedding = self._prompt_features(prompt_wav, prompt_sr)
        return self._warm_saved_voice(torch.tensor([tokens], dtype=torch.int32), feat, embedding)

    def save_spkinfo(self) -> Path:
        """Write the saved voices to the user data folder (the model folder may be read-only)."""
        self.voices_file.parent.mkdir(parents=True, exist_ok=True)
        with self._voices_lock, atomic_path(self.voices_file) as tmp:
            torch.save(self.spk2info, tmp)
        return self.voices_file

    # -- upstream-compatible entry points ------------------------------------------------------------
    # Upstream's signatures, positional order included; ``**extra`` takes our `SynthesisSpec` fields
    # (``seed``, ``prompt_sr``, ``exact_speech_tokens``, ``cancel``).
    def inference_zero_shot(
        self,
        tts_text,
        prompt_text,
        prompt_wav,
        zero_shot_spk_id="",
        stream=False,
        speed=1.0,
        text_frontend=True,
        **extra,
    ) -> Iterator[dict]:
        return self._upstream_call(
            Mode.ZERO_SHOT,
            tts_text,
            prompt_wav,
            zero_shot_spk_id,
            stream,
            speed,
            text_frontend,
            prompt_text=prompt_text,
            **extra,
        )

    def inference_cross_lingual(
        self, tts_text, prompt_wav, zero_shot_spk_id="", stream=False, speed=1.0, text_frontend=True, **extra
    ) -> Iterator[dict]:
        return self._upstream_call(
            Mode.CROSS_LINGUAL, tts_text, prompt_wav, zero_shot_spk_id, stream, speed, text_frontend, **extra
        )

    def inference_instruct2(
        self,
        tts_text,
        instruct_text,
        prompt_wav,
        zero_shot_spk_id="",
        stream=False,
        speed=1.0,
        text_frontend=True,
        **extra,
    ) -> Iterator[dict]:
        return self._upstream_call(
            Mode.INSTRUCT,
            tts_text,
            prompt_wav,
            zero_shot_spk_id,
            stream,
            speed,
            text_frontend,
            instruct_text=instruct_text,
            **extra,
        )

    def _upstream_call(
        self, mode, tts_text, prompt_wav, spk_id, stream, speed, text_frontend, **fields
    ) -> Iterator[dict]:
        """One `SynthesisSpec` from upstream's arguments; a saved voice stands in for the prompt audio."""
        return self.synthesize(
            SynthesisSpec(
                text=tts_text,
                mode=mode,
                prompt_wav=None if spk_id else prompt_wav,
                spk_id=spk_id,
                stream=stream,
                speed=speed,
                text_frontend=text_frontend,
                **fields,
            )
        )

    def inference_instruct(self, *args, **kwargs):
        raise NotImplementedError("inference_instruct is CosyVoice (v1) only; use inference_instruct2")

    # -- the rich entry ------------------------------------------------------------------------------
    def synthesize(self, spec: SynthesisSpec) -> Iterator[dict]:
        """Validate and prepare the request now (errors raise here), then return its chunk generator."""
        spec.validate()
        prompt = self._prepare_prompt(spec)
        return run_take(self, spec, prompt, self._split(spec.text, spec.text_frontend))

    # -- request preparation ---------------------------------------------------------------------
    def _prepare_prompt(self, spec: SynthesisSpec) -> PromptConditioning:
        if spec.spk_id:
            voice = self.spk2info.get(spec.spk_id)
            if voice is None:
                raise SynthesisError(
                    f"unknown saved voice {spec.spk_id!r}; known: {', '.join(self.spk2info) or 'none'}"
                )
            needed = ("flow_prompt_speech_token", "prompt_speech_feat", "flow_embedding")
            if any(key not in voice for key in needed):
                raise SynthesisError(
                    f"saved voice {spec.spk_id!r} has no prompt recording (not a zero-shot voice)"
                )
            flow_token = voice["flow_prompt_speech_token"].reshape(1, -1).to(torch.int32)
            feat, embedding = (
                voice["prompt_speech_feat"].float(),
                voice["flow_embedding"].float().reshape(1, -1),
            )
            cached_text = voice.get("prompt_text", torch.zeros(1, 0, dtype=torch.int32)).reshape(-1).tolist()
            cached_tokens = voice.get("llm_prompt_speech_token", flow_token).reshape(-1).tolist()
        else:
            tokens, feat, embedding = self._prompt_features(spec.prompt_wav, spec.prompt_sr)
            flow_token = torch.tensor([tokens], dtype=torch.int32)
            cached_text, cached_tokens = None, tokens
        if spec.mode is Mode.ZERO_SHOT:
            # as upstream, a saved voice brings its own transcript: it must match its speech tokens
            if cached_text:
                text_ids = cached_text
            else:
                text_ids = self._prompt_text_ids(spec.prompt_text, spec.text_frontend)
            return PromptConditioning(text_ids, cached_tokens, flow_token, feat, embedding)
        if spec.mode is Mode.CROSS_LINGUAL:
            return PromptConditioning(self._cross_lingual_text_ids(), [], flow_token, feat, embedding)
        # instruct2: the instruction always replaces the voice's transcript (upstream defect 5)
        return PromptConditioning(self._instruct_ids(spec.instruct_text), [], flow_token, feat, embedding)

    # -- the model family's prompt formats (CosyVoice3 overrides them) ----------------------------
    def _prompt_text_ids(self, prompt_text: str, text_frontend: bool) -> list[int]:
        """The LM's prompt text for a zero-shot take: the reference's transcript."""
        return self._encode(self._normalize(prompt_text, text_frontend))

    def _cross_lingual_text_ids(self) -> list[int]:
        """The LM's prompt text for a cross-lingual take: none."""
        return []

    def _instruct_ids(self, instruct_text: str) -> list[int]:
        """The LM's prompt text for an instructed take: the instruction, ending in ``<|endofprompt|>``."""
        ending = "" if instruct_text.endswith(END_OF_PROMPT) else END_OF_PROMPT
        return self._encode(instruct_text + ending)

    # -- the model family's take parts (the pipeline asks; CosyVoice3 overrides them) ------------
    def token2wav_stream(
        self,
        spec: SynthesisSpec,
        prompt: PromptConditioning,
        seed: int,
        cancel: threading.Event,
        keep_flow_state: bool = True,
    ) -> Token2WavStream:
        """The take's token-to-waveform state for one sentence (``keep_flow_state`` False: admitted lean, see
        `lean_take_state_bytes`)."""
        return Token2WavStream(
            **self._stream_fields(spec, prompt),
            generator=torch.Generator(device=self.model.device).manual_seed(seed),
            cancel=cancel,
            keep_flow_state=keep_flow_state,
        )

    def _stream_fields(self, spec: SynthesisSpec, prompt: PromptConditioning) -> dict:
        """What every family's token-to-waveform stream is built from."""
        return dict(
            flow=self.model.flow,
            hift=self.model.hift,
            prompt_token=prompt.flow_token,
            prompt_feat=prompt.flow_feat,
            embedding=prompt.embedding,
            streaming=spec.stream,
            speed=float(spec.speed),
            fp16=self.fp16,
            token_hop_len=self.token_hop_len,
            first_hop=spec.first_hop_tokens,
        )

    def token_filter(self) -> Callable[[int], bool] | None:
        """Which sampled speech tokens a take keeps (None: all of them)."""
        return None

    def take_state_bytes(self, prompt_frames: int, max_tokens: int) -> int:
        """What a take's state can grow to on the device (the `TakeGate` reserves it)."""
        return take_state_bytes(self.model, prompt_frames, max_tokens)

    def shared_prompt_bytes(self, stream, prompt_frames: int, max_tokens: int) -> int:
        """What a take admitted by `take_state_bytes` does not hold because its stream reads its prompt's state
        in place from the prompt cache (pinned there until the take ends)."""
        return shared_prompt_bytes(self.model, prompt_frames, max_tokens, stream.shared_prompt_frames)

    def lean_take_state_bytes(self, prompt_frames: int) -> int | None:
        """What a take that keeps no flow state holds (it solves its frames again at every chunk, upstream's
        way): the gate admits it so when its kept state does not fit. None: this family has no such mode."""
        return lean_take_state_bytes(self.model, prompt_frames)

    def _prompt_features(self, prompt_wav: Any, prompt_sr: int | None):
        """(speech tokens, flow mel [1, 2T, 80], speaker embedding [1, 192]) from a prompt recording."""
        if isinstance(prompt_wav, torch.Tensor):
            prompt_wav = prompt_wav.detach().float().cpu().numpy()
        if not isinstance(prompt_wav, (str, Path, np.ndarray)):
            raise SynthesisError(
                f"prompt_wav must be a path, a numpy array or a tensor, not {type(prompt_wav).__name__}"
            )
        sr = None if isinstance(prompt_wav, (str, Path)) else int(prompt_sr or 16000)
        try:
            features = self.model.frontend.prompt_features(prompt_wav, sr)
        except ValueError as exc:
            raise SynthesisError(f"unusable prompt recording: {exc}") from exc
        tokens = list(features.token_ids) or features.speech_token.reshape(-1).tolist()
        feat = features.speech_feat.float().reshape(1, -1, 80)
        embedding = features.embedding.float().reshape(1, -1)
        return tokens, feat, embedding

    def _normalize(self, text: str, text_frontend: bool) -> str:
        if not text.strip():
            return ""
        try:
            return self.model.frontend.text.normalize(text, text_frontend=text_frontend)
        except ValueError as exc:
            raise SynthesisError(str(exc)) from exc

    def _split(self, text: str, text_frontend: bool) -> list[str]:
        try:
            sentences = self.model.frontend.text.split(text, text_frontend=text_frontend)
        except ValueError as exc:
            raise SynthesisError(str(exc)) from exc
        sentences = [s for s in sentences if s.strip()]
        if not sentences:
            raise SynthesisError("nothing to say: the text is empty after normalisation")
        return sentences

    def _encode(self, text: str) -> list[int]:
        return list(self.model.frontend.text.encode(text)) if text else []
