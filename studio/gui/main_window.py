"""The studio window: voice, text, preview, takes and GPU panels around one engine bridge; the status
bar shows the engine's state. The window shows at once; the engine starts in the background."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
from PySide6.QtCore import QByteArray
from PySide6.QtWidgets import (
    QMainWindow,
    QMessageBox,
)

from studio.engine.protocol import EngineState, Error, Hello, LoadModel, State
from studio.gui.engine.bridge import EngineBridge
from studio.gui.engine.engine_location import engine_client, is_remote, move_engine
from studio.gui.engine.engine_location import gpu_query as remote_gpu_query
from studio.gui.engine.engine_status import EngineStatus
from studio.gui.engine.gpu_panel import GpuPanel
from studio.gui.first_run import FirstRunPanel, missing_model_files
from studio.gui.playback.playback import Playback
from studio.gui.playback.preview import PreviewPanel
from studio.gui.script.script_view import ScriptView
from studio.gui.session import SessionKeeper, take_state
from studio.gui.settings import SettingsDialog, engine_changed
from studio.gui.take.export_folder import ExportFolder
from studio.gui.take.take_controller import TakeController
from studio.gui.take.takes_panel import TakesPanel
from studio.gui.take.text_panel import TextPanel
from studio.gui.voice.denoise import TakeDenoiser
from studio.gui.voice.head_start import VoiceHeadStart
from studio.gui.voice.reference_draft import DraftStore
from studio.gui.voice.transcripts import TranscriptController
from studio.gui.voice.voice_panel import VoicePanel
from studio.gui.widgets.disk_notices import KeptTakeNotice, folder_problems
from studio.gui.widgets.jobs import BackgroundJobs
from studio.gui.widgets.wording import sentence
from studio.request import FAST_FIRST_HOP_TOKENS
from studio.settings import Settings, data_dir, save_settings
from studio.takes import TakeError, TakeStore
from studio.voices import VoiceLibrary

log = logging.getLogger("studio.gui")


def is_random_model(folder: str) -> bool:
    """True for folders written by ``make-model`` (random weights: they babble)."""
    try:
        return "Random-weight" in (Path(folder) / "README.md").read_text(errors="replace")[:400]
    except OSError:
        return False


def load_request(settings: Settings) -> LoadModel:
    return LoadModel(
        settings.model_dir,
        backend=settings.backend,
        fp16=settings.fp16,
        vllm_options=settings.vllm_options(),
        vram_budget_gb=settings.vram_budget_gb,
    )


class MainWindow(QMainWindow):
    """The whole studio. ``start_engine()`` (called once the window shows) spawns the engine."""

    def __init__(self, settings: Settings, bridge: EngineBridge | None = None, gpu_query=None):
        super().__init__()
        self.setWindowTitle("CosyVoice Studio")
        self.settings = settings
        self.bridge = bridge or EngineBridge(self, client=engine_client(settings))
        self.jobs = BackgroundJobs(self)
        self.store = TakeStore(settings.resolved_output_dir())
        self.voices = VoiceLibrary(data_dir(create=False) / "voices")
        self.denoiser = TakeDenoiser(self)
        self.takes = TakeController(self.bridge, self.store, self)
        self.takes.first_hop = lambda: FAST_FIRST_HOP_TOKENS if self.settings.fast_first_audio else 0
        self.transcripts = TranscriptController(self.bridge, lambda: self.settings.asr_model, self)
        self._closing = False
        self._notices: list[QMessageBox] = []  # open non-blocking notices (kept alive until closed)

        drafts = DraftStore(data_dir(create=False) / "unsaved-recording")
        self.voice_panel = VoicePanel(self.voices, self.jobs, drafts=drafts)
        self.voice_panel.auto_transcribe = bool(settings.asr_model)
        self.text_panel = TextPanel()
        self.preview = PreviewPanel()
        self.takes_panel = TakesPanel(self.store)
        self.takes_panel.mastering = (settings.export_sample_rate, settings.export_loudness)
        gpu_query = gpu_query or remote_gpu_query(settings)
        self.gpu_panel = GpuPanel(query=gpu_query) if gpu_query else GpuPanel()
        self.first_run = FirstRunPanel(data_dir(create=False) / "models")
        self.engine_status = EngineStatus()
        self.script_view = ScriptView(self.bridge, self.voices, self.jobs, data_dir(create=False) / "scripts")
        self.playback = Playback(self)
        self.player = self.playback.player
        self.script_view.transport = self.playback.transport
        self.export_folder = ExportFolder(settings.last_export_folder, self)  # one for every export dialog
        self.takes_panel.export_folder = self.script_view.export_folder = self.export_folder
        self.export_folder.sig_changed.connect(
            lambda folder: self.update_settings(dataclasses.replace(self.settings, last_export_folder=folder))
        )
        loudness = settings.export_loudness  # scripts export like takes until the session says otherwise
        self.script_view.export_bar.apply_options(
            {
                "rate": settings.export_sample_rate,
                "loudness_on": bool(loudness),
                **({"loudness": loudness} if loudness else {}),
            }
        )
        self._build_layout()
        self._connect()
        self.preview.denoise.setChecked(settings.denoise)
        self.text_panel.stream.setChecked(settings.stream)
        self.voice_panel.refresh_devices(settings.audio_input_device)
        self.voice_panel.input_device.activated.connect(self._on_input_device_picked)
        self._apply_output_device()
        geometry = settings.extra.get("window_geometry")
        if isinstance(geometry, str):
            self.restoreGeometry(QByteArray.fromHex(geometry.encode()))
        else:
            self.resize(1360, 860)
        self.pages.setCurrentWidget(self.studio_page if self.has_model else self.first_run)
        if not self.has_model:
            self.first_run.explain(self.settings.model_dir)
        self._update_title()
        self.session = SessionKeeper(self)
        self.session.restore()
        project = settings.extra.get("script_project")
        if isinstance(project, str) and Path(project).is_dir():
            self.script_view.open_project(Path(project))
        self._on_prompt_changed()

    def _update_title(self) -> None:
        title = "CosyVoice Studio"
        if self.has_model:
            title += f" — {Path(self.settings.model_dir).name}"
            if is_random_model(self.settings.model_dir):
                title += " (demo model: random weights, it babbles)"
        self.setWindowTitle(title)

    # -- construction --------------------------------------------------------------------------------
    def _build_layout(self) -> None:
        from studio.gui.window_layout import build_layout, build_menus

        build_layout(self)
        build_menus(self)

    def _connect(self) -> None:
        bridge = self.bridge
        bridge.sig_state_changed.connect(self.on_engine_state)
        bridge.sig_hello.connect(self.on_hello)
        bridge.sig_progress.connect(self.engine_status.on_progress)
        bridge.sig_error.connect(self.on_engine_error)
        self.engine_status.sig_restart.connect(self.restart_engine)
        self.first_run.sig_model_ready.connect(self.on_model_chosen)
        self.first_run.sig_back.connect(lambda: self.pages.setCurrentWidget(self.studio_page))
        self.text_panel.sig_generate.connect(
            lambda request: self.takes.start(request, self.voice_panel.current_prompt())
        )
        self.text_panel.sig_stop.connect(self.stop_take)
        self.text_panel.sig_escape.connect(self.playback.stop)
        self.playback.sig_message.connect(self.show_message)
        self.takes.sig_started.connect(self.on_take_started)
        self.takes.sig_queued.connect(self.preview.wait_for_memory)
        self.takes.sig_paused.connect(self.preview.pause_for_memory)
        self.takes.sig_chunk.connect(self.on_take_chunk)
        self.takes.sig_finished.connect(self.on_take_finished)
        self.takes.sig_failed.connect(self.on_take_failed)
        self.takes.sig_kept.connect(self.on_take_kept)
        self.voice_panel.sig_reference_ready.connect(self.transcripts.request)
        self.transcripts.sig_heard.connect(
            lambda heard: self.voice_panel.transcript_box.set_automatic(
                heard.text, heard.language, heard.language_name
            )
        )
        self.transcripts.sig_unavailable.connect(self.voice_panel.transcript_box.set_unavailable)
        self.transcripts.sig_progress.connect(self.voice_panel.transcript_box.status.setText)
        self.voice_panel.transcript_box.sig_use_cross_lingual.connect(self.text_panel.use_cross_lingual)
        self.voice_panel.sig_prompt_changed.connect(self._on_prompt_changed)
        self.voice_head_start = VoiceHeadStart(self.bridge, self.voice_panel, self)
        self.voice_panel.sig_message.connect(self.show_message)
        self.takes_panel.sig_play.connect(self.play_take)
        self.takes_panel.sig_message.connect(self.show_message)
        self.takes_panel.details.sig_regenerate.connect(self.regenerate)
        self.takes_panel.details.sig_use_text.connect(self.use_take_text)
        self.script_view.sig_message.connect(self.show_message)
        self.script_view.sig_project.connect(self._remember_script)
        self.voice_panel.sig_prompt_changed.connect(
            self.script_view.refresh_voices
        )  # a voice saved or deleted
        self.preview.denoise.toggled.connect(self._on_denoise_toggled)
        self.denoiser.sig_done.connect(self.on_denoised)
        self.denoiser.sig_failed.connect(self.on_denoise_failed)

    # -- engine --------------------------------------------------------------------------------------
    @property
    def has_model(self) -> bool:
        """A model folder here, or a server that has its own."""
        return is_remote(self.settings) or not missing_model_files(self.settings.model_dir)

    def start_engine(self) -> None:
        """Spawn the engine (and load the model when one is set); returns at once."""
        self.gpu_panel.start()
        if not self.bridge.running:
            self.bridge.start(load_request(self.settings) if self.has_model else None)

    def restart_engine(self) -> None:
        self.takes.abandon()
        self.text_panel.set_busy(False)
        self.bridge.restart(load_request(self.settings) if self.has_model else None)

    def choose_model(self) -> None:
        """The model page, with a way back when a model is already in use."""
        self.first_run.back_button.setVisible(self.has_model)
        self.pages.setCurrentWidget(self.first_run)

    def on_model_chosen(self, folder: str) -> None:
        self.update_settings(dataclasses.replace(self.settings, model_dir=folder))
        self.pages.setCurrentWidget(self.studio_page)
        self._update_title()
        if is_random_model(folder):
            self.show_message("Demo model: random weights, so takes babble rather than speak.")
        if self.bridge.running:
            self.bridge.load_model(load_request(self.settings))
        else:
            self.start_engine()

    def on_hello(self, hello: Hello) -> None:
        self.gpu_panel.set_engine_pid(hello.pid)

    def on_engine_state(self, state: State) -> None:
        self.engine_status.on_state(state)
        ready = state.state in (EngineState.READY, EngineState.BUSY)
        self.text_panel.set_engine_ready(ready and self.has_model)
        if state.state == EngineState.CRASHED:
            self.gpu_panel.set_engine_pid(None)

    def on_engine_error(self, error: Error) -> None:
        """Engine-level failures go to the status bar and the log (the take controller handles take errors)."""
        if error.request_id is None:
            self.engine_status.on_engine_error(error)
            log.error("engine: %s\n%s", error.message, error.traceback)

    # -- takes ---------------------------------------------------------------------------------------
    def on_take_started(self, request) -> None:
        self.text_panel.set_busy(True)
        self.preview.begin_take(request.stream)
        self.gpu_panel.mark_take_started()
        self.playback.begin_live(request.request_id)  # opens at the rate of the take's first chunk

    def stop_take(self) -> None:
        """Stop: cancel the take in the engine and silence the preview at once."""
        self.takes.stop()
        self.playback.stop()

    def on_take_chunk(self, samples: np.ndarray, sample_rate: int, latency: float) -> None:
        self.preview.add_chunk(samples, sample_rate, latency)
        self.playback.feed_live(samples, sample_rate)

    def on_take_finished(self, stats, take) -> None:
        self.text_panel.set_busy(False)
        self.gpu_panel.mark_take_finished()
        if stats is not None:  # the latency the user waited (as streamed, as listed), not the engine's part
            waited = take.stats.get("gui_first_chunk_latency") if take is not None else None
            self.preview.finish_take(
                (waited or stats.first_chunk_latency) if stats.chunks else None,
                stats.rtf,
                stats.audio_seconds,
                stats.cancelled,
            )
        self.playback.end_live(take)
        if take is None:
            return
        self.takes_panel.refresh(select=take.id)
        if stats is not None:  # a broken-off take's failure message says where it was kept
            self.show_message(f"Saved {take.name} ({take.duration_s:.1f} s) to {self.store.folder}")
        if self.preview.denoise.isChecked():
            self.denoise_take(take.id)

    def on_take_failed(self, reason: str) -> None:
        self.text_panel.set_busy(False)
        self.playback.stop()
        self.preview.fail_take(reason)
        self.show_message(f"Take failed: {reason}")

    def _on_prompt_changed(self) -> None:
        """Generate needs a voice: say so on the button rather than failing after the click."""
        self.text_panel.set_has_voice(self.voice_panel.current_prompt() is not None)

    def on_take_kept(self, kept) -> None:
        """The disk refused a take: say so in plain words and offer to save it elsewhere."""
        self.show_message(kept.message())
        self.open_notice(KeptTakeNotice(kept, self.takes.kept, self, self.export_folder))

    def report_folder_problems(self) -> None:
        """Name each folder the studio cannot write to, with its cause; the studio carries on."""
        for problem in folder_problems(self.store, self.voices.folder):
            log.warning("%s", problem)
            self.show_message(problem)
            self.open_notice(QMessageBox(QMessageBox.Icon.Warning, "Folder problem", problem, parent=self))

    def play_take(self, take_id: str) -> None:
        self.playback.play_take(take_id)

    def use_take_text(self, take) -> None:
        self.session.apply({"text": take.text})
        self.text_panel.editor.setFocus()

    def regenerate(self, take, same_seed: bool = False) -> None:
        """A new take with a stored take's text, voice, mode, instruction and speed: a new random seed
        makes a new variation, ``same_seed`` the same take again."""
        state = take_state(take) if same_seed else {**take_state(take), "random_seed": True}
        if not self.session.apply(state):
            self.show_message(f"The voice “{take.voice}” is no longer saved: the take uses the current voice")
        elif not take.settings.get("voice_id"):
            self.show_message("That take's voice was an unsaved recording: the take uses the current voice")
        if self.text_panel.generate_button.isEnabled():
            self.text_panel.request_generate()
        else:
            self.show_message(
                f"{self.text_panel.generate_button.toolTip()}; the take's settings are in place"
            )

    # -- scripts -------------------------------------------------------------------------------------
    def open_script(self) -> None:
        self.views.setCurrentWidget(self.script_view)
        self.script_view.open_script()

    def _remember_script(self, folder: str) -> None:
        if self.settings.extra.get("script_project") != folder:
            self.settings.extra["script_project"] = folder
            self.update_settings(self.settings)

    # -- denoise -------------------------------------------------------------------------------------
    def _on_denoise_toggled(self, on: bool) -> None:
        self.update_settings(dataclasses.replace(self.settings, denoise=on))
        if on:
            self.denoiser.prestart()

    def denoise_take(self, take_id: str) -> None:
        audio, rate = self.store.load_audio(take_id, prefer_denoised=False)
        self.denoiser.submit(take_id, audio, rate)
        self.takes_panel.set_denoise_pending(take_id, True)
        self.preview.set_pending(len(self.denoiser.pending))

    def on_denoised(self, take_id: str, audio: np.ndarray) -> None:
        try:
            self.store.save_denoised(take_id, audio)
        except TakeError:
            pass  # deleted meanwhile
        self.takes_panel.set_denoise_pending(take_id, False)
        self.preview.set_pending(len(self.denoiser.pending))

    def on_denoise_failed(self, take_id: str, reason: str) -> None:
        self.takes_panel.set_denoise_pending(take_id, False)
        self.preview.set_pending(len(self.denoiser.pending))
        if not self._closing:
            self.show_message(f"Denoising failed: {reason}")

    # -- settings ------------------------------------------------------------------------------------
    def update_settings(self, new: Settings) -> None:
        self.settings = new
        try:
            save_settings(new)
        except OSError as exc:
            self.show_message(f"Could not save settings: {exc}")

    def open_settings(self) -> None:
        dialog = SettingsDialog(self.settings, self)
        if dialog.exec() != SettingsDialog.DialogCode.Accepted:
            return
        try:
            new = dialog.result_settings()
        except ValueError as exc:
            QMessageBox.warning(self, "Settings", sentence(str(exc)))
            return
        self.apply_settings(new)

    def apply_settings(self, new: Settings) -> None:
        old = self.settings
        self.update_settings(new)
        self.voice_panel.auto_transcribe = bool(new.asr_model)
        self.takes_panel.mastering = (new.export_sample_rate, new.export_loudness)
        if new.resolved_output_dir() != old.resolved_output_dir():
            self.store = TakeStore(new.resolved_output_dir())
            self.takes.store = self.store
            self.takes_panel.set_store(self.store)
            self.report_folder_problems()
        self.voice_panel.refresh_devices(new.audio_input_device)
        self._apply_output_device()
        self._update_title()
        move_engine(self, old, new)
        if engine_changed(old, new) and self.has_model:
            self.pages.setCurrentWidget(self.studio_page)
            self.restart_engine()

    def _on_input_device_picked(self, _index: int) -> None:
        device = self.voice_panel.input_device.currentData()
        name = device.description() if device is not None else ""
        self.update_settings(dataclasses.replace(self.settings, audio_input_device=name))

    def _apply_output_device(self) -> None:
        from PySide6.QtMultimedia import QMediaDevices

        wanted = self.settings.audio_output_device
        match = [d for d in QMediaDevices.audioOutputs() if d.description() == wanted] if wanted else []
        self.player.set_device(match[0] if match else None)

    def open_notice(self, box: QMessageBox) -> QMessageBox:
        """Show a non-blocking message box, kept alive until it is closed."""
        self._notices.append(box)
        box.finished.connect(lambda _result, b=box: self._notices.remove(b))
        box.open()
        return box

    def show_message(self, text: str) -> None:
        self.statusBar().showMessage(text, 8000)

    # -- closing -------------------------------------------------------------------------------------
    def closeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        self._closing = True
        self.voice_panel.stop()  # a recording still running ends here and is kept with the session
        self.session.flush()
        self.settings.extra["window_geometry"] = bytes(self.saveGeometry().toHex()).decode()
        self.update_settings(dataclasses.replace(self.settings, stream=self.text_panel.stream.isChecked()))
        self.hide()  # gone at once: ending an engine that is loading still takes a few seconds
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        """Stop everything this window started: engine, threads, timers, child processes."""
        self.session.stop()
        self.gpu_panel.stop()
        self.engine_status.stop()
        self.voice_panel.stop()
        self.playback.stop()
        self.first_run.cancel()
        self.denoiser.shutdown()
        self.jobs.shutdown()
        self.bridge.shutdown()
