"""The settings dialog's pages, one group of settings each. A page builds its editors from Settings,
names each after the field it edits (``editors``), and gives back the edited fields (``values``)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtMultimedia import QMediaDevices
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QWidget,
)

from studio.asr import DEFAULT_ASR_MODEL, SMALLER_ASR_MODELS
from studio.audio.export import OUTPUT_RATES
from studio.gui.settings.editors import device_combo, folder_row, option_value, option_widget
from studio.model_layout import COSYVOICE2, COSYVOICE3, folder_family, missing_files
from studio.request import FAST_FIRST_HOP_TOKENS
from studio.settings import BACKENDS, Settings
from studio.vllm_options import VLLM_OPTIONS

LOUDNESS_OFF = -40.5  # the loudness spin box's "as made"


class SettingsPage(QGroupBox):
    """One group of settings: ``editors`` by name, ``values()`` the Settings fields it edits."""

    def __init__(self, title: str):
        super().__init__(title)
        self.form = QFormLayout(self)
        self.editors: dict[str, QWidget] = {}

    def _editor(self, name: str, widget: QWidget) -> QWidget:
        self.editors[name] = widget
        return widget

    def values(self) -> dict:
        raise NotImplementedError


class FoldersPage(SettingsPage):
    """The model folder, the takes folder, and how takes are exported (rate, loudness)."""

    def __init__(self, settings: Settings):
        super().__init__("Folders")
        self.model_dir = self._editor("model_dir", QLineEdit(settings.model_dir))
        self.output_dir = self._editor("output_dir", QLineEdit(settings.output_dir))
        self.output_dir.setPlaceholderText(str(settings.resolved_output_dir()))
        self.form.addRow("Model folder", folder_row(self.model_dir, "CosyVoice2 or CosyVoice3 model folder"))
        self.model_kind = QLabel()  # which family the folder is, or what it lacks
        self.model_kind.setWordWrap(True)
        self.model_kind.setObjectName("Hint")
        self.form.addRow("", self.model_kind)
        self.model_dir.textChanged.connect(self._describe_model)
        self._describe_model(self.model_dir.text())
        self.form.addRow("Takes folder", folder_row(self.output_dir, "Folder for takes"))
        self.form.addRow("Exports", self._export_row(settings))

    def _describe_model(self, text: str) -> None:
        """Name the folder's model family, or say what keeps it from loading."""
        folder = text.strip()
        if not folder:
            self.model_kind.setText("No model folder chosen")
            return
        family, missing = folder_family(folder), missing_files(folder)
        if not Path(folder).expanduser().is_dir():
            self.model_kind.setText("Not a folder")
        elif family is None:
            self.model_kind.setText(
                f"Not a model folder: no {COSYVOICE2.yaml_file} or {COSYVOICE3.yaml_file}"
            )
        elif missing:
            self.model_kind.setText(f"An incomplete {family.folder_kind}: missing {', '.join(missing)}")
        else:
            self.model_kind.setText(f"A {family.folder_kind}")

    def _export_row(self, settings: Settings) -> QWidget:
        """The rate and loudness of exported takes (one row: the dialog fits 1280x720)."""
        self.export_rate = self._editor("export_rate", QComboBox())
        self.export_rate.addItem("Model's rate", 0)
        for rate in OUTPUT_RATES:
            self.export_rate.addItem(f"{rate / 1000:g} kHz", rate)
        self.export_rate.setCurrentIndex(max(0, self.export_rate.findData(settings.export_sample_rate)))
        self.export_loudness = self._editor("export_loudness", QDoubleSpinBox())
        self.export_loudness.setRange(LOUDNESS_OFF, -6.0)
        self.export_loudness.setSingleStep(0.5)
        self.export_loudness.setSuffix(" LUFS")
        self.export_loudness.setSpecialValueText("loudness as made")  # the minimum
        self.export_loudness.setValue(settings.export_loudness or LOUDNESS_OFF)
        self.export_loudness.setToolTip(
            "Integrated loudness of exported takes (EBU R128), under a -1 dBTP true-peak ceiling; -20 suits speech"
        )
        row = QWidget()
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.export_rate)
        layout.addWidget(self.export_loudness, 1)
        return row

    def values(self) -> dict:
        loudness = self.export_loudness.value()
        return {
            "model_dir": self.model_dir.text().strip(),
            "output_dir": self.output_dir.text().strip(),
            "export_sample_rate": self.export_rate.currentData(),
            "export_loudness_lufs": 0.0 if loudness <= LOUDNESS_OFF else loudness,
        }


