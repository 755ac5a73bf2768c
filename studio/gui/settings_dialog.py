"""The settings dialog: engine knobs (backend, precision, vLLM options), model and output folders, and
audio devices. It edits a copy of Settings; the window saves it and applies what changed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

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
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from studio.settings import BACKENDS, VLLM_DTYPES, Settings

#: Fields whose change needs the engine to reload the model.
ENGINE_FIELDS = (
    "model_dir",
    "backend",
    "fp16",
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enforce_eager",
    "dtype",
    "max_model_len",
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


def _device_combo(devices, current: str) -> QComboBox:
    combo = QComboBox()
    combo.addItem("System default", "")
    for device in devices:
        combo.addItem(device.description(), device.description())
        if device.description() == current:
            combo.setCurrentIndex(combo.count() - 1)
    return combo


class SettingsDialog(QDialog):
    """Edit settings; ``result_settings()`` after ``accept`` gives the new values."""

    def __init__(self, settings: Settings, parent: QWidget | None = None):
        super().__init__(parent)
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

        self.backend = QComboBox()
        for name in BACKENDS:
            self.backend.addItem({"pytorch": "PyTorch", "vllm": "vLLM (faster LLM)"}[name], name)
        self.backend.setCurrentIndex(BACKENDS.index(settings.backend))
        self.fp16 = QCheckBox("Half precision (fp16) for flow and vocoder")
        self.fp16.setChecked(settings.fp16)
        self.gpu_memory_utilization = QDoubleSpinBox()
        self.gpu_memory_utilization.setRange(0.05, 1.0)
        self.gpu_memory_utilization.setSingleStep(0.05)
        self.gpu_memory_utilization.setValue(settings.gpu_memory_utilization)
        self.max_num_seqs = QSpinBox()
        self.max_num_seqs.setRange(1, 1024)
        self.max_num_seqs.setValue(settings.max_num_seqs)
        self.max_num_batched_tokens = QSpinBox()
        self.max_num_batched_tokens.setRange(64, 1 << 20)
        self.max_num_batched_tokens.setValue(settings.max_num_batched_tokens)
        self.max_model_len = QSpinBox()
        self.max_model_len.setRange(256, 1 << 17)
        self.max_model_len.setValue(settings.max_model_len)
        self.enforce_eager = QCheckBox("Eager mode (no CUDA graphs: starts faster, runs slower)")
        self.enforce_eager.setChecked(settings.enforce_eager)
        self.dtype = QComboBox()
        self.dtype.addItems(VLLM_DTYPES)
        self.dtype.setCurrentText(settings.dtype)
        engine = QGroupBox("Engine")
        form = QFormLayout(engine)
        form.addRow("Backend", self.backend)
        form.addRow("", self.fp16)
        form.addRow("vLLM GPU memory share", self.gpu_memory_utilization)
        form.addRow("vLLM max sequences", self.max_num_seqs)
        form.addRow("vLLM max batched tokens", self.max_num_batched_tokens)
        form.addRow("vLLM max model length", self.max_model_len)
        form.addRow("vLLM dtype", self.dtype)
        form.addRow("", self.enforce_eager)

        self.input_device = _device_combo(QMediaDevices.audioInputs(), settings.audio_input_device)
        self.output_device = _device_combo(QMediaDevices.audioOutputs(), settings.audio_output_device)
        audio = QGroupBox("Audio devices")
        form = QFormLayout(audio)
        form.addRow("Microphone", self.input_device)
        form.addRow("Playback", self.output_device)

        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        for group in (folders, engine, audio):
            layout.addWidget(group)
        layout.addWidget(buttons)

    def result_settings(self) -> Settings:
        """The edited settings (validated by Settings itself)."""
        return dataclasses.replace(
            self._original,
            model_dir=self.model_dir.text().strip(),
            output_dir=self.output_dir.text().strip(),
            backend=self.backend.currentData(),
            fp16=self.fp16.isChecked(),
            gpu_memory_utilization=round(self.gpu_memory_utilization.value(), 3),
            max_num_seqs=self.max_num_seqs.value(),
            max_num_batched_tokens=self.max_num_batched_tokens.value(),
            max_model_len=self.max_model_len.value(),
            enforce_eager=self.enforce_eager.isChecked(),
            dtype=self.dtype.currentText(),
            audio_input_device=self.input_device.currentData(),
            audio_output_device=self.output_device.currentData(),
        )


def engine_changed(old: Settings, new: Settings) -> bool:
    """True when the engine must reload the model for ``new`` to take effect."""
    return any(getattr(old, name) != getattr(new, name) for name in ENGINE_FIELDS)
