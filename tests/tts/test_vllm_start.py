"""How vLLM's engine process is started: forked, also right after the start that writes the export."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from studio.tts.llm.vllm.backend import engine_forks
from studio.tts.llm.vllm.export import cached_export, export_for_vllm
from studio.tts.loader import llm_skeleton, read_folder_config


def test_only_a_cuda_engine_with_its_own_process_forks(monkeypatch):
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    assert engine_forks(torch.device("cuda")) and not engine_forks(torch.device("cpu"))
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    assert not engine_forks(torch.device("cuda"))
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    assert not engine_forks(torch.device("cuda"))


# Writes the export as the studio's first start does, then forks as vLLM does and has the child run a
# parallel CPU operation. A fresh interpreter: pytest's own process has long since started the thread pool.
_FORK_AFTER_EXPORT = """
import json, os, sys, time
from pathlib import Path
import torch
from studio.tts.llm.vllm.export import export_for_vllm
torch.set_num_threads(2)  # a pool of two threads even on a one-core machine
model, root = Path(sys.argv[1]), sys.argv[2]
config = json.loads((model / "CosyVoice-BlankEN" / "config.json").read_text())
export_for_vllm(model / "llm.pt", config, dtype="bfloat16", root=root)  # a cast, from float16
pid = os.fork()
if pid == 0:
    total = float((torch.ones(4_000_000) * 2).sum())
    os._exit(0 if total == 8e6 else 3)
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        sys.exit(os.waitstatus_to_exitcode(status))
    time.sleep(0.05)
os.kill(pid, 9)
os.waitpid(pid, 0)
print("the forked child hung")
sys.exit(4)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_process_forked_right_after_the_export_is_written_does_not_hang(tiny_model_dir, tmp_path):
    """vLLM's engine core is forked right after the first start's export (the cast that hung it on the H200)."""
    result = subprocess.run(
        [sys.executable, "-c", _FORK_AFTER_EXPORT, str(tiny_model_dir), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert list(tmp_path.glob("*/model.safetensors"))  # the export was written


def test_a_cached_export_is_found_only_once_complete(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_CACHE_DIR", str(tmp_path))
    config = llm_skeleton(tiny_model_dir, read_folder_config(tiny_model_dir)).llm.model.config.to_dict()
    llm_pt = tiny_model_dir / "llm.pt"
    assert cached_export(llm_pt, config, dtype="float16") is None
    folder = export_for_vllm(llm_pt, config, dtype="float16")
    assert cached_export(llm_pt, config, dtype="float16") == folder
    assert cached_export(llm_pt, config, dtype="float32") is None  # another dtype, another export
    (folder / "studio-export.json").unlink()  # an export without its stamp is not complete
    assert cached_export(llm_pt, config, dtype="float16") is None
