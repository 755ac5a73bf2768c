"""The Script view: a long-form script as a table of lines, each with its saved voice; Render all sends
them to the engine a few at a time, Retake gives one line a new seed, Play plays a line or from a line on
(the row playing is marked; Space pauses, Esc stops), Export writes the lines, the joined track and subtitles in the chosen format and loudness. The script and
its render live in a project folder (``data_dir()/scripts/NAME``); every edit is saved there at once."""

from __future__ import annotations

import shutil
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from studio.audio.export import safe_filename
from studio.engine.protocol import EngineState
from studio.gui.script.script_controller import ScriptController
from studio.gui.script.script_export import ScriptExportBar
from studio.gui.script.script_playback import ScriptPlayback
from studio.gui.script.script_table import ScriptTable
from studio.gui.take.export_folder import ExportFolder
from studio.gui.widgets.elided_label import ElidedLabel
from studio.gui.widgets.flow_layout import FlowLayout
from studio.script.parse import ScriptError, read_script
from studio.script.project import SCRIPT_NAME, export_render, load_script, save_script

NO_VOICES = (
    "No saved voices yet: in Single take, record or import a voice and press Save voice…; "
    "lines name saved voices"
)


def _button(text: str, tip: str = "") -> QPushButton:
    button = QPushButton(text)
    button.setToolTip(tip)
    return button


