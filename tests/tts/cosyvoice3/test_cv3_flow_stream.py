"""CosyVoice3's incremental flow stream (`DiTFlowStream`) against upstream's streamed re-run.

Upstream's take calls `flow.inference(prompt + every token so far, streaming=True, finalize=...)` at each
hop and keeps the frames after the last hop's; the stream must return exactly those frames (fp32, 1e-5)
for any hop sequence, while keeping only chunk-complete state.
"""

from __future__ import annotations

import math

import pytest
import torch

from studio.tts.cosyvoice3.dit import DiT
from studio.tts.cosyvoice3.flow import CausalMaskedDiffWithDiT, PreLookaheadLayer
from studio.tts.cosyvoice3.flow_stream import DiTFlowStream
from studio.tts.flow.cfm import CausalConditionalCFM

TOLERANCE = 1e-5
SPEECH_TOKENS = 6561
HOP = 25  # tokens per DiT chunk (50 mel frames)
LOOKAHEAD = 3
CFM_PARAMS = {"sigma_min": 1e-06, "solver": "euler", "t_scheduler": "cosine", "inference_cfg_rate": 0.7}
SMALL_DIT = {"dim": 64, "depth": 2, "heads": 4, "dim_head": 16, "ff_mult": 2}


def small_flow(
    dit: dict | None = None, lookahead_channels: int = 64, seed: int = 0
) -> CausalMaskedDiffWithDiT:
    """A CosyVoice3 flow with random weights, cosyvoice3.yaml's layout at the given DiT shape."""
    torch.manual_seed(seed)
    estimator = DiT(
        **(dit or SMALL_DIT),
        mel_dim=80,
        mu_dim=80,
        spk_dim=80,
        out_channels=80,
        static_chunk_size=2 * HOP,
        num_decoding_left_chunks=-1,
    )
    decoder = CausalConditionalCFM(240, CFM_PARAMS, n_spks=1, spk_emb_dim=80, estimator=estimator)
    return CausalMaskedDiffWithDiT(
        input_size=80,
        output_size=80,
        spk_embed_dim=192,
        vocab_size=SPEECH_TOKENS,
        pre_lookahead_len=LOOKAHEAD,
        pre_lookahead_layer=PreLookaheadLayer(80, lookahead_channels, pre_lookahead_len=LOOKAHEAD),
        decoder=decoder,
    ).eval()


def take_inputs(prompt_tokens: int, tokens: int, seed: int = 1) -> dict:
    generator = torch.Generator().manual_seed(seed)
    return {
        "prompt_token": torch.randint(0, SPEECH_TOKENS, (1, prompt_tokens), generator=generator),
        "prompt_feat": torch.randn(1, 2 * prompt_tokens, 80, generator=generator),
        "embedding": torch.randn(1, 192, generator=generator),
        "tokens": torch.randint(0, SPEECH_TOKENS, (1, tokens), generator=generator),
    }


def rerun(flow, inputs: dict, count: int, finalize: bool, n_timesteps: int = 10) -> torch.Tensor:
    """Upstream's streamed call over the prompt and the first `count` tokens."""
    prompt = inputs["prompt_token"]
    mel, _ = flow.inference(
        inputs["tokens"][:, :count],
        torch.tensor([count]),
        prompt,
        torch.tensor([prompt.shape[1]]),
        inputs["prompt_feat"],
        torch.tensor([inputs["prompt_feat"].shape[1]]),
        inputs["embedding"],
        streaming=True,
        finalize=finalize,
        n_timesteps=n_timesteps,
    )
    return mel


