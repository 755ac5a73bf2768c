"""The Script view's table: one row per line (voice, text, instruction, status, length); the voice cell
edits with a list of the saved voices; rows move up and down; ``lines()`` reads them as ScriptLines."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QAbstractItemView, QComboBox, QHeaderView, QStyledItemDelegate, QTableWidget
from PySide6.QtWidgets import QTableWidgetItem as Item

from studio.script.manifest import LineRecord
from studio.script.parse import ScriptError, ScriptLine

NUMBER, VOICE, TEXT, INSTRUCTION, STATUS, LENGTH = range(6)
HEADERS = ("#", "Voice", "Text", "Instruction", "Status", "Length")
PARAGRAPH_ROLE = Qt.ItemDataRole.UserRole + 1
STATUS_TEXT = {
    "pending": "—",
    "queued": "queued",
    "waiting": "waiting for GPU memory…",
    "rendering": "rendering…",
    "rendered": "✓ rendered",
    "reused": "✓ unchanged",
    "failed": "✗ failed",
    "changed": "edited",
}


class VoiceDelegate(QStyledItemDelegate):
    """Edits a voice cell with a list of the saved voices (a name typed in a script stays as it is)."""

    def __init__(self, names, parent=None):
        super().__init__(parent)
        self.names = names  # a callable: the saved voices' names now

    def createEditor(self, parent, _option, _index):  # noqa: N802 (Qt override)
        combo = QComboBox(parent)
        combo.addItems(self.names())
        return combo

    def setEditorData(self, editor, index):  # noqa: N802 (Qt override)
        current = index.data() or ""
        if editor.findText(current) < 0 and current:
            editor.addItem(current)
        editor.setCurrentText(current)

    def setModelData(self, editor, model, index):  # noqa: N802 (Qt override)
        model.setData(index, editor.currentText())


class ScriptTable(QTableWidget):
    sig_edited = Signal(int)  # a row's voice, text or instruction was changed by the user

    def __init__(self, voice_names, parent=None):
        super().__init__(0, len(HEADERS), parent)
        self.setHorizontalHeaderLabels(HEADERS)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setWordWrap(True)
        self.verticalHeader().setVisible(False)
        header = self.horizontalHeader()
        for column, mode in (
            (NUMBER, "fit"),
            (VOICE, "fit"),
            (TEXT, "stretch"),
            (INSTRUCTION, "fit"),
            (STATUS, "fit"),
            (LENGTH, "fit"),
        ):
            header.setSectionResizeMode(
                column,
                QHeaderView.ResizeMode.Stretch
                if mode == "stretch"
                else QHeaderView.ResizeMode.ResizeToContents,
            )
        self.setItemDelegateForColumn(VOICE, VoiceDelegate(voice_names, self))
        self.playing_row: int | None = None  # the row of the line playing (marked ▶, in bold)
        self._filling = False
        self.itemChanged.connect(self._on_item_changed)

    # -- rows --------------------------------------------------------------------------------------
    def set_lines(self, lines: list[ScriptLine]) -> None:
        self._filling = True
        self.setRowCount(0)
        self.playing_row = None
        for line in lines:
            self._append(line.voice, line.text, line.instruction, line.paragraph_before)
        self._renumber()
        self._filling = False

    def add_line(self, voice: str, text: str = "", after: int | None = None) -> int:
        self._filling = True
        row = self.rowCount() if after is None else after + 1
        self._append(voice, text, "", False, row)
        self._renumber()
        self._filling = False
        return row

    def _append(
        self, voice: str, text: str, instruction: str, paragraph: bool, row: int | None = None
    ) -> None:
        row = self.rowCount() if row is None else row
        self.insertRow(row)
        number = Item()
        number.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
        number.setData(PARAGRAPH_ROLE, paragraph)
        self.setItem(row, NUMBER, number)
        for column, value in ((VOICE, voice), (TEXT, text), (INSTRUCTION, instruction)):
            self.setItem(row, column, Item(value))
        for column in (STATUS, LENGTH):
            item = Item("—" if column == STATUS else "")
            item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
            self.setItem(row, column, item)

    def move_row(self, row: int, delta: int) -> int:
        target = row + delta
        if not (0 <= row < self.rowCount() and 0 <= target < self.rowCount()):
            return row
        self._filling = True
        cells = [self.takeItem(row, column) for column in range(self.columnCount())]
        self.removeRow(row)
        self.insertRow(target)
        for column, item in enumerate(cells):
            self.setItem(target, column, item)
        self._renumber()
        self._filling = False
        self.selectRow(target)
        return target

    def row_values(self, row: int) -> tuple[str, str, str, bool]:
        """(voice, text, instruction, paragraph) of a row as it is, empty cells included."""
        return (
            self.item(row, VOICE).text(),
            self.item(row, TEXT).text(),
            self.item(row, INSTRUCTION).text(),
            bool(self.item(row, NUMBER).data(PARAGRAPH_ROLE)),
        )

    def insert_values(self, row: int, values: tuple[str, str, str, bool]) -> None:
        self._filling = True
        self._append(*values, row=min(row, self.rowCount()))
        self._renumber()
        self._filling = False

    def remove_rows(self, rows: list[int]) -> None:
        for row in sorted(rows, reverse=True):
            self.removeRow(row)
        self._renumber()

    def selected_rows(self) -> list[int]:
        return sorted({index.row() for index in self.selectedIndexes()})

    def _renumber(self) -> None:
        for row in range(self.rowCount()):
            item = self.item(row, NUMBER)
            marks = ("▶ " if row == self.playing_row else "") + ("¶ " if item.data(PARAGRAPH_ROLE) else "")
            item.setText(marks + str(row + 1))

    def set_playing(self, row: int | None) -> None:
        """Mark the row of the line playing (▶ before its number, the row in bold); None: no line plays."""
        if row is not None and not 0 <= row < self.rowCount():
            row = None
        if row == self.playing_row:
            return
        self._filling = True
        for marked, bold in ((self.playing_row, False), (row, True)):
            for column in range(self.columnCount() if marked is not None else 0):
                item = self.item(marked, column)
                if item is not None:
                    font = item.font()
                    font.setBold(bold)
                    item.setFont(font)
        self.playing_row = row
        self._renumber()
        self._filling = False
        if row is not None:
            self.scrollToItem(self.item(row, NUMBER))

    def lines(self) -> list[ScriptLine]:
        """The rows as lines (number = row + 1); an empty text or voice is a ScriptError naming the row."""
        lines = []
        for row in range(self.rowCount()):
            voice, text = self.item(row, VOICE).text().strip(), " ".join(self.item(row, TEXT).text().split())
            if not text:
                raise ScriptError("the line is empty: write its text or remove it", row + 1)
            if not voice:
                raise ScriptError("the line has no voice", row + 1)
            paragraph = bool(self.item(row, NUMBER).data(PARAGRAPH_ROLE)) and row > 0
            lines.append(
                ScriptLine(
                    row + 1, row + 1, voice, text, self.item(row, INSTRUCTION).text().strip(), paragraph
                )
            )
        return lines

    # -- status ------------------------------------------------------------------------------------
    def show_record(self, record: LineRecord) -> None:
        row = record.number - 1
        if not 0 <= row < self.rowCount():
            return
        self._filling = True
        status = self.item(row, STATUS)
        was = status.text()
        edited = record.status == "pending" and (was == STATUS_TEXT["changed"] or was.startswith("✓"))
        status.setText(STATUS_TEXT["changed"] if edited else STATUS_TEXT.get(record.status, record.status))
        status.setToolTip(record.error or "; ".join(record.notes))
        self.item(row, LENGTH).setText(f"{record.seconds:.1f} s" if record.done else "")
        self._filling = False

    def status_of(self, row: int) -> str:
        return self.item(row, STATUS).text()

    def set_voice(self, rows: list[int], voice: str) -> None:
        """Give ``rows`` this voice: one edit (one save, one look at the takes), however many rows."""
        if not rows:
            return
        self._filling = True
        for row in rows:
            self.item(row, VOICE).setText(voice)
            self._mark_edited(row)
        self._filling = False
        self.sig_edited.emit(rows[0])

    def _mark_edited(self, row: int) -> None:
        if self.item(row, STATUS).text().startswith("✓"):
            self.item(row, STATUS).setText(STATUS_TEXT["changed"])
            self.item(row, LENGTH).setText("")

    def _on_item_changed(self, item: Item) -> None:
        if self._filling or item.column() not in (VOICE, TEXT, INSTRUCTION):
            return
        self._filling = True
        self._mark_edited(item.row())
        self._filling = False
        self.sig_edited.emit(item.row())
