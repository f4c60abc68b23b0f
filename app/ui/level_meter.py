"""A small horizontal level meter in dBFS (-60 to 0).

It goes dark (empty and greyed) when no conversation runs, and says "muted" (empty, struck
through) while the microphone is muted, whatever level the device still reports.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QSizePolicy, QWidget

FLOOR_DB = -60.0
BAR_PX = 110  # the bar's width where the toolbar has room
LEAST_BAR_PX = 30  # … and at least, on a narrow window


class LevelMeter(QWidget):
    def __init__(self, label: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._name = label
        self._bar = QProgressBar(self)
        self._bar.setRange(0, 600)
        self._bar.setTextVisible(False)
        self._bar.setFixedWidth(BAR_PX)
        self._bar.setFixedHeight(10)
        self._bar.setAccessibleName(f"{label} level")
        self._label = QLabel(label, self)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(4, 0, 4, 0)
        layout.addWidget(self._label)
        layout.addWidget(self._bar, alignment=Qt.AlignmentFlag.AlignVCenter)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self._muted = False
        self._active = False
        self._show_label()
        self.set_level(FLOOR_DB)

    def set_level(self, db: float) -> None:
        if self._muted or not self._active:
            db = FLOOR_DB
        clamped = max(FLOOR_DB, min(0.0, db))
        self._bar.setValue(int((clamped - FLOOR_DB) * 10))
        self._bar.setToolTip(self._state_text() or f"{db:.0f} dBFS")

    def set_bar_width(self, pixels: int) -> None:
        """Narrower on a narrow window, so that the toolbar's buttons keep their room."""
        pixels = max(LEAST_BAR_PX, min(BAR_PX, pixels))
        if pixels != self._bar.width():
            self._bar.setFixedWidth(pixels)
            self.updateGeometry()

    def bar_width(self) -> int:
        return self._bar.width()

    def set_muted(self, muted: bool) -> None:
        self._muted = muted
        self._show_label()
        self.set_level(FLOOR_DB)

    def set_active(self, active: bool) -> None:
        """Lit while a conversation runs; dark (and empty) otherwise."""
        self._active = active
        self._bar.setEnabled(active)
        self._label.setEnabled(active)
        if not active:
            self.set_level(FLOOR_DB)

    def _state_text(self) -> str:
        if self._muted:
            return f"{self._name} muted"
        return "" if self._active else f"{self._name}: no conversation"

    def _show_label(self) -> None:
        font = self._label.font()
        font.setStrikeOut(self._muted)
        self._label.setFont(font)
        self._label.setText(f"{self._name} (muted)" if self._muted else self._name)

    def is_muted(self) -> bool:
        return self._muted

    def is_active(self) -> bool:
        return self._active

    def level(self) -> int:
        return self._bar.value()