def take_schedule(prompt_tokens: int, tokens: int) -> list[int]:
    """Token counts at each call of upstream's take (CosyVoice3Model.tts): the first hop fills the
    prompt's last chunk and one more, later hops double up to 100 tokens, each call with 3 lookahead."""
    counts, offset, hop = [], 0, HOP
    first = math.ceil(prompt_tokens / HOP) * HOP - prompt_tokens + HOP
    while True:
        this_hop = first if offset == 0 else hop
        if offset + this_hop + LOOKAHEAD > tokens:
            return [*counts, tokens]
        counts.append(offset + this_hop + LOOKAHEAD)
        offset += this_hop
        if len(counts) > 1:
            hop = min(4 * HOP, hop * 2)


def stream_against_rerun(flow, inputs: dict, counts: list[int], n_timesteps: int = 10) -> float:
    """Drive a stream through `counts` (the last call finalizes); return the largest difference from the
    re-run's new frames, after checking each call returns exactly the re-run's new frame count."""
    stream = DiTFlowStream(
        flow, inputs["prompt_token"], inputs["prompt_feat"], inputs["embedding"], n_timesteps
    )
    returned, worst = 0, 0.0
    for index, count in enumerate(counts):
        finalize = index == len(counts) - 1
        new = stream.mel(inputs["tokens"][:, :count], finalize)
        expected = rerun(flow, inputs, count, finalize, n_timesteps)[:, :, returned:]
        assert new.dtype == torch.float32
        assert new.shape == expected.shape, f"call {index} ({count} tokens)"
        if new.numel():
            worst = max(worst, (new - expected).abs().max().item())
        returned += new.shape[2]
    return worst


@pytest.fixture(scope="module")
def flow() -> CausalMaskedDiffWithDiT:
    return small_flow()


@pytest.mark.parametrize("prompt_tokens", [7, 25, 31])
def test_stream_equals_the_rerun_on_the_take_schedule(flow, prompt_tokens):
    inputs = take_inputs(prompt_tokens, tokens=330)
    counts = take_schedule(prompt_tokens, 330)
    assert counts[0] == math.ceil(prompt_tokens / HOP) * HOP - prompt_tokens + HOP + LOOKAHEAD
    assert len(counts) >= 4  # several kept chunks before the finalizing call
    assert stream_against_rerun(flow, inputs, counts) <= TOLERANCE


def test_stream_equals_the_rerun_on_hops_that_end_inside_chunks(flow):
    """Unaligned hops: calls end mid-chunk (that chunk is recomputed next call), return one token's two
    frames, return nothing (the same count again), and finalize right after a call."""
    inputs = take_inputs(prompt_tokens=9, tokens=240)
    assert stream_against_rerun(flow, inputs, [4, 30, 31, 31, 77, 78, 160, 240, 240]) <= TOLERANCE


def test_one_finalizing_call_equals_the_offline_streamed_flow(flow):
    inputs = take_inputs(prompt_tokens=11, tokens=170)
    stream = DiTFlowStream(flow, inputs["prompt_token"], inputs["prompt_feat"], inputs["embedding"])
    mel = stream.mel(inputs["tokens"], finalize=True)
    expected = rerun(flow, inputs, 170, finalize=True)
    assert mel.shape == (1, 80, 340)
    assert (mel - expected).abs().max().item() <= TOLERANCE


def test_stream_is_not_the_offline_flow(flow):
    """The chunk mask matters: the same tokens offline (every frame sees every frame) give other frames
    from the second chunk on, so the equalities above are not those of an unmasked flow."""
    inputs = take_inputs(prompt_tokens=5, tokens=120)
    streamed = rerun(flow, inputs, 120, finalize=True)
    prompt = inputs["prompt_token"]
    offline, _ = flow.inference(
        inputs["tokens"],
        torch.tensor([120]),
        prompt,
        torch.tensor([5]),
        inputs["prompt_feat"],
        torch.tensor([10]),
        inputs["embedding"],
        streaming=False,
        finalize=True,
    )
    assert (streamed[:, :, 40:] - offline[:, :, 40:]).abs().max() > 1e-2


