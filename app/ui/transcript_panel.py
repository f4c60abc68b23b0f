"""The live transcript: what was said, what was injected into the voice, and the tools behind it.

Why model/view (a flat QTreeView over a list model, painted by one delegate) and not a
QTextBrowser: entries change in place (a growing utterance gets a new word several times a
second) and QTreeView is the item view that re-measures only the row that changed on
`dataChanged` (QListView re-lays out every row), and paints only the rows on screen. A rich
text document would have to find and rewrite an entry's text range per word and could not
select whole entries. Row heights are measured once per (entry, width) and cached, so the
full pass Qt does after a row is inserted is a walk over cached numbers.

Colours come from a light or a dark table, chosen by the palette's base colour, so the panel
follows a dark desktop. A pending LLM request's Cancel is a real button in a bar under the
entries (pending_request_bar.py), never drawn inside them: an entry moves whenever the model's
words grow below it, and a button drawn there moved away from the pointer aimed at it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from PySide6.QtCore import (
    QAbstractListModel,
    QItemSelectionModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QPoint,
    QRect,
    QRectF,
    QSize,
    Qt,
    Signal,
    Slot,
)
from PySide6.QtGui import (
    QBrush,
    QColor,
    QFont,
    QFontDatabase,
    QFontMetrics,
    QGuiApplication,
    QKeyEvent,
    QKeySequence,
    QPainter,
    QPainterPath,
    QPalette,
    QPen,
    QResizeEvent,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QMenu,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QToolButton,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from app.conversation.transcript.entries import (
    READ_MARK,
    STOPPED,
    TranscriptEntry,
    closed,
    read_split,
)
from app.conversation.transcript.export import (
    explain_timestamps,
    format_timestamps,
    kind_label,
    shown,
    shows_detail,
    span_meta,
    to_plain_text,
)
from app.ui.pending_request_bar import PendingRequestBar
from app.ui.theme import is_dark

Placement = Literal["left", "right", "wide", "indented", "center"]


def is_resendable(entry: TranscriptEntry) -> bool:
    """A span that is over (landed, or lost on its way: a dropped connection, a restart)
    can be read to the model again; one still on its way cannot yet."""
    return entry.kind == "span" and entry.final and bool(entry.text.strip())

ModelIndex = QModelIndex | QPersistentModelIndex


@dataclass(frozen=True)
class KindStyle:
    """How one kind of entry looks; a table rather than branches in paint() so tests and a
    future dark theme can read and swap it."""

    background: QColor
    accent: QColor
    prefix: str  # an icon-like glyph that DejaVu Sans (the usual Linux fallback) has
    placement: Placement


@dataclass(frozen=True)
class TranscriptTheme:
    """The panel's colours for a light or a dark desktop."""

    kinds: dict[str, KindStyle]
    severities: dict[str, KindStyle]
    blend: QColor  # what a growing entry's fill is mixed with (the panel's usual background)
    text: QColor
    meta: QColor


KIND_STYLES: dict[str, KindStyle] = {
    "user": KindStyle(QColor("#dbeafe"), QColor("#1d4ed8"), "◉", "right"),
    "assistant": KindStyle(QColor("#dcfce7"), QColor("#15803d"), "◆", "left"),
    "span": KindStyle(QColor("#fef3c7"), QColor("#b45309"), "⤵", "wide"),
    "tool": KindStyle(QColor("#ede9fe"), QColor("#6d28d9"), "⚙", "indented"),
    "notice": KindStyle(QColor("#f1f5f9"), QColor("#475569"), "⚑", "center"),
    "thinking": KindStyle(QColor("#ecfeff"), QColor("#0e7490"), "◌", "indented"),
}
NOTICE_SEVERITY_STYLES: dict[str, KindStyle] = {
    "warning": KindStyle(QColor("#ffedd5"), QColor("#c2410c"), "⚠", "center"),
    "error": KindStyle(QColor("#fee2e2"), QColor("#b91c1c"), "⚠", "center"),
}
LIGHT = TranscriptTheme(KIND_STYLES, NOTICE_SEVERITY_STYLES, QColor("#ffffff"),
                        QColor("#111827"), QColor("#4b5563"))
