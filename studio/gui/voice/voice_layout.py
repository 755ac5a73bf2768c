"""The voice panel's widgets and their layout: the saved voices, the microphone and record/import row, the
original and cleaned waveforms with their play buttons, the cleanup report and quality verdict, the
transcript and Save voice. Each widget is an attribute of the panel; its signals go to the panel's slots."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
)

from studio.gui.playback.waveform import WaveformView
from studio.gui.voice.recorder import MAX_SECONDS
from studio.gui.voice.transcript_box import TranscriptBox
from studio.request import PROMPT_LENGTH_ADVICE

#: What the panel says before the first reference.
START_HINT = f"Record or import clear speech: {PROMPT_LENGTH_ADVICE}."


def build_voice_panel(panel) -> None:
    title = QLabel("Voice")
    title.setObjectName("PanelTitle")
    panel.saved = QComboBox()
    panel.saved.setToolTip("Saved voices")
    panel.saved.activated.connect(panel.on_pick_saved)
    panel.delete_voice_button = QPushButton("Delete")
    panel.delete_voice_button.clicked.connect(panel.delete_current_voice)

    panel.input_device = QComboBox()
    panel.input_device.setToolTip("Microphone")
    panel.record_button = QPushButton("● Record")
    panel.record_button.setObjectName("RecordButton")
    panel.record_button.setCheckable(True)
    panel.record_button.toggled.connect(panel.on_record_toggled)
    panel.import_button = QPushButton("Import…")
    panel.import_button.setToolTip("Import a recording (or drop an audio file here)")
    panel.import_button.clicked.connect(panel.choose_file)
    panel.level = QProgressBar()
    panel.level.setObjectName("LevelMeter")
    panel.level.setRange(-60, 0)
    panel.level.setValue(-60)
    panel.level.setTextVisible(False)
    panel.level.setMaximumHeight(10)
    panel.timer_label = QLabel(f"0.0 / {MAX_SECONDS:.0f} s")
    panel.timer_label.setObjectName("Timer")

    panel.before = WaveformView(color="#90a4ae", height=70, caption="Original")
    panel.after = WaveformView(color="#4fc3f7", height=70, caption="Cleaned")
    panel.play_before = QPushButton("▶ Original")
    panel.play_before.clicked.connect(lambda: panel.play_reference("original"))
    panel.play_after = QPushButton("▶ Cleaned")
    panel.play_after.clicked.connect(lambda: panel.play_reference("cleaned"))
    panel.denoise_prompt = QCheckBox("Reduce noise")
    panel.denoise_prompt.setToolTip("Also run noise reduction while cleaning the recording")
    panel.denoise_prompt.toggled.connect(lambda _on: panel.reclean())
    panel.report = QLabel(START_HINT)
    panel.report.setObjectName("Hint")
    panel.report.setWordWrap(True)
    panel.quality = QLabel("")
    panel.quality.setObjectName("Quality")
    panel.quality.setWordWrap(True)
    panel.transcript_box = TranscriptBox()
    panel.transcript_box.sig_retranscribe.connect(panel.retranscribe)
    panel.transcript = panel.transcript_box.edit
    panel.transcript.textChanged.connect(panel.on_transcript_changed)
    panel.save_button = QPushButton("Save voice…")
    panel.save_button.clicked.connect(panel.save_voice_dialog)

    grid = QGridLayout()
    grid.addWidget(QLabel("Saved"), 0, 0)
    saved_row = QHBoxLayout()
    saved_row.addWidget(panel.saved, 1)
    saved_row.addWidget(panel.delete_voice_button)
    grid.addLayout(saved_row, 0, 1)
    grid.addWidget(QLabel("Mic"), 1, 0)
    grid.addWidget(panel.input_device, 1, 1)
    record_row = QHBoxLayout()
    record_row.addWidget(panel.record_button)
    record_row.addWidget(panel.import_button)
    record_row.addWidget(panel.timer_label)
    grid.addLayout(record_row, 2, 1)
    grid.addWidget(panel.level, 3, 1)
    grid.setColumnStretch(1, 1)

    layout = QVBoxLayout(panel)
    layout.addWidget(title)
    layout.addLayout(grid)
    layout.addWidget(panel.before)
    layout.addWidget(panel.after)
    play_row = QHBoxLayout()
    play_row.addWidget(panel.play_before)
    play_row.addWidget(panel.play_after)
    play_row.addStretch(1)
    play_row.addWidget(panel.denoise_prompt)
    layout.addLayout(play_row)
    layout.addWidget(panel.report)
    layout.addWidget(panel.quality)
    layout.addWidget(panel.transcript_box)
    layout.addWidget(panel.save_button)
    layout.addStretch(1)
