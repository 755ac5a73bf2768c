"""The seed's vLLM knobs: saved settings, overridden by command-line flags, reach vLLM's EngineArgs."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from studio.commands.vllm_flags import add_vllm_arguments, vllm_options_from
from studio.settings import Settings, save_settings


def test_flags_override_saved_settings_and_reach_engine_args(tmp_path, monkeypatch):
    pytest.importorskip("vllm")
    from studio.tts.llm.vllm.backend import engine_args
    from studio.tts.llm.vllm.sampling import PROCESSOR_PATH

    monkeypatch.setenv("STUDIO_CONFIG_DIR", str(tmp_path))
    save_settings(dataclasses.replace(Settings(), max_num_seqs=12, max_model_len=3000, dtype="bfloat16"))
    parser = argparse.ArgumentParser()
    add_vllm_arguments(parser)
    options = vllm_options_from(parser.parse_args(["--max-num-seqs", "32", "--enforce-eager"]))
    assert options["max_num_seqs"] == 32 and options["enforce_eager"] is True  # flags win
    assert options["max_model_len"] == 3000 and options["dtype"] == "bfloat16"  # saved settings stay

    export = tmp_path / "export"
    export.mkdir()  # a folder vLLM finds: a missing one is looked up as a hub repo id (and fails offline)
    args = engine_args(export, **options)
    assert (args.max_num_seqs, args.max_model_len, args.dtype, args.enforce_eager) == (
        32,
        3000,
        "bfloat16",
        True,
    )
    assert args.enable_prompt_embeds and args.skip_tokenizer_init
    assert list(args.logits_processors) == [PROCESSOR_PATH]
