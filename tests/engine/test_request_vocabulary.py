"""One vocabulary for a take: the GUI's request, the engine protocol and the runtime spec agree on modes,
and the same defect is refused with the same field wherever it is caught."""

from __future__ import annotations

import numpy as np
import pytest

from studio.engine.protocol import Synthesize
from studio.request import Mode, RequestError, validate_take
from studio.tts.errors import SynthesisError
from studio.tts.synthesis import SynthesisSpec


@pytest.mark.parametrize(
    ("spelling", "mode"),
    [
        ("zero-shot", Mode.ZERO_SHOT),
        ("zero_shot", Mode.ZERO_SHOT),
        ("Cross-Lingual", Mode.CROSS_LINGUAL),
        ("instruct2", Mode.INSTRUCT),
        (Mode.INSTRUCT, Mode.INSTRUCT),
    ],
)
def test_every_spelling_in_use_names_one_mode(spelling, mode):
    assert Mode.parse(spelling) is mode


def test_an_unknown_mode_names_the_field():
    with pytest.raises(RequestError) as caught:
        Mode.parse("sing")
    assert caught.value.field == "mode" and "zero-shot" in str(caught.value)


def test_modes_keep_their_upstream_names():
    assert [m.upstream_name for m in Mode] == ["zero_shot", "cross_lingual", "instruct2"]


WAV = np.zeros(1600, np.float32)
BAD_TAKES = [
    ("text", dict(text="  ")),
    ("mode", dict(mode="sing")),
    ("prompt_wav", dict(prompt=False)),
    ("prompt_text", dict(mode="zero-shot", prompt_text="")),
    ("instruct", dict(mode="instruct", instruct="")),
    ("speed", dict(speed=9.0)),
    ("exact_speech_tokens", dict(exact_speech_tokens=0)),
]


def _take(**changes):
    take = dict(text="Hello.", mode="cross-lingual", prompt=True, prompt_text="", instruct="", speed=1.0)
    take["exact_speech_tokens"] = None
    take.update(changes)
    return take


@pytest.mark.parametrize(("field", "changes"), BAD_TAKES, ids=[f for f, _ in BAD_TAKES])
def test_protocol_and_runtime_refuse_the_same_take_naming_the_same_field(field, changes):
    take = _take(**changes)
    with pytest.raises(RequestError) as by_protocol:
        Synthesize(
            take["text"], mode=take["mode"], prompt_wav=WAV if take["prompt"] else None, prompt_sr=16000,
            prompt_text=take["prompt_text"], instruct=take["instruct"], speed=take["speed"],
            exact_speech_tokens=take["exact_speech_tokens"],
        )  # fmt: skip
    spec = SynthesisSpec(
        take["text"], mode=take["mode"], prompt_wav=WAV if take["prompt"] else None, prompt_sr=16000,
        prompt_text=take["prompt_text"], instruct_text=take["instruct"], speed=take["speed"],
        exact_speech_tokens=take["exact_speech_tokens"],
    )  # fmt: skip
    with pytest.raises(SynthesisError) as by_runtime:
        spec.validate()
    assert by_protocol.value.field == by_runtime.value.field == field
    assert str(by_protocol.value) == str(by_runtime.value)


def test_a_valid_take_passes_and_its_mode_is_normalised():
    request = Synthesize("Hi.", mode="instruct2", voice_id="v", instruct="calm")
    assert request.mode is Mode.INSTRUCT
    assert validate_take(text="Hi.", mode="zero_shot", has_prompt_audio=False, voice="v") is Mode.ZERO_SHOT


def test_the_protocol_request_survives_pickling_with_its_mode():
    import pickle

    request = Synthesize("Hi.", mode="cross-lingual", prompt_wav=WAV, prompt_sr=16000)
    again = pickle.loads(pickle.dumps(request))
    assert again.mode is Mode.CROSS_LINGUAL and again.request_id == request.request_id
