"""A one-line label that never asks for the width of its text.

QLabel's minimum size is its text's width, so a status field that grows (a long model name,
a long error) widens the whole window and keeps it from being made narrower. This label
elides what does not fit and shows the whole text in its tooltip.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

MIN_WIDTH = 24  # px: an ellipsis and a letter or two


class ElidedLabel(QLabel):
    def __init__(self, text: str = "", parent: QWidget | None = None,
                 max_width: int = 360) -> None:
        super().__init__(text, parent)
        self._max_width = max_width
        self._colour: QColor | None = None  # None: the palette's text colour
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.setToolTip(text)

    def setText(self, text: str) -> None:  # Qt's name
        if text == self.text():
            return
        super().setText(text)
        self.setToolTip(text)

    def set_colour(self, colour: QColor | None) -> None:
        """Draw the text in `colour` (a warning), or in the palette's colour (None)."""
        self._colour = QColor(colour) if colour is not None else None
        self.update()

    def colour(self) -> QColor:
        return QColor(self._colour) if self._colour is not None else self.palette().color(
            self.foregroundRole())

    def full_width(self) -> int:
        """What the whole text would take (tests, and the size hint)."""
        margins = self.contentsMargins()
        return self.fontMetrics().horizontalAdvance(self.text()) + margins.left() + \
            margins.right() + 2

    def sizeHint(self) -> QSize:  # Qt's name
        hint = super().sizeHint()
        return QSize(min(self.full_width(), self._max_width), hint.height())

    def minimumSizeHint(self) -> QSize:  # Qt's name
        hint = super().minimumSizeHint()
        return QSize(min(MIN_WIDTH, self.full_width()), hint.height())

    def is_elided(self) -> bool:
        return self.full_width() > self.width()

    def shown_text(self) -> str:
        """What is drawn at the present width: the text, or its start and an ellipsis."""
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight,
                                             self.contentsRect().width())

    def paintEvent(self, _event: QPaintEvent) -> None:  # Qt's name
        painter = QPainter(self)
        painter.setPen(self.colour())
        painter.drawText(self.contentsRect(),
                         int(Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft),
                         self.shown_text())
