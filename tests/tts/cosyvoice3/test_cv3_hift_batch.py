"""CosyVoice3's vocoder pushes batched across takes (studio.tts.cosyvoice3.hift_batch): every take gets what
its own `CausalHiftStream.push` gives, and on the flow's scheduler the takes' chunks are vocoded in one push."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from studio.tts.cosyvoice3 import hift_batch
from studio.tts.cosyvoice3.flow_scheduler import DiTFlowScheduler
from studio.tts.cosyvoice3.flow_stream import DiTFlowStream
from studio.tts.cosyvoice3.hift_batch import HiftPush, push_many, vocode_pushes
from studio.tts.cosyvoice3.hift_stream import CausalHiftStream
from studio.tts.synthesis import SynthesisSpec
from tests.tts.cosyvoice3 import test_cv3_hift_stream
from tests.tts.cosyvoice3.test_cv3_takes import FixedTokens, _tokens, voice

__all__ = ["voice"]  # the module-scoped tiny CosyVoice3 fixture, shared

hift = test_cv3_hift_stream.hift  # the fixture: a small HiFT with weights that reach every path
TOLERANCE = 1e-5
SR = 16000

# each take's pushes (frames); the last finalizes. Lengths differ, as do hops, first and empty pushes
SCHEDULES = [
    [37, 2, 50, 13, 58],
    [1, 1, 1, 1, 1, 1, 1, 1, 1, 50, 1, 99],
    [20, 0, 30, 0, 100, 10, 0],
    [160],
    [120, 40],
    [9, 9, 0, 0, 0],
    [3, 7, 5, 9, 4, 8, 6, 2, 10, 5, 7, 3, 9, 6, 8, 4, 5, 7, 6, 9],
]


def _mel(frames: int, seed: int) -> torch.Tensor:
    return torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(seed))


def _pushes(schedule: list[int], seed: int) -> list[tuple[torch.Tensor, bool]]:
    mel = _mel(sum(schedule), seed)
    starts = np.cumsum([0, *schedule])
    return [
        (mel[:, :, start : start + size], index == len(schedule) - 1)
        for index, (start, size) in enumerate(zip(starts, schedule, strict=False))
    ]


@pytest.fixture(params=[False, True], ids=["eager", "graphs"])
def batched_network(request, hift):
    """The batched pushes' network eager, or through `SpectrumGraphs` (the tests' replaying capture: shapes
    eager once, then captured and replayed, padded to the CUDA path's buckets)."""
    from tests.tts.test_encoder_graphs import replaying_capture

    graphs = hift_batch.attach_hift_graphs(hift, request.param, capture=replaying_capture)
    yield graphs
    hift_batch.attach_hift_graphs(hift, enabled=False)


def test_batched_pushes_equal_each_takes_own(hift, batched_network):
    """Seven takes pushed step by step in one batch per step (a take that has ended leaves the batch):
    each push's samples equal its own stream's push, and the streams' states end the same."""
    takes = [_pushes(schedule, seed) for seed, schedule in enumerate(SCHEDULES)]
    alone = [CausalHiftStream(hift) for _ in takes]
    together = [CausalHiftStream(hift) for _ in takes]
    worst, compared = 0.0, 0
    for step in range(max(len(pushes) for pushes in takes)):
        due = [index for index, pushes in enumerate(takes) if step < len(pushes)]
        batch = [HiftPush(together[index], *takes[index][step]) for index in due]
        batched = push_many(batch)
        for index, got in zip(due, batched, strict=True):
            expected = alone[index].push(*takes[index][step])
            assert got.shape == expected.shape, f"take {index}, push {step}"
            assert got.dtype == torch.float32
            if expected.numel():
                worst = max(worst, float((got - expected).abs().max()))
                compared += 1
            assert together[index].last_network_frames == alone[index].last_network_frames
            assert together[index].last_f0_frames == alone[index].last_f0_frames
    assert compared > 30
    assert worst <= TOLERANCE
    assert all(stream.state_bytes == 0 for stream in together)  # every take finalized
    if batched_network is not None:
        assert batched_network.captures >= 1