def test_state_grows_with_the_kept_frames_and_is_freed(flow):
    inputs = take_inputs(prompt_tokens=5, tokens=400)
    stream = DiTFlowStream(flow, inputs["prompt_token"], inputs["prompt_feat"], inputs["embedding"])
    fixed = stream.state_bytes
    assert fixed > 0  # time modulations, speaker, position-convolution context
    sizes = []
    for count in (48, 148, 348):
        stream.mel(inputs["tokens"][:, :count], finalize=False)
        sizes.append(stream.state_bytes - fixed)
    # keys + values: steps x blocks x rows x 2 x width numbers per frame, at least every frame computed
    per_frame = 10 * SMALL_DIT["depth"] * 2 * 2 * SMALL_DIT["dim"] * 4
    for size, count in zip(sizes, (48, 148, 348), strict=True):
        frames = 2 * (5 + count - LOOKAHEAD)
        assert frames * per_frame <= size <= 2 * frames * per_frame
    assert sizes[0] < sizes[1] < sizes[2]
    stream.close()
    assert stream.state_bytes == 0
    with pytest.raises(RuntimeError, match="closed"):
        stream.mel(inputs["tokens"][:, :360], finalize=True)


def test_finalize_frees_the_state_and_bad_calls_are_refused(flow):
    inputs = take_inputs(prompt_tokens=5, tokens=60)
    stream = DiTFlowStream(flow, inputs["prompt_token"], inputs["prompt_feat"], inputs["embedding"])
    with pytest.raises(ValueError, match="at least 3 tokens"):
        stream.mel(inputs["tokens"][:, :2], finalize=False)
    stream.mel(inputs["tokens"][:, :40], finalize=False)
    with pytest.raises(ValueError, match="only grow: got 39 after 40"):
        stream.mel(inputs["tokens"][:, :39], finalize=False)
    stream.mel(inputs["tokens"], finalize=True)
    assert stream.state_bytes == 0
    with pytest.raises(RuntimeError, match="closed"):
        stream.mel(inputs["tokens"], finalize=True)
    with pytest.raises(ValueError, match="5 prompt tokens need"):
        DiTFlowStream(flow, inputs["prompt_token"], inputs["prompt_feat"][:, :-1], inputs["embedding"])


def test_stream_runs_in_the_flows_half_precision():
    """fp16 (what the loader gives a CUDA flow): the state is held in fp16, only the mel is float32, and
    the frames follow the fp16 re-run within half-precision rounding."""
    flow = small_flow().half()
    inputs = take_inputs(prompt_tokens=6, tokens=110)
    inputs["prompt_feat"] = inputs["prompt_feat"].half()
    stream = DiTFlowStream(flow, inputs["prompt_token"], inputs["prompt_feat"], inputs["embedding"])
    first = stream.mel(inputs["tokens"][:, :47], finalize=False)
    assert stream._state.keys.dtype == torch.float16 and stream._state.position_left.dtype == torch.float16
    rest = stream.mel(inputs["tokens"], finalize=True)
    expected = rerun(flow, inputs, 110, finalize=True)
    streamed = torch.cat([first, rest], dim=2)
    assert streamed.dtype == torch.float32 and streamed.shape == expected.shape
    # here 6e-3 on frames up to 4.8, as far as the fp16 re-run itself lies from the fp32 one (7e-3)
    assert (streamed - expected).abs().max().item() <= 2e-2


def test_stream_equals_the_rerun_at_the_official_width():
    """cosyvoice3.yaml's DiT (22 blocks of 1024, 16 heads) and lookahead width, 2 Euler steps: a first
    call that ends on a chunk boundary, then a finalizing one past it."""
    flow = small_flow({"dim": 1024, "depth": 22, "heads": 16, "dim_head": 64, "ff_mult": 2}, 1024)
    inputs = take_inputs(prompt_tokens=3, tokens=30)
    assert stream_against_rerun(flow, inputs, [25, 30], n_timesteps=2) <= TOLERANCE
