"""A saved conversation, reopened read-only in a window of its own (export and copy work)."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.conversation.transcript.entries import TranscriptEntry
from app.conversation.transcript.export import TranscriptHeader, header_lines
from app.ui.export_dialog import export_with_dialog
from app.ui.transcript_panel import TranscriptPanel
from app.ui.ui_state import UiState


class SavedConversationWindow(QWidget):
    def __init__(self, header: TranscriptHeader, entries: Sequence[TranscriptEntry],
                 state: UiState, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.header = header
        self._state = state
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.setWindowTitle(f"{header.title or 'Conversation'} (read-only) — ContextSpan")
        self.resize(760, 600)
        about = QLabel(self)
        about.setWordWrap(True)
        about.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # Every model, device, LLM and tool set it ran on, as the export's header says it.
        ran_on = " · ".join(line.removeprefix("- ") for line in header_lines(header))
        about.setText(f"Saved conversation, read-only. {ran_on}")
        self.transcript = TranscriptPanel(self)
        self.transcript.extend(entries)
        self.export_button = QPushButton("&Export…", self)
        self.copy_button = QPushButton("&Copy all", self)
        self.close_button = QPushButton("Close", self)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        for button in (self.export_button, self.copy_button, self.close_button):
            buttons.addWidget(button)
        layout = QVBoxLayout(self)
        layout.addWidget(about)
        layout.addWidget(self.transcript, 1)
        layout.addLayout(buttons)
        self.export_button.clicked.connect(self.export)
        self.copy_button.clicked.connect(self.transcript.copy_all)
        self.close_button.clicked.connect(self.close)
        QShortcut(QKeySequence(QKeySequence.StandardKey.Close), self, self.close)

    def entries(self) -> list[TranscriptEntry]:
        return self.transcript.entries()

    def export(self) -> None:
        export_with_dialog(self, self.entries(), self.header, self._state)
