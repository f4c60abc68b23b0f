"""The QA results as a PNG, drawn with Qt's QPainter (already a dependency; no plotting
library): resp with and without injection per set, and the distribution of the latencies
(<ret> after the question's end, span after <ret>). Works headless (offscreen platform)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

WIDTH, HEIGHT = 1200, 520
MARGIN = 56
ARM_COLOURS = {"inject": "#2f6fb3", "gold": "#d08a1c", "no-inject": "#9a9a9a"}
LATENCY_COLOURS = {"ret_lat_s": "#6a3d9a", "inj_lat_s": "#2f9e5a"}
LATENCY_BINS_S = 0.25


@dataclass(frozen=True)
class SetBars:
    set_name: str
    resp: dict[str, float | None]  # arm -> resp (fraction) or None


def _application():
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication.instance()
    if app is None:
        if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        app = QGuiApplication([])
    return app


def draw_chart(path: Path, bars: list[SetBars], latencies: dict[str, list[float]],
               title: str) -> None:
    from PySide6.QtCore import QRectF, Qt
    from PySide6.QtGui import QColor, QFont, QImage, QPainter

    _application()
    image = QImage(WIDTH, HEIGHT, QImage.Format.Format_ARGB32)
    image.fill(QColor("white"))
    painter = QPainter(image)
    try:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        font = QFont()
        font.setPixelSize(14)
        painter.setFont(font)
        painter.drawText(QRectF(0, 6, WIDTH, 24), Qt.AlignmentFlag.AlignCenter, title)
        half = WIDTH / 2
        _draw_resp(painter, QRectF(MARGIN, 50, half - 1.5 * MARGIN, HEIGHT - 120), bars)
        _draw_latency(painter, QRectF(half + MARGIN / 2, 50, half - 1.5 * MARGIN,
                                      HEIGHT - 120), latencies)
    finally:
        painter.end()
    # PySide6's stub types the format as bytes, but the call refuses bytes at run time.
    if not image.save(str(path), "PNG"):  # type: ignore[arg-type]
        raise OSError(f"cannot write {path}")


def _axes(painter, area, y_label: str, top: float, steps: int, fmt) -> None:
    from PySide6.QtCore import QPointF, QRectF, Qt
    from PySide6.QtGui import QColor, QPen

    painter.setPen(QPen(QColor("#dddddd"), 1))
    for i in range(steps + 1):
        y = area.bottom() - area.height() * i / steps
        painter.drawLine(QPointF(area.left(), y), QPointF(area.right(), y))
        painter.setPen(QPen(QColor("#444444"), 1))
        painter.drawText(QRectF(area.left() - 50, y - 9, 44, 18),
                         Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                         fmt(top * i / steps))
        painter.setPen(QPen(QColor("#dddddd"), 1))
    painter.setPen(QPen(QColor("#444444"), 1))
    painter.drawLine(area.bottomLeft(), area.bottomRight())
    painter.drawLine(area.bottomLeft(), area.topLeft())
    painter.drawText(QRectF(area.left(), area.top() - 24, area.width(), 18),
                     Qt.AlignmentFlag.AlignLeft, y_label)


def _legend(painter, x: float, y: float, entries: list[tuple[str, str]]) -> None:
    from PySide6.QtCore import QRectF, Qt
    from PySide6.QtGui import QColor

    for label, colour in entries:
        painter.fillRect(QRectF(x, y + 3, 12, 12), QColor(colour))
        advance = painter.fontMetrics().horizontalAdvance(label)
        painter.drawText(QRectF(x + 16, y, advance + 8, 18), Qt.AlignmentFlag.AlignLeft, label)
        x += 28 + advance


def _draw_resp(painter, area, bars: list[SetBars]) -> None:
    from PySide6.QtCore import QRectF, Qt
    from PySide6.QtGui import QColor

    _axes(painter, area, "resp (judge on the model's words), by arm", 1.0, 5,
          lambda v: f"{v * 100:.0f}%")
    arms = [a for a in ARM_COLOURS if any(b.resp.get(a) is not None for b in bars)]
    if not bars or not arms:
        painter.drawText(area, Qt.AlignmentFlag.AlignCenter, "no judged items")
        return
    group = area.width() / len(bars)
    width = min(40.0, group * 0.8 / len(arms))
    for i, entry in enumerate(bars):
        left = area.left() + group * i + (group - width * len(arms)) / 2
        for j, arm in enumerate(arms):
            value = entry.resp.get(arm)
            if value is None:
                continue
            height = area.height() * value
            painter.fillRect(QRectF(left + j * width, area.bottom() - height, width - 2,
                                    height), QColor(ARM_COLOURS[arm]))
            painter.drawText(QRectF(left + j * width - 10, area.bottom() - height - 18,
                                    width + 20, 16), Qt.AlignmentFlag.AlignCenter,
                             f"{value * 100:.0f}")
        painter.drawText(QRectF(area.left() + group * i, area.bottom() + 4, group, 36),
                         Qt.AlignmentFlag.AlignHCenter | Qt.TextFlag.TextWordWrap,
                         entry.set_name)
    _legend(painter, area.left(), area.bottom() + 42, [(a, ARM_COLOURS[a]) for a in arms])


def _draw_latency(painter, area, latencies: dict[str, list[float]]) -> None:
    from PySide6.QtCore import QRectF, Qt
    from PySide6.QtGui import QColor

    values = [v for series in latencies.values() for v in series]
    if not values:
        _axes(painter, area, "items", 1.0, 1, lambda v: f"{v:.0f}")
        painter.drawText(area, Qt.AlignmentFlag.AlignCenter, "no spans: no latencies")
        return
    low = math.floor(min(0.0, min(values)) / LATENCY_BINS_S) * LATENCY_BINS_S
    high = max(values) + LATENCY_BINS_S
    bins = max(1, int((high - low) / LATENCY_BINS_S + 0.999))
    counts = {k: [0] * bins for k in latencies}
    for key, series in latencies.items():
        for value in series:
            counts[key][min(bins - 1, int((value - low) / LATENCY_BINS_S))] += 1
    step = max(1, math.ceil(max(max(c) for c in counts.values()) / 5))  # whole items a tick
    ticks = max(1, math.ceil(max(max(c) for c in counts.values()) / step))
    top = step * ticks
    _axes(painter, area, "items per 0.25 s (inject and gold arms)", float(top), ticks,
          lambda v: f"{v:.0f}")
    slot = area.width() / bins
    keys = list(latencies)
    for b in range(bins):
        for j, key in enumerate(keys):
            height = area.height() * counts[key][b] / top
            width = slot / len(keys)
            painter.fillRect(QRectF(area.left() + b * slot + j * width, area.bottom() - height,
                                    max(1.0, width - 1), height),
                             QColor(LATENCY_COLOURS.get(key, "#333333")))
    every = max(1, math.ceil(70 / slot))  # a label each 70 px at least: none overlap
    for b in range(0, bins + 1, every):
        x = area.left() + b * slot
        painter.drawText(QRectF(x - 30, area.bottom() + 4, 60, 16),
                         Qt.AlignmentFlag.AlignHCenter, f"{low + b * LATENCY_BINS_S:.2f} s")
    _legend(painter, area.left(), area.bottom() + 42,
            [("trigger after the question's end (ret_lat_s)", LATENCY_COLOURS["ret_lat_s"]),
             ("span after the trigger (inj_lat_s)", LATENCY_COLOURS["inj_lat_s"])])
