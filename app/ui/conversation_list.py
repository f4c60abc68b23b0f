"""The conversation list (a side panel): the current conversation and the saved ones,
newest first. Open shows a saved one read-only; Delete removes its file."""

from __future__ import annotations

import time
from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.conversation.transcript.saved import ConversationSummary
from app.display_text import visible_controls

_ID_ROLE = Qt.ItemDataRole.UserRole


def started_label(started: float | None) -> str:
    """When a saved conversation started, as the list (and the delete question) shows it."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(started)) if started else "not started"


class ConversationList(QWidget):
    open_requested = Signal(str)  # a saved conversation's id
    delete_requested = Signal(str)
    new_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.list = QListWidget(self)
        self.list.setAccessibleName("Conversations")
        self.list.setMinimumWidth(120)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setWordWrap(True)  # a narrow panel wraps a title, it does not scroll sideways
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.new_button = QToolButton(self)
        self.new_button.setText("&New")
        self.open_button = QToolButton(self)
        self.open_button.setText("&Open")
        self.delete_button = QToolButton(self)
        self.delete_button.setText("&Delete")
        buttons = QHBoxLayout()
        for button in (self.new_button, self.open_button, self.delete_button):
            button.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
            buttons.addWidget(button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.list, 1)
        layout.addLayout(buttons)
        self._current_id = ""
        self.new_button.clicked.connect(self.new_requested)
        self.open_button.clicked.connect(self._open)
        self.delete_button.clicked.connect(self._delete)
        self.list.itemActivated.connect(self._activated)
        self.list.currentItemChanged.connect(self._current_changed)
        self._enable()

    def show_conversations(self, current_id: str, current_title: str,
                           saved: Sequence[ConversationSummary]) -> None:
        """The current conversation first, then the saved ones (newest first)."""
        self._current_id = current_id
        self.list.clear()
        current_title = visible_controls(current_title)  # titles are what the user said
        item = QListWidgetItem(f"● {current_title} (now)")
        item.setData(_ID_ROLE, current_id)
        item.setToolTip("The conversation in the window")
        self.list.addItem(item)
        for summary in saved:
            if summary.conversation_id == current_id:
                continue
            title = visible_controls(summary.title)
            item = QListWidgetItem(f"{title}\n{started_label(summary.started)} · "
                                   f"{summary.entries} entries")
            item.setData(_ID_ROLE, summary.conversation_id)
            item.setToolTip(f"{title} — {visible_controls(str(summary.path))}")
            self.list.addItem(item)
        self._enable()

    def ids(self) -> list[str]:
        return [self.list.item(row).data(_ID_ROLE) for row in range(self.list.count())]

    def select(self, conversation_id: str) -> None:
        for row, found in enumerate(self.ids()):
            if found == conversation_id:
                self.list.setCurrentRow(row)

    def selected_id(self) -> str | None:
        item = self.list.currentItem()
        return item.data(_ID_ROLE) if item is not None else None

    def _activated(self, _item: object) -> None:
        self._open()

    def _current_changed(self, *_items: object) -> None:
        self._enable()

    def _enable(self) -> None:
        chosen = self.selected_id()
        saved = chosen is not None and chosen != self._current_id
        self.open_button.setEnabled(saved)
        self.delete_button.setEnabled(saved)

    def _open(self) -> None:
        chosen = self.selected_id()
        if chosen and chosen != self._current_id:
            self.open_requested.emit(chosen)

    def _delete(self) -> None:
        chosen = self.selected_id()
        if chosen and chosen != self._current_id:
            self.delete_requested.emit(chosen)
