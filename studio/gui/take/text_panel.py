"""The text panel: what to say and how — editor, fine-grained tag buttons, mode, instruction, speed,
seed, streaming, and the Generate (Ctrl+Enter) / Stop (Esc) buttons."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut, QTextCursor
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from studio.gui.take.tag_bar import TagBar
from studio.request import Mode
from studio.tags import strip_tags

MAX_SEED = 2**31 - 1


#: speaking rates for the length estimate: words a second (space-separated scripts), characters a
#: second (Chinese, Japanese, Korean, which are written without spaces)
WORDS_PER_SECOND = 2.6
CJK_CHARS_PER_SECOND = 4.5
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")


def estimated_seconds(text: str) -> float:
    """About how long the text takes to say (tags are not spoken)."""
    plain = strip_tags(text)
    cjk = len(_CJK.findall(plain))
    words = len(_CJK.sub(" ", plain).split())
    return words / WORDS_PER_SECOND + cjk / CJK_CHARS_PER_SECOND


def describe_length(text: str) -> str:
    """ "123 characters · about 8 s of speech" (empty for an empty text)."""
    if not text.strip():
        return ""
    seconds = estimated_seconds(text)
    duration = f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"
    return f"{len(text)} characters · about {duration} of speech"


@dataclass(frozen=True)
class TextRequest:
    """What the text panel asks for: the GUI adds the voice and sends it to the engine."""

    text: str
    mode: Mode
    instruct: str
    speed: float
    seed: int
    stream: bool


class TextPanel(QWidget):
    """Editor and generation controls; emits ``sig_generate`` with a TextRequest, ``sig_stop`` to cancel."""

    sig_generate = Signal(object)
    """The user asked for a take (a TextRequest)."""
    sig_stop = Signal()
    """The user asked to stop the running take."""
    sig_escape = Signal()
    """Esc with no take running (the window stops playback)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("TextPanel")
        self._build_editor()
        self.tags = TagBar()
        self.tags.sig_insert.connect(self.insert_tag)
        self.tags.sig_wrap.connect(self.wrap_selection)
        options, instruct_row = self._build_options()
        actions = self._build_actions()

        title = QLabel("Text")
        title.setObjectName("PanelTitle")
        layout = QVBoxLayout(self)
        layout.addWidget(title)
        layout.addWidget(self.editor, 1)
        layout.addWidget(self.length)
        layout.addWidget(self.tags)
        layout.addLayout(options)
        layout.addLayout(instruct_row)
        layout.addLayout(actions)
        self._set_tab_order()
        self._add_shortcuts()

        self._engine_ready = False
        self._busy = False
        self._has_voice = True  # the window says otherwise until a voice exists
        self._update_mode()
        self._update_buttons()

    def _build_editor(self) -> None:
        """The text box and the length estimate under it."""
        self.editor = QPlainTextEdit()
        self.editor.setObjectName("TextEditor")
        # Tab moves on (tags are buttons; a tab character is never wanted)
        self.editor.setTabChangesFocus(True)
        self.editor.setPlaceholderText(
            "Type what the voice should say. Tags like [laughter] or <strong>word</strong> shape the delivery."
        )
        self.editor.textChanged.connect(self._update_buttons)
        self.length = QLabel("")
        self.length.setObjectName("Hint")
        self.editor.textChanged.connect(
            lambda: self.length.setText(describe_length(self.editor.toPlainText()))
        )

    def _build_options(self) -> tuple[QGridLayout, QHBoxLayout]:
        """Mode, speed and seed in a grid; the instruction in a row of its own."""
        self.mode = QComboBox()
        for mode in Mode:
            self.mode.addItem(mode.label, mode.value)
        self.mode.currentIndexChanged.connect(self._update_mode)
        self.mode.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.mode.setMinimumContentsLength(12)  # may shrink below its longest label on a small screen
        self.instruct = QLineEdit()
        self.instruct.setPlaceholderText("e.g. speak slowly and warmly, like telling a bedtime story")
        self.instruct_label = QLabel("Instruction")
        self.speed = QDoubleSpinBox()
        self.speed.setRange(0.5, 2.0)
        self.speed.setSingleStep(0.05)
        self.speed.setValue(1.0)
        self.speed.setSuffix(" ×")
        self.random_seed = QCheckBox("random")
        self.random_seed.setChecked(True)
        self.seed = QSpinBox()
        self.seed.setRange(0, MAX_SEED)
        self.seed.setEnabled(False)
        self.random_seed.toggled.connect(lambda on: self.seed.setEnabled(not on))

        options = QGridLayout()
        options.addWidget(QLabel("Mode"), 0, 0)
        options.addWidget(self.mode, 0, 1)
        options.addWidget(QLabel("Speed"), 0, 2)
        options.addWidget(self.speed, 0, 3)
        options.addWidget(QLabel("Seed"), 1, 0)
        seed_row = QHBoxLayout()  # a row of its own: the panel fits beside the others at 1280 pixels
        seed_row.addWidget(self.random_seed)
        seed_row.addWidget(self.seed, 1)
        options.addLayout(seed_row, 1, 1)
        options.setColumnStretch(1, 2)
        options.setColumnStretch(3, 1)
        instruct_row = QHBoxLayout()  # its own row: showing it never widens the columns above
        instruct_row.addWidget(self.instruct_label)
        instruct_row.addWidget(self.instruct, 1)
        return options, instruct_row

    def _build_actions(self) -> QHBoxLayout:
        """Stream, Stop and Generate."""
        self.stream = QCheckBox("Stream (hear it while it is made)")
        self.stream.setChecked(True)
        self.generate_button = QPushButton("Generate")
        self.generate_button.setObjectName("PrimaryButton")
        self.generate_button.setToolTip("Generate a take (Ctrl+Enter)")
        self.generate_button.clicked.connect(self.request_generate)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop the take (Esc)")
        self.stop_button.clicked.connect(self.sig_stop.emit)
        self.stop_button.setEnabled(False)
        actions = QHBoxLayout()
        actions.addWidget(self.stream)
        actions.addStretch(1)
        actions.addWidget(self.stop_button)
        actions.addWidget(self.generate_button)
        return actions

    def _set_tab_order(self) -> None:
        """Tab: the text, the options, Generate, then the tags (one stop; arrows move between them)."""
        chain = [self.editor, self.mode, self.speed, self.random_seed, self.seed, self.instruct, self.stream]
        chain += [self.stop_button, self.generate_button, self.tags.buttons[0]]
        for first, second in zip(chain, chain[1:], strict=False):
            QWidget.setTabOrder(first, second)

    def _add_shortcuts(self) -> None:
        """Ctrl+Enter generates, Esc stops (anywhere in the window)."""
        for keys in ("Ctrl+Return", "Ctrl+Enter"):
            shortcut = QShortcut(QKeySequence(keys), self, context=Qt.ShortcutContext.WindowShortcut)
            shortcut.activated.connect(self.request_generate)
        stop = QShortcut(QKeySequence(Qt.Key.Key_Escape), self, context=Qt.ShortcutContext.WindowShortcut)
        stop.activated.connect(self._on_escape)

    # -- editing -------------------------------------------------------------------------------------
    def insert_tag(self, tag: str) -> None:
        self.editor.insertPlainText(tag)
        self.editor.setFocus()

    def wrap_selection(self, opening: str, closing: str) -> None:
        cursor = self.editor.textCursor()
        selected = cursor.selectedText()
        cursor.insertText(f"{opening}{selected}{closing}")
        if not selected:
            cursor.movePosition(QTextCursor.MoveOperation.Left, n=len(closing))
            self.editor.setTextCursor(cursor)
        self.editor.setFocus()

    # -- state ---------------------------------------------------------------------------------------
    def set_engine_ready(self, ready: bool) -> None:
        self._engine_ready = ready
        self._update_buttons()

    def set_has_voice(self, has_voice: bool) -> None:
        """A voice is recorded, imported or picked (Generate needs one)."""
        self._has_voice = has_voice
        self._update_buttons()

    def set_busy(self, busy: bool) -> None:
        """A take is running: Stop on, Generate off."""
        self._busy = busy
        self._update_buttons()

    def _update_buttons(self) -> None:
        has_text = bool(self.editor.toPlainText().strip())
        self.generate_button.setEnabled(
            self._engine_ready and has_text and self._has_voice and not self._busy
        )
        self.stop_button.setEnabled(self._busy)
        if not self._engine_ready:
            self.generate_button.setToolTip("The engine is not ready yet (see the status bar)")
        elif not has_text:
            self.generate_button.setToolTip("Type some text first")
        elif not self._has_voice:
            self.generate_button.setToolTip("Record, import or pick a voice first")
        else:
            self.generate_button.setToolTip("Generate a take (Ctrl+Enter)")

    def _on_escape(self) -> None:
        """Esc stops the take when one runs, else whatever is playing."""
        if self.stop_button.isEnabled():
            self.sig_stop.emit()
        else:
            self.sig_escape.emit()

    def use_cross_lingual(self) -> None:
        """Switch to cross-lingual mode (offered when the voice's language is known)."""
        self.mode.setCurrentIndex(self.mode.findData(Mode.CROSS_LINGUAL.value))

    def _update_mode(self) -> None:
        instruct = self.mode.currentData() == Mode.INSTRUCT.value
        self.instruct.setVisible(instruct)
        self.instruct_label.setVisible(instruct)

    # -- requests ------------------------------------------------------------------------------------
    def current_request(self) -> TextRequest:
        seed = random.randint(0, MAX_SEED) if self.random_seed.isChecked() else self.seed.value()
        return TextRequest(
            text=self.editor.toPlainText().strip(),
            mode=Mode(self.mode.currentData()),
            instruct=self.instruct.text().strip(),
            speed=round(self.speed.value(), 3),
            seed=seed,
            stream=self.stream.isChecked(),
        )

    def request_generate(self) -> None:
        if self.generate_button.isEnabled():
            self.sig_generate.emit(self.current_request())
