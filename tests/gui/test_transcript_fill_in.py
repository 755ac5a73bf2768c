"""A new reference gets its transcript filled in automatically (marked so until edited), the detected
language is shown and cross-lingual offered, a saved voice keeps its transcript, and without a model the
panel says to type it. The bridge here only records requests; the engine side is tested with a real engine."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt

from studio.engine.protocol import Error, Transcript
from studio.gui.engine.bridge import EngineSignals
from studio.gui.take.text_panel import TextPanel
from studio.gui.voice.transcripts import TranscriptController
from studio.gui.voice.voice_panel import VoicePanel
from studio.gui.widgets.jobs import BackgroundJobs
from studio.request import Mode
from studio.runtime.warmup import synthetic_voice
from studio.voices import VoiceLibrary

pytestmark = pytest.mark.gui


class RecordingBridge(EngineSignals):
    def __init__(self):
        super().__init__()
        self.sent = []

    def transcribe(self, request):
        self.sent.append(request)
        return request.request_id


@pytest.fixture
def studio(qtbot, tmp_path):
    jobs = BackgroundJobs()
    panel = VoicePanel(VoiceLibrary(tmp_path / "voices"), jobs)
    qtbot.addWidget(panel)
    bridge = RecordingBridge()
    model = {"asr": "openai/whisper-large-v3-turbo"}
    transcripts = TranscriptController(bridge, lambda: model["asr"])
    panel.sig_reference_ready.connect(transcripts.request)
    box = panel.transcript_box
    transcripts.sig_heard.connect(lambda h: box.set_automatic(h.text, h.language, h.language_name))
    transcripts.sig_unavailable.connect(box.set_unavailable)
    yield panel, bridge, transcripts, model
    panel.stop()
    jobs.shutdown()


def _record(panel, qtbot, bridge, seconds=4.0):
    before = len(bridge.sent)
    panel.set_recording(0.4 * synthetic_voice(22050, seconds), 22050, "the test recording")
    qtbot.waitUntil(lambda: len(bridge.sent) > before, timeout=60_000)
    return bridge.sent[-1]


def test_a_new_recording_is_transcribed_and_the_text_marked_automatic_until_edited(studio, qtbot):
    panel, bridge, _, _ = studio
    request = _record(panel, qtbot, bridge)
    assert request.sample_rate == 16000 and request.audio.size == panel.current_prompt().audio.size
    assert "Transcribing" in panel.transcript_box.status.text()
    bridge.sig_transcript.emit(
        Transcript(request.request_id, "a calm voice reads", "en", "english", 0.4, "w")
    )
    assert panel.transcript.text() == "a calm voice reads" and panel.transcript_box.automatic
    assert (
        "automatic" in panel.transcript_box.status.text() and "English" in panel.transcript_box.status.text()
    )
    assert panel.transcript_box.cross_lingual_button.isVisibleTo(panel)
    qtbot.keyClicks(panel.transcript, " aloud")
    assert not panel.transcript_box.automatic and panel.transcript_box.status.text() == "edited"
    assert panel.current_prompt().transcript == "a calm voice reads aloud"


def test_a_new_recording_clears_the_old_transcript_and_a_late_answer_is_dropped(studio, qtbot):
    panel, bridge, _, _ = studio
    first = _record(panel, qtbot, bridge)
    bridge.sig_transcript.emit(Transcript(first.request_id, "first words", "en", "english", 0.1, "w"))
    second = _record(panel, qtbot, bridge, seconds=5.0)
    assert panel.transcript.text() == ""  # the old transcript never goes out with the new audio
    bridge.sig_transcript.emit(Transcript(first.request_id, "stale words", "en", "english", 0.1, "w"))
    assert panel.transcript.text() == ""
    bridge.sig_transcript.emit(Transcript(second.request_id, "second words", "de", "german", 0.1, "w"))
    assert panel.transcript.text() == "second words" and panel.transcript_box.language == "de"


def test_re_transcribe_asks_again_and_a_saved_voice_keeps_its_transcript(studio, qtbot):
    panel, bridge, _, _ = studio
    request = _record(panel, qtbot, bridge)
    bridge.sig_transcript.emit(Transcript(request.request_id, "kept words", "en", "english", 0.1, "w"))
    panel.transcript_box.retranscribe_button.click()
    assert len(bridge.sent) == 2 and bridge.sent[1].request_id != request.request_id
    assert panel.save_voice("Kept")
    slug = panel.library.list()[0].slug
    assert panel.library.get(slug).transcript == "kept words"
    _record(panel, qtbot, bridge)
    panel.on_pick_saved(panel.saved.findData(slug))
    assert panel.transcript.text() == "kept words" and len(bridge.sent) == 3  # picking asks nothing


def test_without_a_model_the_panel_says_to_type_the_transcript(studio, qtbot):
    panel, bridge, transcripts, model = studio
    request = _record(panel, qtbot, bridge)
    bridge.sig_error.emit(Error(request.request_id, "the ASR model x is not on this computer"))
    assert "Type the transcript" in panel.transcript_box.status.text() and panel.transcript.text() == ""
    qtbot.keyClicks(panel.transcript, "my own words")
    assert panel.transcript_box.status.text() == ""  # the note is answered once a transcript is typed
    panel.transcript.selectAll()
    qtbot.keyClick(panel.transcript, Qt.Key.Key_Delete)
    assert "Type the transcript" in panel.transcript_box.status.text()  # empty again: the note is back
    model["asr"] = ""
    transcripts.request(np.ones(1600, np.float32), 16000)
    assert "no ASR model is configured" in panel.transcript_box.status.text()


def test_use_cross_lingual_switches_the_text_panel(qtbot):
    text = TextPanel()
    qtbot.addWidget(text)
    text.use_cross_lingual()
    assert text.current_request().mode is Mode.CROSS_LINGUAL
