"""vLLM general plugin: registers the CosyVoice2 architecture in every process vLLM starts.

Installed as the `vllm.general_plugins` entry point `cosyvoice_studio` (pyproject), so the model is
found with V1 multiprocessing on or off. Registration is by name only: the model module (torch,
vllm layers) is imported by vLLM when the architecture is first used, never at plugin load.
"""

from __future__ import annotations

#: The exported config.json names this architecture; the class in vllm_model.py carries the same name.
ARCHITECTURE = "CosyVoice2StudioForCausalLM"
MODEL_CLASS_PATH = f"studio.tts.llm.vllm.model:{ARCHITECTURE}"


def register() -> None:
    """Register the architecture with vLLM's ModelRegistry (idempotent)."""
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, MODEL_CLASS_PATH)
