"""The settings dialog: its pages in one scrolling column, OK and Cancel. It edits a copy of Settings;
``result_settings()`` gives the edited copy, the window saves it and applies what changed."""

from __future__ import annotations

import dataclasses

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QScrollArea, QVBoxLayout, QWidget

from studio.gui.settings.pages import AudioPage, EnginePage, FoldersPage, LocationPage, TranscriptsPage
from studio.settings import Settings
from studio.vllm_options import VLLM_OPTION_NAMES

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


def find_gpus() -> tuple[list[str], str]:
    """(names of the NVIDIA GPUs NVML sees, why none when empty)."""
    from studio.gpu.nvml import NvmlUnavailable, query_gpus

    try:
        return [gpu.name for gpu in query_gpus()], ""
    except NvmlUnavailable as exc:
        return [], str(exc)


class SettingsDialog(QDialog):
    """Edit settings; ``result_settings()`` after ``accept`` gives the new values. Every page's editors
    are also attributes of the dialog, named after what they edit (``dialog.backend``)."""

    def __init__(
        self, settings: Settings, parent: QWidget | None = None, gpus: tuple[list[str], str] | None = None
    ):
        super().__init__(parent)
        self.gpu_names, why_no_gpu = gpus if gpus is not None else find_gpus()
        self.setWindowTitle("Settings")
        self.setMinimumWidth(520)
        self._original = settings
        self.pages = (
            FoldersPage(settings),
            LocationPage(settings),
            EnginePage(settings, self.gpu_names, why_no_gpu),
            TranscriptsPage(settings),
            AudioPage(settings),
        )
        for page in self.pages:
            for name, editor in page.editors.items():
                setattr(self, name, editor)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self._scrolling(self.pages), 1)
        layout.addWidget(buttons)

    def _scrolling(self, pages) -> QScrollArea:
        """The pages in one column; a short screen scrolls them rather than squeezing their rows."""
        column = QWidget()
        groups = QVBoxLayout(column)
        groups.setContentsMargins(0, 0, 0, 0)
        for page in pages:
            groups.addWidget(page)
        groups.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidget(column)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        room = (self.screen().availableGeometry().height() - 120) if self.screen() else 600
        scroll.setMinimumHeight(max(240, min(column.sizeHint().height(), room)))  # all of it, where it fits
        return scroll

    def option_shown(self, name: str) -> bool:
        """Whether the editor of this setting is shown (tests, and what a user sees)."""
        return not getattr(self, name).isHidden()

    def result_settings(self) -> Settings:
        """The edited settings (validated by Settings itself)."""
        edited = {name: value for page in self.pages for name, value in page.values().items()}
        return dataclasses.replace(self._original, **edited)


def engine_changed(old: Settings, new: Settings) -> bool:
    """True when the engine must reload the model for ``new`` to take effect."""
    return any(getattr(old, name) != getattr(new, name) for name in ENGINE_FIELDS)
