"""The text box under the transcript: type to the assistant, or paste text to be read.

Tab moves the focus on (a tab character is never what a question needs). Enter sends,
Shift+Enter makes a new line; Alt+S and Alt+E press the buttons.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QHBoxLayout, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget


class _Editor(QPlainTextEdit):
    submitted = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # Qt's name
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submitted.emit()  # Enter sends; Shift+Enter makes a new line
            return
        super().keyPressEvent(event)


class InputBox(QWidget):
    send_requested = Signal(str)  # a question for the assistant (goes to the LLM)
    read_requested = Signal(str)  # text to read as-is (injected as a span)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.editor = _Editor(self)
        self.editor.setPlaceholderText(
            "Type to the assistant (Enter sends) — or paste a text and press “Read this”")
        self.editor.setFixedHeight(64)
        self.editor.setTabChangesFocus(True)
        self.editor.setAccessibleName("Message to the assistant")
        self.send_button = QPushButton("&Send", self)
        self.send_button.setToolTip("Send to the assistant (Enter)")
        self.read_button = QPushButton("R&ead this", self)
        self.read_button.setToolTip("Inject the text into the voice's context as a span")
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.read_button)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.editor, 1)
        layout.addLayout(buttons)
        self.setFocusProxy(self.editor)
        QWidget.setTabOrder(self.editor, self.send_button)
        QWidget.setTabOrder(self.send_button, self.read_button)
        self.editor.submitted.connect(self._send)
        self.send_button.clicked.connect(self._send)
        self.read_button.clicked.connect(self._read)

    def text(self) -> str:
        return self.editor.toPlainText().strip()

    def _send(self) -> None:
        if self.text():
            self.send_requested.emit(self.text())

    def _read(self) -> None:
        if self.text():
            self.read_requested.emit(self.text())

    def clear(self) -> None:
        """Called by the window once the text was accepted: nothing typed is lost before."""
        self.editor.clear()
