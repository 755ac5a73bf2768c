"""The voice library under concurrency and hostile ids, without a server: saves of one name take turns (the
second is refused, even when both looked before either wrote), ids match exactly, names are checked."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from studio.voices import AliasTakenError, VoiceError, VoiceExistsError, VoiceLibrary, VoiceNotFoundError

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


def test_aliases_persist_are_unique_and_fold_case(tmp_path):
    library = VoiceLibrary(tmp_path)
    anna, ben = library.save("Anna", TONE, 16000), library.save("Ben", TONE, 16000)
    assert anna.aliases == () and library.get("anna").aliases == ()
    assert library.set_aliases("anna", ["Alloy", " nova ", "alloy"]).aliases == ("alloy", "nova")
    reopened = VoiceLibrary(tmp_path)
    assert reopened.get("anna").aliases == ("alloy", "nova")
    assert reopened.by_alias("NOVA").slug == "anna" and reopened.by_alias("onyx") is None
    for taken in ("ALLOY", "anna"):  # another voice's alias, another voice's id
        with pytest.raises(AliasTakenError):
            library.set_aliases(ben.slug, [taken])
    with pytest.raises(VoiceNotFoundError):
        library.set_aliases("nobody", ["echo"])
    for bad in ("", "x" * 101, "a\x00b"):
        with pytest.raises(VoiceError):
            library.set_aliases("ben", [bad])
    library.save("Anna", TONE * 0.5, 16000, overwrite=True)  # a replaced voice keeps its aliases
    assert library.get("anna").aliases == ("alloy", "nova")
    assert library.set_aliases("anna", []).aliases == ()


def test_an_old_sidecar_loads_with_no_aliases(tmp_path):
    library = VoiceLibrary(tmp_path)
    library.save("Anna", TONE, 16000)
    sidecar = tmp_path / "anna" / "voice.json"
    fields = json.loads(sidecar.read_text())
    del fields["aliases"]
    sidecar.write_text(json.dumps(fields))
    assert library.get("anna").aliases == () and [v.slug for v in library.list()] == ["anna"]


def test_concurrent_claims_of_one_alias_give_it_to_one_voice(tmp_path):
    library = VoiceLibrary(tmp_path)
    slugs = [library.save(f"Voice {n}", TONE, 16000).slug for n in range(4)]
    outcomes: list[str] = []

    def claim(slug: str) -> None:
        try:
            library.set_aliases(slug, ["alloy"])
            outcomes.append(slug)
        except AliasTakenError:
            outcomes.append("taken")

    threads = [threading.Thread(target=claim, args=(slug,)) for slug in slugs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert outcomes.count("taken") == 3
    assert [v.slug for v in library.list() if "alloy" in v.aliases] == [o for o in outcomes if o != "taken"]
