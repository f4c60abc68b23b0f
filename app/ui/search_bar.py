"""Find in the transcript (Ctrl+F): a bar under the transcript; Enter finds the next entry,
Shift+Enter the previous one, Esc closes the bar."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QToolButton, QWidget

from app.ui.transcript_panel import TranscriptPanel


class SearchBar(QWidget):
    def __init__(self, panel: TranscriptPanel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._panel = panel
        self.field = QLineEdit(self)
        self.field.setPlaceholderText("Find in the transcript")
        self.field.setClearButtonEnabled(True)
        self.field.setAccessibleName("Find in the transcript")
        self.count = QLabel("", self)
        self.previous_button = QToolButton(self)
        self.previous_button.setText("↑")
        self.previous_button.setToolTip("Previous match (Shift+Enter)")
        self.next_button = QToolButton(self)
        self.next_button.setText("↓")
        self.next_button.setToolTip("Next match (Enter)")
        self.close_button = QToolButton(self)
        self.close_button.setText("✕")
        self.close_button.setToolTip("Close (Esc)")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        label = QLabel("&Find:", self)
        label.setBuddy(self.field)
        layout.addWidget(label)
        layout.addWidget(self.field, 1)
        layout.addWidget(self.count)
        for button in (self.previous_button, self.next_button, self.close_button):
            layout.addWidget(button)
        self.field.textChanged.connect(self._find_fresh)
        self.field.installEventFilter(self)
        self.next_button.clicked.connect(self.find_next)
        self.previous_button.clicked.connect(self.find_previous)
        self.close_button.clicked.connect(self.close_bar)
        self.hide()

    def open_bar(self) -> None:
        self.show()
        self.field.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.field.selectAll()

    def close_bar(self) -> None:
        self.hide()
        self._panel.view.setFocus(Qt.FocusReason.OtherFocusReason)

    # QWidget.find(id) is Qt's static lookup of a widget by window id, which nothing calls
    # on this bar: the name says what the bar does.
    def _find_fresh(self, _text: str) -> None:
        self.find(True, fresh=True)

    def find_next(self, *_checked: object) -> None:
        self.find(True)

    def find_previous(self, *_checked: object) -> None:
        self.find(False)

    def find(  # type: ignore[override]
            self, forward: bool = True, fresh: bool = False) -> tuple[int, int]:
        """Select the next (or previous) matching entry; `fresh`: the text changed, so the
        search starts over from the top."""
        if fresh:
            self._panel.view.selectionModel().clearSelection()
        place, total = self._panel.find(self.field.text(), forward)
        if not self.field.text().strip():
            self.count.setText("")
        else:
            self.count.setText(f"{place} of {total}" if total else "no match")
        return place, total

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # Qt's name
        if watched is self.field and isinstance(event, QKeyEvent):
            key = event.key()
            if event.type() == QEvent.Type.ShortcutOverride and key == Qt.Key.Key_Escape:
                event.accept()  # Esc closes the bar here, not the window's Esc action
                return True
            if event.type() == QEvent.Type.KeyPress:
                if key == Qt.Key.Key_Escape:
                    self.close_bar()
                    return True
                if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
                    shift = bool(event.modifiers() & Qt.KeyboardModifier.ShiftModifier)
                    self.find(not shift)
                    return True
        return super().eventFilter(watched, event)
