"""Our CosyVoice3 LM (studio/tts/cosyvoice3/llm.py) against the reference's (vllm-omni's port of upstream's).

The reference's `CosyVoice3LM` holds the head (speech embedding, bias-less decoder) and its prompt layout
lives in `CosyVoice3Model.embed_input_ids`; its Qwen2 body needs a running vLLM, so here the body is
transformers' stock `Qwen2ForCausalLM` (the export is a stock Qwen2) under upstream's `llm.model` name.
The reference's state dict, upstream's `llm.pt` layout, loads strictly into ours; then the prompt
embeddings and the raw next-token logits are compared for the prompt pass and decode steps, in fp32:
ours runs its KV cache, the reference recomputes the whole sequence each time.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from studio.tts.cosyvoice3.llm import CosyVoice3LM
from studio.tts.llm.model import Qwen2Encoder
from studio.tts.llm.sampling import RasSampling
from studio.tts.llm.torch_backend import TorchTokenBackend

pytestmark = pytest.mark.parity

SPEECH_TOKENS = 6561
HIDDEN = 64
TOLERANCE = 1e-4
TEXT, PROMPT_TEXT, PROMPT_SPEECH = [5, 17, 42, 99, 3], [7, 8, 300], [10, 200, 6560, 0, 31]
DECODED = [123, 6560, 0, 4000]  # fed back as decode steps


#: A small body, and the official body's width (896 wide, 14 query heads of 64, 2 KV heads) with 2 of its 24
#: layers; the text vocabulary is cut to 400 ids (it only sizes the text embedding).
QWEN2_SHAPES = {
    "small": {
        "hidden_size": HIDDEN,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
    },
    "official width": {
        "hidden_size": 896,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "intermediate_size": 4864,
    },
}


def _qwen2_config(shape: str):
    from transformers import Qwen2Config

    return Qwen2Config(
        **QWEN2_SHAPES[shape],
        num_hidden_layers=2,
        vocab_size=400,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )


class _UpstreamQwen2Encoder(nn.Module):
    """Upstream's `Qwen2Encoder` layout: the stock transformers model under `.model`."""

    def __init__(self, config) -> None:
        super().__init__()
        from transformers import Qwen2ForCausalLM

        self.model = Qwen2ForCausalLM(config)


def _build_models(shape: str):
    """The reference head on a stock Qwen2 body with random weights, and ours loaded strictly from it."""
    from vllm_omni.model_executor.models.cosyvoice3.cosyvoice3_talker import CosyVoice3LM as RefLM

    torch.manual_seed(0)
    config = _qwen2_config(shape)
    width = config.hidden_size
    theirs = RefLM(width, width, SPEECH_TOKENS, _UpstreamQwen2Encoder(config)).eval()
    ours = CosyVoice3LM(width, width, SPEECH_TOKENS, Qwen2Encoder(config=config))
    ours.load_state_dict(theirs.state_dict(), strict=True)
    return theirs, ours.eval()


@pytest.fixture(scope="module")
def models(cosyvoice3_reference):
    return _build_models("small")


@pytest.fixture(scope="module", params=list(QWEN2_SHAPES))
def models_of_each_shape(cosyvoice3_reference, request):
    return _build_models(request.param)


def _reference_prompt_embeds(theirs) -> torch.Tensor:
    """The reference's own prompt layout: `CosyVoice3Model.embed_input_ids` on vLLM's placeholder ids.

    vLLM hands it `[sos, task, audio * len(prompt speech), prompt text + text]` with the first block marked
    multimodal and the prompt speech embedded by `embed_multimodal` (the speech embedding); it reorders them.
    """
    from vllm_omni.model_executor.models.cosyvoice3.cosyvoice3 import CosyVoice3Model

    text_ids = PROMPT_TEXT + TEXT
    input_ids = torch.tensor([1] * (2 + len(PROMPT_SPEECH)) + text_ids)
    is_multimodal = torch.tensor([True] * (2 + len(PROMPT_SPEECH)) + [False] * len(text_ids))
    body = SimpleNamespace(model=theirs.llm.model.model)  # vLLM's encoder holds the bare Qwen2Model
    stage = SimpleNamespace(
        model_stage="cosyvoice3_talker",
        model=SimpleNamespace(
            llm=body, speech_embedding=theirs.speech_embedding, sos=theirs.sos, task_id=theirs.task_id
        ),
    )
    speech = theirs.speech_embedding(torch.tensor(PROMPT_SPEECH))
    return CosyVoice3Model.embed_input_ids(stage, input_ids, [speech], is_multimodal).unsqueeze(0)


