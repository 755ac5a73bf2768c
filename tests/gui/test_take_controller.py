"""The take controller owns the take in progress: it listens to the bridge itself, keeps the rate each chunk
carries, saves what finished, and ends the take when the engine goes away."""

from __future__ import annotations

import numpy as np
import pytest

from studio.engine.protocol import AudioChunk, EngineState, Error, State, TakeFinished, TakeStats
from studio.gui.engine.bridge import EngineSignals
from studio.gui.take.take_controller import TakeController
from studio.gui.take.text_panel import TextRequest
from studio.gui.voice.voice_panel import Prompt
from studio.request import Mode
from studio.takes import TakeStore

pytestmark = pytest.mark.gui


class RecordingBridge(EngineSignals):
    """The bridge's signals without an engine (the engine is tested elsewhere); records what is sent."""

    def __init__(self):
        super().__init__()
        self.sent, self.cancelled = [], []

    def synthesize(self, request):
        self.sent.append(request)
        return request.request_id

    def cancel(self, request_id):
        self.cancelled.append(request_id)


def _text(mode=Mode.CROSS_LINGUAL):
    return TextRequest(text="Hello there.", mode=mode, instruct="", speed=1.0, seed=3, stream=True)


PROMPT = Prompt(np.zeros(16000, np.float32), 16000, transcript="", voice_name="Ada")


@pytest.fixture
def controller(qtbot, tmp_path):
    bridge = RecordingBridge()
    return TakeController(bridge, TakeStore(tmp_path / "takes")), bridge


def _stats(seconds):
    return TakeStats(0.1, 0.2, seconds, 0.2 / seconds, 10, 2)


def test_chunks_carry_their_rate_to_the_listeners_and_into_the_saved_take(controller, qtbot):
    takes, bridge = controller
    heard = []
    takes.sig_chunk.connect(lambda samples, rate, latency: heard.append((samples.size, rate)))
    assert takes.start(_text(), PROMPT)
    request_id = bridge.sent[0].request_id
    for index in range(2):
        bridge.sig_chunk.emit(AudioChunk(request_id, index, np.full(800, 0.1, np.float32), 16000))
    with qtbot.waitSignal(takes.sig_finished) as finished:
        bridge.sig_take_finished.emit(TakeFinished(request_id, _stats(0.1)))
    assert heard == [(800, 16000), (800, 16000)]
    take = finished.args[1]
    audio, rate = takes.store.load_audio(take.id)
    assert rate == 16000 and audio.size == 1600 and take.mode == "cross-lingual"
    assert not takes.busy


def test_chunks_of_another_take_are_ignored(controller):
    takes, bridge = controller
    heard = []
    takes.sig_chunk.connect(lambda *args: heard.append(args))
    takes.start(_text(), PROMPT)
    bridge.sig_chunk.emit(AudioChunk("someone-else", 0, np.ones(10, np.float32), 24000))
    assert heard == []


def test_an_engine_crash_ends_the_take_as_failed(controller, qtbot):
    takes, bridge = controller
    takes.start(_text(), PROMPT)
    with qtbot.waitSignal(takes.sig_failed) as failed:
        bridge.sig_state_changed.emit(State(EngineState.CRASHED, "gone"))
    assert "crashed" in failed.args[0] and not takes.busy


def test_a_missing_transcript_is_explained_by_its_field(controller, qtbot):
    takes, bridge = controller
    with qtbot.waitSignal(takes.sig_failed) as failed:
        assert not takes.start(_text(Mode.ZERO_SHOT), PROMPT)
    assert "transcript of the voice recording" in failed.args[0] and bridge.sent == []


def _finish_a_take(takes, bridge, qtbot, seconds=0.5, rate=16000):
    assert takes.start(_text(), PROMPT)
    request_id = bridge.sent[-1].request_id
    bridge.sig_chunk.emit(AudioChunk(request_id, 0, np.full(int(rate * seconds), 0.1, np.float32), rate))
    with qtbot.waitSignal(takes.sig_finished) as finished:
        bridge.sig_take_finished.emit(TakeFinished(request_id, _stats(seconds)))
    return finished.args


def test_a_take_the_disk_refuses_is_kept_in_the_recovery_folder_and_announced(qtbot, small_disk, tmp_path):
    bridge = RecordingBridge()
    recovery = TakeStore(tmp_path / "recovery")
    takes = TakeController(bridge, TakeStore(small_disk(16) / "takes"), recovery=recovery)
    kept = []
    takes.sig_kept.connect(kept.append)
    stats, take = _finish_a_take(takes, bridge, qtbot, seconds=1.0)  # 64 KB on a 16 KB disk
    assert stats is not None and take is None and not takes.busy  # the take ended; Generate comes back
    (one,) = kept
    assert one.recovered is not None and recovery.load_audio(one.recovered.id)[0].size == 16000
    message = one.message()
    assert (
        "is full (ENOSPC)" in message and "1 s take is kept in" in message and str(recovery.folder) in message
    )
    assert takes.kept == [one]


