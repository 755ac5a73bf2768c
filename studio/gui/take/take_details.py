"""The details of the take selected in the list: its full text and everything it was made with (voice,
mode, instruction, seed, speed, backend, first-audio latency, RTF, date), and what to do with it:
regenerate with these settings, use its text, show its file."""

from __future__ import annotations

import html
import time

from PySide6.QtCore import Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QMenu,
    QPushButton,
    QSizePolicy,
    QStyle,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from studio.request import Mode, RequestError
from studio.takes import Take

# the summary asks for the height of its settings and of this many lines of the take's text; a longer text
# scrolls, so the window keeps fitting 1280x720
TEXT_LINES_SHOWN = 2
SHORT_VALUE_CHARS = 12  # values up to this long share a row (two to a row), longer ones have their own


def first_audio_latency(take: Take) -> float | None:
    """What the user waited for the first sound: the GUI's measure (click to first chunk), else the engine's."""
    for key in ("gui_first_chunk_latency", "first_chunk_latency"):
        value = take.stats.get(key)
        if isinstance(value, (int, float)):
            return float(value)
    return None


def _mode_label(value: str) -> str:
    try:
        return Mode.parse(value).label
    except RequestError:
        return value or "–"


def describe_take(take: Take) -> list[tuple[str, str]]:
    """(label, value) rows of what a take was made with, in the order the pane shows them."""
    stats, settings = take.stats, take.settings
    rows = [("Voice", take.voice or "an unsaved recording"), ("Mode", _mode_label(take.mode))]
    if settings.get("instruct"):
        rows.append(("Instruction", str(settings["instruct"])))
    rows.append(("Seed", "–" if take.seed is None else str(take.seed)))
    if isinstance(settings.get("speed"), (int, float)):
        rows.append(("Speed", f"{settings['speed']:.2f}×"))
    if stats.get("backend"):
        rows.append(("Backend", str(stats["backend"])))
    latency = first_audio_latency(take)
    if latency is not None:
        engine = stats.get("first_chunk_latency")
        inside = f" (engine {engine * 1000:.0f} ms)" if isinstance(engine, (int, float)) else ""
        rows.append(("First audio", f"{latency * 1000:.0f} ms{inside}"))
    if isinstance(stats.get("rtf"), (int, float)):
        rows.append(("RTF", f"{stats['rtf']:.2f}"))
    rows.append(("Length", f"{take.duration_s:.1f} s"))
    rows.append(("Made", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(take.created))))
    if stats.get("failed"):
        rows.append(("Partial", f"broken off: {stats['failed']}"))
    elif stats.get("cancelled"):
        rows.append(("Stopped", "the take was stopped before its end"))
    return rows