class ScriptView(QWidget):
    sig_message = Signal(str)
    sig_project = Signal(str)  # the project folder now open (remembered for the next start)

    def __init__(self, bridge, library, jobs, projects: Path, parent=None):
        super().__init__(parent)
        self.library, self.jobs, self.projects = library, jobs, projects
        self.folder: Path | None = None
        self.export_folder = ExportFolder(parent=self)  # the window shares its own (kept in the settings)
        self.engine_ready = False
        self.exporting = False
        self.controller = ScriptController(bridge, library, self)
        self.table = ScriptTable(lambda: [v.name for v in library.list()])
        self.playback = ScriptPlayback(self.table, self)
        self._edit_triggers = self.table.editTriggers()
        self._build()
        self._connect(bridge)
        self._update_buttons()

    def _build(self) -> None:
        self.project_label = ElidedLabel()
        self.new_button = _button("New script", "An empty script in a new project")
        self.open_button = _button("Open script…", "A text file: one line per utterance, [Voice] prefixes")
        top = QHBoxLayout()
        top.addWidget(self.project_label, 1)
        top.addWidget(self.new_button)
        top.addWidget(self.open_button)
        self.add_button = _button("+ Line", "Add a line after the selected one")
        self.remove_button = _button("Remove", "Remove the selected lines (Delete)")
        self.undo_button = _button("Undo remove", "Put the removed lines back (Ctrl+Z)")
        self.undo_button.setVisible(False)
        self.removed: list[tuple[int, tuple]] = []  # (row, values) of the lines removed last
        self.up_button, self.down_button = (
            _button("↑", "Move the line up"),
            _button("↓", "Move the line down"),
        )
        self.voice_combo = QComboBox()
        self.voice_combo.setToolTip("The voice for new lines and for Set voice")
        self.set_voice_button = _button("Set voice", "Give the selected lines this voice")
        self.play_button = _button("▶ Line", "Play the selected line (Space plays and pauses, Esc stops)")
        self.play_from_button = _button("▶ From here", "Play from the selected line to the end")
        self.retake_button = _button("⟳ Retake", "Render the selected line again with a new seed")
        self.stop_playing_button, self.play_position = self.playback.stop_button, self.playback.position
        tools = FlowLayout()
        for widget in (
            self.add_button,
            self.remove_button,
            self.undo_button,
            self.up_button,
            self.down_button,
            self.voice_combo,
            self.set_voice_button,
            self.play_button,
            self.play_from_button,
            self.stop_playing_button,
            self.retake_button,
            self.play_position,
        ):
            tools.addWidget(widget)
        self.render_button = _button("Render all", "Render every line not rendered yet (changed lines again)")
        self.stop_button = _button("Stop rendering", "Stop the render; finished lines are kept")
        self.at_once = QSpinBox(minimum=1, maximum=32, value=4, suffix=" at once")
        self.at_once.setToolTip(
            "Lines the engine makes at the same time (a GPU batches them: more is faster "
            "until its memory budget is reached; further lines wait)"
        )
        self.progress = QProgressBar()
        self.progress.setFormat("%v / %m lines")
        self.progress.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        render_row = QHBoxLayout()
        for widget in (self.render_button, self.stop_button, self.at_once):
            render_row.addWidget(widget)
        render_row.addWidget(self.progress, 1)
        self.export_bar = ScriptExportBar()
        self.export_button = self.export_bar.export_button
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addLayout(tools)
        layout.addWidget(self.table, 1)
        layout.addLayout(render_row)
        layout.addWidget(self.status)
        layout.addWidget(self.export_bar)

    def _connect(self, bridge) -> None:
        self.new_button.clicked.connect(self.new_project)
        self.open_button.clicked.connect(lambda: self.open_script())
        self.add_button.clicked.connect(self.add_line)
        self.remove_button.clicked.connect(self.remove_lines)
        self.up_button.clicked.connect(lambda: self.move(-1))
        self.down_button.clicked.connect(lambda: self.move(1))
        self.set_voice_button.clicked.connect(self.set_voice)
        self.play_button.clicked.connect(lambda: self.play(to_end=False))
        self.play_from_button.clicked.connect(lambda: self.play(to_end=True))
        self.retake_button.clicked.connect(self.retake)
        self.render_button.clicked.connect(self.render_all)
        self.stop_button.clicked.connect(self.controller.stop)
        self.at_once.valueChanged.connect(self._set_concurrency)
        remove = QShortcut(
            QKeySequence(Qt.Key.Key_Delete), self.table, context=Qt.ShortcutContext.WidgetShortcut
        )
        remove.activated.connect(lambda: self.remove_lines() if self.remove_button.isEnabled() else None)
        undo = QShortcut(QKeySequence.StandardKey.Undo, self.table, context=Qt.ShortcutContext.WidgetShortcut)
        undo.activated.connect(self.undo_remove)
        escape = QShortcut(
            QKeySequence(Qt.Key.Key_Escape), self, context=Qt.ShortcutContext.WidgetWithChildrenShortcut
        )
        escape.activated.connect(self.playback.stop)
        self.undo_button.clicked.connect(self.undo_remove)
        self.export_button.clicked.connect(lambda: self.export())
        self.table.sig_edited.connect(lambda _row: self._changed())
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.controller.sig_line.connect(self._on_line)
        self.controller.sig_progress.connect(self._on_progress)
        self.controller.sig_finished.connect(self._on_finished)
        self.controller.sig_message.connect(self.sig_message)
        bridge.sig_state_changed.connect(self._on_engine_state)

    # -- projects ----------------------------------------------------------------------------------
    def open_project(self, folder: Path) -> None:
        """Show the script kept in ``folder`` (a new, empty one when there is none)."""
        self.playback.stop()
        self.folder = Path(folder)
        self.removed = []
        self.undo_button.setVisible(False)
        try:
            lines = load_script(self.folder)
        except ScriptError as exc:
            lines = []
            self.sig_message.emit(f"The script in {self.folder} cannot be read: {exc}")
        self.table.set_lines(lines)
        self.project_label.setText(f"Project: {self.folder.name} — {self.folder}")
        self.refresh_voices()
        self._show_render_state()
        self.sig_project.emit(str(self.folder))

    def new_project(self) -> None:
        number = 1
        while (self.projects / f"Script {number}").exists():
            number += 1
        folder = self.projects / f"Script {number}"
        folder.mkdir(parents=True)
        self.open_project(folder)

    def open_script(self, path: str | None = None) -> None:
        """Import a script file into a project of its name (an earlier script there is kept as .bak)."""
        if path is None:
            path, _ = QFileDialog.getOpenFileName(self, "Open script", "", "Scripts (*.txt);;All files (*)")
            if not path:
                return
        default = self.voice_combo.currentText()
        try:
            lines = list(read_script(path, default_voice=default))
        except ScriptError as exc:
            self.sig_message.emit(f"Cannot open {Path(path).name}: {exc}")
            return
        folder = self.projects / safe_filename(Path(path).stem, ".txt").removesuffix(".txt")
        folder.mkdir(parents=True, exist_ok=True)
        if (folder / SCRIPT_NAME).is_file():
            shutil.copy2(folder / SCRIPT_NAME, folder / f"{SCRIPT_NAME}.bak")
        save_script(folder, lines)
        self.open_project(folder)
        self.sig_message.emit(f"Opened {Path(path).name}: {len(lines)} line(s)")

    def _changed(self) -> None:
        """An edit: saved at once; the statuses say again which lines have a take of their present text."""
        self.save()
        if not (self.controller.busy or self.exporting) and self.folder is not None:
            self._show_render_state()

    def save(self) -> None:
        if self.folder is None:
            return
        try:
            save_script(self.folder, self.table.lines())
        except ScriptError:
            pass  # a line being written (empty for now): saved once it has text
        except OSError as exc:
            self.sig_message.emit(f"Could not save the script: {exc}")

    def showEvent(self, event) -> None:  # noqa: N802 (Qt override): voices saved meanwhile are offered
        self.refresh_voices()
        super().showEvent(event)

    def refresh_voices(self) -> None:
        current = self.voice_combo.currentText()
        self.voice_combo.clear()
        self.voice_combo.addItems([v.name for v in self.library.list()])
        if current:
            self.voice_combo.setCurrentText(current)
        if self.voice_combo.count() == 0 and not self.status.text():
            self.status.setText(NO_VOICES)
        elif self.voice_combo.count() and self.status.text() == NO_VOICES:
            self.status.setText("")
        self._update_buttons()

    # -- editing -----------------------------------------------------------------------------------
    def add_line(self) -> None:
        if self.folder is None:
            self.new_project()
        rows = self.table.selected_rows()
        row = self.table.add_line(self.voice_combo.currentText(), "", rows[-1] if rows else None)
        self.table.selectRow(row)
        self.table.editItem(self.table.item(row, 2))

    def remove_lines(self) -> None:
        rows = self.table.selected_rows()
        if not rows:
            return
        self.removed = [(row, self.table.row_values(row)) for row in rows]
        self.table.remove_rows(rows)
        self._changed()
        self.undo_button.setVisible(True)
        self.status.setText(
            f"Removed {len(rows)} line(s); Undo remove (Ctrl+Z) puts them back with their takes"
        )

    def undo_remove(self) -> None:
        """The lines removed last, back in their places; their takes come back from .superseded/."""
        if not self.removed or self.controller.busy or self.exporting:
            return
        for row, values in self.removed:
            self.table.insert_values(row, values)
        self.removed = []
        self.undo_button.setVisible(False)
        self._changed()
        self.status.setText("")

    def move(self, delta: int) -> None:
        rows = self.table.selected_rows()
        if len(rows) == 1:
            self.table.move_row(rows[0], delta)
            self._changed()

    def set_voice(self) -> None:
        self.table.set_voice(self.table.selected_rows(), self.voice_combo.currentText())  # sig_edited: saved

    def _set_concurrency(self, value: int) -> None:
        self.controller.concurrency = value
        self.controller.dispatch()  # more at once takes effect at once

    # -- rendering ---------------------------------------------------------------------------------
    def render_all(self) -> None:
        if self.folder is None:
            self.new_project()
        try:
            self.save()
            self.controller.render_all(self.folder, self.table.lines())
        except ScriptError as exc:
            self.status.setText(f"Cannot render: {exc}")
            return
        self.status.setText("Rendering…" if self.controller.busy else self.controller.summary())
        self._update_buttons()

    def retake(self) -> None:
        rows = self.table.selected_rows()
        if len(rows) == 1:
            self.controller.retake(rows[0] + 1)
            self._update_buttons()

    def _show_render_state(self) -> None:
        """What the project has rendered of these lines (nothing renders)."""
        try:
            records = self.controller.plan(self.folder, self.table.lines()) if self.table.rowCount() else []
        except ScriptError as exc:
            if "empty" not in str(exc):  # a line being written is no news
                self.status.setText(str(exc))
            return
        except OSError as exc:
            self.status.setText(f"Cannot read the project: {exc}")
            return
        for record in records:
            self.table.show_record(record)
        self.progress.setRange(0, max(1, len(records)))
        self.progress.setValue(sum(r.done for r in records))
        self.status.setText("")

    def _on_line(self, record) -> None:
        self.table.show_record(record)
        self._update_buttons()

    def _on_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(done)

    def _on_finished(self, summary: str) -> None:
        self.status.setText(summary)
        self.sig_message.emit(f"Script: {summary}")
        self._update_buttons()

    def _on_engine_state(self, state) -> None:
        self.engine_ready = state.state in (EngineState.READY, EngineState.BUSY)
        self._update_buttons()

    def _update_buttons(self) -> None:
        busy, rows = self.controller.busy or self.exporting, self.table.selected_rows()
        self.table.setEditTriggers(
            QAbstractItemView.EditTrigger.NoEditTriggers if busy else self._edit_triggers
        )
        record = self._record(rows[0]) if len(rows) == 1 else None
        for widget in (
            self.add_button,
            self.remove_button,
            self.undo_button,
            self.up_button,
            self.down_button,
            self.new_button,
            self.open_button,
            self.set_voice_button,
        ):
            widget.setEnabled(not busy)
        self.set_voice_button.setEnabled(not busy and bool(rows) and self.voice_combo.count() > 0)
        self.render_button.setEnabled(not busy and self.engine_ready and self.table.rowCount() > 0)
        self.render_button.setToolTip("" if self.engine_ready else "The engine is not ready yet")
        self.stop_button.setEnabled(self.controller.busy)
        self.retake_button.setEnabled(self.engine_ready and record is not None and record.done)
        self.play_button.setEnabled(record is not None and record.done)
        self.play_from_button.setEnabled(record is not None and record.done)
        missing = sum(not r.done for r in self.controller.records)
        self.export_button.setEnabled(not busy and bool(self.controller.records) and not missing)
        self.export_button.setToolTip(
            f"Render all first: {missing} line(s) have no take yet"
            if missing
            else "The lines, the joined track and subtitles, into a folder"
        )

    def _record(self, row: int):
        """The rendered record of ``row`` when it still says what the row says, else None."""
        records = self.controller.records
        record = records[row] if 0 <= row < len(records) else None
        if record is None or not record.done or not self.table.status_of(row).startswith("✓"):
            return None
        same = self.table.item(row, 2).text().split() == record.text.split()
        return (
            record
            if same and self.table.item(row, 1).text().strip().casefold() == record.voice.casefold()
            else None
        )

    # -- playing and exporting ---------------------------------------------------------------------
    @property
    def transport(self):
        """The window's transport (set once its playback exists): one clip plays at a time."""
        return self.playback.transport

    @transport.setter
    def transport(self, transport) -> None:
        self.playback.attach(transport)

    def play(self, to_end: bool) -> bool:
        """Play the selected line (``to_end``: and the lines after it); False when nothing plays."""
        rows = self.table.selected_rows()
        record = self._record(rows[0]) if len(rows) == 1 else None
        if record is None:
            return False
        records, render = self.controller.records, self.controller.render
        return self.playback.play(self.folder, render, records, record, to_end)

    def on_space(self) -> None:
        """Space in this view: pause or resume what plays, else play the selected line."""
        if not self.playback.toggle():
            self.play(to_end=False)

    def export(self, folder: str | None = None) -> None:
        """Into ``folder``/NAME (asked when not given), in the background; says where when done."""
        if folder is None:
            folder = QFileDialog.getExistingDirectory(self, "Export the script to", self.export_folder.start)
            if not folder:
                return
        self.export_folder.remember(folder)
        target = Path(folder) / self.folder.name
        records, settings = list(self.controller.records), self.export_bar.render_settings()
        self.exporting = True  # no edits meanwhile: an edit may move the files the export reads
        self._update_buttons()
        self.status.setText(f"Exporting to {target}…")
        subtitles = self.export_bar.subtitles.isChecked()
        self.jobs.submit(
            export_render,
            self.controller.render,
            records,
            target,
            settings,
            subtitles,
            callback=self._on_exported,
        )

    def _on_exported(self, result=None, error=None) -> None:
        self.exporting = False
        self._update_buttons()
        if error is not None:
            text = f"Export failed: {error}"
        else:
            text = f"Exported {len(self.controller.records)} lines and {result.path.name} ({result.seconds:.1f} s)"
            text += f" to {result.path.parent}"
        self.status.setText(text)
        self.sig_message.emit(text)
