"""Parity of the flow (encoder, estimator, flow-matching sampler) with the reference on the same weights."""

from __future__ import annotations

import pytest
import torch

from studio.tts.flow import (
    CausalConditionalCFM,
    CausalConditionalDecoder,
    CausalMaskedDiffWithXvec,
    UpsampleConformerEncoder,
)
from tests.parity.conftest import relative_error
from tests.tts.small_modules import CFM_PARAMS, ENCODER_KWARGS, ESTIMATOR_KWARGS, FLOW_KWARGS, flow_inputs

pytestmark = [pytest.mark.parity, pytest.mark.filterwarnings("ignore:.*LoRACompatibleLinear:FutureWarning")]

TOLERANCE = 1e-4
PROMPT_TOKENS, TOKENS = 12, 40  # 52 tokens, 104 frames: longer than one streaming chunk (25 / 50)


def _build(encoder_cls, cfm_cls, estimator_cls, flow_cls, cfm_params):
    decoder = cfm_cls(
        in_channels=240,
        n_spks=1,
        spk_emb_dim=80,
        cfm_params=cfm_params,
        estimator=estimator_cls(**ESTIMATOR_KWARGS),
    )
    return flow_cls(**FLOW_KWARGS, encoder=encoder_cls(**ENCODER_KWARGS), decoder=decoder)


@pytest.fixture(scope="module")
def flows(reference):
    """The reference flow with seeded random weights, and ours loaded strictly from its state dict."""
    from cosyvoice.flow.decoder import CausalConditionalDecoder as RefDecoder
    from cosyvoice.flow.flow import CausalMaskedDiffWithXvec as RefFlow
    from cosyvoice.flow.flow_matching import CausalConditionalCFM as RefCFM
    from cosyvoice.transformer.upsample_encoder import UpsampleConformerEncoder as RefEncoder
    from omegaconf import DictConfig

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(11)
        theirs = _build(RefEncoder, RefCFM, RefDecoder, RefFlow, DictConfig(CFM_PARAMS)).eval()
        # random (non-zero) biases and norms, so every parameter's role is exercised
        with torch.no_grad():
            for name, param in theirs.named_parameters():
                if name.endswith("bias") or ".norm" in name:
                    param.add_(0.1 * torch.randn_like(param))
    ours = _build(
        UpsampleConformerEncoder,
        CausalConditionalCFM,
        CausalConditionalDecoder,
        CausalMaskedDiffWithXvec,
        dict(CFM_PARAMS),
    )
    ours.load_state_dict(theirs.state_dict(), strict=True)
    return theirs, ours.eval()


@pytest.fixture(scope="module")
def inputs():
    return flow_inputs(TOKENS, PROMPT_TOKENS, seed=5)


def test_state_dict_keys_match_and_foreign_keys_are_rejected(flows):
    theirs, ours = flows
    assert set(ours.state_dict()) == set(theirs.state_dict())
    bad = dict(theirs.state_dict())
    bad["decoder.estimator.extra"] = torch.zeros(1)
    with pytest.raises(RuntimeError, match="decoder.estimator.extra"):
        ours.load_state_dict(bad, strict=True)


@pytest.mark.parametrize("streaming", [False, True])
def test_encoder_output_matches_reference(flows, streaming):
    theirs, ours = flows
    xs = torch.randn(1, PROMPT_TOKENS + TOKENS, 512, generator=torch.Generator().manual_seed(3))
    lens = torch.tensor([xs.shape[1]])
    context = torch.randn(1, 3, 512, generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        expected, expected_mask = theirs.encoder(xs, lens, streaming=streaming)
        got, got_mask = ours.encoder(xs, lens, streaming=streaming)
        expected_ctx, _ = theirs.encoder(xs, lens, context=context, streaming=streaming)
        got_ctx, _ = ours.encoder(xs, lens, context=context, streaming=streaming)
    assert got.shape == (1, 2 * xs.shape[1], 512)
    assert torch.equal(got_mask, expected_mask)
    assert relative_error(got, expected) <= TOLERANCE
    assert relative_error(got_ctx, expected_ctx) <= TOLERANCE
    assert relative_error(got_ctx, got) > 1e-3  # the lookahead context really changes the tail


@pytest.mark.parametrize(("streaming", "finalize"), [(False, True), (True, False)])
def test_flow_mel_matches_reference(flows, inputs, streaming, finalize):
    theirs, ours = flows
    expected, _ = theirs.inference(**inputs, streaming=streaming, finalize=finalize)
    got, cache = ours.inference(**inputs, streaming=streaming, finalize=finalize)
    frames = 2 * (TOKENS if finalize else TOKENS - 3)
    assert cache is None
    assert got.dtype == torch.float32 and got.shape == (1, 80, frames)
    assert relative_error(got, expected) <= TOLERANCE


def test_estimator_streaming_mask_matches_reference(flows):
    """One estimator call with the chunked (streaming) attention mask, on inputs of full random content."""
    theirs, ours = flows
    g = torch.Generator().manual_seed(9)
    frames = 120
    x, mu, cond = (torch.randn(2, 80, frames, generator=g) for _ in range(3))
    mask = torch.ones(2, 1, frames)
    mask[1, :, 100:] = 0  # a padded second row
    t, spks = torch.rand(2, generator=g), torch.randn(2, 80, generator=g)
    with torch.inference_mode():
        for streaming in (False, True):
            expected = theirs.decoder.estimator(x, mask, mu, t, spks, cond, streaming=streaming)
            got = ours.decoder.estimator(x, mask, mu, t, spks, cond, streaming=streaming)
            assert relative_error(got, expected) <= TOLERANCE