DARK = TranscriptTheme(
    {
        "user": KindStyle(QColor("#1e3a5f"), QColor("#93c5fd"), "◉", "right"),
        "assistant": KindStyle(QColor("#173d29"), QColor("#86efac"), "◆", "left"),
        "span": KindStyle(QColor("#45320f"), QColor("#fbbf24"), "⤵", "wide"),
        "tool": KindStyle(QColor("#2e2452"), QColor("#c4b5fd"), "⚙", "indented"),
        "notice": KindStyle(QColor("#273142"), QColor("#cbd5e1"), "⚑", "center"),
        "thinking": KindStyle(QColor("#123840"), QColor("#67e8f9"), "◌", "indented"),
    },
    {
        "warning": KindStyle(QColor("#4a2a12"), QColor("#fdba74"), "⚠", "center"),
        "error": KindStyle(QColor("#4c1717"), QColor("#fca5a5"), "⚠", "center"),
    },
    QColor("#1e1e1e"), QColor("#e5e7eb"), QColor("#9ca3af"),
)


def theme_for(palette: QPalette) -> TranscriptTheme:
    return DARK if is_dark(palette) else LIGHT


def style_for(entry: TranscriptEntry, theme: TranscriptTheme = LIGHT) -> KindStyle:
    """The style of an entry: its kind's, or its severity's for warnings and errors."""
    if entry.kind == "notice":
        severity = theme.severities.get(entry.detail.strip().lower())
        if severity is not None:
            return severity
    return theme.kinds.get(entry.kind, theme.kinds["notice"])


def displayed_background(entry: TranscriptEntry, theme: TranscriptTheme = LIGHT) -> QColor:
    """The bubble's fill: a growing (non-final) entry is paler, so it reads as provisional."""
    base = style_for(entry, theme).background
    if entry.final:
        return QColor(base)
    blend = theme.blend
    return QColor(
        (base.red() + blend.red()) // 2,
        (base.green() + blend.green()) // 2,
        (base.blue() + blend.blue()) // 2,
    )


