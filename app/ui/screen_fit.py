"""Every window and dialog fits the screen it opens on, at any scale (QT_SCALE_FACTOR=2 on a
1920×1080 screen leaves 960×540 to lay out in): it opens no larger than the screen's free
area, a saved geometry that no longer fits is brought back on, and what does not fit
scrolls while the buttons stay in view.

- `fit_to_screen(window, wanted)`: the size a window asks for, bounded by the screen.
- `keep_on_screen(window)`: moved and shrunk back inside the screen (a restored geometry).
- `fit_when_shown(widget)`: both, each time the widget is shown (dialogs).
- `ScrollingTabs`: a tab widget whose pages scroll; it still hands out the pages themselves.
- `ScrollingArea`: a scroll area that asks for its whole content, so that a window sized by
  it opens as large as its content where the screen allows.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QRect, QSize, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFrame, QScrollArea, QStyle, QTabWidget, QWidget

# What a window manager adds around a window (title bar, borders) that Qt does not know
# before the window is first shown: kept free so the frame fits too.
FRAME_ALLOWANCE = QSize(16, 40)


def room_for(widget: QWidget) -> QRect:
    """The free area (less panels and docks) of the screen `widget` is on, or would open on."""
    screen = widget.screen() or QGuiApplication.primaryScreen()
    return screen.availableGeometry() if screen is not None else QRect(0, 0, 1024, 768)


def _frame_margins(window: QWidget) -> QSize:
    """The frame's size once known (shown at least once); the allowance before."""
    frame, inner = window.frameGeometry(), window.geometry()
    known = QSize(frame.width() - inner.width(), frame.height() - inner.height())
    return known if window.isVisible() and known.height() > 0 else FRAME_ALLOWANCE


def fit_to_screen(window: QWidget, wanted: QSize) -> None:
    """Resize `window` to `wanted`, or to what its screen has room for."""
    room, frame = room_for(window), _frame_margins(window)
    most = QSize(room.width() - frame.width(), room.height() - frame.height())
    window.resize(wanted.boundedTo(most))


def keep_on_screen(window: QWidget) -> None:
    """A window (whose geometry was restored, or that grew) back inside its screen's free
    area: shrunk to fit, then moved in."""
    room, frame = room_for(window), _frame_margins(window)
    most = QSize(room.width() - frame.width(), room.height() - frame.height())
    if window.width() > most.width() or window.height() > most.height():
        window.resize(window.size().boundedTo(most))
    outer = window.frameGeometry() if window.isVisible() else QRect(
        window.pos(), window.size() + frame)
    x = min(max(outer.left(), room.left()), room.right() + 1 - outer.width())
    y = min(max(outer.top(), room.top()), room.bottom() + 1 - outer.height())
    if (x, y) != (outer.left(), outer.top()):
        window.move(x, y)


class _FitOnShow(QObject):
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # Qt's name
        if event.type() == QEvent.Type.Show and isinstance(watched, QWidget):
            keep_on_screen(watched)
        return False


def fit_when_shown(widget: QWidget, wanted: QSize | None = None) -> None:
    """`widget` sized to `wanted` (its size hint when None) within its screen now, and kept
    within it each time it is shown."""
    fit_to_screen(widget, wanted if wanted is not None else widget.sizeHint())
    widget.installEventFilter(_FitOnShow(widget))


class ScrollingArea(QScrollArea):
    """A frameless scroll area, resizing its content to its width, that asks for all of its
    content's size (a plain QScrollArea asks for at most 36×24 lines) and for little at
    least: the window it is in opens large enough where it can, and shrinks where it must."""

    def __init__(self, content: QWidget, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWidget(content)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)

    def sizeHint(self) -> QSize:  # Qt's name
        content = self.widget()
        if content is None:
            return super().sizeHint()
        hint = content.sizeHint().expandedTo(content.minimumSizeHint())
        bar = self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent)
        margins = self.contentsMargins()
        return QSize(hint.width() + bar + margins.left() + margins.right(),
                     hint.height() + margins.top() + margins.bottom())


class ScrollingTabs(QTabWidget):
    """Tabs whose pages scroll when the window is smaller than they are. `addTab(page)`
    puts the page in a scroll area; `widget`, `currentWidget`, `setCurrentWidget` and
    `indexOf` speak of the pages themselves, as a QTabWidget's callers expect."""

    def addTab(self, page: QWidget, label: str) -> int:  # type: ignore[override]
        area = ScrollingArea(page)
        area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        return super().addTab(area, label)

    def _page(self, area: QWidget | None) -> QWidget | None:
        return area.widget() if isinstance(area, ScrollingArea) else area

    def widget(self, index: int) -> QWidget | None:
        return self._page(super().widget(index))

    def currentWidget(self) -> QWidget:  # Qt's name
        area = super().currentWidget()
        return self._page(area) or area  # (a page is in each area)

    def indexOf(self, page: QWidget) -> int:  # Qt's name
        for index in range(self.count()):
            if self.widget(index) is page:
                return index
        return super().indexOf(page)

    def setCurrentWidget(self, page: QWidget) -> None:  # Qt's name
        index = self.indexOf(page)
        if index >= 0:
            self.setCurrentIndex(index)
