"""Labels that never cut their text. ElidedLabel: one line that shortens its text (in the middle by
default: "/home/…/takes") instead of widening its panel, the whole text in its tooltip (for paths, which
have no spaces to wrap at). WrappedLabel: wraps, and asks its layout for the height of all its lines."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel, QSizePolicy


class ElidedLabel(QLabel):
    def __init__(self, text: str = "", parent=None, mode: Qt.TextElideMode = Qt.TextElideMode.ElideMiddle):
        super().__init__(text, parent)
        self.elide_mode = mode
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt override)
        super().setText(text)
        self.setToolTip(text)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        return QSize(self.fontMetrics().horizontalAdvance("…") * 8, super().minimumSizeHint().height())

    @property
    def shown_text(self) -> str:
        """The text as drawn at the label's width."""
        return self.fontMetrics().elidedText(self.text(), self.elide_mode, self.contentsRect().width())

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt override)
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.drawText(self.contentsRect(), int(self.alignment()), self.shown_text)


class WrappedLabel(QLabel):
    """A word-wrapped label whose minimum height is that of its lines at its width: a splitter or a
    crowded layout gives a plain wrapped QLabel only its one-line minimum and cuts the rest."""

    def __init__(self, text: str = "", parent=None):
        super().__init__(text, parent)
        self.setWordWrap(True)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt override)
        super().setText(text)
        self._fit()

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        self.setMinimumHeight(max(0, self.heightForWidth(max(1, self.width()))))  # -1: no text yet
