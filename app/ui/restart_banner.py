"""The notice shown when settings changed that only a new conversation can use.

"The speech model and the microphone apply after a restart. [Restart the conversation now]"
The button asks for a restart; the transcript stays (the window keeps it). The banner goes
away by itself when the conversation stops or restarts.
"""

from __future__ import annotations

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget


class RestartBanner(QFrame):
    restart_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.label = QLabel(self)
        self.label.setWordWrap(True)
        self.restart_button = QPushButton("&Restart the conversation now", self)
        self.restart_button.clicked.connect(self._restart)
        self.later_button = QPushButton("Later", self)
        self.later_button.clicked.connect(self.hide)
        row = QHBoxLayout(self)
        row.addWidget(self.label, 1)
        row.addWidget(self.restart_button)
        row.addWidget(self.later_button)
        self.hide()

    def offer(self, changes: tuple[str, ...]) -> None:
        """Say what waits for a restart ("the speech model", "the microphone")."""
        if not changes:
            return
        what = changes[0] if len(changes) == 1 else ", ".join(changes[:-1]) + " and " + changes[-1]
        self.label.setText(f"Saved. {what[0].upper()}{what[1:]} will apply after a restart of "
                           "the conversation; everything else applies now.")
        self.show()

    def _restart(self) -> None:
        self.hide()
        self.restart_requested.emit()

    @Slot(str, str)
    def on_state(self, state: str, _detail: str) -> None:
        if state in ("stopping", "stopped", "error", "model_missing"):
            self.hide()  # nothing runs that a restart would change