class LocationPage(SettingsPage):
    """Where the engine runs: this computer, or a `cosyvoice-studio serve` reached by URL and key."""

    def __init__(self, settings: Settings):
        super().__init__("Engine location")
        self.engine_where = self._editor("engine_where", QComboBox())
        self.engine_where.addItem("This computer", "local")
        self.engine_where.addItem("A server (cosyvoice-studio serve)", "server")
        self.engine_where.setCurrentIndex(1 if settings.engine_url else 0)
        self.engine_url = self._editor("engine_url", QLineEdit(settings.engine_url))
        self.engine_url.setPlaceholderText("http://gpu-box:8080")
        self.engine_key = self._editor("engine_key", QLineEdit(settings.engine_key))
        self.engine_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.engine_key.setPlaceholderText("API key (empty: none)")
        self.form.addRow("Runs on", self.engine_where)
        self.form.addRow("Server URL", self.engine_url)
        self.form.addRow("API key", self.engine_key)
        self.engine_where.currentIndexChanged.connect(self._show_rows)
        self._show_rows()

    def _remote(self) -> bool:
        return self.engine_where.currentData() == "server"

    def _show_rows(self) -> None:
        for widget in (self.engine_url, self.engine_key):
            self.form.setRowVisible(widget, self._remote())

    def values(self) -> dict:
        return {
            "engine_url": self.engine_url.text().strip() if self._remote() else "",
            "engine_key": self.engine_key.text().strip(),
        }


class EnginePage(SettingsPage):
    """The backend, precision, VRAM budget and vLLM's options. vLLM's options show only with the vLLM
    backend, the GPU-only ones (fp16, memory share, CUDA graphs) only where NVML finds an NVIDIA GPU;
    a hidden option keeps its value."""

    def __init__(self, settings: Settings, gpu_names: list[str], why_no_gpu: str):
        super().__init__("Engine")
        self.gpu_names = gpu_names
        self.backend = self._editor("backend", QComboBox())
        for name in BACKENDS:
            self.backend.addItem({"pytorch": "PyTorch", "vllm": "vLLM (faster LLM)"}[name], name)
        self.backend.setCurrentIndex(BACKENDS.index(settings.backend))
        self.form.addRow("Backend", self.backend)
        self.gpu_note = self._editor("gpu_note", self._gpu_note(why_no_gpu))
        self.form.addRow("", self.gpu_note)
        self.fp16 = self._editor("fp16", QCheckBox("Half precision (fp16) for flow and vocoder"))
        self.fp16.setChecked(settings.fp16)
        self.form.addRow("", self.fp16)
        self.form.setRowVisible(self.fp16, bool(gpu_names))
        self.vram_budget = self._editor("vram_budget", self._vram_budget(settings))
        self.form.addRow("VRAM budget (0 = auto)", self.vram_budget)
        self.form.setRowVisible(self.vram_budget, bool(gpu_names))
        for option in VLLM_OPTIONS:
            widget = self._editor(option.name, option_widget(option, getattr(settings, option.name)))
            self.form.addRow("" if option.kind is bool else option.label, widget)
        self.backend.currentIndexChanged.connect(self._show_vllm_rows)
        self._show_vllm_rows()

    def _gpu_note(self, why_no_gpu: str) -> QLabel:
        names = self.gpu_names
        note = QLabel(
            f"GPU: {', '.join(names)}"
            if names
            else "No NVIDIA GPU found: the engine runs on the CPU; the GPU options are hidden."
        )
        if not names:  # the reason, and what is hidden, on hover: the dialog fits 1280x720
            note.setToolTip(
                f"{why_no_gpu or 'NVML saw no GPU'}. Hidden: fp16, the VRAM budget, "
                "vLLM's memory share and CUDA graphs."
            )
        note.setObjectName("Hint")
        note.setWordWrap(True)
        return note

    @staticmethod
    def _vram_budget(settings: Settings) -> QDoubleSpinBox:
        budget = QDoubleSpinBox()
        budget.setRange(-1.0, 1024.0)
        budget.setSingleStep(1.0)
        budget.setSuffix(" GiB")
        budget.setSpecialValueText("no budget")  # the minimum, -1
        budget.setValue(settings.vram_budget_gb if settings.vram_budget_gb >= 0 else -1.0)
        budget.setToolTip(
            "GPU memory the studio may use: vLLM, the flow and the takes are sized from it; takes beyond it "
            "wait. 0 = 80% of what is free when the engine starts"
        )
        return budget

    def _show_vllm_rows(self) -> None:
        vllm = self.backend.currentData() == "vllm"
        for option in VLLM_OPTIONS:
            shown = vllm and (self.gpu_names or not option.gpu_only)
            self.form.setRowVisible(self.editors[option.name], bool(shown))

    def values(self) -> dict:
        return {
            "backend": self.backend.currentData(),
            "fp16": self.fp16.isChecked(),
            "vram_budget_gb": round(self.vram_budget.value(), 2),
            **{option.name: option_value(option, self.editors[option.name]) for option in VLLM_OPTIONS},
        }


