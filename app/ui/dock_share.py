"""The side panels give way before the transcript does.

A QMainWindow hands every change of its width to the central widget: side panels keep their
width while the transcript shrinks to its minimum (about 150 px with both panels open at
640x480). This keeps the transcript at `share` of the window's width by narrowing the docked
side panels (each never below its own minimum), in proportion to the widths they had; when the
window grows again they get back the widths they had before, or the user last gave them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtWidgets import QDockWidget, QMainWindow, QWidget

TRANSCRIPT_SHARE = 0.5  # of the window's width, with any side panels open
_SIDES = (Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea)


class DockShare(QObject):
    def __init__(self, window: QMainWindow, kept: QWidget, docks: Sequence[QDockWidget],
                 share: float = TRANSCRIPT_SHARE) -> None:
        super().__init__(window)
        self._kept = kept  # the widget whose share of the width is kept
        self._docks = tuple(docks)
        self._share = share
        self._wanted: dict[QDockWidget, int] = {}  # the width each dock had, or was given
        self._pressed: dict[QDockWidget, int] = {}  # widths when a mouse button went down
        self._timer = QTimer(self)  # one adjustment after a burst of events
        self._timer.setSingleShot(True)
        self._timer.setInterval(0)
        self._timer.timeout.connect(self.adjust)
        window.installEventFilter(self)
        for dock in self._docks:
            dock.visibilityChanged.connect(self._adjust_soon)
            dock.dockLocationChanged.connect(self._adjust_soon)
            dock.topLevelChanged.connect(self._adjust_soon)

    def _adjust_soon(self, *_what_changed: object) -> None:
        self._timer.start()

    def _window(self) -> QMainWindow:
        """The window (our parent; held by no reference of ours, so it is no cycle)."""
        return cast(QMainWindow, self.parent())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # Qt's name
        if watched is not self.parent():
            return False
        kind = event.type()
        if kind in (QEvent.Type.Resize, QEvent.Type.Show):
            self._timer.start()
        elif kind == QEvent.Type.MouseButtonPress:  # perhaps on a separator
            self._pressed = {d: d.width() for d in self._docks}
        elif kind == QEvent.Type.MouseButtonRelease and self._pressed:
            # The user dragged a separator: the widths they gave are the ones to come back
            # to (if they take more than their share, the adjustment narrows them).
            for dock, width in self._pressed.items():
                if dock.width() != width:
                    self._wanted[dock] = dock.width()
            self._pressed = {}
            self._timer.start()
        return False

    def side_columns(self) -> list[list[QDockWidget]]:
        """The docked panels at the left and at the right, a column per side (panels stacked
        in one side share its width; a tabbed-away or floating one takes none)."""
        columns = []
        for area in _SIDES:
            column = [d for d in self._docks if d.isVisible() and not d.isFloating()
                      and self._window().dockWidgetArea(d) == area]
            if column:
                columns.append(column)
        return columns

    def adjust(self) -> None:
        """Narrow (or widen back) the side panels so the kept widget has its share."""
        columns = self.side_columns()
        width = self._window().width()
        if not columns or not self._window().isVisible():
            return
        for dock in (d for column in columns for d in column):
            self._wanted.setdefault(dock, dock.width())
        current = [max(d.width() for d in column) for column in columns]
        # What the panels may take: the window less the kept widget's share and whatever
        # else shares the row (separators, the central widget's margins).
        others = width - self._kept.width() - sum(current)
        room = width - math.ceil(self._share * width) - others
        wanted = [max(self._wanted[d] for d in column) for column in columns]
        least = [max(d.minimumSizeHint().width() for d in column) for column in columns]
        target = fit_widths(wanted, least, room)
        if target == current:
            return
        docks = [d for column in columns for d in column]
        widths = [w for column, w in zip(columns, target, strict=True) for _ in column]
        self._window().resizeDocks(docks, widths, Qt.Orientation.Horizontal)


def fit_widths(wanted: Sequence[int], least: Sequence[int], room: int) -> list[int]:
    """The wanted widths if they fit in `room`; else each less, in proportion to what it
    can give, never below its least."""
    total = sum(wanted)
    if total <= room:
        return list(wanted)
    spare = [max(0, w - m) for w, m in zip(wanted, least, strict=True)]
    cut = total - room
    return [max(m, w - (math.ceil(cut * give / sum(spare)) if sum(spare) else 0))
            for w, m, give in zip(wanted, least, spare, strict=True)]
