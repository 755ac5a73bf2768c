"""vLLM general plugin: registers the CosyVoice2 architecture in every process vLLM starts.

Installed as the `vllm.general_plugins` entry point `cosyvoice_studio` (pyproject), so the model is
found with V1 multiprocessing on or off. Registration is by name only: the model module (torch,
vllm layers) is imported by vLLM when the architecture is first used, never at plugin load.

It also spares RAS a host round trip per step: with any custom logits processor loaded, vLLM makes its
input batch bring each step's sampled tokens to the host before the next step samples (it cannot know
whether a processor reads them). Ours reads only how many tokens each request has output, which vLLM
keeps right with placeholders (tts/llm/vllm/sampling.py), so when ours is the only custom one the batch
is built without that wait (`skip_output_token_sync`).
"""

from __future__ import annotations

import functools
import inspect
import logging

log = logging.getLogger(__name__)

#: The exported config.json names this architecture; the class in vllm_model.py carries the same name.
ARCHITECTURE = "CosyVoice2StudioForCausalLM"
MODEL_CLASS_PATH = f"studio.tts.llm.vllm.model:{ARCHITECTURE}"
SAMPLING_MODULE = "studio.tts.llm.vllm.sampling"
_NEEDS_TOKENS = "logitsprocs_need_output_token_ids"


def register() -> None:
    """Register the architecture with vLLM's ModelRegistry (idempotent)."""
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, MODEL_CLASS_PATH)
    skip_output_token_sync()


def only_length_readers(logitsprocs) -> bool:
    """True when every logits processor in vLLM's `LogitsProcessors` is vLLM's own or our RAS one."""
    modules = [type(p).__module__ for p in logitsprocs.all]
    return all(m == SAMPLING_MODULE or m.startswith("vllm.") for m in modules)


def skip_output_token_sync() -> bool:
    """Wrap vLLM's `InputBatch` so it does not wait for sampled tokens that only our RAS would read.

    Applied once per process; a vLLM whose `InputBatch` takes no such argument is left as it is.
    Returns whether the wrapper is in place."""
    try:
        from vllm.v1.worker.gpu_input_batch import InputBatch
    except ImportError:  # a vLLM without the V1 GPU input batch
        return False
    init = InputBatch.__init__
    if getattr(init, "_studio_wrapped", False):
        return True
    if _NEEDS_TOKENS not in inspect.signature(init).parameters:
        return False

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        logitsprocs = kwargs.get("logitsprocs")
        if (
            kwargs.get(_NEEDS_TOKENS)
            and logitsprocs is not None
            and kwargs.get("reasoning_config") is None
            and only_length_readers(logitsprocs)
        ):
            kwargs[_NEEDS_TOKENS] = False
        init(self, *args, **kwargs)

    __init__._studio_wrapped = True
    InputBatch.__init__ = __init__
    return True
