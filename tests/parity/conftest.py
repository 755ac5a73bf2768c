"""Parity tests: our runtime against the reference CosyVoice2 code on the same random weights.

The reference (cosyvoice2-eu 0.2.8, upstream's model code) lives in `.cache/parity-ref`, installed
by `scripts/install-parity-reference`. It goes at the END of sys.path so our environment's packages
(numpy, transformers, torch) always win over anything in that folder.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
REFERENCE_DIR = REPO / ".cache" / "parity-ref"


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
    if not (REFERENCE_DIR / ".installed-v1").exists():
        subprocess.run([str(REPO / "scripts" / "install-parity-reference")], check=True)
    if str(REFERENCE_DIR) not in sys.path:
        sys.path.append(str(REFERENCE_DIR))
    return REFERENCE_DIR