def test_when_the_recovery_disk_is_full_too_the_take_stays_in_memory_and_can_be_saved_elsewhere(
    qtbot, small_disk, tmp_path
):
    from studio.gui.widgets.disk_notices import KeptTakeNotice

    bridge = RecordingBridge()
    takes = TakeController(bridge, TakeStore(small_disk(16)), recovery=TakeStore(small_disk(16)))
    kept = []
    takes.sig_kept.connect(kept.append)
    _finish_a_take(takes, bridge, qtbot, seconds=1.0)
    (one,) = kept
    assert one.recovered is None and "kept in memory only" in one.message() and one.notes
    notice = KeptTakeNotice(one, takes.kept)
    qtbot.addWidget(notice)
    saved = notice.save_to(tmp_path / "elsewhere" / "rescued")
    assert saved == tmp_path / "elsewhere" / "rescued.wav" and saved.is_file()
    import soundfile as sf

    audio, rate = sf.read(saved, dtype="float32")
    assert rate == 16000 and audio.size == 16000 and takes.kept == []


def test_audio_streamed_before_an_engine_error_is_kept_as_a_partial_take(controller, qtbot):
    takes, bridge = controller
    assert takes.start(_text(), PROMPT)
    request_id = bridge.sent[0].request_id
    bridge.sig_chunk.emit(AudioChunk(request_id, 0, np.full(8000, 0.2, np.float32), 16000))
    failed = []
    takes.sig_failed.connect(failed.append)
    with qtbot.waitSignal(takes.sig_finished) as finished:
        bridge.sig_error.emit(Error(request_id, "synthesis failed: boom"))
    stats, take = finished.args
    assert stats is None and take is not None and take.name.startswith("(partial)")
    assert take.settings["partial"] is True and take.duration_s == pytest.approx(0.5)
    assert takes.store.load_audio(take.id)[0].size == 8000
    assert "boom" in failed[0] and "kept as" in failed[0]


def test_a_crash_mid_take_keeps_what_arrived(controller, qtbot):
    takes, bridge = controller
    takes.start(_text(), PROMPT)
    request_id = bridge.sent[0].request_id
    bridge.sig_chunk.emit(AudioChunk(request_id, 0, np.full(4000, 0.2, np.float32), 16000))
    with qtbot.waitSignal(takes.sig_finished) as finished:
        bridge.sig_state_changed.emit(State(EngineState.CRASHED, "killed"))
    assert finished.args[1] is not None and [t.id for t in takes.store.list()] == [finished.args[1].id]


TAGGED = "<strong>Hello</strong> there [breath] my good friend, [laughter] how are you"


@pytest.mark.parametrize(
    ("cancelled", "name"),
    [(False, "Hello there my good friend, how"), (True, "(stopped) Hello there my good friend,")],
)
def test_tags_stay_in_a_takes_text_but_leave_its_name_and_file_name(
    controller, qtbot, tmp_path, cancelled, name
):
    takes, bridge = controller
    text = TextRequest(text=TAGGED, mode=Mode.CROSS_LINGUAL, instruct="", speed=1.0, seed=3, stream=True)
    assert takes.start(text, PROMPT)
    request_id = bridge.sent[0].request_id
    bridge.sig_chunk.emit(AudioChunk(request_id, 0, np.full(800, 0.1, np.float32), 24000))
    stats = TakeStats(0.1, 0.2, 0.1, 2.0, 10, 1, cancelled=cancelled)
    with qtbot.waitSignal(takes.sig_finished) as finished:
        bridge.sig_take_finished.emit(TakeFinished(request_id, stats))
    take = finished.args[1]
    assert take.text == TAGGED  # the model is given the tags; they are part of how the take was made
    assert take.name == name
    (exported,) = takes.store.export([take.id], tmp_path)
    assert exported.path.name == name + ".wav"


def test_a_take_named_with_tags_before_exports_under_a_plain_file_name(tmp_path):
    from studio.audio.export import safe_filename

    assert safe_filename("<strong>Loud</strong> news [laughter]", ".wav") == "Loud news.wav"
    assert safe_filename("Hi[breath]there <|endofprompt|>", ".flac") == "Hi there.flac"
    assert safe_filename("[breath] <strong></strong>", ".wav") == "take.wav"
    assert safe_filename("[Chapter 1] intro", ".wav") == "[Chapter 1] intro.wav"  # not a tag: kept


def test_a_take_kept_in_memory_is_named_without_its_tags():
    from studio.gui.widgets.disk_notices import kept_name
    from studio.recovery import KeptTake

    kept = KeptTake(np.zeros(10, np.float32), 24000, {"text": TAGGED, "name": None}, "the disk is full")
    assert kept_name(kept) == "Hello there my good friend, how"
