"""What the model knows now: the injected spans inside the speech model's context window (one
still being read counts as far as it was read, as the status bar's count does), each with the
share of the window it uses; a span that slid out (or whose session ended, so the next one
starts afresh, or that a speech server lost with its connection) stays listed, greyed, saying
which; Enter on it (or its context menu) reads it to the model again.

It reads the transcript's own model (the spans' `context`, which the transcript builder keeps
up to date as frames go by), so it shows exactly the conversation the window shows.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QModelIndex, QPersistentModelIndex, QPoint, Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QVBoxLayout,
    QWidget,
)

from app.conversation.transcript.entries import TranscriptEntry
from app.conversation.transcript.export import describe_source, shown
from app.ui.transcript_panel import TranscriptModel

SNIPPET_CHARS = 90
_KEY_ROLE = Qt.ItemDataRole.UserRole


def describe_context(entry: TranscriptEntry) -> str:
    """`126 positions · 4.2% of the window`, or why it no longer counts."""
    context = entry.context
    assert context is not None
    if context.lost:
        return f"{context.positions:,} positions · lost: {context.lost}"
    if context.in_window <= 0:
        return f"{context.positions:,} positions · slid out of the window"
    share = f"{100 * context.share:.1f}% of the window"
    if not entry.final:  # read in chunks, frame by frame: in the context as far as read
        return f"{context.positions:,} positions read so far · {share}"
    if context.in_window < context.positions:
        return f"{context.in_window:,} of {context.positions:,} positions still inside · {share}"
    return f"{context.positions:,} positions · {share}"


class ContextPanel(QWidget):
    resend_requested = Signal(object)  # "Send again": a span's TranscriptEntry

    def __init__(self, model: TranscriptModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._model = model
        self.summary = QLabel(self)
        self.summary.setWordWrap(True)
        self.list = QListWidget(self)
        self.list.setAccessibleName("Spans in the model's context")
        self.list.setWordWrap(True)
        self.list.setMinimumWidth(100)  # narrow enough for the transcript to keep half of 640 px
        self.list.setFocusPolicy(Qt.FocusPolicy.TabFocus)
        self.list.setSpacing(3)
        self.list.setAlternatingRowColors(True)
        # A span the model no longer has (slid out, lost with a connection, forgotten at a
        # restart) can be read to it again from here.
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._show_context_menu)
        self.list.itemActivated.connect(self._activated)
        self._menu_key: tuple[str, int] | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.summary)
        layout.addWidget(self.list, 1)
        self._items: dict[tuple[str, int], QListWidgetItem] = {}
        self._entries: dict[tuple[str, int], TranscriptEntry] = {}
        self._ended: set[tuple[str, int]] = set()  # their session ended
        model.rowsInserted.connect(self._rows_changed)
        model.dataChanged.connect(self._data_changed)
        model.modelReset.connect(self.clear)
        self._summarise()

    def _data_changed(self, first: QModelIndex, last: QModelIndex, *_roles: object) -> None:
        self._rows_changed(QModelIndex(), first.row(), last.row())

    def _rows_changed(self, _parent: QModelIndex | QPersistentModelIndex, first: int,
                      last: int) -> None:
        for row in range(first, last + 1):
            entry = self._model.entry_at(row)
            if entry.kind == "span" and entry.context is not None:
                self._show(entry)
        self._summarise()

    def _show(self, entry: TranscriptEntry) -> None:
        item = self._items.get(entry.key)
        if item is None:
            item = QListWidgetItem()
            item.setData(_KEY_ROLE, entry.key)
            self.list.addItem(item)
            self._items[entry.key] = item
        self._entries[entry.key] = entry
        self._ended.discard(entry.key)
        self._draw(item, entry)

    def _draw(self, item: QListWidgetItem, entry: TranscriptEntry) -> None:
        entry = shown(entry)  # a file name's bidi controls drawn, not obeyed
        text = " ".join(entry.text.split())
        if len(text) > SNIPPET_CHARS:
            text = text[: SNIPPET_CHARS - 1] + "…"
        if entry.key in self._ended:
            assert entry.context is not None  # the panel lists spans that reached the model
            how = f"{entry.context.positions:,} positions · forgotten: its conversation ended"
        else:
            how = describe_context(entry)
        item.setText(f"⤵ {describe_source(entry.source)}\n{text}\n{how}")
        item.setToolTip(entry.text)
        greyed = not self.is_inside(entry.key)
        role = QPalette.ColorRole.Text
        group = QPalette.ColorGroup.Disabled if greyed else QPalette.ColorGroup.Active
        item.setForeground(self.palette().color(group, role))

    def changeEvent(self, event: QEvent) -> None:  # Qt's name
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:  # greyed is the palette's own grey
            for key, item in self._items.items():
                self._draw(item, self._entries[key])

    def is_inside(self, key: tuple[str, int]) -> bool:
        """The span is (at least partly) inside the model's window now."""
        entry = self._entries.get(key)
        return (entry is not None and key not in self._ended and entry.context is not None
                and entry.context.in_window > 0)

    def context_menu(self, position: QPoint) -> QMenu:
        """The menu at `position` (the list's viewport): "Send again" for the span there."""
        menu = QMenu(self)
        item = self.list.itemAt(position) or self.list.currentItem()
        self._menu_key = item.data(_KEY_ROLE) if item is not None else None
        again = menu.addAction("Send again (read it to the model again)")
        again.setEnabled(self._menu_key is not None)
        again.triggered.connect(self._resend_menu_key)
        return menu

    def _show_context_menu(self, position: QPoint) -> None:
        menu = self.context_menu(position)
        menu.exec(self.list.viewport().mapToGlobal(position))
        menu.deleteLater()

    def _resend_menu_key(self) -> None:
        entry = self._entries.get(self._menu_key) if self._menu_key is not None else None
        if entry is not None:
            self.resend_requested.emit(entry)

    def _activated(self, item: QListWidgetItem) -> None:
        """Enter (or a double click) on a span the model no longer has sends it again."""
        key = item.data(_KEY_ROLE)
        entry = self._entries.get(key)
        if entry is not None and not self.is_inside(key):
            self.resend_requested.emit(entry)

    def keys(self) -> list[tuple[str, int]]:
        return [self.list.item(row).data(_KEY_ROLE) for row in range(self.list.count())]

    def item_for(self, key: tuple[str, int]) -> QListWidgetItem | None:
        return self._items.get(key)

    def forget_all(self) -> None:
        """The session ended: the next one starts with an empty context."""
        self._ended.update(self._entries)
        for key, item in self._items.items():
            self._draw(item, self._entries[key])
        self._summarise()

    def clear(self) -> None:
        self.list.clear()
        self._items.clear()
        self._entries.clear()
        self._ended.clear()
        self._summarise()

    def _summarise(self) -> None:
        inside = [self._entries[k] for k in self._entries if self.is_inside(k)]
        if not inside:
            self.summary.setText("No injected span is in the model's context now.")
            return
        used = sum(e.context.in_window for e in inside if e.context is not None)
        window = inside[-1].context.window if inside[-1].context is not None else 0
        share = f" ({100 * used / window:.1f}% of its {window:,}-position window)" if window \
            else ""
        count = "1 span" if len(inside) == 1 else f"{len(inside)} spans"
        self.summary.setText(f"The model has {count} in its context: {used:,} "
                             f"positions{share}.")
