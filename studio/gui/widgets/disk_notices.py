"""Telling the user about disk trouble in plain words, and offering a way out: a take the disk refused
(kept in the recovery folder or in memory) can be saved elsewhere; a folder the studio cannot use at
start-up is named with its cause, and the studio carries on."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from studio.atomic_files import DiskError, ensure_folder
from studio.audio.errors import AudioError
from studio.audio.export import ExportFormat, write_audio
from studio.gui.take.export_folder import ExportFolder
from studio.recovery import KeptTake
from studio.tags import name_from_text

log = logging.getLogger("studio.gui")


def save_kept_take(kept: KeptTake, path: str | Path) -> Path:
    """Write a kept take to ``path`` (float WAV, nothing lost); raises AudioError saying why not."""
    target = Path(path)
    if target.suffix.lower() != ".wav":
        target = target.with_suffix(".wav")
    try:
        ensure_folder(target.parent)
    except DiskError as exc:
        raise AudioError(exc.explain("the take was not saved")) from exc
    write_audio(target, kept.audio, kept.sample_rate, ExportFormat.WAV_FLOAT32, overwrite=True)
    return target


class KeptTakeNotice(QMessageBox):
    """A non-blocking notice for one kept take: "Save elsewhere…" (a file dialog that starts in the last
    export folder, which the save updates) or "Later"."""

    def __init__(
        self,
        kept: KeptTake,
        kept_list: list[KeptTake],
        parent: QWidget | None = None,
        export_folder: ExportFolder | None = None,
    ):
        super().__init__(QMessageBox.Icon.Warning, "Take not saved", kept.message(), parent=parent)
        self.kept, self._kept_list = kept, kept_list
        self.export_folder = export_folder or ExportFolder(parent=self)
        details = [*kept.notes]
        if kept.recovered is not None:
            details.append(f"Recovery copy: {kept.recovery_folder}/{kept.recovered.id}.wav")
        if details:
            self.setDetailedText("\n".join(details))
        self.save_button = self.addButton("Save elsewhere…", QMessageBox.ButtonRole.AcceptRole)
        self.addButton("Later", QMessageBox.ButtonRole.RejectRole)
        self.save_button.clicked.connect(self.choose_and_save)

    def choose_and_save(self) -> None:
        name = (
            "".join(c if c.isalnum() or c in " -_" else " " for c in kept_name(self.kept)).strip() or "take"
        )
        path, _ = QFileDialog.getSaveFileName(
            self.parentWidget(),
            "Save the take",
            str(Path(self.export_folder.start) / f"{name}.wav"),
            "WAV (*.wav)",
        )
        if path:
            self.save_to(path)

    def save_to(self, path: str | Path) -> Path | None:
        """Save the kept take at ``path``; on success it is no longer pending. None (and a warning) if refused."""
        try:
            target = save_kept_take(self.kept, path)
        except AudioError as exc:
            QMessageBox.warning(self.parentWidget(), "Take not saved", str(exc))
            return None
        self.export_folder.remember(target.parent)
        if self.kept in self._kept_list:
            self._kept_list.remove(self.kept)
        log.info("kept take saved to %s", target)
        return target


def kept_name(kept: KeptTake) -> str:
    return str(kept.meta.get("name") or name_from_text(str(kept.meta.get("text", ""))) or "take")


def folder_problems(store, library_folder: Path) -> list[str]:
    """Sentences about the folders the studio writes to and cannot use (empty when all is well)."""
    problems = []
    try:
        store.check_writable()
    except DiskError as exc:
        problems.append(
            exc.explain("new takes cannot be saved there")
            + " Takes are kept in the recovery folder until then."
        )
    if library_folder.exists() and not library_folder.is_dir():
        problems.append(f"{library_folder} is not a folder: saved voices cannot be stored.")
    return problems
