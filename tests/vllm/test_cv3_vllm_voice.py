"""A CosyVoice3 folder with load_vllm=True on a real vLLM engine: the LM runs in vLLM's stock Qwen2 class, its
layers are freed here, and a greedy take sounds as on the PyTorch path."""

from __future__ import annotations

import numpy as np
import pytest

from studio.tts.llm.sampling import RasSampling
from studio.tts.synthesis import SynthesisSpec

pytestmark = pytest.mark.vllm


def _voiced(seconds: float = 2.0, sr: int = 16000) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    return (0.3 * np.sin(2 * np.pi * 150 * t) * (0.6 + 0.4 * np.sin(6 * np.pi * t))).astype(np.float32)


def test_a_greedy_take_on_vllm_is_the_pytorch_take(cosyvoice3_voices):
    on_vllm, on_torch = cosyvoice3_voices
    assert on_vllm.backend_name == "vllm" and on_torch.backend_name == "pytorch"
    assert on_vllm.backend._engine.model_config.architecture == "Qwen2ForCausalLM"
    assert not len(on_vllm.model.llm.llm.model.model.layers)  # vLLM runs them: the PyTorch copy is freed
    spec = dict(
        text="Hello there.",
        prompt_wav=_voiced(),
        prompt_text="A prompt.",
        seed=7,
        exact_speech_tokens=30,
        text_frontend=False,
    )
    audio = {}
    for name, voice in (("vllm", on_vllm), ("pytorch", on_torch)):
        previous, voice.model.llm.sampling = voice.model.llm.sampling, RasSampling(top_k=1)
        try:
            chunks = list(voice.synthesize(SynthesisSpec(**spec)))
        finally:
            voice.model.llm.sampling = previous
        audio[name] = np.concatenate([c["tts_speech"].numpy()[0] for c in chunks])
    assert audio["vllm"].size > 0 and np.isfinite(audio["vllm"]).all()
    np.testing.assert_allclose(audio["vllm"], audio["pytorch"], atol=1e-5)
