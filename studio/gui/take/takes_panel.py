"""The takes list as a history: every finished take (already on disk), newest first, filtered by a search
box, with its full text on hover and in a details pane; replay, rename, delete (Delete key, asks, with an
undo for the last delete) and export (a file name for one take, a folder for many; a confirmation that
offers to show the folder). A take being denoised shows a pending mark until its denoised copy is ready."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QStyle,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from studio.atomic_files import DiskError
from studio.audio.errors import AudioError
from studio.gui.take.export_folder import ExportFolder
from studio.gui.take.take_details import TakeDetails, first_audio_latency
from studio.gui.widgets.desktop import reveal
from studio.gui.widgets.elided_label import ElidedLabel
from studio.takes import Take, TakeError, TakeStore

EXPORT_FORMATS = (
    ("wav16", "WAV 16-bit"),
    ("wav32f", "WAV 32-bit float"),
    ("flac", "FLAC"),
    ("mp3", "MP3"),
    ("ogg", "Ogg Vorbis"),
    ("opus", "Opus"),
)
_ID_ROLE = Qt.ItemDataRole.UserRole


def matches(take: Take, query: str) -> bool:
    """The search box's rule: every word appears in the take's name, text, voice or mode."""
    haystack = " ".join((take.name, take.text, take.voice, take.mode)).casefold()
    return all(word in haystack for word in query.casefold().split())


def describe_stats(take: Take) -> tuple[str, str]:
    """(first-audio latency, real-time factor) of a take as short texts: the latency the preview showed."""
    latency = first_audio_latency(take)
    rtf = take.stats.get("rtf")
    if latency is None:
        shown = "–"
    else:  # the column is narrow: four characters and a unit at most
        shown = f"{latency * 1000:.0f} ms" if latency < 1.0 else f"{latency:.1f} s"
    return (
        shown,
        f"{rtf:.2f}" if isinstance(rtf, (int, float)) else "–",
    )


class TakesPanel(QWidget):
    """Lists the takes of a TakeStore; replay goes through ``sig_play`` (the window owns the player)."""

    sig_play = Signal(str)
    """Play the take with this id."""
    sig_exported = Signal(list)
    """Files written by an export (list of Path)."""
    sig_message = Signal(str)
    """A short status message for the user."""

    def __init__(self, store: TakeStore, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("TakesPanel")
        self.store = store
        self.mastering: tuple[int, float | None] = (0, None)  # exports' (rate, loudness): from the settings
        self._pending: set[str] = set()
        self._exported_file: Path | None = None  # the last export, for "Show in folder"
        self.export_folder = ExportFolder(parent=self)  # the window shares its own (kept in the settings)

        self._build_list()
        self._build_buttons()
        self._lay_out()
        self.refresh()

    def _build_list(self) -> None:
        """The takes list (Delete deletes, Ctrl+Z undoes), its search box and the selected take's details."""
        self.folder_label = ElidedLabel()  # a long path never widens the panel
        self.folder_label.setObjectName("Hint")
        self.tree = QTreeWidget()
        self.tree.setObjectName("TakesList")
        self.tree.setHeaderLabels(["Take", "Length", "Latency", "RTF", "DN"])
        header_item = self.tree.headerItem()
        header_item.setToolTip(2, "Time to the first audio chunk")
        header_item.setToolTip(3, "Real-time factor: synthesis time / audio length (lower is faster)")
        header_item.setToolTip(4, "Denoised: ✓ done, … denoising")
        self.tree.setRootIsDecorated(False)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.tree.itemDoubleClicked.connect(lambda item, _col: self.sig_play.emit(item.data(0, _ID_ROLE)))
        self.tree.itemSelectionChanged.connect(self._update_buttons)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search takes (text, name, voice)…")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(lambda _text: self.refresh())
        self.details = TakeDetails()
        self.details.sig_show_file.connect(lambda take: reveal(self.store.wav_path(take.id), self))
        QShortcut(
            QKeySequence.StandardKey.Delete,
            self.tree,
            self.delete_selected,
            context=Qt.ShortcutContext.WidgetShortcut,
        )
        QShortcut(
            QKeySequence.StandardKey.Undo,
            self,
            self.undo_delete,
            context=Qt.ShortcutContext.WidgetWithChildrenShortcut,
        )
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column, width in ((1, 54), (2, 62), (3, 46), (4, 30)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Fixed)
            header.resizeSection(column, width)

    def _build_buttons(self) -> None:
        """Play, Rename, Delete, Undo delete; the export format and Export…."""
        self.play_button = QPushButton("Play")
        self.play_button.clicked.connect(self.play_selected)
        self.rename_button = QPushButton("Rename")
        self.rename_button.clicked.connect(self.rename_selected)
        self.delete_button = QPushButton("Delete")
        self.delete_button.clicked.connect(lambda: self.delete_selected())  # clicked(bool) is no "confirm"
        self.delete_button.setToolTip("Delete the selected takes (Delete); Undo brings them back")
        self.undo_button = QPushButton("Undo delete")
        self.undo_button.setToolTip("Bring back the takes deleted last (Ctrl+Z in the list)")
        self.undo_button.clicked.connect(self.undo_delete)
        self.undo_button.hide()
        self.export_format = QComboBox()
        for key, label in EXPORT_FORMATS:
            self.export_format.addItem(label, key)
        self.export_button = QPushButton("Export…")
        self.export_button.clicked.connect(lambda: self.export_selected())

    def _lay_out(self) -> None:
        """Title and search; the list over the details; the buttons; the folder line or the export notice."""
        title = QLabel("Takes")
        title.setObjectName("PanelTitle")
        row1 = QHBoxLayout()
        for button in (self.play_button, self.rename_button, self.delete_button, self.undo_button):
            row1.addWidget(button)
        row2 = QHBoxLayout()
        row2.addWidget(self.export_format, 1)
        row2.addWidget(self.export_button)
        list_and_details = QSplitter(Qt.Orientation.Vertical)
        list_and_details.addWidget(self.tree)
        list_and_details.addWidget(self.details)
        list_and_details.setStretchFactor(0, 3)
        list_and_details.setStretchFactor(1, 2)
        list_and_details.setChildrenCollapsible(False)
        list_and_details.setSizes([600, 300])  # proportions; the details ask for their whole height
        self.tree.setMinimumHeight(96)  # three rows at least, at 1280x720 too
        header = QHBoxLayout()
        header.addWidget(title)
        header.addWidget(self.search, 1)
        # the export notice takes the folder line's place, in a row as high as the notice: nothing moves
        self.folder_or_notice = QStackedWidget()
        self.folder_or_notice.addWidget(self.folder_label)
        self.folder_or_notice.addWidget(self._build_export_bar())
        layout = QVBoxLayout(self)
        layout.addLayout(header)
        layout.addWidget(list_and_details, 1)
        layout.addLayout(row1)
        layout.addLayout(row2)
        layout.addWidget(self.folder_or_notice)

    def _build_export_bar(self) -> QFrame:
        self.export_bar = QFrame()
        self.export_bar.setObjectName("ExportBar")
        self.export_note = ElidedLabel(mode=Qt.TextElideMode.ElideRight)
        self.show_export_button = QPushButton("Show in folder")
        self.show_export_button.clicked.connect(
            lambda: self._exported_file and reveal(self._exported_file, self)
        )
        self.close_export_button = QPushButton()
        self.close_export_button.setIcon(
            self.style().standardIcon(QStyle.StandardPixmap.SP_TitleBarCloseButton)
        )
        self.close_export_button.setToolTip("Hide this note")
        self.close_export_button.setAccessibleName("Hide this note")
        self.close_export_button.clicked.connect(
            lambda: self.folder_or_notice.setCurrentWidget(self.folder_label)
        )
        row = QHBoxLayout(self.export_bar)
        row.setContentsMargins(6, 2, 2, 2)
        row.addWidget(self.export_note, 1)
        row.addWidget(self.show_export_button)
        row.addWidget(self.close_export_button)
        return self.export_bar

    # -- list ----------------------------------------------------------------------------------------
    def set_store(self, store: TakeStore) -> None:
        self.store = store
        self.refresh()

    def refresh(self, select: str | None = None) -> None:
        """Reload the list from disk (newest first), keeping or setting the selection."""
        keep = {select} if select else set(self.selected_ids())
        self.tree.clear()
        query = self.search.text().strip()
        shown = [take for take in reversed(self.store.list()) if not query or matches(take, query)]
        for take in shown:
            latency, rtf = describe_stats(take)
            mark = "…" if take.id in self._pending else ("✓" if take.denoised else "")
            item = QTreeWidgetItem([take.name, f"{take.duration_s:.1f} s", latency, rtf, mark])
            item.setData(0, _ID_ROLE, take.id)
            item.setToolTip(
                0, f"{take.text}\n\nmode {take.mode} · seed {take.seed} · voice {take.voice or '–'}"
            )
            item.setToolTip(
                4,
                "denoising…"
                if take.id in self._pending
                else ("denoised copy used for playback and export" if take.denoised else ""),
            )
            self.tree.addTopLevelItem(item)
            item.setSelected(take.id in keep)
        hidden = "" if not query else f" · showing {len(shown)} matching “{query}”"
        self.folder_label.setText(f"Saved in {self.store.folder}{hidden}")
        self._update_buttons()

    def selected_ids(self) -> list[str]:
        return [item.data(0, _ID_ROLE) for item in self.tree.selectedItems()]

    def set_denoise_pending(self, take_id: str, pending: bool) -> None:
        if pending:
            self._pending.add(take_id)
        else:
            self._pending.discard(take_id)
        self.refresh()

    @property
    def pending_ids(self) -> set[str]:
        return set(self._pending)

    def _update_buttons(self) -> None:
        ids = self.selected_ids()
        count = len(ids)
        try:
            self.details.show_take(self.store.get(ids[0]) if count == 1 else None)
        except TakeError:
            self.details.show_take(None)
        self.play_button.setEnabled(count == 1)
        self.rename_button.setEnabled(count == 1)
        self.delete_button.setEnabled(count >= 1)
        self.export_button.setEnabled(count >= 1)

    # -- actions -------------------------------------------------------------------------------------
    def play_selected(self) -> None:
        ids = self.selected_ids()
        if len(ids) == 1:
            self.sig_play.emit(ids[0])

    def rename_selected(self) -> None:
        ids = self.selected_ids()
        if len(ids) != 1:
            return
        take = self.store.get(ids[0])
        name, ok = QInputDialog.getText(self, "Rename take", "Name:", text=take.name)
        if ok:
            self.rename(take.id, name)

    def rename(self, take_id: str, name: str) -> None:
        try:
            self.store.rename(take_id, name)
        except TakeError as exc:
            QMessageBox.warning(self, "Rename take", str(exc))
        self.refresh(select=take_id)

    def delete_selected(self, confirm: bool = True) -> None:
        """Delete the selected takes (after asking); `undo_delete` brings the last delete back."""
        ids = self.selected_ids()
        if not ids:
            return
        if confirm:
            answer = QMessageBox.question(
                self, "Delete takes", f"Delete {len(ids)} take(s)? Undo delete brings them back."
            )
            if answer != QMessageBox.StandardButton.Yes:
                return
        try:
            self.store.discard(ids)
        except (TakeError, OSError) as exc:
            QMessageBox.warning(self, "Delete takes", f"Could not delete: {exc}")
            self.refresh()
            return
        self.refresh()
        self.undo_button.setText(f"Undo delete ({len(ids)})")
        self.undo_button.show()
        self.sig_message.emit(f"Deleted {len(ids)} take(s) — Undo delete (Ctrl+Z) brings them back")

    def undo_delete(self) -> list[str]:
        try:
            restored = self.store.restore_discarded()
        except (TakeError, OSError) as exc:
            QMessageBox.warning(self, "Undo delete", f"Could not bring the takes back: {exc}")
            return []
        self.undo_button.hide()
        self.refresh()
        for item in (self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount())):
            item.setSelected(item.data(0, _ID_ROLE) in restored)
        if restored:
            self.sig_message.emit(f"Brought back {len(restored)} take(s)")
        return restored

    def export_selected(self, folder: str | Path | None = None, path: str | Path | None = None) -> list[Path]:
        """Export the selected takes in the chosen format: one take to a file the user names, several
        into a folder (``folder``/``path`` skip the dialogs); a confirmation offers to show the folder."""
        ids = self.selected_ids()
        if not ids:
            return []
        fmt = self.export_format.currentData()
        if folder is None and path is None:
            if len(ids) == 1:
                path = self._ask_file_name(ids[0], fmt)
            else:
                folder = QFileDialog.getExistingDirectory(self, "Export takes to", self.export_folder.start)
            if not (folder or path):
                return []
        rate, loudness = self.mastering
        try:
            if path is not None:
                results = [
                    self.store.export_as(ids[0], path, fmt=fmt, sample_rate=rate, loudness_lufs=loudness)
                ]
            else:
                results = self.store.export(ids, folder, fmt=fmt, sample_rate=rate, loudness_lufs=loudness)
        except DiskError as exc:
            QMessageBox.warning(self, "Export", exc.explain("nothing was exported"))
            return []
        except (AudioError, TakeError, OSError) as exc:
            QMessageBox.warning(self, "Export", f"Export failed: {exc}")
            return []
        written = [result.path for result in results]
        warnings = [w for result in results for w in result.warnings]
        self.export_folder.remember(written[0].parent)
        self.sig_exported.emit(written)
        where = written[0] if len(written) == 1 else written[0].parent
        warning = f" — {warnings[0]}" if warnings else ""
        text = f"Exported {len(written)} file(s) to {where}{warning}"
        self.sig_message.emit(text)
        what = written[0].name if len(written) == 1 else f"{len(written)} files to {where.name}"
        self._confirm_export(f"Exported {what}{warning}", text, written[0])
        return written

    def _ask_file_name(self, take_id: str, fmt: str) -> str:
        from studio.audio.export import ExportFormat, safe_filename

        suffix = ExportFormat.parse(fmt).suffix
        suggested = Path(self.export_folder.start) / safe_filename(self.store.get(take_id).name, suffix)
        chosen, _ = QFileDialog.getSaveFileName(
            self, "Export take as", str(suggested), f"{self.export_format.currentText()} (*{suffix})"
        )
        return chosen

    def _confirm_export(self, note: str, text: str, first: Path) -> None:
        """The confirmation bar under the list, one line (``text``, with the whole path, in its tooltip);
        it takes no focus, so work goes on."""
        self._exported_file = first
        self.export_note.setText(note)
        self.export_note.setToolTip(text)
        self.folder_or_notice.setCurrentWidget(self.export_bar)
