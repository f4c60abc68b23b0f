"""The QA results as a PNG, drawn with Qt's QPainter (already a dependency; no plotting
library): per set and arm, ref, resp and P(resp|ref) as bars with the paper's ref and resp as
marks across the set, so the picture answers "how far from the paper"; and the distribution
of the latencies (<ret> after the question's end, span after <ret>). Works headless
(offscreen platform). `draw_chart` returns what it drew and where (the legend, a pixel inside
each bar and mark), for the report's readers and the tests."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

WIDTH, HEIGHT = 1200, 520
MARGIN = 56
PLOT_TOP, PLOT_BELOW = 50, 150  # the panels' top, and the room under them for the legends
ARM_COLOURS = {"inject": "#2f6fb3", "gold": "#d08a1c", "no-inject": "#9a9a9a"}
# Each arm's bars in its colour: ref lighter, P(resp|ref) darker (QColor.lighter/darker %).
METRIC_SHADES = {"ref": ("lighter", 165), "resp": ("lighter", 100),
                 "P(resp|ref)": ("darker", 160)}
METRIC_LABELS = {"ref": "ref (judge on the spans)", "resp": "resp (judge on the words)",
                 "P(resp|ref)": "P(resp|ref)"}
PAPER_COLOURS = {"Gemma 4": {"ref": "#f0a04b", "resp": "#c0392b"},  # the paper's marks
                 "GPT-4.1": {"ref": "#8e8e8e", "resp": "#1b1b1b"}}
MARK_PX = 3  # a paper mark's thickness
LATENCY_COLOURS = {"ret_lat_s": "#6a3d9a", "inj_lat_s": "#2f9e5a"}
LATENCY_BINS_S = 0.25


@dataclass(frozen=True)
class SetBars:
    set_name: str
    resp: dict[str, float | None]  # arm -> resp (fraction) or None
    ref: dict[str, float | None] = field(default_factory=dict)  # arm -> ref
    given: dict[str, float | None] = field(default_factory=dict)  # arm -> P(resp|ref)
    paper: dict[str, tuple[float, float]] = field(default_factory=dict)  # backend: (ref, resp)

    def value(self, metric: str, arm: str) -> float | None:
        return {"ref": self.ref, "resp": self.resp, "P(resp|ref)": self.given}[metric].get(arm)


@dataclass(frozen=True)
class Mark:
    """One drawn bar or paper mark: (x, y) is a pixel inside it, painted `colour`."""

    set_name: str
    series: str  # the arm, or "paper <backend>"
    metric: str
    value: float
    x: int
    y: int
    colour: str  # #rrggbb


@dataclass(frozen=True)
class ChartDrawing:
    legend: tuple[tuple[str, str], ...]  # (label, #rrggbb) as shown
    marks: tuple[Mark, ...]


def metric_colour(arm: str, metric: str) -> str:
    from PySide6.QtGui import QColor

    way, factor = METRIC_SHADES[metric]
    base = QColor(ARM_COLOURS.get(arm, "#555555"))
    return (base.lighter(factor) if way == "lighter" else base.darker(factor)).name()


def paper_colour(backend: str, metric: str) -> str:
    return PAPER_COLOURS.get(backend, {}).get(metric, "#555555")


def _application():
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication.instance()
    if app is None:
        if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        app = QGuiApplication([])
    return app


def draw_chart(path: Path, bars: list[SetBars], latencies: dict[str, list[float]],
               title: str) -> ChartDrawing:
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
        height = HEIGHT - PLOT_TOP - PLOT_BELOW
        drawing = _draw_resp(painter, QRectF(MARGIN, PLOT_TOP, half - 1.5 * MARGIN, height),
                             bars)
        _draw_latency(painter, QRectF(half + MARGIN / 2, PLOT_TOP, half - 1.5 * MARGIN,
                                      height), latencies)
    finally:
        painter.end()
    # PySide6's stub types the format as bytes, but the call refuses bytes at run time.
    if not image.save(str(path), "PNG"):  # type: ignore[call-overload]
        raise OSError(f"cannot write {path}")
    return drawing


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


def _legend(painter, x: float, y: float, entries: list[tuple[str, str]]
            ) -> list[tuple[str, str]]:
    from PySide6.QtCore import QRectF, Qt
    from PySide6.QtGui import QColor

    for label, colour in entries:
        painter.fillRect(QRectF(x, y + 3, 12, 12), QColor(colour))
        advance = painter.fontMetrics().horizontalAdvance(label)
        painter.drawText(QRectF(x + 16, y, advance + 8, 18), Qt.AlignmentFlag.AlignLeft, label)
        x += 28 + advance
    return entries


def _draw_resp(painter, area, bars: list[SetBars]) -> ChartDrawing:
    from PySide6.QtCore import QRectF, Qt
    from PySide6.QtGui import QColor

    _axes(painter, area, "ref, resp and P(resp|ref) by arm; the paper's ref and resp marked",
          1.0, 5, lambda v: f"{v * 100:.0f}%")
    arms = [a for a in ARM_COLOURS
            if any(b.value(m, a) is not None for b in bars for m in METRIC_SHADES)]
    backends = [k for k in PAPER_COLOURS if any(k in b.paper for b in bars)]
    if not bars or not arms:
        painter.drawText(area, Qt.AlignmentFlag.AlignCenter, "no judged items")
        return ChartDrawing((), ())
    marks: list[Mark] = []
    group = area.width() / len(bars)
    metrics = list(METRIC_SHADES)
    width = min(24.0, group * 0.85 / (len(arms) * len(metrics)))
    small = painter.font()
    small.setPixelSize(10)
    for i, entry in enumerate(bars):
        left = area.left() + group * i + (group - width * len(arms) * len(metrics)) / 2
        for j, arm in enumerate(arms):
            for k, metric in enumerate(metrics):
                value = entry.value(metric, arm)
                if value is None:
                    continue
                x = left + (j * len(metrics) + k) * width
                height = area.height() * value
                colour = metric_colour(arm, metric)
                painter.fillRect(QRectF(x, area.bottom() - height, width - 1, height),
                                 QColor(colour))
                marks.append(Mark(entry.set_name, arm, metric, value, int(x + width / 2 - 1),
                                  int(area.bottom() - height / 2), colour))
                saved = painter.font()
                painter.setFont(small)
                painter.drawText(QRectF(x - 8, area.bottom() - height - 14, width + 16, 12),
                                 Qt.AlignmentFlag.AlignCenter, f"{value * 100:.0f}")
                painter.setFont(saved)
        # The paper's numbers across the whole set, drawn over the bars.
        for backend in backends:
            if backend not in entry.paper:
                continue
            for metric, value in zip(("ref", "resp"), entry.paper[backend], strict=True):
                y = round(area.bottom() - area.height() * value)
                colour = paper_colour(backend, metric)
                x0 = area.left() + group * i + 2
                painter.fillRect(QRectF(x0, y - MARK_PX // 2, group - 4, MARK_PX),
                                 QColor(colour))
                marks.append(Mark(entry.set_name, f"paper {backend}", metric, value,
                                  int(x0 + 1), y, colour))
        painter.drawText(QRectF(area.left() + group * i, area.bottom() + 4, group, 36),
                         Qt.AlignmentFlag.AlignHCenter | Qt.TextFlag.TextWordWrap,
                         entry.set_name)
    legend = _legend(painter, area.left(), area.bottom() + 42,
                     [(a, ARM_COLOURS[a]) for a in arms])
    reference = arms[0]
    legend += _legend(painter, area.left(), area.bottom() + 62,
                      [(METRIC_LABELS[m], metric_colour(reference, m)) for m in metrics])
    legend += _legend(painter, area.left(), area.bottom() + 82,
                      [(f"paper {b} {m}", paper_colour(b, m)) for b in backends
                       for m in ("ref", "resp")])
    return ChartDrawing(tuple(legend), tuple(marks))


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
