"""The voice panel: record (device picker, level meter, timer, 30 s limit) or import (dialog or drag and
drop) a reference voice, clean it with the audio core (before/after waveforms, playback of both), type its
transcript, save it as a named voice, or pick a saved one. A reference not saved yet is kept on disk as
the unsaved recording (`studio.gui.voice.reference_draft`) and listed first among the saved voices."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PySide6.QtCore import Signal
from PySide6.QtMultimedia import QMediaDevices
from PySide6.QtWidgets import (
    QFileDialog,
    QInputDialog,
    QMessageBox,
    QWidget,
)

from studio.atomic_files import DiskError
from studio.gui.playback.transport import Clip
from studio.gui.voice.recorder import Recorder
from studio.gui.voice.reference_audio import AUDIO_FILTER, clean_recording, load_file, summarise_report
from studio.gui.voice.reference_draft import DraftStore, ReferenceDraft
from studio.gui.voice.transcript_box import quality_html
from studio.gui.voice.voice_layout import START_HINT, build_voice_panel
from studio.gui.widgets.jobs import BackgroundJobs
from studio.gui.widgets.wording import capitalised, sentence
from studio.voices import Voice, VoiceError, VoiceExistsError, VoiceLibrary


@dataclass(frozen=True)
class Prompt:
    """The voice a take uses: cleaned audio and transcript, and the saved voice's name if any."""

    audio: np.ndarray
    sample_rate: int
    transcript: str
    voice_name: str = ""
    voice_id: str = ""  # a saved voice's id in the voice library: the engine loads it by id