class TakeDetails(QWidget):
    """Shows one take (``show_take``); its buttons act on that take."""

    sig_regenerate = Signal(object, bool)
    """Make a new take with this Take's text, voice and settings: (Take, keep its seed) - a new variation
    draws a new seed, keeping the seed makes the same take again."""
    sig_use_text = Signal(object)
    """Put this Take's text in the text box."""
    sig_show_file = Signal(object)
    """Show this Take's file in the file manager."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("TakeDetails")
        self.take: Take | None = None
        self.summary = QTextBrowser()
        self.summary.setObjectName("TakeSummary")
        self.summary.setFrameShape(QFrame.Shape.NoFrame)
        self.summary.setOpenLinks(False)
        self.regenerate_button = QPushButton("Regenerate")
        self.regenerate_button.setToolTip(
            "A new variation: this take's text, voice, mode, instruction and speed with a new random seed"
        )
        self.regenerate_button.clicked.connect(lambda: self._regenerate(same_seed=False))
        self.same_seed_action = QAction("Regenerate with the same seed", self)
        self.same_seed_action.triggered.connect(lambda: self._regenerate(same_seed=True))
        self.new_seed_action = QAction("Regenerate with a new seed", self)
        self.new_seed_action.triggered.connect(lambda: self._regenerate(same_seed=False))
        regenerate_menu = QMenu(self)
        regenerate_menu.addAction(self.new_seed_action)
        regenerate_menu.addAction(self.same_seed_action)
        self.regenerate_menu = regenerate_menu
        self.regenerate_menu_button = QPushButton()  # an arrow beside Regenerate (a menu indicator is wide)
        self.regenerate_menu_button.setIcon(self.style().standardIcon(QStyle.StandardPixmap.SP_ArrowDown))
        self.regenerate_menu_button.setToolTip(
            "More ways to regenerate: with the same seed (the same take again)"
        )
        self.regenerate_menu_button.setAccessibleName("More ways to regenerate")
        self.regenerate_menu_button.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.regenerate_menu_button.clicked.connect(
            lambda: regenerate_menu.popup(
                self.regenerate_menu_button.mapToGlobal(self.regenerate_menu_button.rect().bottomLeft())
            )
        )
        self.use_text_button = QPushButton("Use this text")
        self.use_text_button.setToolTip("Put this take's text in the text box")
        self.use_text_button.clicked.connect(lambda: self.take and self.sig_use_text.emit(self.take))
        self.show_file_button = QPushButton("Show file")
        self.show_file_button.setToolTip("Open the folder that holds this take's WAV")
        self.show_file_button.clicked.connect(lambda: self.take and self.sig_show_file.emit(self.take))
        buttons = QHBoxLayout()
        regenerate = QHBoxLayout()  # the button and its menu side by side, as one control
        regenerate.setSpacing(0)
        regenerate.addWidget(self.regenerate_button)
        regenerate.addWidget(self.regenerate_menu_button)
        buttons.addLayout(regenerate)
        for button in (self.use_text_button, self.show_file_button):
            buttons.addWidget(button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.summary, 1)
        layout.addLayout(buttons)
        self.show_take(None)

    def _regenerate(self, same_seed: bool) -> None:
        if self.take is not None:
            self.sig_regenerate.emit(self.take, same_seed)

    def show_take(self, take: Take | None) -> None:
        self.take = take
        buttons = (
            self.regenerate_button,
            self.regenerate_menu_button,
            self.use_text_button,
            self.show_file_button,
        )
        for button in buttons:
            button.setEnabled(take is not None)
        seed = "" if take is None or take.seed is None else f" ({take.seed})"
        self.same_seed_action.setText(f"Regenerate with the same seed{seed}")
        if take is None:
            self.summary.setHtml("<p style='color:#8b9bab'>Select a take to see how it was made.</p>")
            return
        self.summary.setHtml(f"<p>{html.escape(take.text) or '<i>no text</i>'}</p>{summary_table(take)}")
        self._fit_summary()

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        self._fit_summary()

    def _fit_summary(self) -> None:
        """Ask for the summary's whole height, but for the take's text past TEXT_LINES_SHOWN lines."""
        document = self.summary.document()
        document.setTextWidth(self.summary.viewport().width())
        needed = int(document.size().height()) + 2 * self.summary.frameWidth()
        text = document.firstBlock().layout()  # the take's text: the summary's first paragraph
        if text.lineCount() > TEXT_LINES_SHOWN:
            needed -= int(sum(text.lineAt(n).height() for n in range(TEXT_LINES_SHOWN, text.lineCount())))
        self.summary.setMinimumHeight(needed)


def summary_table(take: Take) -> str:
    """The rows of `describe_take` as an HTML table for a narrow pane: short values two to a row (in their
    order), a longer one on a row of its own."""
    label = "<td style='color:#90a4ae;padding-right:6px'>{}</td>"
    short = [(name, value) for name, value in describe_take(take) if len(value) <= SHORT_VALUE_CHARS]
    rows = [
        "".join(
            label.format(html.escape(name)) + f"<td style='padding-right:14px'>{html.escape(value)}</td>"
            for name, value in short[i : i + 2]
        )
        for i in range(0, len(short), 2)
    ]
    rows += [
        label.format(html.escape(name)) + f"<td colspan='3'>{html.escape(value)}</td>"
        for name, value in describe_take(take)
        if len(value) > SHORT_VALUE_CHARS
    ]
    return "<table cellspacing='0'>" + "".join(f"<tr>{row}</tr>" for row in rows) + "</table>"
