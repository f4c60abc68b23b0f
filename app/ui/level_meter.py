"""A small horizontal level meter in dBFS (-60 to 0)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QSizePolicy, QWidget

FLOOR_DB = -60.0


class LevelMeter(QWidget):
    def __init__(self, label: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._bar = QProgressBar(self)
        self._bar.setRange(0, 600)
        self._bar.setTextVisible(False)
        self._bar.setFixedWidth(110)
        self._bar.setFixedHeight(10)
        self._label = QLabel(label, self)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(4, 0, 4, 0)
        layout.addWidget(self._label)
        layout.addWidget(self._bar, alignment=Qt.AlignmentFlag.AlignVCenter)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.set_level(FLOOR_DB)

    def set_level(self, db: float) -> None:
        clamped = max(FLOOR_DB, min(0.0, db))
        self._bar.setValue(int((clamped - FLOOR_DB) * 10))
        self._bar.setToolTip(f"{db:.0f} dBFS")

    def level(self) -> int:
        return self._bar.value()