class VoicePanel(QWidget):
    """Owns the reference voice; ``current_prompt()`` gives what the next take clones."""

    sig_play = Signal(object)
    """Play this `Clip` (the original or the cleaned reference)."""
    sig_message = Signal(str)
    """A short status message."""
    sig_prompt_changed = Signal()
    """The prompt (audio or transcript) changed."""
    sig_reference_ready = Signal(object, int)
    """A new recording was cleaned: (16 kHz float32 samples, rate) to transcribe."""

    def __init__(
        self,
        library: VoiceLibrary,
        jobs: BackgroundJobs,
        parent: QWidget | None = None,
        drafts: DraftStore | None = None,
    ):
        super().__init__(parent)
        self.setObjectName("VoicePanel")
        self.setAcceptDrops(True)
        self.library = library
        self.jobs = jobs
        self.recorder = Recorder(self)
        self.recorder.sig_level.connect(self.on_level)
        self.recorder.sig_elapsed.connect(self.on_elapsed)
        self.recorder.sig_finished.connect(self.on_recorded)
        self.recorder.sig_error.connect(lambda text: QMessageBox.warning(self, "Recording", text))
        self._original: tuple[np.ndarray, int] | None = None
        self._cleaned: tuple[np.ndarray, int] | None = None
        self._voice_name = ""
        self._voice_id = ""
        self.drafts = drafts if drafts is not None else DraftStore(None)  # keeps the unsaved recording
        self.draft: ReferenceDraft | None = None
        self._clean_generation = 0
        self._fresh_recording = False  # the next cleaning result is a new recording: transcribe it
        self._saved_original: tuple[np.ndarray, int] | None = None  # a picked saved voice's recording
        self._generation = {"original": 0, "cleaned": 0}  # which version of each is shown (playheads)

        self._auto_transcribe = True
        build_voice_panel(self)

        self._media = QMediaDevices(self)  # follows microphones being plugged in or out
        self._media.audioInputsChanged.connect(lambda: self.refresh_devices(self.input_device.currentText()))
        self.refresh_devices()
        self.refresh_voices()
        self._update_buttons()
        draft = self.drafts.load()
        if draft is not None:
            self.show_draft(draft)

    # -- devices and saved voices ----------------------------------------------------------------------
    def refresh_devices(self, preferred: str = "") -> None:
        self.input_device.clear()
        devices = QMediaDevices.audioInputs()
        if not devices:
            self.input_device.addItem("No microphone found", None)
        for device in devices:
            self.input_device.addItem(device.description(), device)
            if preferred and device.description() == preferred:
                self.input_device.setCurrentIndex(self.input_device.count() - 1)
        self.record_button.setEnabled(bool(devices))

    def refresh_voices(self, select: str = "") -> None:
        self.saved.clear()
        self.saved.addItem(self._draft_label(), "")
        for voice in self.library.list():
            self.saved.addItem(f"{voice.name} ({voice.duration_s:.1f} s)", voice.slug)
            if voice.slug == select:
                self.saved.setCurrentIndex(self.saved.count() - 1)
        self._update_buttons()

    def on_pick_saved(self, index: int) -> None:
        slug = self.saved.itemData(index)
        if not slug:
            if self.draft is not None and not self.showing_draft:
                self.show_draft(self.draft)
            return
        try:
            audio, rate, transcript = self.library.load_prompt(slug)
            voice = self.library.get(slug)
            original = self.library.load_original(slug)
        except VoiceError as exc:
            QMessageBox.warning(self, "Saved voice", sentence(str(exc)))
            return
        report = f"Saved voice “{voice.name}”: {voice.duration_s:.1f} s."
        # nothing to clean again: the saved prompt is used as it is, its original only shown and played
        self._show(
            None, (audio, rate), saved_original=original, voice=voice, transcript=transcript, report=report
        )

    def delete_current_voice(self) -> None:
        slug = self.saved.currentData()
        if not slug:
            self.discard_draft_dialog()
            return
        answer = QMessageBox.question(
            self, "Delete voice", f"Delete the saved voice {self.saved.currentText()}?"
        )
        if answer == QMessageBox.StandardButton.Yes:
            self.library.delete(slug)
            self.refresh_voices()

    # -- recording -----------------------------------------------------------------------------------
    def on_record_toggled(self, on: bool) -> None:
        if on and not self.recorder.is_recording:
            device = self.input_device.currentData()
            if not self.recorder.start(device):
                self.record_button.setChecked(False)
                return
            self.record_button.setText("■ Stop")
        elif not on and self.recorder.is_recording:
            self.recorder.stop()

    def on_level(self, dbfs: float) -> None:
        self.level.setValue(int(max(-60.0, dbfs if math.isfinite(dbfs) else -60.0)))

    def on_elapsed(self, seconds: float) -> None:
        self.timer_label.setText(f"{seconds:.1f} / {self.recorder.max_seconds:.0f} s")

    def on_recorded(self, audio: np.ndarray, sample_rate: int) -> None:
        self.record_button.blockSignals(True)
        self.record_button.setChecked(False)
        self.record_button.blockSignals(False)
        self.record_button.setText("● Record")
        self.level.setValue(-60)
        if audio.size == 0:
            self.report.setText("Nothing was recorded.")
            return
        self.set_recording(audio, sample_rate, recorded=True)

    # -- import --------------------------------------------------------------------------------------
    def choose_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Import a voice recording", str(Path.home()), AUDIO_FILTER
        )
        if path:
            self.import_file(path)

    def import_file(self, path: str) -> None:
        self.report.setText(f"Reading {Path(path).name}…")
        self.jobs.submit(load_file, path, callback=self._on_loaded)

    def _on_loaded(self, result=None, error=None) -> None:
        if error is not None:
            self.report.setText(f"<span style='color:#e57373'>{error}</span>")
            return
        self.set_recording(result.samples, result.sample_rate, origin=Path(result.info.path).name)

    def dragEnterEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if event.mimeData().hasUrls() and any(url.isLocalFile() for url in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:  # noqa: N802 (Qt override)
        for url in event.mimeData().urls():
            if url.isLocalFile():
                self.import_file(url.toLocalFile())
                event.acceptProposedAction()
                return

    # -- cleanup -------------------------------------------------------------------------------------
    def set_recording(
        self, audio: np.ndarray, sample_rate: int, origin: str = "", recorded: bool = False
    ) -> None:
        """A new original, recorded or imported (``origin``: its file name): the unsaved recording from now
        on, kept on disk at once, shown and cleaned in the background."""
        self.draft = ReferenceDraft((np.asarray(audio, dtype=np.float32), int(sample_rate)), origin=origin)
        self.drafts.track(self.draft)
        self._keep_draft_in_background()
        self.saved.setItemText(0, self._draft_label())
        self.saved.setCurrentIndex(0)
        if not recorded:  # an import never shows the last recording's timer
            self.timer_label.setText(f"0.0 / {self.recorder.max_seconds:.0f} s")
        report = f"Cleaning {origin or 'the recording'} ({len(audio) / sample_rate:.1f} s)…"
        self._show(self.draft.original, None, report=report, transcribing=self.auto_transcribe)
        self.reclean()

    def reclean(self) -> None:
        if self._original is None:
            return
        self._clean_generation += 1
        generation = self._clean_generation
        audio, rate = self._original
        name = self.draft.origin if self.showing_draft and self.draft.origin else "the recording"
        self.jobs.submit(
            clean_recording,
            audio,
            rate,
            self.denoise_prompt.isChecked(),
            name,
            callback=lambda result=None, error=None: self._on_cleaned(generation, result, error),
        )

    @property
    def cleaning(self) -> bool:
        return self._original is not None and self._cleaned is None

    def _on_cleaned(self, generation: int, result, error) -> None:
        if generation != self._clean_generation:
            return  # a newer recording or option replaced this one
        if error is not None:
            self.report.setText(f"<span style='color:#e57373'>{error}</span>")
            return
        self._cleaned = (result.samples, result.sample_rate)
        self._bump("cleaned")
        self.after.set_audio(result.samples, result.sample_rate)
        self.report.setText(summarise_report(result.report))
        self.report.setToolTip(result.report.text())
        self.quality.setText(quality_html(result.quality))
        if self.showing_draft:
            self.draft.set_cleaned(
                result.samples, result.sample_rate, self.report.text(), self.quality.text()
            )
            self.saved.setItemText(0, self._draft_label())  # the prompt's length, as saved voices show
            self._keep_draft_in_background()
        self._update_buttons()
        self.sig_prompt_changed.emit()
        if self._fresh_recording and self.auto_transcribe:
            self._fresh_recording = False
            self.sig_reference_ready.emit(result.samples, result.sample_rate)

    def retranscribe(self) -> None:
        if self._cleaned is not None:
            self.transcript_box.status.setText("Transcribing…")
            self.sig_reference_ready.emit(*self._cleaned)

    # -- saving --------------------------------------------------------------------------------------
    def save_voice_dialog(self) -> None:
        name, ok = QInputDialog.getText(self, "Save voice", "Name of the voice:", text=self._voice_name)
        if ok and name.strip():
            self.save_voice(name)

    def save_voice(self, name: str, overwrite: bool = False) -> bool:
        if self._cleaned is None:
            return False
        audio, rate = self._cleaned
        original, original_rate = self._original if self._original is not None else (None, None)
        try:
            voice = self.library.save(
                name, audio, rate, self.transcript.text(), original, original_rate, overwrite=overwrite
            )
        except VoiceExistsError as exc:
            answer = QMessageBox.question(self, "Save voice", f"{capitalised(str(exc))}. Replace it?")
            if answer == QMessageBox.StandardButton.Yes:
                return self.save_voice(name, overwrite=True)
            return False
        except DiskError as exc:
            QMessageBox.warning(self, "Save voice", exc.explain("the voice was not saved"))
            return False
        except VoiceError as exc:
            QMessageBox.warning(self, "Save voice", sentence(str(exc)))
            return False
        if self.showing_draft:  # in the library now: no longer an unsaved recording
            self.draft = None
            self.drafts.discard()
        self._voice_name = voice.name
        self._voice_id = voice.slug
        self.refresh_voices(select=voice.slug)
        self.sig_message.emit(f"Saved the voice “{voice.name}”")
        return True

    # -- the unsaved recording -------------------------------------------------------------------------
    @property
    def showing_draft(self) -> bool:
        """The reference shown is the unsaved recording."""
        return self.draft is not None and self._original is self.draft.original

    def _draft_label(self) -> str:
        if self.draft is None:
            return "— new recording —"
        return f"— unsaved recording ({self.draft.duration_s:.1f} s) —"

    def show_draft(self, draft: ReferenceDraft) -> None:
        """Show the unsaved recording again (at start, or picked after a saved voice)."""
        self.draft = draft
        self.saved.setItemText(0, self._draft_label())
        self.saved.setCurrentIndex(0)
        report = draft.report or "The unsaved recording: Save voice… keeps it in the library."
        self._show(
            draft.original, draft.cleaned, transcript=draft.transcript, report=report, quality=draft.quality
        )
        if draft.cleaned is None:
            self.reclean()

    def discard_draft_dialog(self) -> None:
        if not self.showing_draft:
            return
        answer = QMessageBox.question(
            self, "Discard recording", "Discard the unsaved recording? It is not saved as a voice."
        )
        if answer == QMessageBox.StandardButton.Yes:
            self.draft = None
            self.drafts.discard()
            self.refresh_voices()
            self._show(None, None, report=START_HINT)

    def on_transcript_changed(self, text: str) -> None:
        if self.showing_draft:
            self.draft.transcript = text  # written with the session (`keep_draft`)
        self.sig_prompt_changed.emit()

    def _keep_draft_in_background(self) -> None:
        self.jobs.submit(self.drafts.save, self.draft, callback=self._on_draft_kept)

    def keep_draft(self) -> None:
        """Write the unsaved recording now (its transcript changes with the session; at close)."""
        if self.draft is not None:
            try:
                self.drafts.save(self.draft)
            except DiskError as exc:
                self._on_draft_kept(error=exc)

    def _on_draft_kept(self, result=None, error=None) -> None:
        if isinstance(error, DiskError):
            self.sig_message.emit(error.explain("the unsaved recording is kept only until the studio closes"))
        elif error is not None:
            raise error

    # -- state ---------------------------------------------------------------------------------------
    def _show(
        self,
        original: tuple[np.ndarray, int] | None,
        cleaned: tuple[np.ndarray, int] | None,
        *,
        saved_original: tuple[np.ndarray, int] | None = None,
        voice: Voice | None = None,
        transcript: str = "",
        report: str = "",
        quality: str = "",
        transcribing: bool = False,
    ) -> None:
        """Show a reference: its original (None for a saved voice, whose recording is ``saved_original``), its
        cleaned prompt (None while it is cleaned), the saved `Voice` it is (None: unsaved), its transcript,
        the report and quality lines; ``transcribing``: its transcript is asked for once it is cleaned."""
        self._voice_name, self._voice_id = (voice.name, voice.slug) if voice is not None else ("", "")
        self._original, self._saved_original, self._cleaned = original, saved_original, cleaned
        self._clean_generation += 1  # a cleaning still running is for the reference shown before
        self._bump("original", "cleaned")
        for view, audio in ((self.before, original or saved_original), (self.after, cleaned)):
            if audio is not None:
                view.set_audio(*audio)
            else:
                view.clear_audio()
        self.transcript_box.new_recording(transcribing=transcribing)
        self.transcript.setText(transcript)  # a saved voice keeps the transcript it was saved with
        self.report.setText(report)
        self.report.setToolTip("")
        self.quality.setText(quality)
        self._fresh_recording = transcribing
        self._update_buttons()
        self.sig_prompt_changed.emit()

    @property
    def auto_transcribe(self) -> bool:
        """Whether a new recording's transcript is asked for (off when no ASR model is configured)."""
        return self._auto_transcribe

    @auto_transcribe.setter
    def auto_transcribe(self, on: bool) -> None:
        self._auto_transcribe = on
        self._update_buttons()

    def current_prompt(self) -> Prompt | None:
        if self._cleaned is None:
            return None
        audio, rate = self._cleaned
        return Prompt(audio, rate, self.transcript.text().strip(), self._voice_name, self._voice_id)

    def reference_key(self, which: str) -> str:
        """The transport key of the "original" or "cleaned" audio shown now."""
        return f"{which}:{self._generation[which]}"

    def reference_clip(self, which: str) -> Clip | None:
        audio = (self._original or self._saved_original) if which == "original" else self._cleaned
        if audio is None:
            return None
        return Clip(self.reference_key(which), audio[0], audio[1], which.capitalize())

    def _bump(self, *which: str) -> None:
        for name in which:
            self._generation[name] += 1

    def play_reference(self, which: str) -> None:
        clip = self.reference_clip(which)
        if clip is not None:
            self.sig_play.emit(clip)

    def _update_buttons(self) -> None:
        self.play_before.setEnabled(self._original is not None or self._saved_original is not None)
        self.play_after.setEnabled(self._cleaned is not None)
        self.save_button.setEnabled(self._cleaned is not None)
        self.delete_voice_button.setEnabled(bool(self.saved.currentData()) or self.showing_draft)
        self.transcript_box.set_transcribable(self._cleaned is not None and self.auto_transcribe)

    def stop(self) -> None:
        """Stop recording (on close)."""
        if self.recorder.is_recording:
            self.recorder.stop()
