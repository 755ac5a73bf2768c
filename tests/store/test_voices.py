"""The voice library keeps named voices (cleaned prompt, original, transcript) the engine can load by id."""

from __future__ import annotations

import numpy as np
import pytest

from studio.voices import VoiceError, VoiceLibrary, slugify


def test_save_list_load_and_delete(tmp_path):
    library = VoiceLibrary(tmp_path / "voices")
    prompt = (0.1 * np.sin(np.arange(16000 * 3) * 0.05)).astype(np.float32)
    original = np.zeros(48000 * 4, dtype=np.float32)
    voice = library.save("Ann Smith", prompt, 16000, " Hello there. ", original, 48000)
    assert voice.slug == "ann-smith" and voice.transcript == "Hello there." and voice.duration_s == 3.0
    assert [v.name for v in VoiceLibrary(tmp_path / "voices").list()] == ["Ann Smith"]
    audio, rate, transcript = library.load_prompt("ann-smith")
    np.testing.assert_array_equal(audio, prompt)
    assert (rate, transcript) == (16000, "Hello there.")
    assert (tmp_path / "voices" / "ann-smith" / "original.wav").exists()
    with pytest.raises(VoiceError, match="already exists"):
        library.save("ann smith", prompt, 16000)
    library.save("ann smith", prompt[:16000], 16000, "Hi", overwrite=True)
    assert library.get("ann-smith").transcript == "Hi"
    library.delete("ann-smith")
    assert library.list() == []
    with pytest.raises(VoiceError, match="no saved voice"):
        library.load_prompt("ann-smith")


def test_names_cannot_escape_the_library_and_bad_input_is_refused(tmp_path):
    assert slugify("../../etc/passwd") == "etc-passwd"
    assert slugify("   ") == "voice"
    library = VoiceLibrary(tmp_path)
    with pytest.raises(VoiceError, match="name"):
        library.save(" ", np.ones(10, dtype=np.float32), 16000)
    with pytest.raises(VoiceError, match="audio"):
        library.save("x", np.zeros(0, dtype=np.float32), 16000)
