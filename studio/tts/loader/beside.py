"""Loading a whole model folder, optionally beside vLLM's start: the weights load on a thread of their own
while the caller's thread starts vLLM (after vLLM has forked its engine process, when it forks)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from studio import envs
from studio.model_layout import SPK2INFO_FILE, family_of
from studio.tts.device.fork_gate import ForkGate
from studio.tts.loader.folder import check_folder, load_spk2info, read_folder_config
from studio.tts.loader.parts import (
    ModelParts,
    attach_cuda_graphs,
    default_device,
    llm_skeleton,
    load_flow,
    load_frontend,
    load_hift,
    load_llm,
)

log = logging.getLogger(__name__)

LOAD_THREAD = "load-weights"  # loads the weights while vLLM starts on the caller's thread


def load_model_folder(
    model_dir: str | Path, *, device: torch.device | str | None = None, fp16: bool = False
) -> ModelParts:
    """Load the whole folder; ``fp16`` (CUDA only, as upstream) halves the LM and the flow."""
    parts, _ = load_model_folder_beside(model_dir, device=device, fp16=fp16)
    return parts


def load_model_folder_beside(
    model_dir: str | Path,
    *,
    device: torch.device | str | None = None,
    fp16: bool = False,
    beside: Callable[[torch.nn.Module, torch.device], Any] | None = None,
    beside_forks: bool | Callable[[torch.device], bool] = False,
    lm_backbone: bool = True,
    then: Callable[[ModelParts], None] | None = None,
) -> tuple[ModelParts, Any]:
    """Load the folder while ``beside(skeleton, device)`` runs on this thread (starting vLLM); return the
    parts and what ``beside`` returned.

    ``skeleton`` is the LM built on the meta device: its config and shapes, no weights (vLLM exports and
    runs its own copy). The weights (LM, flow, HiFT, frontend) load on another thread meanwhile. With
    ``beside_forks`` (vLLM will fork its engine-core process; a callable is asked with the device) that
    thread waits until this one has forked (`ForkGate`), so this process touches CUDA only after the fork
    and vLLM need not spawn a new interpreter. ``lm_backbone=False`` leaves the LM's transformer layers
    out (`load_llm`). ``then(parts)`` runs on the loading thread once the weights are in, while ``beside``
    may still run (warming up beside vLLM's start). Errors of either side are raised here, after both
    have ended."""
    model_dir = check_folder(model_dir)
    if beside_forks:  # torch.cuda.is_available() through NVML: a CUDA runtime call would poison the fork
        os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    device = torch.device(device) if device is not None else default_device()
    if fp16 and device.type != "cuda":
        log.info("fp16 needs a CUDA device; running in float32 on %s", device)
        fp16 = False
    config, family = read_folder_config(model_dir), family_of(model_dir)
    forks = beside_forks(device) if callable(beside_forks) else beside_forks
    if forks and torch.cuda.is_initialized():
        log.warning("CUDA was initialised here before vLLM started: vLLM spawns its engine process (slower)")
    gate = ForkGate(armed=beside is not None and forks)
    loaded: dict[str, Any] = {}

    def load_weights() -> None:
        try:
            waited = time.perf_counter()
            gate.wait()
            start = time.perf_counter()
            llm = load_llm(model_dir, config, device, backbone=lm_backbone)
            flow = load_flow(model_dir, config, device)
            hift = load_hift(model_dir, config, device)
            if fp16:
                llm.half()
                flow.half()
            if device.type == "cuda" and envs.CUDA_GRAPHS.enabled():
                # The estimator (~1,300 small kernels per Euler step for CosyVoice2's U-Net, ~18,000 per
                # streamed call for CosyVoice3's DiT) and HiFT are launch-bound on a GPU: replaying captured
                # graphs makes them several times faster with identical output.
                attach_cuda_graphs(flow, hift)  # STUDIO_CUDA_GRAPHS=0 opts out
            loaded["parts"] = ModelParts(
                model_dir=model_dir,
                config=config,
                llm=llm,
                flow=flow,
                hift=hift,
                frontend=load_frontend(model_dir, device, config),
                device=device,
                fp16=fp16,
                family=family,
                spk2info=load_spk2info(model_dir / SPK2INFO_FILE),
            )
            log.info(
                "weights loaded in %.1f s, after %.1f s waiting for vLLM's fork",
                time.perf_counter() - start,
                start - waited,
            )
            if then is not None:
                then(loaded["parts"])
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            loaded["error"] = exc

    result = None
    if beside is None:
        load_weights()
    else:
        skeleton = llm_skeleton(model_dir, config)
        worker = threading.Thread(target=load_weights, name=LOAD_THREAD, daemon=True)
        worker.start()
        try:
            result = beside(skeleton, device)
        finally:
            if forks and not gate.is_open():
                log.info("vLLM started without forking here; the weights load after it")
            gate.open()
            worker.join()
    if "error" in loaded:
        raise loaded["error"]
    return loaded["parts"], result