class TranscriptsPage(SettingsPage):
    """The Whisper model that transcribes references (empty: no automatic transcripts)."""

    def __init__(self, settings: Settings):
        super().__init__("Transcripts")
        self.asr_model = self._editor("asr_model", QComboBox())
        self.asr_model.setEditable(True)
        self.asr_model.addItems([DEFAULT_ASR_MODEL, *SMALLER_ASR_MODELS])
        self.asr_model.setCurrentText(settings.asr_model)
        self.asr_model.setToolTip(
            "Whisper model for automatic transcripts: a hub id (downloaded once, with resume) or a local "
            "folder; empty turns automatic transcripts off"
        )
        self.form.addRow("Whisper model", self.asr_model)

    def values(self) -> dict:
        return {"asr_model": self.asr_model.currentText().strip()}


class AudioPage(SettingsPage):
    """The microphone, the playback device, and how soon a streamed take starts playing."""

    def __init__(self, settings: Settings):
        super().__init__("Audio")
        self.input_device = self._editor(
            "input_device", device_combo(QMediaDevices.audioInputs(), settings.audio_input_device)
        )
        self.output_device = self._editor(
            "output_device", device_combo(QMediaDevices.audioOutputs(), settings.audio_output_device)
        )
        self.form.addRow("Microphone", self.input_device)
        self.form.addRow("Playback", self.output_device)
        self.fast_first_audio = self._editor(
            "fast_first_audio",
            QCheckBox(f"Start playing sooner (first chunk after {FAST_FIRST_HOP_TOKENS} tokens)"),
        )
        self.fast_first_audio.setChecked(settings.fast_first_audio)
        self.fast_first_audio.setToolTip(
            f"Streaming takes play their first chunk after {FAST_FIRST_HOP_TOKENS} speech tokens instead of 25; "
            "that first 0.4 s is computed without the rest of its chunk, so it may differ slightly from a "
            "take made without this"
        )
        self.form.addRow("", self.fast_first_audio)

    def values(self) -> dict:
        return {
            "audio_input_device": self.input_device.currentData(),
            "audio_output_device": self.output_device.currentData(),
            "fast_first_audio": self.fast_first_audio.isChecked(),
        }
