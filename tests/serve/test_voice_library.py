"""The voice library under concurrency and hostile ids, without a server: saves of one name take turns (the
second is refused, even when both looked before either wrote), ids match exactly, names are checked."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from studio.voices import VoiceError, VoiceExistsError, VoiceLibrary

TONE = 0.1 * np.sin(np.arange(16000) / 5.0).astype(np.float32)


def test_concurrent_saves_of_one_name_make_one_voice(tmp_path, monkeypatch):
    library = VoiceLibrary(tmp_path)
    real_list = VoiceLibrary.list

    def slow_list(self):  # every save looks, then waits: without a claim both would write
        found = real_list(self)
        time.sleep(0.2)
        return found

    monkeypatch.setattr(VoiceLibrary, "list", slow_list)
    outcomes: list[str] = []

    def save() -> None:
        try:
            outcomes.append(library.save("Anna", TONE, 16000).slug)
        except VoiceExistsError:
            outcomes.append("exists")

    threads = [threading.Thread(target=save) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["anna", "exists", "exists", "exists"]
    assert [v.name for v in real_list(library)] == ["Anna"]


def test_ids_match_exactly(tmp_path):
    library = VoiceLibrary(tmp_path / "voices")
    library.save("Narrator", TONE, 16000)
    assert library.get("narrator").name == "Narrator"
    for wrong in ("NARRATOR", "Narrator", "narrator!!", "../voices/narrator", "narrator/", ".", ""):
        with pytest.raises(VoiceError):
            library.get(wrong)
        with pytest.raises(VoiceError):
            library.delete(wrong)
    assert [v.slug for v in library.list()] == ["narrator"]


@pytest.mark.parametrize("name", ["a\x00b", "tab\there", "x" * 101, "\ud800", "   "])
def test_names_are_checked(tmp_path, name):
    with pytest.raises(VoiceError):
        VoiceLibrary(tmp_path).save(name, TONE, 16000)
