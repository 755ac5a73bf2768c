"""The unsaved recording's files: written once each, read back as they were, and never written for a draft
that was replaced or saved meanwhile (a background save that runs late leaves the newer draft alone)."""

from __future__ import annotations

import json

import numpy as np

from studio.gui.voice.reference_draft import MANIFEST, DraftStore, ReferenceDraft


def _draft(seconds: float = 1.0, rate: int = 22050) -> ReferenceDraft:
    samples = np.sin(np.arange(int(rate * seconds)) * 0.01).astype(np.float32) * 0.3
    return ReferenceDraft((samples, rate), origin="me.wav")


def test_a_draft_is_read_back_as_it_was_written(tmp_path):
    store, draft = DraftStore(tmp_path), _draft()
    store.track(draft)
    store.save(draft)
    draft.set_cleaned(draft.original[0][::2].copy(), 11025, "report", "quality")
    draft.transcript = "hello there"
    store.save(draft)
    draft.set_cleaned(draft.original[0][::3].copy(), 7350, "again", "better")  # cleaned again
    store.save(draft)

    back = DraftStore(tmp_path).load()
    assert (back.transcript, back.origin, back.report, back.quality) == (
        "hello there",
        "me.wav",
        "again",
        "better",
    )
    np.testing.assert_array_equal(back.original[0], draft.original[0])
    np.testing.assert_array_equal(back.cleaned[0], draft.cleaned[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([MANIFEST, *draft.files()])  # no stale file


def test_a_replaced_or_discarded_draft_is_never_written(tmp_path):
    store, old, new = DraftStore(tmp_path), _draft(1.0), _draft(2.0)
    store.track(old)
    store.track(new)  # a new recording replaced it before its background save ran
    store.save(old)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
    store.save(new)
    assert json.loads((tmp_path / MANIFEST).read_text())["id"] == new.draft_id
    store.discard()  # saved as a voice
    store.save(new)  # a late background save
    assert not any(tmp_path.iterdir()) and DraftStore(tmp_path).load() is None


def test_an_unreadable_draft_is_skipped(tmp_path, caplog):
    tmp_path.joinpath(MANIFEST).write_text("{not json")
    assert DraftStore(tmp_path).load() is None
    assert "cannot be read" in caplog.text
    tmp_path.joinpath(MANIFEST).write_text(json.dumps({"id": "../../voices/x", "cleaned": 0}))
    assert DraftStore(tmp_path).load() is None  # a draft's files are only ever its own, in its folder
