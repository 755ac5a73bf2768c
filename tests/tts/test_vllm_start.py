"""How vLLM's engine process is started: forked, except on the start that writes the export."""

from __future__ import annotations

import os

import pytest
import torch

from studio.tts.llm.vllm.backend import engine_forks, spawning
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


@pytest.mark.parametrize("before", [None, "fork"])
def test_spawning_holds_only_inside_its_block(monkeypatch, before):
    if before is None:
        monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    else:
        monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", before)
    with pytest.raises(RuntimeError), spawning():
        assert os.environ["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
        raise RuntimeError("vLLM failed to start")
    assert os.environ.get("VLLM_WORKER_MULTIPROC_METHOD") == before
    with spawning(False):
        assert os.environ.get("VLLM_WORKER_MULTIPROC_METHOD") == before


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
