"""The voice panel: record (device picker, level meter, timer, 30 s limit) or import (dialog or drag and
drop) a reference voice, clean it with the audio core (before/after waveforms, playback of both), type its
transcript, save it as a named voice, or pick a saved one."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PySide6.QtCore import Signal
from PySide6.QtMultimedia import QMediaDevices
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from studio.atomic_files import DiskError
from studio.gui.jobs import BackgroundJobs
from studio.gui.recorder import MAX_SECONDS, Recorder
from studio.gui.reference_audio import AUDIO_FILTER, clean_recording, load_file, summarise_report
from studio.gui.transcript_box import TranscriptBox, quality_html
from studio.gui.transport import Clip
from studio.gui.waveform import WaveformView
from studio.voices import VoiceError, VoiceExistsError, VoiceLibrary


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

    def __init__(self, library: VoiceLibrary, jobs: BackgroundJobs, parent: QWidget | None = None):
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
        self._clean_generation = 0
        self._fresh_recording = False  # the next cleaning result is a new recording: transcribe it
        self._saved_original: tuple[np.ndarray, int] | None = None  # a picked saved voice's recording
        self._generation = {"original": 0, "cleaned": 0}  # which version of each is shown (playheads)

        title = QLabel("Voice")
        title.setObjectName("PanelTitle")
        self.saved = QComboBox()
        self.saved.setToolTip("Saved voices")
        self.saved.activated.connect(self.on_pick_saved)
        self.delete_voice_button = QPushButton("Delete")
        self.delete_voice_button.clicked.connect(self.delete_current_voice)

        self.input_device = QComboBox()
        self.input_device.setToolTip("Microphone")
        self.record_button = QPushButton("● Record")
        self.record_button.setObjectName("RecordButton")
        self.record_button.setCheckable(True)
        self.record_button.toggled.connect(self.on_record_toggled)
        self.import_button = QPushButton("Import…")
        self.import_button.setToolTip("Import a recording (or drop an audio file here)")
        self.import_button.clicked.connect(self.choose_file)
        self.level = QProgressBar()
        self.level.setObjectName("LevelMeter")
        self.level.setRange(-60, 0)
        self.level.setValue(-60)
        self.level.setTextVisible(False)
        self.level.setMaximumHeight(10)
        self.timer_label = QLabel(f"0.0 / {MAX_SECONDS:.0f} s")
        self.timer_label.setObjectName("Timer")

        self.before = WaveformView(color="#90a4ae", height=70)
        self.after = WaveformView(color="#4fc3f7", height=70)
        self.play_before = QPushButton("▶ Original")
        self.play_before.clicked.connect(lambda: self._play("original"))
        self.play_after = QPushButton("▶ Cleaned")
        self.play_after.clicked.connect(lambda: self._play("cleaned"))
        self.denoise_prompt = QCheckBox("Reduce noise")
        self.denoise_prompt.setToolTip("Also run noise reduction while cleaning the recording")
        self.denoise_prompt.toggled.connect(lambda _on: self.reclean())
        self.report = QLabel("Record or import 3–30 s of clear speech.")
        self.report.setObjectName("Hint")
        self.report.setWordWrap(True)
        self.quality = QLabel("")
        self.quality.setObjectName("Quality")
        self.quality.setWordWrap(True)
        self.transcript_box = TranscriptBox()
        self.transcript_box.sig_retranscribe.connect(self.retranscribe)
        self.transcript = self.transcript_box.edit
        self.transcript.textChanged.connect(lambda _t: self.sig_prompt_changed.emit())
        self.auto_transcribe = True  # the window turns it off when no ASR model is configured
        self.save_button = QPushButton("Save voice…")
        self.save_button.clicked.connect(self.save_voice_dialog)

        grid = QGridLayout()
        grid.addWidget(QLabel("Saved"), 0, 0)
        saved_row = QHBoxLayout()
        saved_row.addWidget(self.saved, 1)
        saved_row.addWidget(self.delete_voice_button)
        grid.addLayout(saved_row, 0, 1)
        grid.addWidget(QLabel("Mic"), 1, 0)
        grid.addWidget(self.input_device, 1, 1)
        record_row = QHBoxLayout()
        record_row.addWidget(self.record_button)
        record_row.addWidget(self.import_button)
        record_row.addWidget(self.timer_label)
        grid.addLayout(record_row, 2, 1)
        grid.addWidget(self.level, 3, 1)
        grid.setColumnStretch(1, 1)

        layout = QVBoxLayout(self)
        layout.addWidget(title)
        layout.addLayout(grid)
        for label, view in (("Original", self.before), ("Cleaned", self.after)):
            caption = QLabel(label)
            caption.setObjectName("Caption")
            layout.addWidget(caption)
            layout.addWidget(view)
        play_row = QHBoxLayout()
        play_row.addWidget(self.play_before)
        play_row.addWidget(self.play_after)
        play_row.addStretch(1)
        play_row.addWidget(self.denoise_prompt)
        layout.addLayout(play_row)
        layout.addWidget(self.report)
        layout.addWidget(self.quality)
        layout.addWidget(QLabel("Transcript"))
        layout.addWidget(self.transcript_box)
        layout.addWidget(self.save_button)
        layout.addStretch(1)

        self._media = QMediaDevices(self)  # follows microphones being plugged in or out
        self._media.audioInputsChanged.connect(lambda: self.refresh_devices(self.input_device.currentText()))
        self.refresh_devices()
        self.refresh_voices()
        self._update_buttons()

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
        self.saved.addItem("— new recording —", "")
        for voice in self.library.list():
            self.saved.addItem(f"{voice.name} ({voice.duration_s:.1f} s)", voice.slug)
            if voice.slug == select:
                self.saved.setCurrentIndex(self.saved.count() - 1)
        self._update_buttons()

    def on_pick_saved(self, index: int) -> None:
        slug = self.saved.itemData(index)
        if not slug:
            return
        try:
            audio, rate, transcript = self.library.load_prompt(slug)
            voice = self.library.get(slug)
            original = self.library.load_original(slug)
        except VoiceError as exc:
            QMessageBox.warning(self, "Saved voice", str(exc))
            return
        self._voice_name = voice.name
        self._voice_id = voice.slug
        self._original = None  # nothing to clean again: the saved prompt is used as it is
        self._saved_original = original  # shown and playable: the recording it was made from, if kept
        self._cleaned = (audio, rate)
        self._bump("original", "cleaned")
        if original is not None:
            self.before.set_audio(*original)
        else:
            self.before.clear_audio()
        self.after.set_audio(audio, rate)
        self.transcript_box.new_recording(transcribing=False)
        self.transcript.setText(transcript)  # a saved voice keeps the transcript it was saved with
        self.quality.setText("")
        self._fresh_recording = False
        self.report.setText(f"Saved voice “{voice.name}”: {voice.duration_s:.1f} s.")
        self._update_buttons()
        self.sig_prompt_changed.emit()

    def delete_current_voice(self) -> None:
        slug = self.saved.currentData()
        if not slug:
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
        self.set_recording(audio, sample_rate, origin="recording")

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
    def set_recording(self, audio: np.ndarray, sample_rate: int, origin: str = "") -> None:
        """A new original (recorded or imported): show it and clean it in the background."""
        self.saved.setCurrentIndex(0)
        self._voice_name = ""
        self._voice_id = ""
        self._original = (np.asarray(audio, dtype=np.float32), int(sample_rate))
        self._saved_original = None
        self._cleaned = None
        self._bump("original", "cleaned")
        self.before.set_audio(audio, sample_rate)
        self.after.clear_audio()
        if origin != "recording":  # D1: an import never shows the last recording's timer
            self.timer_label.setText(f"0.0 / {self.recorder.max_seconds:.0f} s")
        self.quality.setText("")
        self.transcript_box.new_recording(transcribing=self.auto_transcribe)
        self._fresh_recording = True
        self.report.setText(f"Cleaning {origin or 'the recording'} ({len(audio) / sample_rate:.1f} s)…")
        self._update_buttons()
        self.reclean()

    def reclean(self) -> None:
        if self._original is None:
            return
        self._clean_generation += 1
        generation = self._clean_generation
        audio, rate = self._original
        self.jobs.submit(
            clean_recording,
            audio,
            rate,
            self.denoise_prompt.isChecked(),
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
            reason = str(exc)
            answer = QMessageBox.question(
                self, "Save voice", f"{reason[:1].upper()}{reason[1:]}. Replace it?"
            )
            if answer == QMessageBox.StandardButton.Yes:
                return self.save_voice(name, overwrite=True)
            return False
        except DiskError as exc:
            QMessageBox.warning(self, "Save voice", exc.explain("the voice was not saved"))
            return False
        except VoiceError as exc:
            QMessageBox.warning(self, "Save voice", str(exc))
            return False
        self._voice_name = voice.name
        self._voice_id = voice.slug
        self.refresh_voices(select=voice.slug)
        self.sig_message.emit(f"Saved the voice “{voice.name}”")
        return True

    # -- state ---------------------------------------------------------------------------------------
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

    def _play(self, which: str) -> None:
        clip = self.reference_clip(which)
        if clip is not None:
            self.sig_play.emit(clip)

    def _update_buttons(self) -> None:
        self.play_before.setEnabled(self._original is not None or self._saved_original is not None)
        self.play_after.setEnabled(self._cleaned is not None)
        self.save_button.setEnabled(self._cleaned is not None)
        self.delete_voice_button.setEnabled(bool(self.saved.currentData()))
        self.transcript_box.set_transcribable(self._cleaned is not None and self.auto_transcribe)

    def stop(self) -> None:
        """Stop recording (on close)."""
        if self.recorder.is_recording:
            self.recorder.stop()
