"""CosyVoice3's LM beside CosyVoice2's: the members the loader and pipeline call, and the silent-run filter."""

from __future__ import annotations

import random

import pytest
import torch

from studio.tts.cosyvoice3.llm import MAX_SILENT_RUN, SILENT_TOKENS, CosyVoice3LM, SilentRunLimiter
from studio.tts.llm.model import BACKBONE_LAYERS, Qwen2Encoder, Qwen2LM

SPEECH_TOKENS = 6561


def _qwen2_config():
    from transformers import Qwen2Config

    return Qwen2Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=400,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )


def _lm(kind: type, device: str = "cpu"):
    with torch.device(device):
        return kind(64, 64, SPEECH_TOKENS, Qwen2Encoder(config=_qwen2_config()))


def _upstream_llm_job_filter(tokens, silent_tokens, max_silent=5):
    """The token loop of upstream's `CosyVoiceModel.llm_job` (cosyvoice/cli/model.py), as a list filter."""
    kept, silent_run = [], 0
    for token in tokens:
        if token in silent_tokens:
            silent_run += 1
            if silent_run > max_silent:
                continue
        else:
            silent_run = 0
        kept.append(token)
    return kept


def _limited(tokens, silent_tokens, max_run=MAX_SILENT_RUN):
    limiter = SilentRunLimiter(silent_tokens, max_run)
    return [t for t in tokens if limiter.keep(t)]


def test_cosyvoice3_has_every_public_member_of_cosyvoice2s_lm_but_its_separate_sos_table():
    def public(kind):
        return {name for name in dir(kind) if not name.startswith("_")} - set(dir(torch.nn.Module))

    assert public(Qwen2LM) - public(CosyVoice3LM) == set()
    cv2, cv3 = _lm(Qwen2LM, "meta"), _lm(CosyVoice3LM, "meta")
    assert set(vars(cv2)) - set(vars(cv3)) == set()  # instance attributes too
    assert {n for n, _ in cv2.named_children()} - {n for n, _ in cv3.named_children()} == {"llm_embedding"}


def test_silent_tokens_are_upstreams_eleven_fsq_ids_for_cosyvoice3_and_none_for_cosyvoice2():
    assert CosyVoice3LM.silent_tokens == (1, 2, 28, 29, 55, 248, 494, 2241, 2242, 2322, 2323)
    assert _lm(CosyVoice3LM, "meta").silent_tokens == SILENT_TOKENS
    assert Qwen2LM.silent_tokens == () and _lm(Qwen2LM, "meta").silent_tokens == ()
    tokens = [1] * 9 + [7] + [2] * 9
    assert _limited(tokens, Qwen2LM.silent_tokens) == tokens  # CosyVoice2: nothing dropped


def test_a_run_of_silent_tokens_keeps_its_first_five_and_any_other_token_starts_afresh():
    silent = SILENT_TOKENS
    assert _limited([1, 2, 28, 29, 55, 248, 494, 7], silent) == [1, 2, 28, 29, 55, 7]
    assert _limited([7, 1, 1, 1, 1, 1, 1, 8, 1, 1], silent) == [7, 1, 1, 1, 1, 1, 8, 1, 1]
    assert _limited([2322] * 5, silent) == [2322] * 5  # exactly five: all kept
    assert _limited([3, 4, 5], silent) == [3, 4, 5]
    assert _limited([1] * 4, silent, max_run=0) == []
    limiter = SilentRunLimiter(silent)
    assert [limiter.keep(1) for _ in range(7)] == [True] * 5 + [False] * 2
    assert limiter.keep(6000) and limiter.keep(1)  # reset by a speech token
    with pytest.raises(ValueError, match="max_run"):
        SilentRunLimiter(silent, max_run=-1)


def test_the_filter_keeps_what_upstreams_llm_job_loop_keeps():
    rng = random.Random(0)
    pool = [*SILENT_TOKENS, 0, 3, 30, 247, 2243, 6560]  # silent ids and neighbours that are not
    for _ in range(300):
        tokens = [rng.choice(pool) for _ in range(rng.randint(0, 60))]
        assert _limited(tokens, SILENT_TOKENS) == _upstream_llm_job_filter(tokens, SILENT_TOKENS), tokens
    long_runs = [1] * 12 + [5] + [2241, 2242] * 4 + [6560] + [494] * 6
    assert _limited(long_runs, SILENT_TOKENS) == _upstream_llm_job_filter(long_runs, SILENT_TOKENS)
    assert len(_limited(long_runs, SILENT_TOKENS)) == 5 + 1 + 5 + 1 + 5


def test_drop_backbone_frees_the_layers_and_the_rest_still_loads_strictly_from_llm_pt():
    lm = _lm(CosyVoice3LM)
    layer_bytes = sum(p.numel() * p.element_size() for p in lm.llm.model.model.layers.parameters())
    assert lm.backbone_bytes() == layer_bytes > 0
    state = {k: v.clone() for k, v in lm.state_dict().items()}
    assert any(k.startswith(BACKBONE_LAYERS) for k in state)

    skeleton = _lm(CosyVoice3LM, "meta")  # as the loader does when vLLM runs the transformer
    assert skeleton.drop_backbone() == layer_bytes
    assert skeleton.backbone_bytes() == 0 and not len(skeleton.llm.model.model.layers)
    rest = {k: v for k, v in state.items() if not k.startswith(BACKBONE_LAYERS)}
    skeleton.load_state_dict(rest, strict=True, assign=True)
    skeleton.materialize_buffers()
    assert torch.equal(skeleton.llm_decoder.weight, lm.llm_decoder.weight)
    prompt = skeleton.build_prompt_embeds([5, 6], [7], [10, 6560])
    assert torch.equal(prompt, lm.build_prompt_embeds([5, 6], [7], [10, 6560]))  # prompts still built here
    with pytest.raises(RuntimeError, match="layers were freed"):
        skeleton.forward(prompt, skeleton.new_cache())
