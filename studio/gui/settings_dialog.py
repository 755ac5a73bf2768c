"""The settings dialog: engine knobs (backend, precision, vLLM options), model and output folders, and
audio devices. It edits a copy of Settings; the window saves it and applies what changed. vLLM's options
show only with the vLLM backend, and the GPU-only ones (fp16, memory share, CUDA graphs) only where NVML
finds an NVIDIA GPU; a hidden option keeps its value."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtMultimedia import QMediaDevices
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from studio.asr import DEFAULT_ASR_MODEL, SMALLER_ASR_MODELS
from studio.request import FAST_FIRST_HOP_TOKENS
from studio.settings import BACKENDS, Settings
from studio.vllm_options import VLLM_OPTION_NAMES, VLLM_OPTIONS, VllmOption

#: Fields whose change needs the engine to reload the model.
ENGINE_FIELDS = (
    "model_dir",
    "backend",
    "fp16",
    "vram_budget_gb",
    "engine_url",
    "engine_key",
    *VLLM_OPTION_NAMES,
)


def _folder_row(edit: QLineEdit, caption: str) -> QWidget:
    row = QWidget()
    layout = QHBoxLayout(row)
    layout.setContentsMargins(0, 0, 0, 0)
    browse = QPushButton("Browse…")

    def choose() -> None:
        folder = QFileDialog.getExistingDirectory(row, caption, edit.text() or str(Path.home()))
        if folder:
            edit.setText(folder)

    browse.clicked.connect(choose)
    layout.addWidget(edit, 1)
    layout.addWidget(browse)
    return row


def _option_widget(option: VllmOption, value) -> QWidget:
    """The editor of one vLLM option, set to ``value``."""
    if option.kind is bool:
        widget = QCheckBox(option.label)
        widget.setChecked(bool(value))
    elif option.choices:
        widget = QComboBox()
        widget.addItems(option.choices)
        widget.setCurrentText(str(value))
    else:
        widget = QDoubleSpinBox() if option.kind is float else QSpinBox()
        low, high = option.ui_range
        widget.setRange(option.kind(low), option.kind(high))
        if option.ui_step is not None:
            widget.setSingleStep(option.ui_step)
        widget.setValue(value)
    return widget


def _option_value(option: VllmOption, widget: QWidget):
    if option.kind is bool:
        return widget.isChecked()
    if option.choices:
        return widget.currentText()
    return round(widget.value(), 3) if option.kind is float else widget.value()


def find_gpus() -> tuple[list[str], str]:
    """(names of the NVIDIA GPUs NVML sees, why none when empty)."""
    from studio.gpu.nvml import NvmlUnavailable, query_gpus

    try:
        return [gpu.name for gpu in query_gpus()], ""
    except NvmlUnavailable as exc:
        return [], str(exc)


def _device_combo(devices, current: str) -> QComboBox:
    combo = QComboBox()
    combo.addItem("System default", "")
    for device in devices:
        combo.addItem(device.description(), device.description())
        if device.description() == current:
            combo.setCurrentIndex(combo.count() - 1)
    return combo


LOUDNESS_OFF = -40.5  # the loudness spin box's "as made"


class SettingsDialog(QDialog):
    """Edit settings; ``result_settings()`` after ``accept`` gives the new values."""

    def __init__(
        self, settings: Settings, parent: QWidget | None = None, gpus: tuple[list[str], str] | None = None
    ):
        super().__init__(parent)
        self.gpu_names, why_no_gpu = gpus if gpus is not None else find_gpus()
        self.setWindowTitle("Settings")
        self.setMinimumWidth(520)
        self._original = settings

        self.model_dir = QLineEdit(settings.model_dir)
        self.output_dir = QLineEdit(settings.output_dir)
        self.output_dir.setPlaceholderText(str(settings.resolved_output_dir()))
        folders = QGroupBox("Folders")
        form = QFormLayout(folders)
        form.addRow("Model folder", _folder_row(self.model_dir, "CosyVoice2 model folder"))
        form.addRow("Takes folder", _folder_row(self.output_dir, "Folder for takes"))
        form.addRow("Exports", self._export_row(settings))

        self.backend = QComboBox()
        for name in BACKENDS:
            self.backend.addItem({"pytorch": "PyTorch", "vllm": "vLLM (faster LLM)"}[name], name)
        self.backend.setCurrentIndex(BACKENDS.index(settings.backend))
        self.fp16 = QCheckBox("Half precision (fp16) for flow and vocoder")
        self.fp16.setChecked(settings.fp16)
        engine = QGroupBox("Engine")
        form = QFormLayout(engine)
        self._engine_form = form
        form.addRow("Backend", self.backend)
        self.gpu_note = QLabel(
            f"GPU: {', '.join(self.gpu_names)}"
            if self.gpu_names
            else "No NVIDIA GPU found: the engine runs on the CPU; the GPU options are hidden."
        )
        if not self.gpu_names:  # the reason, and what is hidden, on hover: the dialog fits 1280x720
            self.gpu_note.setToolTip(
                f"{why_no_gpu or 'NVML saw no GPU'}. Hidden: fp16, the VRAM budget, "
                "vLLM's memory share and CUDA graphs."
            )
        self.gpu_note.setObjectName("Hint")
        self.gpu_note.setWordWrap(True)
        form.addRow("", self.gpu_note)
        form.addRow("", self.fp16)
        form.setRowVisible(self.fp16, bool(self.gpu_names))
        self.vram_budget = QDoubleSpinBox()
        self.vram_budget.setRange(-1.0, 1024.0)
        self.vram_budget.setSingleStep(1.0)
        self.vram_budget.setSuffix(" GiB")
        self.vram_budget.setSpecialValueText("no budget")  # the minimum, -1
        self.vram_budget.setValue(settings.vram_budget_gb if settings.vram_budget_gb >= 0 else -1.0)
        self.vram_budget.setToolTip(
            "GPU memory the studio may use: vLLM, the flow and the takes are sized from it; takes beyond it "
            "wait. 0 = 80% of what is free when the engine starts"
        )
        form.addRow("VRAM budget (0 = auto)", self.vram_budget)
        form.setRowVisible(self.vram_budget, bool(self.gpu_names))
        for option in VLLM_OPTIONS:  # one editor per option, kept as an attribute of the same name
            widget = _option_widget(option, getattr(settings, option.name))
            setattr(self, option.name, widget)
            form.addRow("" if option.kind is bool else option.label, widget)
        self.backend.currentIndexChanged.connect(self._show_engine_rows)
        self._show_engine_rows()

        self.engine_where = QComboBox()
        self.engine_where.addItem("This computer", "local")
        self.engine_where.addItem("A server (cosyvoice-studio serve)", "server")
        self.engine_where.setCurrentIndex(1 if settings.engine_url else 0)
        self.engine_url = QLineEdit(settings.engine_url)
        self.engine_url.setPlaceholderText("http://gpu-box:8080")
        self.engine_key = QLineEdit(settings.engine_key)
        self.engine_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.engine_key.setPlaceholderText("API key (empty: none)")
        location = QGroupBox("Engine location")
        self._location_form = QFormLayout(location)
        self._location_form.addRow("Runs on", self.engine_where)
        self._location_form.addRow("Server URL", self.engine_url)
        self._location_form.addRow("API key", self.engine_key)
        self.engine_where.currentIndexChanged.connect(self._show_location_rows)
        self._show_location_rows()

        self.asr_model = QComboBox()
        self.asr_model.setEditable(True)
        self.asr_model.addItems([DEFAULT_ASR_MODEL, *SMALLER_ASR_MODELS])
        self.asr_model.setCurrentText(settings.asr_model)
        self.asr_model.setToolTip(
            "Whisper model for automatic transcripts: a hub id (downloaded once, with resume) or a local "
            "folder; empty turns automatic transcripts off"
        )
        transcripts = QGroupBox("Transcripts")
        form = QFormLayout(transcripts)
        form.addRow("Whisper model", self.asr_model)

        self.input_device = _device_combo(QMediaDevices.audioInputs(), settings.audio_input_device)
        self.output_device = _device_combo(QMediaDevices.audioOutputs(), settings.audio_output_device)
        audio = QGroupBox("Audio")
        form = QFormLayout(audio)
        form.addRow("Microphone", self.input_device)
        form.addRow("Playback", self.output_device)
        self.fast_first_audio = QCheckBox(
            f"Start playing sooner (first chunk after {FAST_FIRST_HOP_TOKENS} tokens)"
        )
        self.fast_first_audio.setChecked(settings.fast_first_audio)
        self.fast_first_audio.setToolTip(
            f"Streaming takes play their first chunk after {FAST_FIRST_HOP_TOKENS} speech tokens instead of 25; "
            "that first 0.4 s is computed without the rest of its chunk, so it may differ slightly from a "
            "take made without this"
        )
        form.addRow("", self.fast_first_audio)

        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        page = QWidget()
        groups = QVBoxLayout(page)
        groups.setContentsMargins(0, 0, 0, 0)
        for group in (folders, location, engine, transcripts, audio):
            groups.addWidget(group)
        groups.addStretch(1)
        scroll = QScrollArea()  # a short screen scrolls the groups rather than squeezing their rows
        scroll.setWidget(page)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        room = (self.screen().availableGeometry().height() - 120) if self.screen() else 600
        scroll.setMinimumHeight(max(240, min(page.sizeHint().height(), room)))  # all of it, where it fits
        layout = QVBoxLayout(self)
        layout.addWidget(scroll, 1)
        layout.addWidget(buttons)

    def _export_row(self, settings: Settings) -> QWidget:
        """The rate and loudness of exported takes (one row: the dialog fits 1280x720)."""
        from PySide6.QtWidgets import QHBoxLayout

        from studio.audio.export import OUTPUT_RATES

        self.export_rate = QComboBox()
        self.export_rate.addItem("Model's rate", 0)
        for rate in OUTPUT_RATES:
            self.export_rate.addItem(f"{rate / 1000:g} kHz", rate)
        self.export_rate.setCurrentIndex(max(0, self.export_rate.findData(settings.export_sample_rate)))
        self.export_loudness = QDoubleSpinBox()
        self.export_loudness.setRange(LOUDNESS_OFF, -6.0)
        self.export_loudness.setSingleStep(0.5)
        self.export_loudness.setSuffix(" LUFS")
        self.export_loudness.setSpecialValueText("loudness as made")  # the minimum
        self.export_loudness.setValue(settings.export_loudness or LOUDNESS_OFF)
        self.export_loudness.setToolTip(
            "Integrated loudness of exported takes (EBU R128), under a -1 dBTP "
            "true-peak ceiling; -20 suits speech"
        )
        row = QWidget()
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.export_rate)
        layout.addWidget(self.export_loudness, 1)
        return row

    def _show_location_rows(self) -> None:
        remote = self.engine_where.currentData() == "server"
        for widget in (self.engine_url, self.engine_key):
            self._location_form.setRowVisible(widget, remote)

    def _show_engine_rows(self) -> None:
        vllm = self.backend.currentData() == "vllm"
        for option in VLLM_OPTIONS:
            shown = vllm and (self.gpu_names or not option.gpu_only)
            self._engine_form.setRowVisible(getattr(self, option.name), bool(shown))

    def option_shown(self, name: str) -> bool:
        """Whether the editor of this setting is shown (tests, and what a user sees)."""
        return not getattr(self, name).isHidden()

    def result_settings(self) -> Settings:
        """The edited settings (validated by Settings itself)."""
        return dataclasses.replace(
            self._original,
            model_dir=self.model_dir.text().strip(),
            output_dir=self.output_dir.text().strip(),
            backend=self.backend.currentData(),
            fp16=self.fp16.isChecked(),
            vram_budget_gb=round(self.vram_budget.value(), 2),
            **{option.name: _option_value(option, getattr(self, option.name)) for option in VLLM_OPTIONS},
            asr_model=self.asr_model.currentText().strip(),
            engine_url=self.engine_url.text().strip() if self.engine_where.currentData() == "server" else "",
            engine_key=self.engine_key.text().strip(),
            audio_input_device=self.input_device.currentData(),
            audio_output_device=self.output_device.currentData(),
            fast_first_audio=self.fast_first_audio.isChecked(),
            export_sample_rate=self.export_rate.currentData(),
            export_loudness_lufs=0.0
            if self.export_loudness.value() <= LOUDNESS_OFF
            else self.export_loudness.value(),
        )


def engine_changed(old: Settings, new: Settings) -> bool:
    """True when the engine must reload the model for ``new`` to take effect."""
    return any(getattr(old, name) != getattr(new, name) for name in ENGINE_FIELDS)
