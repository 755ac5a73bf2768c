"""The first-run panel, shown while no model folder is set: choose a folder, download the official
model, or build the tiny random demo model (which babbles, and says so). Long jobs run as a child
``cosyvoice-studio`` process (QProcess), so the GUI never imports the model code."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QProcess, Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from studio.launch import studio_command
from studio.model_layout import FAMILIES, family_of, folder_family, missing_files


def missing_model_files(folder: str | Path) -> list[str]:
    """Files of its family's official layout that ``folder`` lacks (all of them when it does not exist)."""
    return missing_files(folder)


def folder_problem(folder: str | Path) -> str:
    """Why ``folder`` is not a model folder the studio runs, as the panel says it ("" when it is one)."""
    missing = missing_model_files(folder)
    if not missing:
        return ""
    family = folder_family(folder)
    if family is None:
        models = " or ".join(f.model for f in FAMILIES)
        return f"<b>{folder}</b> is not a {models} model folder: missing {', '.join(missing)}."
    return f"<b>{folder}</b> is an incomplete {family.folder_kind}: missing {', '.join(missing)}."


def folder_description(folder: str | Path) -> str:
    """What the panel says of a folder it accepts: "CosyVoice3 folder (Fun-CosyVoice3-0.5B)"."""
    return family_of(folder).folder_kind


class FirstRunPanel(QWidget):
    """Offers three ways to get a model folder; emits ``sig_model_ready`` with the folder when one works."""

    sig_model_ready = Signal(str)
    """A usable model folder (chosen, downloaded or built)."""
    sig_back = Signal()
    """Keep the model in use: back to the studio (only offered when there is one)."""

    def __init__(self, default_models_dir: Path, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("FirstRunPanel")
        self.models_dir = Path(default_models_dir)
        self._process: QProcess | None = None
        self._target: Path | None = None

        heading = QLabel("Welcome to CosyVoice Studio")
        heading.setObjectName("Heading")
        intro = QLabel(
            "The studio needs a CosyVoice2-0.5B or Fun-CosyVoice3-0.5B model folder. Choose one you have, "
            "download the official CosyVoice2 "
            "model (about 5 GB), or build a tiny demo model in seconds to try the studio."
        )
        intro.setWordWrap(True)
        self.choose_button = QPushButton("Choose a model folder…")
        self.choose_button.setObjectName("PrimaryButton")
        self.choose_button.clicked.connect(self.choose_folder)
        self.download_button = QPushButton("Download CosyVoice2-0.5B")
        self.download_button.clicked.connect(self.download)
        self.demo_button = QPushButton("Build a demo model")
        self.demo_button.clicked.connect(self.build_demo)
        self.back_button = QPushButton("Back to the studio")
        self.back_button.setToolTip("Keep the current model")
        self.back_button.clicked.connect(self.sig_back.emit)
        self.back_button.hide()  # shown when a model is already in use (Engine -> Choose model…)
        demo_note = QLabel(
            "The demo model has random weights: it runs the whole pipeline and streams audio, but it "
            "<b>babbles</b> — it does not speak words or clone voices."
        )
        demo_note.setWordWrap(True)
        demo_note.setObjectName("Hint")
        self.message = QLabel("")
        self.message.setWordWrap(True)
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(400)
        self.log.hide()

        card = QFrame()
        card.setObjectName("Card")
        card.setMaximumWidth(760)  # room for the three buttons in bold (at 640 the first was cut)
        buttons = QHBoxLayout()
        for button in (self.choose_button, self.download_button, self.demo_button, self.back_button):
            buttons.addWidget(button)
        inner = QVBoxLayout(card)
        inner.setSpacing(12)
        inner.addWidget(heading)
        inner.addWidget(intro)
        inner.addLayout(buttons)
        inner.addWidget(demo_note)
        inner.addWidget(self.message)
        inner.addWidget(self.log, 1)
        outer = QVBoxLayout(self)
        outer.addStretch(1)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(card, 3)
        row.addStretch(1)
        outer.addLayout(row)
        outer.addStretch(2)
        outer.setAlignment(Qt.AlignmentFlag.AlignCenter)

    @property
    def is_running(self) -> bool:
        return self._process is not None

    def choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(
            self, "CosyVoice2 or CosyVoice3 model folder", str(Path.home())
        )
        if folder:
            self.use_folder(folder)

    def use_folder(self, folder: str) -> bool:
        problem = folder_problem(folder)
        if problem:
            self.message.setText(problem)
            return False
        self.message.setText(f"{folder_description(folder)}: {folder}")
        self.sig_model_ready.emit(str(folder))
        return True

    def explain(self, folder: str) -> None:
        """Say why ``folder`` (the one in the settings) cannot be used; nothing when none is set."""
        if folder:
            self.message.setText(folder_problem(folder))

    def download(self) -> None:
        target = self.models_dir / "CosyVoice2-0.5B"
        self._run(["download", "--from-studio", "--to", str(target)], target, "Downloading CosyVoice2-0.5B…")

    def build_demo(self) -> None:
        target = self.models_dir / "tiny-demo"
        self._run(["make-model", "--size", "tiny", str(target)], target, "Building the demo model…")

    def _run(self, arguments: list[str], target: Path, message: str) -> None:
        if self._process is not None:
            return
        self._target = target
        self.message.setText(message)
        self.log.clear()
        self.log.show()
        for button in (self.choose_button, self.download_button, self.demo_button):
            button.setEnabled(False)
        process = QProcess(self)
        process.setProcessChannelMode(QProcess.ProcessChannelMode.MergedChannels)
        process.readyReadStandardOutput.connect(self._on_output)
        process.finished.connect(self._on_finished)
        self._process = process
        program, *rest = studio_command(*arguments)
        process.start(program, rest)

    def _on_output(self) -> None:
        if self._process is not None:
            text = bytes(self._process.readAllStandardOutput().data()).decode(errors="replace")
            self.log.appendPlainText(text.rstrip())

    def _on_finished(self, exit_code: int, _status) -> None:
        process, self._process = self._process, None
        if process is not None:
            self._on_output_from(process)
            process.deleteLater()
        for button in (self.choose_button, self.download_button, self.demo_button):
            button.setEnabled(True)
        if exit_code == 0 and self._target is not None and not missing_model_files(self._target):
            self.message.setText(f"Model ready in {self._target}.")
            self.sig_model_ready.emit(str(self._target))
        else:
            self.message.setText(f"That did not work (exit code {exit_code}); the log below says why.")

    def _on_output_from(self, process: QProcess) -> None:
        text = bytes(process.readAllStandardOutput().data()).decode(errors="replace").rstrip()
        if text:
            self.log.appendPlainText(text)

    def cancel(self) -> None:
        """Stop a running download/build (on close)."""
        if self._process is not None:
            self._process.kill()
            self._process.waitForFinished(5000)
