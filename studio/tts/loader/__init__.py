"""Load a model folder of either family (CosyVoice2-0.5B, Fun-CosyVoice3-0.5B) into our own modules, strictly
(`studio.model_layout` says which family a folder is and what it holds): the folder's checks
(folder.py), its parts (parts.py), the whole folder beside vLLM's start (beside.py). Nothing is written into
the folder, so read-only folders work."""

from studio.tts.loader.beside import LOAD_THREAD, load_model_folder, load_model_folder_beside
from studio.tts.loader.folder import (
    check_folder,
    describe_mismatch,
    load_spk2info,
    load_strict,
    read_folder_config,
    read_state_dict,
    tokenizer_special_tokens,
    validate_folder,
)
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

__all__ = [
    "LOAD_THREAD",
    "ModelParts",
    "attach_cuda_graphs",
    "check_folder",
    "default_device",
    "describe_mismatch",
    "llm_skeleton",
    "load_flow",
    "load_frontend",
    "load_hift",
    "load_llm",
    "load_model_folder",
    "load_model_folder_beside",
    "load_spk2info",
    "load_strict",
    "read_folder_config",
    "read_state_dict",
    "tokenizer_special_tokens",
    "validate_folder",
]