def _reference_decode_embeds(theirs, token: int) -> torch.Tensor:
    from vllm_omni.model_executor.models.cosyvoice3.cosyvoice3 import CosyVoice3Model

    stage = SimpleNamespace(model_stage="cosyvoice3_talker", model=theirs)
    return CosyVoice3Model.embed_input_ids(stage, torch.tensor([token])).unsqueeze(0)


def _reference_logits(theirs, inputs_embeds: torch.Tensor) -> torch.Tensor:
    """Raw next-token logits: the stock Qwen2 body over the whole sequence (no cache), then the head."""
    hidden = theirs.llm.model.model(inputs_embeds=inputs_embeds).last_hidden_state[:, -1]
    return theirs.llm_decoder(hidden)


def _max_abs_error(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    assert ours.shape == theirs.shape, f"shape {tuple(ours.shape)} != reference {tuple(theirs.shape)}"
    return float((ours.double() - theirs.double()).abs().max())


def test_upstream_state_dict_loads_strictly_and_foreign_keys_are_refused(models):
    theirs, ours = models
    keys = set(theirs.state_dict())
    assert set(ours.state_dict()) == keys
    assert {"speech_embedding.weight", "llm_decoder.weight", "llm.model.model.embed_tokens.weight"} <= keys
    assert "llm_decoder.bias" not in keys and not any(k.startswith("llm_embedding") for k in keys)
    bad = dict(theirs.state_dict())
    bad["llm_decoder.bias"] = torch.zeros(SPEECH_TOKENS + 200)
    with pytest.raises(RuntimeError, match="llm_decoder.bias"):
        ours.load_state_dict(bad, strict=True)


def test_special_ids_follow_the_reference(models):
    theirs, ours = models
    assert (ours.sos, ours.eos_token, ours.task_id, ours.fill_token) == (
        theirs.sos,
        theirs.eos_token,
        theirs.task_id,
        theirs.fill_token,
    )
    assert ours.stop_token_ids == theirs.stop_token_ids


@torch.inference_mode()
def test_prompt_embeddings_and_logits_match_the_reference_over_decode_steps(models_of_each_shape):
    theirs, ours = models_of_each_shape
    ours_embeds = ours.build_prompt_embeds(TEXT, PROMPT_TEXT, PROMPT_SPEECH)
    ref_embeds = _reference_prompt_embeds(theirs)
    assert ours_embeds.shape == (
        1,
        1 + len(PROMPT_TEXT) + len(TEXT) + 1 + len(PROMPT_SPEECH),
        ours.llm_input_size,
    )
    assert _max_abs_error(ours_embeds, ref_embeds) == 0.0

    cache = ours.new_cache()
    logits = ours(ours_embeds, cache)
    assert logits.shape == (1, SPEECH_TOKENS + 200) and logits.dtype == torch.float32
    assert _max_abs_error(logits, _reference_logits(theirs, ref_embeds)) <= TOLERANCE
    for token in DECODED:  # ours extends its KV cache by one position, the reference recomputes
        logits = ours(ours.embed_speech_tokens([token]).unsqueeze(0), cache)
        ref_embeds = torch.cat([ref_embeds, _reference_decode_embeds(theirs, token)], dim=1)
        assert _max_abs_error(logits, _reference_logits(theirs, ref_embeds)) <= TOLERANCE


@torch.inference_mode()
def test_the_torch_backend_decodes_with_it_at_reference_logits(models):
    """`TorchTokenBackend` drives ours as it drives CosyVoice2's LM: its log-probs are the reference's."""
    theirs, ours = models
    ref_embeds = _reference_prompt_embeds(theirs)
    session = TorchTokenBackend(ours).start(ours.build_prompt_embeds(TEXT, PROMPT_TEXT, PROMPT_SPEECH)[0])
    ref_logp = _reference_logits(theirs, ref_embeds).log_softmax(dim=-1)[0]
    assert _max_abs_error(session.logp(), ref_logp) <= TOLERANCE
    session.feed(DECODED[0])
    ref_embeds = torch.cat([ref_embeds, _reference_decode_embeds(theirs, DECODED[0])], dim=1)
    assert (
        _max_abs_error(session.logp(), _reference_logits(theirs, ref_embeds).log_softmax(dim=-1)[0])
        <= TOLERANCE
    )


@pytest.mark.parametrize(
    "stop_id", [SPEECH_TOKENS, SPEECH_TOKENS + 1, SPEECH_TOKENS + 137, SPEECH_TOKENS + 199]
)
@torch.inference_mode()
def test_any_special_id_ends_a_take(models, stop_id):
    """Greedy decoding stops at once when any special id scores highest, not only eos (upstream: any id >=
    6561 stops); below `min_len` the stop ids are avoided and a speech token comes out instead."""
    _, ours = models
    decoder = ours.llm_decoder.weight
    saved = decoder[stop_id].clone()
    try:
        decoder[stop_id] = 0.0
        hidden = ours.llm.step(ours.build_prompt_embeds(TEXT), ours.new_cache())[0]
        decoder[stop_id] = hidden * (1e3 / hidden.norm() ** 2)  # a logit of 1000 at the prompt
        prompt = ours.build_prompt_embeds(TEXT)[0]
        greedy = RasSampling(top_k=1)
        run = dict(max_len=3, sampling=greedy, seed=0, cancel=threading.Event())
        assert list(TorchTokenBackend(ours).generate(prompt, min_len=0, **run)) == []
        forced = list(TorchTokenBackend(ours).generate(prompt, min_len=1, **run))
        assert forced and forced[0] < SPEECH_TOKENS
    finally:
        decoder[stop_id] = saved


def test_bad_inputs_are_refused_with_what_is_wrong(models):
    _, ours = models
    with pytest.raises(ValueError, match=r"speech tokens must be in \[0, 6561\)"):
        ours.build_prompt_embeds(TEXT, PROMPT_TEXT, [5, SPEECH_TOKENS])
    with pytest.raises(ValueError, match=r"speech tokens must be in \[0, 6561\)"):
        ours.embed_speech_tokens(torch.tensor([-1]))
    with pytest.raises(ValueError, match="at least one text token"):
        ours.build_prompt_embeds([], [])
    with pytest.raises(ValueError, match=r"inputs_embeds \[1, L, 64\]"):
        ours(torch.zeros(1, HIDDEN), ours.new_cache())
    with pytest.raises(ValueError, match="hidden_size=64"):
        CosyVoice3LM(32, 32, SPEECH_TOKENS, ours.llm)


@torch.inference_mode()
def test_built_on_meta_and_loaded_by_assignment_it_gives_the_same_logits(models):
    """The loaders' way (no random init): build on `meta`, assign upstream's tensors, recompute the rotary
    frequencies; the rotary buffers are not in `llm.pt`, so without `materialize_buffers` it cannot run."""
    theirs, ours = models
    with torch.device("meta"):
        lazy = CosyVoice3LM(HIDDEN, HIDDEN, SPEECH_TOKENS, Qwen2Encoder(config=ours.llm.model.config))
    lazy.load_state_dict(theirs.state_dict(), strict=True, assign=True)
    lazy.materialize_buffers()
    embeds = lazy.build_prompt_embeds(TEXT, PROMPT_TEXT, PROMPT_SPEECH)
    expected = _reference_logits(theirs, _reference_prompt_embeds(theirs))
    assert _max_abs_error(lazy.eval()(embeds, lazy.new_cache()), expected) <= TOLERANCE


@torch.inference_mode()
def test_the_vllm_export_is_a_stock_qwen2_giving_the_reference_logits(models, tmp_path):
    """vLLM serves CosyVoice3's LM as its stock `Qwen2ForCausalLM`: the export of upstream's llm.pt, read
    back by transformers' stock class of that name, gives the reference's logits on the prompt, and decoded
    ids fed back through its token embedding (the speech embedding) give them at every step."""
    from transformers import AutoModelForCausalLM

    from studio.tts.llm.vllm.export import export_for_vllm
    from studio.tts.llm.vllm.plugin import STOCK_ARCHITECTURE

    theirs, _ = models
    torch.save(theirs.state_dict(), tmp_path / "llm.pt")
    folder = export_for_vllm(
        tmp_path / "llm.pt",
        theirs.llm.model.config.to_dict(),
        root=tmp_path / "cache",
        dtype="float32",
        architecture=STOCK_ARCHITECTURE,
    )
    stock = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    assert type(stock).__name__ == "Qwen2ForCausalLM" and stock.lm_head.bias is None
    ref_embeds = _reference_prompt_embeds(theirs)
    embeds = ref_embeds
    for token in [None, *DECODED]:
        if token is not None:
            embeds = torch.cat([embeds, stock.get_input_embeddings()(torch.tensor([[token]]))], dim=1)
            ref_embeds = torch.cat([ref_embeds, _reference_decode_embeds(theirs, token)], dim=1)
        logits = stock(inputs_embeds=embeds).logits[:, -1]
        assert _max_abs_error(logits, _reference_logits(theirs, ref_embeds)) <= TOLERANCE
