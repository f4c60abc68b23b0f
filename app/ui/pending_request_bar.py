"""The bar under the transcript while the LLM is being asked: what is asked, and Cancel (Esc).

Why a bar of its own and not a button drawn in the pending entry: the transcript follows the
newest entry, so everything in it moves up as the model's words grow below (126 px in 16 s
was seen), and a click aimed at a button drawn there landed on the assistant's bubble. The
bar sits at the bottom of the transcript panel, outside what scrolls: from the moment a
request is pending until it ends, its button does not move.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QPushButton, QWidget

from app.conversation.transcript.entries import TranscriptEntry
from app.conversation.transcript.export import shown
from app.ui.elided_label import ElidedLabel

CANCEL_TEXT = "Cancel (Esc)"
ASKING = "◌ Asking the LLM"


def is_pending_request(entry: TranscriptEntry) -> bool:
    return entry.kind == "thinking" and not entry.final


class PendingRequestBar(QFrame):
    """Shown while at least one request is pending; Cancel names the newest one."""

    cancel_requested = Signal(object)  # the pending request's TranscriptEntry

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self._pending: dict[tuple[str, int], TranscriptEntry] = {}  # in arrival order
        self.label = ElidedLabel("", self, max_width=2000)
        self.label.setAccessibleName("The question the LLM is being asked")
        self.cancel_button = QPushButton(CANCEL_TEXT, self)
        self.cancel_button.setAccessibleName("Cancel the LLM request")
        self.cancel_button.setToolTip("Stop asking the LLM this question (Esc)")
        self.cancel_button.setFocusPolicy(Qt.FocusPolicy.TabFocus)
        self.cancel_button.clicked.connect(self._cancel)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 3, 4, 3)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.cancel_button)
        self.hide()

    def note(self, entry: TranscriptEntry) -> None:
        """An entry was added or changed: a pending request shows the bar, an ended one
        (or another kind under the same key) takes it away."""
        if is_pending_request(entry):
            self._pending[entry.key] = entry
        elif self._pending.pop(entry.key, None) is None:
            return
        self._show()

    def clear(self) -> None:
        self._pending.clear()
        self._show()

    def pending(self) -> TranscriptEntry | None:
        """The newest pending request (what Cancel cancels), or None."""
        return next(reversed(self._pending.values()), None)

    def _show(self) -> None:
        entry = self.pending()
        if entry is None:
            self.hide()
            return
        self.label.setText(f"{ASKING}: {' '.join(shown(entry).text.split())}")  # bidi drawn
        self.show()

    def _cancel(self) -> None:
        entry = self.pending()
        if entry is not None:
            self.cancel_requested.emit(entry)
