"""Protocol: every message pickles (it crosses a spawn pipe) and bad requests fail with clear errors."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from studio.engine import protocol as p


def _messages():
    wav = np.linspace(-0.5, 0.5, 800, dtype=np.float64)
    stats = p.TakeStats(0.2, 1.0, 2.0, 0.5, 50, 3, "pytorch", False, {"llm": 0.4})
    return [
        p.LoadModel("/m", backend="vllm", vllm_options={"max_num_seqs": 4}),
        p.Synthesize("Hello.", prompt_wav=wav, prompt_sr=16000, prompt_text="hi", seed=3),
        p.Cancel("abc"),
        p.Shutdown(),
        p.Hello(p.PROTOCOL_VERSION, 1, "0.1", "3.11"),
        p.State(p.EngineState.READY, "ok", backend="pytorch", load_seconds=1.0, warmup_seconds=0.5),
        p.Progress("abc", "half", 0.5),
        p.TakeQueued("abc", "other takes are using it"),
        p.AudioChunk("abc", 0, np.ones(10, dtype=np.float32)),
        p.TakeFinished("abc", stats),
        p.Error(None, "boom", "Traceback ..."),
    ]


@pytest.mark.parametrize("message", _messages(), ids=lambda m: type(m).__name__)
def test_messages_pickle_round_trip(message):
    copy = pickle.loads(pickle.dumps(message))
    assert type(copy) is type(message)
    for name, value in vars(message).items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(getattr(copy, name), value)
        else:
            assert getattr(copy, name) == value


def test_synthesize_normalises_prompt_and_is_frozen():
    request = p.Synthesize("Hi.", prompt_wav=[0.1, 0.2], prompt_sr=24000, prompt_text="x")
    assert request.prompt_wav.dtype == np.float32 and len(request.request_id) == 12
    with pytest.raises(AttributeError):
        request.text = "other"  # frozen
    assert (
        p.Synthesize("Hi.", voice_id="alice").request_id != p.Synthesize("Hi.", voice_id="alice").request_id
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"text": "  "}, "text is empty"),
        ({"text": "a", "mode": "sing"}, "mode"),
        ({"text": "a"}, "prompt audio"),
        ({"text": "a", "prompt_wav": np.zeros(5)}, "prompt_sr"),
        ({"text": "a", "prompt_wav": np.zeros((2, 5)), "prompt_sr": 16000}, "mono"),
        ({"text": "a", "prompt_wav": np.zeros(5), "prompt_sr": 16000}, "transcript"),
        ({"text": "a", "voice_id": "v", "mode": "instruct"}, "instruction"),
        ({"text": "a", "voice_id": "v", "speed": 9.0}, "speed"),
        ({"text": "a", "voice_id": "v", "exact_speech_tokens": 0}, "exact_speech_tokens"),
    ],
)
def test_bad_requests_are_rejected_with_a_reason(kwargs, message):
    with pytest.raises(ValueError, match=message):
        p.Synthesize(**kwargs)


def test_load_model_checks_backend():
    with pytest.raises(ValueError, match="backend"):
        p.LoadModel("/m", backend="tensorrt")
