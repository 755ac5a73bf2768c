"""The reference voice's transcript: an editable line that the automatic transcript (Whisper, in the
engine) fills in, marked "automatic" until the user edits it, with the detected language and a button to
transcribe again. Also the quality verdict of the recording, with its advice, as a line of rich text."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QPushButton, QVBoxLayout, QWidget

from studio.gui.widgets.wording import capitalised

_VERDICT_COLOURS = {"good": "#81c784", "usable": "#ffb74d", "poor": "#e57373"}


def quality_html(quality) -> str:
    """The verdict of a studio.audio.quality.QualityReport, coloured, with one line of advice per problem."""
    if quality is None:
        return ""
    colour = _VERDICT_COLOURS.get(quality.verdict, "#b0bec5")
    lines = [f"Reference: <b style='color:{colour}'>{quality.verdict}</b>"]
    lines += [f"• {p.figure}: {p.advice}" for p in quality.problems]
    return "<br>".join(lines)


class TranscriptBox(QWidget):
    """``edit`` is the transcript; ``set_automatic`` fills it from the ASR until the user edits it."""

    sig_retranscribe = Signal()
    """The user asked to transcribe the current recording again."""
    sig_use_cross_lingual = Signal()
    """The user wants cross-lingual mode for this voice (offered with the detected language)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.edit = QLineEdit()
        self.edit.setPlaceholderText("What the recording says (needed for zero-shot cloning)")
        self.edit.textEdited.connect(self._on_user_edit)  # textEdited: only the user's own edits
        self.status = QLabel("")
        self.status.setObjectName("Hint")
        self.status.setWordWrap(True)
        self.retranscribe_button = QPushButton("Re-transcribe")
        self.retranscribe_button.setToolTip("Transcribe the cleaned recording again (Whisper)")
        self.retranscribe_button.clicked.connect(self.sig_retranscribe.emit)
        self.retranscribe_button.setEnabled(False)
        self.cross_lingual_button = QPushButton("Use cross-lingual")
        self.cross_lingual_button.setToolTip("Cross-lingual mode speaks other languages in this voice")
        self.cross_lingual_button.clicked.connect(self.sig_use_cross_lingual.emit)
        self.cross_lingual_button.hide()
        self.automatic = False
        self.language = ""  # the detected language code, once transcribed
        self._unavailable_note = ""  # why there is no automatic transcript, shown while the line is empty
        # the title and the buttons share one row above the line: the voice panel fits 1280x720 unscrolled
        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.addWidget(QLabel("Transcript"))
        header.addStretch(1)
        header.addWidget(self.cross_lingual_button)
        header.addWidget(self.retranscribe_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(header)
        layout.addWidget(self.edit)
        layout.addWidget(self.status)

    def new_recording(self, transcribing: bool) -> None:
        """A new reference arrived: its old transcript no longer applies."""
        self.edit.clear()
        self.automatic, self.language, self._unavailable_note = False, "", ""
        self.cross_lingual_button.hide()
        self.status.setText("Transcribing…" if transcribing else "")

    def set_transcribable(self, on: bool) -> None:
        self.retranscribe_button.setEnabled(on)

    def set_automatic(self, text: str, language: str, language_name: str) -> None:
        """Fill in what the ASR heard (unless the user typed meanwhile), marked automatic."""
        self.language, self._unavailable_note = language, ""
        if self.edit.text().strip() and not self.automatic:
            self.status.setText(f"Heard ({language_name}): “{text}” — your own transcript was kept")
            return
        self.edit.setText(text)
        self.automatic = True
        self.status.setText(f"automatic · {language_name.title()}")
        self.status.setToolTip(
            "Check that it matches the recording word for word: zero-shot cloning needs it"
        )
        self.cross_lingual_button.show()

    def set_unavailable(self, reason: str) -> None:
        """No automatic transcript: say why; the user types it."""
        if "type the transcript" in reason.lower():  # the reason already says what to do
            text = capitalised(reason)
        else:
            text = f"Type the transcript: {reason}"
        self._unavailable_note = f"<span style='color:#ffb74d'>{text}</span>"
        if not self.edit.text().strip():
            self.status.setText(self._unavailable_note)

    def _on_user_edit(self, text: str) -> None:
        if self.automatic:
            self.automatic = False
            self.status.setText("edited")
        elif self._unavailable_note:  # the note asks for a transcript: gone while one is typed
            self.status.setText("" if text.strip() else self._unavailable_note)