@torch.inference_mode()
def test_right_padding_would_change_a_finalizing_push_were_its_edges_not_its_own(hift):
    """The check above can fail: a finalizing take's last samples depend on the right edge, which a longer
    take in the batch pads (decoded as one padded window, its last frame's samples differ)."""
    short, long_ = CausalHiftStream(hift), CausalHiftStream(hift)
    short.accept(_mel(30, 1), True)
    long_.accept(_mel(90, 2), True)
    for stream in (short, long_):
        stream.take_f0(hift.predict_f0(stream.f0_request().mel, True), stream.f0_request())
    windows = [short.network_window(), long_.network_window()]
    own = hift.decode(windows[0].mel, windows[0].source)
    padded_mel = torch.nn.functional.pad(windows[0].mel, (0, 60))
    padded_source = torch.nn.functional.pad(windows[0].source, (0, 60 * hift.upsample_scale))
    naive = hift.decode(padded_mel, padded_source)[:, : own.shape[1]]
    assert float((naive - own).abs().max()) > 1e-3
    mine = hift_batch.decode_many(hift, [w.mel for w in windows], [w.source for w in windows])[0]
    assert float((mine - own).abs().max()) <= TOLERANCE


def test_a_failing_push_fails_alone(hift):
    """A closed stream, a finalized one and a mel of the wrong shape each get their own error; the other
    takes of the batch get their samples."""
    closed, finalized, good, misshapen = (CausalHiftStream(hift) for _ in range(4))
    closed.close()
    finalized.push(_mel(20, 1), True)
    reference = CausalHiftStream(hift)
    mel = _mel(40, 2)
    results = vocode_pushes(
        [
            HiftPush(closed, mel, False),
            HiftPush(good, mel, False),
            HiftPush(finalized, mel, False),
            HiftPush(misshapen, mel[:, :40], False),
        ]
    )
    assert isinstance(results[0], RuntimeError) and "closed" in str(results[0])
    assert isinstance(results[2], RuntimeError) and "finalized" in str(results[2])
    assert isinstance(results[3], ValueError) and "mel must be" in str(results[3])
    torch.testing.assert_close(results[1], reference.push(mel, False), rtol=0, atol=TOLERANCE)
    assert misshapen.state.frames == 0  # an invalid push leaves its take untouched
    with pytest.raises(RuntimeError, match="closed"):
        push_many([HiftPush(good, mel, True), HiftPush(closed, mel, True)])
    with pytest.raises(ValueError, match="once per batch"):
        vocode_pushes([HiftPush(good, mel, True), HiftPush(good, mel, True)])


# -- on the flow's scheduler, through the tiny CosyVoice3 -------------------------------------------------
@pytest.fixture(scope="module")
def prompt_wav():
    t = np.arange(int(2.0 * SR)) / SR
    return (0.3 * np.sin(2 * np.pi * 150 * t) * (1 + 0.5 * np.sin(2 * np.pi * 2 * t))).astype(np.float32)


def test_scheduled_takes_vocoded_together_equal_their_own(voice, prompt_wav, monkeypatch):
    """Four streamed takes (different lengths, one slowed down) at once on the scheduler (forced on the CPU):
    their chunks are vocoded in shared batches and each take's audio equals the take run alone."""
    takes = [(_tokens(130, 21), 1.0), (_tokens(90, 22), 1.0), (_tokens(170, 23), 0.8), (_tokens(60, 24), 1.0)]

    def take(tokens_and_speed):
        tokens, speed = tokens_and_speed
        spec = SynthesisSpec(
            text="One line.", mode="cross_lingual", prompt_wav=prompt_wav, prompt_sr=SR, stream=True,
            speed=speed, token_backend=FixedTokens(tokens),
        )  # fmt: skip
        chunks = list(voice.synthesize(spec))
        return torch.cat([chunk["tts_speech"] for chunk in chunks], dim=1)

    alone = [take(spec) for spec in takes]
    sizes: list[int] = []
    batched = hift_batch.vocode_pushes

    def counted(pushes):
        sizes.append(len(pushes))
        return batched(pushes)

    monkeypatch.setattr("studio.tts.cosyvoice3.flow_scheduler.vocode_pushes", counted)
    monkeypatch.setenv("STUDIO_FLOW_SCHEDULER", "1")
    scheduler = voice.model.flow._dit_flow_scheduler = DiTFlowScheduler(gather_seconds=0.5)
    with ThreadPoolExecutor(len(takes)) as pool:
        together = list(pool.map(take, takes))
    scheduler.close()
    assert max(sizes) > 1, f"no vocoder batch held two takes: {sizes}"
    assert sum(sizes) == scheduler.stats()["calls"]
    for mine, theirs in zip(together, alone, strict=True):
        assert mine.shape == theirs.shape
        torch.testing.assert_close(mine, theirs, rtol=0, atol=TOLERANCE)


