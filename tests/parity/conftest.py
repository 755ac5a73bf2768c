"""Parity tests: our runtime against the reference CosyVoice2 and CosyVoice3 code on the same random weights.

The reference (cosyvoice2-eu 0.2.8, upstream's model code; vllm-omni 0.30.0's CosyVoice3 classes, ported
from upstream's) lives in `.cache/parity-ref` (or ``$PARITY_REFERENCE_DIR``), installed by
`scripts/install-parity-reference`. It goes at the END of sys.path so our environment's packages (numpy,
transformers, torch, vllm) always win over anything in that folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
REFERENCE_DIR = Path(os.environ.get("PARITY_REFERENCE_DIR") or REPO / ".cache" / "parity-ref")
#: Written by the install script when it completes; its version changes whenever the install does.
REFERENCE_STAMP = ".installed-v2"
#: vllm-omni packages whose ``__init__`` does more than the model classes need: the top package patches
#: vLLM (and needs aenum), the models package imports every model's registry, the configs package registers
#: every model's config with transformers. They are entered as plain namespaces instead.
_VLLM_OMNI_BARE_PACKAGES = (
    "vllm_omni",
    "vllm_omni.model_executor.models",
    "vllm_omni.transformers_utils.configs",
)


def relative_error(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    """||ours - theirs|| / ||theirs|| in float64: the parity measure (must be <= 1e-4)."""
    ours = ours.detach().double().cpu()
    theirs = theirs.detach().double().cpu()
    assert ours.shape == theirs.shape, f"shape {tuple(ours.shape)} != reference {tuple(theirs.shape)}"
    return float((ours - theirs).norm() / theirs.norm().clamp_min(1e-30))


@pytest.fixture(scope="session", autouse=True)
def _single_thread():
    """Tiny models gain nothing from intra-op threads; on 2 shared cores they only burn CPU spinning."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def reference() -> Path:
    """Make the reference package importable (installing it on first use) and return its folder."""
    if not (REFERENCE_DIR / REFERENCE_STAMP).exists():
        subprocess.run([str(REPO / "scripts" / "install-parity-reference"), str(REFERENCE_DIR)], check=True)
    if str(REFERENCE_DIR) not in sys.path:
        sys.path.append(str(REFERENCE_DIR))
    return REFERENCE_DIR


@pytest.fixture(scope="session")
def cosyvoice3_reference(reference: Path):
    """Make vllm-omni's CosyVoice3 classes importable on this CPU, with plain PyTorch attention.

    vllm-omni has no CPU platform: its diffusion attention asks the platform for a backend and a forward,
    and the unspecified platform answers NotImplementedError. Here it gets vllm-omni's own SDPA backend,
    whose CUDA forward is ``torch.nn.functional.scaled_dot_product_attention`` and runs on any device.
    """
    for name in _VLLM_OMNI_BARE_PACKAGES:
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(reference / name.replace(".", "/"))]
            sys.modules[name] = package
    from vllm_omni.diffusion.attention.backends.sdpa import SDPABackend, SDPAImpl
    from vllm_omni.platforms import current_omni_platform

    sdpa = f"{SDPABackend.__module__}.{SDPABackend.__qualname__}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            type(current_omni_platform),
            "get_diffusion_attn_backend_cls",
            classmethod(lambda cls, selected_backend, head_size, allow_trtllm_default=False: sdpa),
        )
        patch.setattr(SDPAImpl, "forward", SDPAImpl.forward_cuda)
        yield reference
