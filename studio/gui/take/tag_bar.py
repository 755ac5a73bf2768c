"""The text panel's tag buttons: CosyVoice2's tags, wrapped to the panel's width, one stop in the Tab chain.

Tab reaches one button (the one used last); the arrow keys, Home and End move between the buttons, and
Space or Enter presses one, as in a toolbar."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtWidgets import QPushButton, QWidget

from studio.gui.widgets.flow_layout import FlowLayout
from studio.tags import EVENT_TAGS, SPAN_TAGS

_PREVIOUS = (Qt.Key.Key_Left, Qt.Key.Key_Up)
_NEXT = (Qt.Key.Key_Right, Qt.Key.Key_Down)


class TagBar(QWidget):
    """A button per tag: an event tag is inserted at the cursor, a span tag wraps the selection."""

    sig_insert = Signal(str)
    """Insert this event tag (e.g. "[breath]") at the cursor."""
    sig_wrap = Signal(str, str)
    """Wrap the selection in this opening and closing tag."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        layout = FlowLayout(self)
        self.buttons: list[QPushButton] = []
        for tag in EVENT_TAGS:
            button = self._add(tag.strip("[]"), f"Insert {tag} at the cursor")
            button.clicked.connect(lambda _checked=False, t=tag: self.sig_insert.emit(t))
        for opening, closing in SPAN_TAGS:
            button = self._add(f"{opening}…{closing}", f"Wrap the selection in {opening}{closing}")
            button.clicked.connect(lambda _checked=False, o=opening, c=closing: self.sig_wrap.emit(o, c))
        for button in self.buttons:
            layout.addWidget(button)
        for first, second in zip(self.buttons, self.buttons[1:], strict=False):
            QWidget.setTabOrder(first, second)
        self._make_tab_stop(self.buttons[0])

    def _add(self, label: str, tip: str) -> QPushButton:
        button = QPushButton(label)
        button.setObjectName("TagButton")
        button.setToolTip(tip)
        button.installEventFilter(self)
        self.buttons.append(button)
        return button

    def _make_tab_stop(self, stop: QPushButton) -> None:
        """Only ``stop`` takes focus from Tab; the others take it from a click or an arrow key."""
        for button in self.buttons:
            policy = Qt.FocusPolicy.StrongFocus if button is stop else Qt.FocusPolicy.ClickFocus
            button.setFocusPolicy(policy)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt override)
        if watched in self.buttons:
            if event.type() == QEvent.Type.FocusIn:
                self._make_tab_stop(watched)
            elif event.type() == QEvent.Type.KeyPress and event.modifiers() in (
                Qt.KeyboardModifier.NoModifier,
                Qt.KeyboardModifier.KeypadModifier,
            ):
                target = self._arrow_target(self.buttons.index(watched), event.key())
                if target is not None:
                    target.setFocus(Qt.FocusReason.OtherFocusReason)
                    return True
                if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
                    watched.click()
                    return True
        return super().eventFilter(watched, event)

    def _arrow_target(self, index: int, key: int) -> QPushButton | None:
        count = len(self.buttons)
        if key in _PREVIOUS:
            return self.buttons[(index - 1) % count]
        if key in _NEXT:
            return self.buttons[(index + 1) % count]
        if key == Qt.Key.Key_Home:
            return self.buttons[0]
        if key == Qt.Key.Key_End:
            return self.buttons[-1]
        return None