class TranscriptModel(QAbstractListModel):
    """The entries in arrival order, with an index by key so an update finds its row in O(1)
    and announces just that row."""

    EntryRole = Qt.ItemDataRole.UserRole + 1

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._entries: list[TranscriptEntry] = []
        self._rows: dict[tuple[str, int], int] = {}

    def rowCount(self, parent: ModelIndex = QModelIndex()) -> int:  # noqa: B008 (Qt's signature)
        return 0 if parent.isValid() else len(self._entries)

    def data(self, index: ModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid() or not 0 <= index.row() < len(self._entries):
            return None
        entry = self._entries[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return to_plain_text([entry])
        if role == Qt.ItemDataRole.ToolTipRole:  # the text, and what its two times are
            return f"{to_plain_text([entry])}\n\n{explain_timestamps(entry)}"
        if role == self.EntryRole:
            return entry
        return None

    def entry_at(self, row: int) -> TranscriptEntry:
        return self._entries[row]

    def entries(self) -> list[TranscriptEntry]:
        return list(self._entries)

    def upsert(self, entry: TranscriptEntry) -> int:
        """Replace the entry with the same key in place, or append it; returns its row."""
        row = self._rows.get(entry.key)
        if row is not None:
            self._entries[row] = entry
            index = self.index(row)
            self.dataChanged.emit(index, index)
            return row
        row = len(self._entries)
        self.beginInsertRows(QModelIndex(), row, row)
        self._entries.append(entry)
        self._rows[entry.key] = row
        self.endInsertRows()
        return row

    def extend(self, entries: Iterable[TranscriptEntry]) -> None:
        """Many entries at once (loading a saved conversation): one insert notification for the
        new ones, so the view lays out once."""
        fresh: list[TranscriptEntry] = []
        pending: dict[tuple[str, int], int] = {}
        for entry in entries:
            if entry.key in self._rows:
                self.upsert(entry)
            elif entry.key in pending:
                fresh[pending[entry.key]] = entry
            else:
                pending[entry.key] = len(fresh)
                fresh.append(entry)
        if not fresh:
            return
        first = len(self._entries)
        self.beginInsertRows(QModelIndex(), first, first + len(fresh) - 1)
        for offset, entry in enumerate(fresh):
            self._rows[entry.key] = first + offset
        self._entries.extend(fresh)
        self.endInsertRows()

    def clear(self) -> None:
        self.beginResetModel()
        self._entries.clear()
        self._rows.clear()
        self.endResetModel()

    def close_open(self, reason: str = STOPPED) -> list[TranscriptEntry]:
        """Entries still open when their conversation ended become final (see `closed`);
        returns those that changed."""
        changed = [closed(e, reason) for e in self._entries if not e.final]
        for entry in changed:
            self.upsert(entry)
        return changed


@dataclass(frozen=True)
class RowLayout:
    """Where each part of an entry goes, relative to its row's top-left corner."""

    height: int
    bubble: QRect
    header: QRect
    meta: QRect  # spans: provenance line; empty for other kinds
    body: QRect  # a span the model read only the start of: the part it read
    detail: QRect  # tools and spans: what happened to them; empty otherwise
    # A span the model read only the start of: the line that marks where it stopped, and
    # the rest of the text below it, drawn greyed; empty otherwise.
    mark: QRect = field(default_factory=QRect)
    unread: QRect = field(default_factory=QRect)


_OUTER_X = 10
_OUTER_Y = 4
_PAD = 8
_GAP = 3
_ACCENT_BAR = 4
_TEXT_FLAGS = int(Qt.TextFlag.TextWordWrap)
_UNBOUNDED = 1_000_000
ZOOM_STEP = 0.1  # of the base font size, per Ctrl++ / Ctrl+-
ZOOM_LIMITS = (-5, 10)


class TranscriptDelegate(QStyledItemDelegate):
    """Paints one entry as a bubble and measures it, caching the measurement per entry object
    and width (entries are immutable, so an unchanged object needs no new measurement)."""

    def __init__(self, model: TranscriptModel, view: QTreeView) -> None:
        super().__init__(view)
        self._model = model
        self._view = view
        self._cache: dict[tuple[str, int], tuple[TranscriptEntry, int, RowLayout]] = {}
        self.layouts_computed = 0  # how many measurements were not cached (tests, benchmarks)
        self._base_point_size = QFont(view.font()).pointSizeF()
        self.zoom = 0
        self._make_fonts()

    def _make_fonts(self) -> None:
        base = QFont(self._view.font())
        base.setPointSizeF(max(5.0, self._base_point_size * (1 + ZOOM_STEP * self.zoom)))
        self._body_font = base
        self._mono_font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self._mono_font.setPointSizeF(base.pointSizeF())
        self._small_font = QFont(base)
        self._small_font.setPointSizeF(max(5.0, base.pointSizeF() * 0.85))
        self._label_font = QFont(self._small_font)
        self._label_font.setBold(True)

    def set_zoom(self, zoom: int) -> None:
        """Text size in steps of 10% of the desktop's font (0: the desktop's)."""
        self.zoom = max(ZOOM_LIMITS[0], min(ZOOM_LIMITS[1], zoom))
        self._make_fonts()
        self.clear_cache()

    @property
    def body_point_size(self) -> float:
        return self._body_font.pointSizeF()

    def theme(self) -> TranscriptTheme:
        return theme_for(self._view.palette())

    # --- texts -------------------------------------------------------------------------
    @staticmethod
    def header_label(entry: TranscriptEntry) -> str:
        """Glyph and label, e.g. `⤵ Injected span`; a growing entry ends with an ellipsis."""
        label = kind_label(entry)
        if entry.kind == "notice" and entry.detail:
            label = f"{label} · {entry.detail}"
        suffix = " …" if not entry.final else ""
        return f"{style_for(entry).prefix} {label}{suffix}"

    @staticmethod
    def detail_text(entry: TranscriptEntry) -> str:
        """Tools: result size; spans: truncation, positions, delay after <ret>."""
        return entry.detail if shows_detail(entry) else ""

    @staticmethod
    def header_stamps(entry: TranscriptEntry) -> str:
        """The clock's time and the audio's, named (the tooltip says what each is)."""
        return format_timestamps(entry)

    @staticmethod
    def meta_text(entry: TranscriptEntry) -> str:
        if entry.kind != "span":
            return ""
        return span_meta(entry)

    def _body_font_for(self, entry: TranscriptEntry) -> QFont:
        font = QFont(self._mono_font if entry.kind == "tool" else self._body_font)
        if not entry.final:
            font.setItalic(True)
        return font

    # --- measuring ---------------------------------------------------------------------
    def clear_cache(self) -> None:
        self._cache.clear()

    def layout_for(self, entry: TranscriptEntry, width: int) -> RowLayout:
        cached = self._cache.get(entry.key)
        if cached is not None and cached[0] is entry and cached[1] == width:
            return cached[2]
        layout = self._compute_layout(entry, width)
        self._cache[entry.key] = (entry, width, layout)
        self.layouts_computed += 1
        return layout

    def _compute_layout(self, entry: TranscriptEntry, width: int) -> RowLayout:
        width = max(width, 160)
        style = style_for(entry)
        lane = width - 2 * _OUTER_X
        if style.placement in ("left", "right"):
            max_bubble = int(lane * 0.8)
        elif style.placement == "indented":
            max_bubble = lane - 40
        elif style.placement == "center":
            max_bubble = int(lane * 0.75)
        else:
            max_bubble = lane
        bar = _ACCENT_BAR if entry.kind == "span" else 0
        max_inner = max(40, max_bubble - 2 * _PAD - bar)

        label_fm = QFontMetrics(self._label_font)
        small_fm = QFontMetrics(self._small_font)
        body_fm = QFontMetrics(self._body_font_for(entry))
        header_w = (
            label_fm.horizontalAdvance(self.header_label(entry))
            + 16
            + small_fm.horizontalAdvance(self.header_stamps(entry))
        )
        header_h = max(label_fm.height(), small_fm.height())
        meta = self.meta_text(entry)
        meta_box = (
            small_fm.boundingRect(QRect(0, 0, max_inner, _UNBOUNDED), _TEXT_FLAGS, meta)
            if meta
            else QRect()
        )
        split = read_split(entry)
        read_text, unread_text = split if split is not None else (entry.text, "")
        body_box = body_fm.boundingRect(
            QRect(0, 0, max_inner, _UNBOUNDED), _TEXT_FLAGS, read_text or " "
        )
        mark_box = unread_box = QRect()
        if split is not None:
            mark_box = small_fm.boundingRect(QRect(0, 0, max_inner, _UNBOUNDED), _TEXT_FLAGS,
                                             READ_MARK)
            unread_box = body_fm.boundingRect(QRect(0, 0, max_inner, _UNBOUNDED), _TEXT_FLAGS,
                                              unread_text or " ")
        detail = self.detail_text(entry)
        detail_box = (
            small_fm.boundingRect(QRect(0, 0, max_inner, _UNBOUNDED), _TEXT_FLAGS, detail)
            if detail
            else QRect()
        )
        if style.placement in ("left", "right"):  # chat bubbles hug their text
            inner = min(
                max_inner,
                max(header_w, meta_box.width(), body_box.width(), detail_box.width(),
                    mark_box.width(), unread_box.width()),
            )
        else:
            inner = max_inner
        bubble_w = inner + 2 * _PAD + bar

        if style.placement == "right":
            left = width - _OUTER_X - bubble_w
        elif style.placement == "indented":
            left = _OUTER_X + 40
        elif style.placement == "center":
            left = (width - bubble_w) // 2
        else:
            left = _OUTER_X
        x = left + _PAD + bar
        y = _OUTER_Y + _PAD
        header = QRect(x, y, inner, header_h)
        y += header_h + _GAP
        meta_rect = QRect()
        if meta:
            meta_rect = QRect(x, y, inner, meta_box.height())
            y += meta_box.height() + _GAP
        body = QRect(x, y, inner, body_box.height())
        y += body_box.height()
        mark_rect = unread_rect = QRect()
        if split is not None:
            y += _GAP
            mark_rect = QRect(x, y, inner, mark_box.height())
            y += mark_box.height() + _GAP
            unread_rect = QRect(x, y, inner, unread_box.height())
            y += unread_box.height()
        detail_rect = QRect()
        if detail:
            y += _GAP
            detail_rect = QRect(x, y, inner, detail_box.height())
            y += detail_box.height()
        bubble = QRect(left, _OUTER_Y, bubble_w, y + _PAD - _OUTER_Y)
        return RowLayout(
            height=bubble.bottom() + 1 + _OUTER_Y,
            bubble=bubble,
            header=header,
            meta=meta_rect,
            body=body,
            detail=detail_rect,
            mark=mark_rect,
            unread=unread_rect,
        )

    def row_layout(self, index: ModelIndex) -> RowLayout:
        """The layout of a row at the view's current width (what paint() draws)."""
        return self.layout_for(shown(self._model.entry_at(index.row())),
                               self._view.viewport().width())

    def sizeHint(self, option: QStyleOptionViewItem, index: ModelIndex) -> QSize:
        layout = self.row_layout(index)
        return QSize(self._view.viewport().width(), layout.height)

    # --- painting ----------------------------------------------------------------------
    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: ModelIndex) -> None:
        entry = shown(self._model.entry_at(index.row()))  # bidi controls drawn, not obeyed
        layout = self.row_layout(index)
        theme = self.theme()
        style = style_for(entry, theme)
        origin = option.rect.topLeft()
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        painter.translate(origin)

        bubble = QRectF(layout.bubble).adjusted(0.5, 0.5, -0.5, -0.5)
        path = QPainterPath()
        path.addRoundedRect(bubble, 8, 8)
        painter.fillPath(path, QBrush(displayed_background(entry, theme)))
        if entry.kind == "span":
            bar = QPainterPath()
            bar.addRoundedRect(
                QRectF(bubble.left(), bubble.top(), _ACCENT_BAR + 4, bubble.height()), 4, 4
            )
            painter.fillPath(bar.intersected(path), QBrush(style.accent))
        border = QPen(QColor(style.accent), 1)
        if not entry.final:
            border.setStyle(Qt.PenStyle.DashLine)
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        if selected:
            border = QPen(option.palette.color(QPalette.ColorRole.Highlight), 2.5)
        painter.setPen(border)
        painter.drawPath(path)

        painter.setFont(self._label_font)
        painter.setPen(style.accent)
        alignment = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
        painter.drawText(layout.header, int(alignment), self.header_label(entry))
        painter.setFont(self._small_font)
        painter.setPen(theme.meta)
        stamps_alignment = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
        painter.drawText(layout.header, int(stamps_alignment), self.header_stamps(entry))
        if not layout.meta.isNull():
            painter.setPen(style.accent)
            painter.drawText(layout.meta, _TEXT_FLAGS, self.meta_text(entry))

        text_color = QColor(theme.text)
        if not entry.final:
            text_color.setAlpha(140)
        painter.setPen(text_color)
        painter.setFont(self._body_font_for(entry))
        body_flags = _TEXT_FLAGS
        if style.placement == "center":
            body_flags |= int(Qt.AlignmentFlag.AlignHCenter)
        split = read_split(entry)
        painter.drawText(layout.body, body_flags, entry.text if split is None else split[0])
        if split is not None and not layout.mark.isNull():
            # Where the model stopped reading; the rest reads greyed, as not read.
            painter.setFont(self._small_font)
            painter.setPen(style.accent)
            painter.drawText(layout.mark, _TEXT_FLAGS, READ_MARK)
            painter.setFont(self._body_font_for(entry))
            painter.setPen(theme.meta)
            painter.drawText(layout.unread, body_flags, split[1])
        if not layout.detail.isNull():
            painter.setFont(self._small_font)
            painter.setPen(theme.meta)
            painter.drawText(layout.detail, _TEXT_FLAGS, entry.detail)
        painter.restore()


class _TranscriptView(QTreeView):
    """A flat, header-less QTreeView: per-pixel scrolling, whole-entry selection, our own copy."""

    copyRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setHeaderHidden(True)
        self.setRootIsDecorated(False)
        self.setItemsExpandable(False)
        self.setIndentation(0)
        self.setUniformRowHeights(False)
        self.setAllColumnsShowFocus(False)
        self.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.verticalScrollBar().setSingleStep(24)
        self._laid_out_width = -1  # the background is the palette's base: light or dark

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        width = self.viewport().width()
        if width != self._laid_out_width:  # wrapped heights depend on the width
            self._laid_out_width = width
            self.scheduleDelayedItemsLayout()

    def drawRow(self, painter: QPainter, option: QStyleOptionViewItem, index: ModelIndex) -> None:
        # Skip the style's full-row selection fill: the delegate outlines the selected bubble.
        row_option = QStyleOptionViewItem(option)
        row_option.rect = QRect(
            0, option.rect.top(), self.viewport().width(), option.rect.height()
        )
        selection = self.selectionModel()
        if selection is not None and selection.isSelected(index):
            row_option.state |= QStyle.StateFlag.State_Selected
        else:
            row_option.state &= ~QStyle.StateFlag.State_Selected
        self.itemDelegate().paint(painter, row_option, index)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.matches(QKeySequence.StandardKey.Copy):
            self.copyRequested.emit()
            event.accept()
            return
        super().keyPressEvent(event)


class TranscriptPanel(QWidget):
    """The transcript panel. Feed it with `upsert()` from the GUI thread.

    It follows the newest entry while the view is at the bottom; scrolling up pauses that
    (a "jump to latest" button appears) and scrolling back down resumes it.

    Signals:
        followingChanged(bool): auto-scroll paused (False) or resumed (True).
        copied(str): text just put on the clipboard.
        cancel_requested(TranscriptEntry): the Cancel button of a pending LLM request (in the
            bar under the entries, which stays put while they move).
        resend_requested(TranscriptEntry): "Send again" on a span (its context menu).
        zoomChanged(int): the text size changed (steps of 10%).
    """

    followingChanged = Signal(bool)
    copied = Signal(str)
    cancel_requested = Signal(object)
    resend_requested = Signal(object)  # a span's TranscriptEntry, to be read again
    zoomChanged = Signal(int)

    BOTTOM_TOLERANCE_PX = 4

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._model = TranscriptModel(self)
        self._view = _TranscriptView(self)
        self._view.setAccessibleName("Transcript")
        self._view.setModel(self._model)
        self._delegate = TranscriptDelegate(self._model, self._view)
        self._view.setItemDelegate(self._delegate)
        self._model.modelReset.connect(self._delegate.clear_cache)
        self.pending_bar = PendingRequestBar(self)
        self.pending_bar.cancel_requested.connect(self.cancel_requested)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self._view, 1)
        layout.addWidget(self.pending_bar)

        self._jump = QToolButton(self)
        self._jump.setText("⤓ Jump to latest")
        self._jump.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self._jump.setCursor(Qt.CursorShape.PointingHandCursor)
        self._jump.setStyleSheet(
            "QToolButton { background: #1f2937; color: white; border-radius: 10px;"
            " padding: 3px 10px; }"
        )
        self._jump.clicked.connect(self.jump_to_latest)
        self._jump.hide()

        self._following = True
        self._menu_entry: TranscriptEntry | None = None  # the span its context menu is on
        bar = self._view.verticalScrollBar()
        bar.rangeChanged.connect(self._on_range_changed)
        bar.valueChanged.connect(self._on_scrolled)
        self._view.copyRequested.connect(self.copy_selected)
        self._view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self._view.customContextMenuRequested.connect(self._show_context_menu)

    # --- feeding -----------------------------------------------------------------------
    @Slot(object)  # receives entries emitted on other threads (see PYSIDE-3124)
    def upsert(self, entry: TranscriptEntry) -> None:
        """Add an entry, or replace the one with the same entry_id where it stands."""
        self._model.upsert(entry)
        self.pending_bar.note(entry)

    def extend(self, entries: Iterable[TranscriptEntry]) -> None:
        """Add or replace many entries with a single layout pass (e.g. an imported transcript)."""
        entries = list(entries)
        self._model.extend(entries)
        for entry in entries:
            self.pending_bar.note(entry)

    def entries(self) -> list[TranscriptEntry]:
        """The entries as shown, oldest first (a copy)."""
        return self._model.entries()

    def clear(self) -> None:
        self._model.clear()
        self.pending_bar.clear()

    def close_open(self, reason: str = STOPPED) -> list[TranscriptEntry]:
        """The conversation ended: what was still growing or pending is closed for good."""
        changed = self._model.close_open(reason)
        for entry in changed:
            self.pending_bar.note(entry)
        return changed

    # --- search and zoom ---------------------------------------------------------------
    def matches(self, text: str) -> list[int]:
        """Rows whose text (or source, or detail) holds `text`, ignoring case."""
        needle = text.casefold().strip()
        if not needle:
            return []
        return [row for row, e in enumerate(self._model.entries())
                if needle in e.text.casefold() or needle in e.source.casefold()
                or needle in e.detail.casefold()]

    # QWidget.find(id) is Qt's static lookup of a widget by window id, which nothing calls
    # on this panel: the name says what the panel does.
    def find(  # type: ignore[override]
            self, text: str, forward: bool = True) -> tuple[int, int]:
        """Select and show the next (or previous) entry holding `text`, after the selected
        one, wrapping around; returns (its place among the matches from 1, how many there
        are), or (0, 0) when none does."""
        rows = self.matches(text)
        if not rows:
            return 0, 0
        selected = [index.row() for index in self._view.selectionModel().selectedRows()]
        here = max(selected) if forward and selected else min(selected) if selected else None
        if here is None:
            row = rows[0] if forward else rows[-1]
        elif forward:
            row = next((r for r in rows if r > here), rows[0])
        else:
            row = next((r for r in reversed(rows) if r < here), rows[-1])
        self.select_rows([row])
        self._view.scrollTo(self._model.index(row), QAbstractItemView.ScrollHint.PositionAtCenter)
        return rows.index(row) + 1, len(rows)

    @property
    def zoom(self) -> int:
        return self._delegate.zoom

    def set_zoom(self, zoom: int) -> None:
        """A new text size. Rows change height, so the scroll bar's pixels point elsewhere:
        the entry at the top of the view (and how far into it) is what stays in place,
        unless the view follows the newest entry."""
        before = self._delegate.zoom
        view = self._view
        reading = view.indexAt(QPoint(0, 0)) if not self._following else QModelIndex()
        into = 0.0
        if reading.isValid():
            shown = view.visualRect(reading)
            into = -shown.top() / shown.height() if shown.height() > 0 else 0.0
        self._delegate.set_zoom(zoom)
        if self._delegate.zoom != before:
            view.doItemsLayout()  # now, not later: the rows' new heights place the entry
            if reading.isValid():
                view.scrollTo(reading, QAbstractItemView.ScrollHint.PositionAtTop)
                bar = view.verticalScrollBar()
                bar.setValue(bar.value() + round(into * view.visualRect(reading).height()))
            view.viewport().update()
            self.zoomChanged.emit(self._delegate.zoom)

    def zoom_in(self) -> None:
        self.set_zoom(self.zoom + 1)

    def zoom_out(self) -> None:
        self.set_zoom(self.zoom - 1)

    # --- selection and clipboard -------------------------------------------------------
    def selected_entries(self) -> list[TranscriptEntry]:
        """The selected entries in transcript order."""
        selection = self._view.selectionModel()
        if selection is None:
            return []
        rows = sorted({index.row() for index in selection.selectedRows()})
        return [self._model.entry_at(row) for row in rows]

    def select_rows(self, rows: Sequence[int]) -> None:
        """Select entries by row (what a user's clicks do; used by tests and "select all")."""
        selection = self._view.selectionModel()
        selection.clearSelection()
        for row in rows:
            selection.select(
                self._model.index(row),
                QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows,
            )

    def copy_selected(self) -> str:
        """Copy the selected entries as plain text, or all of them when none is selected."""
        chosen = self.selected_entries() or self._model.entries()
        return self._copy(chosen)

    def copy_all(self) -> str:
        return self._copy(self._model.entries())

    def _copy(self, entries: Sequence[TranscriptEntry]) -> str:
        text = to_plain_text(entries)
        QGuiApplication.clipboard().setText(text)
        self.copied.emit(text)
        return text

    def context_menu(self, position: QPoint) -> QMenu:
        """The menu at `position` (viewport coordinates): copy, and "Send again" on a span
        (one lost to a dropped connection or a restart, say: the model no longer has it)."""
        menu = QMenu(self)
        index = self._view.indexAt(position)
        if not index.isValid():
            index = self._view.currentIndex()  # the keyboard's context menu
        entry = self._model.entry_at(index.row()) if index.isValid() else None
        if entry is not None and is_resendable(entry):
            self._menu_entry = entry
            again = menu.addAction("Send again (read it to the model again)")
            again.triggered.connect(self._resend_menu_entry)
            menu.addSeparator()
        copy_selected = menu.addAction("Copy selected")
        copy_selected.setEnabled(bool(self.selected_entries()))
        copy_selected.triggered.connect(self.copy_selected)
        menu.addAction("Copy all").triggered.connect(self.copy_all)
        return menu

    def _resend_menu_entry(self) -> None:
        if self._menu_entry is not None:
            self.resend_requested.emit(self._menu_entry)

    def _show_context_menu(self, position: QPoint) -> None:
        menu = self.context_menu(position)
        menu.exec(self._view.viewport().mapToGlobal(position))
        menu.deleteLater()

    # --- following the newest entry ----------------------------------------------------
    def is_following(self) -> bool:
        return self._following

    def jump_to_latest(self) -> None:
        """Scroll to the newest entry and follow new ones again."""
        bar = self._view.verticalScrollBar()
        bar.setValue(bar.maximum())
        self._set_following(True)

    def _on_range_changed(self, _minimum: int, maximum: int) -> None:
        if self._following:
            self._view.verticalScrollBar().setValue(maximum)

    def _on_scrolled(self, value: int) -> None:
        bar = self._view.verticalScrollBar()
        self._set_following(value >= bar.maximum() - self.BOTTOM_TOLERANCE_PX)

    def _set_following(self, following: bool) -> None:
        if following == self._following:
            return
        self._following = following
        self._jump.setVisible(not following)
        if not following:
            self._place_jump_button()
            self._jump.raise_()
        self.followingChanged.emit(following)

    def _place_jump_button(self) -> None:
        self._jump.adjustSize()
        viewport = self._view.viewport()
        corner = viewport.mapTo(self, QPoint(viewport.width(), viewport.height()))
        self._jump.move(corner.x() - self._jump.width() - 12, corner.y() - self._jump.height() - 10)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._place_jump_button()

    # --- parts, for the main window and tests ------------------------------------------
    @property
    def view(self) -> QTreeView:
        return self._view

    @property
    def model(self) -> TranscriptModel:
        return self._model

    @property
    def delegate(self) -> TranscriptDelegate:
        return self._delegate

    @property
    def jump_button(self) -> QToolButton:
        return self._jump
