"""The takes list: every finished take (already on disk), with replay, rename, delete and export of one or
many; a take being denoised shows a pending mark until its denoised copy is ready."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QMessageBox,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from studio.audio.errors import AudioError
from studio.takes import Take, TakeError, TakeStore

EXPORT_FORMATS = (("wav16", "WAV 16-bit"), ("wav32f", "WAV 32-bit float"), ("flac", "FLAC"))
_ID_ROLE = Qt.ItemDataRole.UserRole


def describe_stats(take: Take) -> tuple[str, str]:
    """(first-chunk latency, real-time factor) of a take as short texts."""
    latency = take.stats.get("first_chunk_latency")
    rtf = take.stats.get("rtf")
    return (
        f"{latency:.2f} s" if isinstance(latency, (int, float)) else "–",
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
        self._pending: set[str] = set()

        title = QLabel("Takes")
        title.setObjectName("PanelTitle")
        self.folder_label = QLabel()
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
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column, width in ((1, 54), (2, 60), (3, 46), (4, 22)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Fixed)
            header.resizeSection(column, width)

        self.play_button = QPushButton("Play")
        self.play_button.clicked.connect(self.play_selected)
        self.rename_button = QPushButton("Rename")
        self.rename_button.clicked.connect(self.rename_selected)
        self.delete_button = QPushButton("Delete")
        self.delete_button.clicked.connect(lambda: self.delete_selected())  # clicked(bool) is no "confirm"
        self.export_format = QComboBox()
        for key, label in EXPORT_FORMATS:
            self.export_format.addItem(label, key)
        self.export_button = QPushButton("Export…")
        self.export_button.clicked.connect(lambda: self.export_selected())

        row1 = QHBoxLayout()
        for button in (self.play_button, self.rename_button, self.delete_button):
            row1.addWidget(button)
        row2 = QHBoxLayout()
        row2.addWidget(self.export_format, 1)
        row2.addWidget(self.export_button)
        layout = QVBoxLayout(self)
        layout.addWidget(title)
        layout.addWidget(self.tree, 1)
        layout.addLayout(row1)
        layout.addLayout(row2)
        layout.addWidget(self.folder_label)
        self.refresh()

    # -- list ----------------------------------------------------------------------------------------
    def set_store(self, store: TakeStore) -> None:
        self.store = store
        self.refresh()

    def refresh(self, select: str | None = None) -> None:
        """Reload the list from disk (newest first), keeping or setting the selection."""
        keep = {select} if select else set(self.selected_ids())
        self.tree.clear()
        for take in reversed(self.store.list()):
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
        self.folder_label.setText(f"Saved in {self.store.folder}")
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
        count = len(self.selected_ids())
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
        ids = self.selected_ids()
        if not ids:
            return
        if confirm:
            answer = QMessageBox.question(self, "Delete takes", f"Delete {len(ids)} take(s) from disk?")
            if answer != QMessageBox.StandardButton.Yes:
                return
        for take_id in ids:
            self.store.delete(take_id)
        self.refresh()
        self.sig_message.emit(f"Deleted {len(ids)} take(s)")

    def export_selected(self, folder: str | Path | None = None) -> list[Path]:
        """Export the selected takes in the chosen format (asks for a folder unless given)."""
        ids = self.selected_ids()
        if not ids:
            return []
        if folder is None:
            folder = QFileDialog.getExistingDirectory(self, "Export takes to", str(Path.home()))
            if not folder:
                return []
        try:
            results = self.store.export(ids, folder, fmt=self.export_format.currentData())
        except (AudioError, TakeError, OSError) as exc:
            QMessageBox.warning(self, "Export", f"Export failed: {exc}")
            return []
        written = [result.path for result in results]
        warnings = [w for result in results for w in result.warnings]
        self.sig_exported.emit(written)
        self.sig_message.emit(
            f"Exported {len(written)} file(s) to {folder}" + (f" — {warnings[0]}" if warnings else "")
        )
        return written
