"""The Script view's export options in one row: format, rate, loudness, the gap between lines, subtitles and
the Export… button; ``render_settings()`` gives them as the script renderer takes them, ``options()`` and
``apply_options()`` keep them across sessions."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QLabel, QPushButton, QSpinBox, QWidget

from studio.audio.export import OUTPUT_RATES
from studio.gui.take.takes_panel import EXPORT_FORMATS
from studio.gui.widgets.flow_layout import FlowLayout
from studio.script.manifest import RenderSettings

PARAGRAPH_S = 0.75  # a blank line's pause: at least this, or three gaps


class ScriptExportBar(QWidget):
    sig_changed = Signal()  # an option changed (the session keeps them)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.format_combo = QComboBox()
        for key, label in EXPORT_FORMATS:
            self.format_combo.addItem(label, key)
        self.rate_combo = QComboBox()
        self.rate_combo.addItem("Model's rate", 0)
        for rate in OUTPUT_RATES:
            self.rate_combo.addItem(f"{rate / 1000:g} kHz", rate)
        self.loudness_check = QCheckBox("Loudness")
        self.loudness = QDoubleSpinBox(
            minimum=-40.0, maximum=-6.0, value=-20.0, suffix=" LUFS", singleStep=0.5
        )
        self.loudness.setToolTip(
            "Integrated loudness of every line (EBU R128) under a -1 dBTP true-peak ceiling"
        )
        self.gap = QSpinBox(minimum=0, maximum=5000, value=250, suffix=" ms gap", singleStep=50)
        self.gap.setToolTip("Silence between lines in the joined file (0: a 20 ms crossfade)")
        self.subtitles = QCheckBox("Subtitles (SRT, VTT)", checked=True)
        self.export_button = QPushButton("Export…")
        row = FlowLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for widget in (
            QLabel("Export as"),
            self.format_combo,
            self.rate_combo,
            self.loudness_check,
            self.loudness,
            self.gap,
            self.subtitles,
            self.export_button,
        ):
            row.addWidget(widget)
        for signal in (
            self.format_combo.currentIndexChanged,
            self.rate_combo.currentIndexChanged,
            self.loudness_check.toggled,
            self.loudness.valueChanged,
            self.gap.valueChanged,
            self.subtitles.toggled,
        ):
            signal.connect(lambda *_: self.sig_changed.emit())

    def render_settings(self) -> RenderSettings:
        gap = self.gap.value() / 1000
        loudness = self.loudness.value() if self.loudness_check.isChecked() else None
        return RenderSettings(
            format=self.format_combo.currentData(),
            sample_rate=self.rate_combo.currentData(),
            gap_s=gap,
            paragraph_s=max(PARAGRAPH_S, 3 * gap),
            loudness_lufs=loudness,
        )

    def options(self) -> dict[str, Any]:
        return {
            "format": self.format_combo.currentData(),
            "rate": self.rate_combo.currentData(),
            "loudness_on": self.loudness_check.isChecked(),
            "loudness": self.loudness.value(),
            "gap_ms": self.gap.value(),
            "subtitles": self.subtitles.isChecked(),
        }

    def apply_options(self, options: dict[str, Any]) -> None:
        """Set what ``options`` names (as `options` gives them); unknown values are skipped."""
        for combo, key in ((self.format_combo, "format"), (self.rate_combo, "rate")):
            index = combo.findData(options.get(key)) if key in options else -1
            if index >= 0:
                combo.setCurrentIndex(index)
        if isinstance(options.get("loudness"), (int, float)):
            self.loudness.setValue(float(options["loudness"]))
        if isinstance(options.get("gap_ms"), int):
            self.gap.setValue(options["gap_ms"])
        for box, key in ((self.loudness_check, "loudness_on"), (self.subtitles, "subtitles")):
            if isinstance(options.get(key), bool):
                box.setChecked(options[key])
