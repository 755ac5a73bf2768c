"""Parity of Qwen2LM and RAS sampling with the reference CosyVoice2 code on the same random weights."""

from __future__ import annotations

import functools

import pytest
import torch

from studio.tts.llm.model import Qwen2Encoder, Qwen2LM
from studio.tts.llm.sampling import RasSampling
from studio.tts.llm.torch_backend import TorchTokenBackend
from tests.parity.conftest import relative_error

pytestmark = pytest.mark.parity

SPEECH_TOKEN_SIZE = 6561
HIDDEN = 128


def _tiny_qwen2_config():
    from transformers import Qwen2Config

    return Qwen2Config(
        hidden_size=HIDDEN,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        intermediate_size=256,
        vocab_size=600,
        max_position_embeddings=512,
        tie_word_embeddings=True,
    )


@pytest.fixture(scope="module")
def models(reference, tmp_path_factory):
    """The reference Qwen2LM (backbone via from_pretrained) and ours loaded strictly from its state dict."""
    from cosyvoice.llm.llm import Qwen2Encoder as RefEncoder
    from cosyvoice.llm.llm import Qwen2LM as RefLM
    from cosyvoice.utils.common import ras_sampling
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("blanken")
    Qwen2ForCausalLM(_tiny_qwen2_config()).save_pretrained(folder)
    sampling = functools.partial(ras_sampling, top_p=0.8, top_k=25, win_size=10, tau_r=0.1)
    theirs = RefLM(HIDDEN, HIDDEN, SPEECH_TOKEN_SIZE, RefEncoder(str(folder)), sampling).eval()
    ours = Qwen2LM(HIDDEN, HIDDEN, SPEECH_TOKEN_SIZE, Qwen2Encoder(pretrain_path=folder), RasSampling())
    ours.load_state_dict(theirs.state_dict(), strict=True)
    return theirs, ours.eval()


def _reference_logp(theirs, lm_input: torch.Tensor) -> torch.Tensor:
    """Reference next-token log-probs: its own one-step forward over the whole sequence, no cache."""
    mask = torch.tril(torch.ones((1, lm_input.shape[1], lm_input.shape[1]), dtype=torch.bool))
    hidden, _ = theirs.llm.forward_one_step(lm_input, masks=mask, cache=None)
    return theirs.llm_decoder(hidden[:, -1]).log_softmax(dim=-1)[0]


def test_reference_state_dict_loads_strictly_and_rejects_foreign_keys(models):
    theirs, ours = models
    assert set(ours.state_dict()) == set(theirs.state_dict())
    bad = dict(theirs.state_dict())
    bad["llm_decoder.extra"] = torch.zeros(1)
    with pytest.raises(RuntimeError, match="llm_decoder.extra"):
        ours.load_state_dict(bad, strict=True)


@torch.inference_mode()
def test_next_token_logp_matches_reference_first_step_and_after_forced_tokens(models):
    theirs, ours = models
    text, prompt_text, prompt_speech = [5, 17, 42, 99, 3], [7, 8], [10, 200, 6000, 31]
    ours_embeds = ours.build_prompt_embeds(
        torch.tensor([text]), torch.tensor([prompt_text]), torch.tensor([prompt_speech])
    )
    ref_text = theirs.llm.model.model.embed_tokens(torch.tensor([prompt_text + text]))
    ref_input = torch.cat(
        [
            theirs.llm_embedding.weight[0].reshape(1, 1, -1),
            ref_text,
            theirs.llm_embedding.weight[1].reshape(1, 1, -1),
            theirs.speech_embedding(torch.tensor([prompt_speech])),
        ],
        dim=1,
    )
    assert relative_error(ours_embeds, ref_input) == 0.0

    session = TorchTokenBackend(ours).start(ours_embeds[0])
    assert relative_error(session.logp(), _reference_logp(theirs, ref_input)) <= 1e-4
    for token in (123, 6560, 0, 4000):  # forced tokens go through our KV cache, the reference recomputes
        session.feed(token)
        ref_input = torch.cat([ref_input, theirs.speech_embedding.weight[token].reshape(1, 1, -1)], dim=1)
        assert relative_error(session.logp(), _reference_logp(theirs, ref_input)) <= 1e-4


def test_length_bounds_and_stop_ids_follow_upstream(models):
    _, ours = models
    # 12 text tokens fed to the LM, 4 of them prompt text -> 8 target tokens
    assert ours.length_bounds(12, 4) == (16, 160)
    assert ours.stop_token_ids == [6561, 6562, 6563]
    with pytest.raises(ValueError):
        ours.length_bounds(3, 4)


@pytest.mark.parametrize("decoded", [[], [1, 2, 3], [7] * 10])
def test_ras_sampling_draws_the_same_token_as_reference(reference, decoded):
    from cosyvoice.utils.common import ras_sampling

    ours = RasSampling(top_p=0.8, top_k=25, win_size=10, tau_r=0.1)
    logits = torch.randn(6564, generator=torch.Generator().manual_seed(1)) * 3
    logp = logits.log_softmax(dim=0)
    logp[7] = logp.max() + 1.0  # make 7 likely, so a long run of 7s triggers the repetition fallback
    logp = logp.log_softmax(dim=0)
    for seed in range(20):
        torch.manual_seed(seed)
        theirs = int(ras_sampling(logp, decoded, 25, top_p=0.8, top_k=25, win_size=10, tau_r=0.1))
        assert ours.sample(logp, decoded, torch.Generator().manual_seed(seed)) == theirs
