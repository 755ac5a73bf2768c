"""Editors the settings pages share: a folder with Browse…, a vLLM option's editor, an audio device list."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QWidget,
)

from studio.vllm_options import VllmOption


def folder_row(edit: QLineEdit, caption: str) -> QWidget:
    """``edit`` with a Browse… button that fills it from a folder dialog."""
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


def option_widget(option: VllmOption, value) -> QWidget:
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


def option_value(option: VllmOption, widget: QWidget):
    """The value ``widget`` (made by ``option_widget``) holds, as the option's type."""
    if option.kind is bool:
        return widget.isChecked()
    if option.choices:
        return widget.currentText()
    return round(widget.value(), 3) if option.kind is float else widget.value()


def device_combo(devices, current: str) -> QComboBox:
    """The system default and every device of ``devices`` (QAudioDevice), ``current`` picked by name."""
    combo = QComboBox()
    combo.addItem("System default", "")
    for device in devices:
        combo.addItem(device.description(), device.description())
        if device.description() == current:
            combo.setCurrentIndex(combo.count() - 1)
    return combo
