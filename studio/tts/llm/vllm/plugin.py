"""vLLM general plugin: registers the CosyVoice2 architecture in every process vLLM starts.

Installed as the `vllm.general_plugins` entry point `cosyvoice_studio` (pyproject), so the model is
found with V1 multiprocessing on or off. Registration is by name only: the model module (torch,
vllm layers) is imported by vLLM when the architecture is first used, never at plugin load.

The studio's own process registers the class itself before it builds the engine config
(`register(in_process=True)`): vLLM inspects a model registered by name in a subprocess that imports
torch and vLLM afresh whenever its cache of that inspection misses (first start, and after any change
to the model module): 23.5 s of a cold start on the H200. The class imports in 0.3 s once vLLM's engine
modules are loaded, and an engine core forked from this process then finds it imported. CosyVoice3's
export is served by vLLM's stock `Qwen2ForCausalLM` (`STOCK_ARCHITECTURE`), which vLLM registers by
name too (its first inspection took 10 s on a 2-core CPU): that same class is registered in the
studio's process by class as well (the module is the one our class imports).

It also spares RAS a host round trip per step: with any custom logits processor loaded, vLLM makes its
input batch bring each step's sampled tokens to the host before the next step samples (it cannot know
whether a processor reads them). Ours reads only how many tokens each request has output, which vLLM
keeps right with placeholders (tts/llm/vllm/sampling.py), so when ours is the only custom one the batch
is built without that wait (`skip_output_token_sync`).

And it spares the first two starts of a machine vLLM's Triton top-k/top-p kernels: vLLM warms its
sampler with a top-k/top-p draw, whose Triton kernels compile then (6-9 s on the H200; the first start
caches them in torch.compile's folder, the second in Triton's own). Our requests are greedy (the RAS
processor leaves one-hot rows) and never use them, so in a process that serves our model top-k/top-p
takes vLLM's PyTorch path on a GPU (`top_k_top_p_in_pytorch`; on a CPU vLLM's own path is PyTorch
already); anybody else's model keeps vLLM's choice. A process serves a CosyVoice model when it builds our
class or our RAS logits processor (every studio engine loads it, the stock Qwen2's for CosyVoice3 too).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import threading

log = logging.getLogger(__name__)

#: The exported config.json names this architecture; the class in vllm_model.py carries the same name.
ARCHITECTURE = "CosyVoice2StudioForCausalLM"
MODEL_CLASS_PATH = f"studio.tts.llm.vllm.model:{ARCHITECTURE}"
STOCK_ARCHITECTURE = "Qwen2ForCausalLM"  # vLLM's own class: CosyVoice3's export (a head without bias)
SAMPLING_MODULE = "studio.tts.llm.vllm.sampling"
_NEEDS_TOKENS = "logitsprocs_need_output_token_ids"


def register(in_process: bool = False) -> None:
    """Register the architecture with vLLM's ModelRegistry (idempotent): by name, or with
    ``in_process`` by the class itself (imported here, so vLLM inspects it without a subprocess).
    In vLLM's own processes it also makes them die with their parent (`studio.lifetime`)."""
    from vllm import ModelRegistry

    from studio import lifetime

    lifetime.arm_if_child()  # vLLM's engine core and workers: gone with the process that started them
    lifetime.watch_forks()  # and those it forks (vLLM forks on CUDA; a fork does not load plugins again)

    if in_process:
        from vllm.model_executor.models.qwen2 import Qwen2ForCausalLM

        from studio.tts.llm.vllm.model import CosyVoice2StudioForCausalLM

        for name, model_class in (
            (ARCHITECTURE, CosyVoice2StudioForCausalLM),
            (STOCK_ARCHITECTURE, Qwen2ForCausalLM),
        ):
            if not _registered_by_class(ModelRegistry, name):
                with _quiet(logging.getLogger("vllm.model_executor.models.registry")):  # "overwritten": meant
                    ModelRegistry.register_model(name, model_class)
    elif ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, MODEL_CLASS_PATH)
    skip_output_token_sync()
    top_k_top_p_in_pytorch()


#: Set when this process builds our model (`CosyVoice2StudioForCausalLM.__init__`) or our RAS logits
#: processor (`sampling.RasLogitsProcessor.__init__`): it serves CosyVoice2 or CosyVoice3.
SERVING_COSYVOICE = threading.Event()


def top_k_top_p_in_pytorch() -> bool:
    """Wrap vLLM's `apply_top_k_top_p` so a process serving our model takes its PyTorch path.

    Applied once per process; a vLLM without that function or its PyTorch twin is left as it is.
    Returns whether the wrapper is in place."""
    try:
        from vllm.v1.sample.ops import topk_topp_sampler as ops
    except ImportError:
        return False
    apply, pytorch = getattr(ops, "apply_top_k_top_p", None), getattr(ops, "apply_top_k_top_p_pytorch", None)
    if apply is None or pytorch is None:
        return False
    if getattr(apply, "_studio_wrapped", False):
        return True

    @functools.wraps(apply)
    def apply_top_k_top_p(logits, k, p):
        if SERVING_COSYVOICE.is_set() and logits.device.type != "cpu" and (k is not None or p is not None):
            return pytorch(logits, k, p)
        return apply(logits, k, p)

    apply_top_k_top_p._studio_wrapped = True
    ops.apply_top_k_top_p = apply_top_k_top_p
    return True


def _registered_by_class(registry, architecture: str) -> bool:
    entry = getattr(registry, "models", {}).get(architecture)
    return entry is not None and getattr(entry, "model_cls", None) is not None


@contextlib.contextmanager
def _quiet(logger: logging.Logger):
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


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
