"""A saved conversation, reopened read-only in a window of its own (export and copy work).

A conversation the app did not close (it crashed, was killed, the computer lost power) was
saved with its last entries still open. They are shown closed, with a notice at the end and a
word at the top that the run ended unexpectedly; what Export writes is the file as saved
(its Markdown marks the open entries "partial")."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.conversation.transcript.entries import TranscriptEntry, closed
from app.conversation.transcript.export import TranscriptHeader, header_lines
from app.ui.export_dialog import export_with_dialog
from app.ui.screen_fit import fit_when_shown
from app.ui.transcript_panel import TranscriptPanel
from app.ui.ui_state import UiState

ENDED_UNEXPECTEDLY = "ContextSpan ended unexpectedly"  # the reason the open entries get
CUT_OFF_WORD = (": it was cut off, ContextSpan ended unexpectedly while it ran (a crash, a "
                "forced quit or a power loss)")
CUT_OFF_NOTICE = ("The conversation was cut off here: ContextSpan ended unexpectedly while it "
                  "ran (a crash, a forced quit or a power loss), so the entries above were "
                  "never finished; each is shown as far as it got.")


def _as_shown(saved: Sequence[TranscriptEntry]) -> list[TranscriptEntry]:
    """The entries as the window shows them: any left open by a run that ended unexpectedly
    closed with that reason, and a notice after them that says so."""
    if all(entry.final for entry in saved):
        return list(saved)
    shown = [closed(entry, ENDED_UNEXPECTEDLY) for entry in saved]
    last = saved[-1]
    shown.append(TranscriptEntry(max(e.entry_id for e in saved) + 1, "notice", CUT_OFF_NOTICE,
                                 last.wall_time, detail="warning", origin="saved-window"))
    return shown


class SavedConversationWindow(QWidget):
    def __init__(self, header: TranscriptHeader, entries: Sequence[TranscriptEntry],
                 state: UiState, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.header = header
        self._state = state
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.setWindowTitle(f"{header.title or 'Conversation'} (read-only) — ContextSpan")
        fit_when_shown(self, QSize(760, 600))
        self._saved = list(entries)
        self.about = about = QLabel(self)
        about.setWordWrap(True)
        about.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # Every model, device, LLM and tool set it ran on, as the export's header says it.
        ran_on = " · ".join(line.removeprefix("- ") for line in header_lines(header))
        cut_off = any(not entry.final for entry in self._saved)
        about.setText(f"Saved conversation, read-only{CUT_OFF_WORD if cut_off else ''}. "
                      f"{ran_on}")
        self.transcript = TranscriptPanel(self)
        self.transcript.extend(_as_shown(self._saved))
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
        """The conversation as it was saved (what Export writes)."""
        return list(self._saved)

    def export(self) -> None:
        export_with_dialog(self, self.entries(), self.header, self._state)