def test_a_scheduled_push_that_fails_fails_alone(voice, prompt_wav):
    """Two takes' chunks in one scheduler batch: the take whose vocoder stream is closed gets its error, the
    other its samples (equal to its own stream's)."""
    tokens, feat, embedding = voice._prompt_features(prompt_wav, SR)
    prompt = torch.tensor([tokens], dtype=torch.int32)
    flow, hift = voice.model.flow, voice.model.hift
    chunk = torch.tensor([_tokens(60, 31)], dtype=torch.int32)
    reference = CausalHiftStream(hift).push(
        DiTFlowStream(flow, prompt, feat, embedding, prompt_cache=None).mel(chunk, True), True
    )
    scheduler = DiTFlowScheduler(max_takes=2, gather_seconds=5.0)
    broken = CausalHiftStream(hift)
    broken.close()
    vocoders = [CausalHiftStream(hift), broken]
    outcomes: list[object] = [None, None]
    started = threading.Barrier(2)

    def take(index: int) -> None:
        stream = DiTFlowStream(flow, prompt, feat, embedding, prompt_cache=None)
        started.wait()
        try:
            outcomes[index] = scheduler.render_speech(stream, chunk, True, vocoders[index])
        except Exception as error:  # noqa: BLE001 - checked below
            outcomes[index] = error

    threads = [threading.Thread(target=take, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    scheduler.close()
    assert scheduler.stats()["largest_batch"] == 2
    assert isinstance(outcomes[1], RuntimeError) and "closed" in str(outcomes[1])
    assert outcomes[0].hift_seconds > 0
    torch.testing.assert_close(outcomes[0].speech, reference, rtol=0, atol=TOLERANCE)


def test_the_loaders_cuda_graphs_give_a_causal_hift_its_batched_network_graphs(hift):
    from studio.tts.loader import attach_cuda_graphs

    attach_cuda_graphs(None, hift)
    try:
        assert isinstance(hift.spectrum_graphs, hift_batch.SpectrumGraphs)
        assert hift.graphs is None  # CosyVoice2's chunk graphs: not a causal HiFT's
    finally:
        attach_cuda_graphs(None, hift, enabled=False)
    assert hift.spectrum_graphs is None


def test_a_failing_graphed_network_falls_back_to_eager(hift, monkeypatch, caplog):
    from tests.tts.test_encoder_graphs import replaying_capture

    graphs = hift_batch.attach_hift_graphs(hift, capture=replaying_capture)
    try:
        assert graphs is hift.spectrum_graphs
        monkeypatch.setattr(
            hift_batch.SpectrumGraphs, "__call__", lambda self, *a: 1 / 0
        )  # the graph path fails
        takes = [_pushes(schedule, seed) for seed, schedule in enumerate(SCHEDULES[:3])]
        alone = [CausalHiftStream(hift) for _ in takes]
        together = [CausalHiftStream(hift) for _ in takes]
        for step in range(2):
            batched = push_many([HiftPush(together[i], *takes[i][step]) for i in range(len(takes))])
            for i, got in enumerate(batched):
                expected = alone[i].push(*takes[i][step])
                assert got.shape == expected.shape
                if expected.numel():
                    assert float((got - expected).abs().max()) <= TOLERANCE
        assert hift.spectrum_graphs is None and "running it eagerly from now on" in caplog.text
    finally:
        hift_batch.attach_hift_graphs(hift, enabled=False)
