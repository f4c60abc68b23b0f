"""Issue 10, broken item 6 (span truncation shown in the panel and the Markdown export) and
the dark desktop palette (the transcript and the red budget warning follow it), by pixels."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtGui import QColor, QImage
from PySide6.QtWidgets import QApplication

from app.conversation.session import SessionStatus
from app.conversation.transcript.entries import TranscriptEntry
from app.conversation.transcript.export import to_markdown, to_plain_text
from app.ui.theme import dark_palette
from app.ui.transcript_panel import DARK, LIGHT, TranscriptPanel, displayed_background

T0 = 1_790_000_000.0
TRUNCATED = TranscriptEntry(
    1, "span", "The first part of a very long web page …", T0, 4.0,
    source="qwen3:4b on Ollama via web_fetch", landed_frame=50,
    detail="truncated: kept 120 of 15,392 tokens; 126 positions in 1 chunk", origin="s")


@pytest.fixture()
def panel(qtbot):
    widget = TranscriptPanel()
    qtbot.addWidget(widget)
    widget.resize(600, 300)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def rendered(qtbot, panel: TranscriptPanel) -> QImage:
    index = panel.model.index(panel.model.rowCount() - 1)
    qtbot.waitUntil(lambda: panel.view.visualRect(index).height() > 0, timeout=2000)
    return panel.view.viewport().grab().toImage()


def bubble_of(panel: TranscriptPanel, row: int) -> tuple[QRect, QRect]:
    index = panel.model.index(row)
    top_left = panel.view.visualRect(index).topLeft()
    layout = panel.delegate.row_layout(index)
    return layout.bubble.translated(top_left), layout.detail.translated(top_left)


def test_the_panel_draws_a_spans_truncation(qtbot, panel):
    panel.upsert(TRUNCATED)
    image = rendered(qtbot, panel)
    _bubble, detail = bubble_of(panel, 0)
    assert panel.delegate.detail_text(TRUNCATED).startswith("truncated: kept 120 of 15,392")
    assert not detail.isNull() and detail.height() > 5
    background = displayed_background(TRUNCATED)
    inked = sum(QColor(image.pixel(x, y)) != background
                for x in range(detail.left(), detail.right()) for y in range(detail.top(),
                                                                             detail.bottom()))
    assert inked > 50  # the detail line is drawn, not just measured
    assert "kept 120 of 15,392 tokens" in to_plain_text([TRUNCATED])


def test_the_markdown_export_carries_a_spans_truncation():
    markdown = to_markdown([TRUNCATED])
    span_lines = [line for line in markdown.splitlines() if line.startswith(">")]
    assert any("kept 120 of 15,392 tokens" in line for line in span_lines)
    assert any("from qwen3:4b on Ollama via web_fetch" in line for line in span_lines)
    assert "`llm`" not in markdown


@pytest.fixture()
def dark_desktop():
    app = QApplication.instance()
    before = app.palette()
    app.setPalette(dark_palette())
    yield
    app.setPalette(before)


def _transcript_colours(qtbot, panel) -> tuple[QColor, QColor, int]:
    """The panel's empty background, the user bubble's fill, the lightness of its text."""
    panel.upsert(TranscriptEntry(1, "user", "What is the capital of Australia?", T0, 1.0))
    image = rendered(qtbot, panel)
    bubble, _ = bubble_of(panel, 0)
    empty = QColor(image.pixel(QPoint(5, image.height() - 5)))
    fill = QColor(image.pixel(QPoint(bubble.center().x(), bubble.top() + 3)))
    body = panel.delegate.row_layout(panel.model.index(0)).body.translated(
        panel.view.visualRect(panel.model.index(0)).topLeft())
    inks = [QColor(image.pixel(x, y)).lightness() for x in range(body.left(), body.right())
            for y in range(body.top(), body.bottom())]
    ink = min(inks) if fill.lightness() > 128 else max(inks)  # the text's own pixels
    return empty, fill, ink


def test_the_transcript_is_light_on_a_light_desktop(qtbot, panel):
    empty, fill, ink = _transcript_colours(qtbot, panel)
    assert empty.lightness() > 200 and fill == LIGHT.kinds["user"].background
    assert ink < 90


def test_the_transcript_is_dark_on_a_dark_desktop(qtbot, dark_desktop, panel):
    empty, fill, ink = _transcript_colours(qtbot, panel)
    assert empty.lightness() < 60  # not the white panel it used to be
    assert fill == DARK.kinds["user"].background and fill.lightness() < 100
    assert ink > 170  # light text on the dark bubble


def _warning_contrast(qtbot, window) -> int:
    """How far the budget warning's red text stands from the status bar behind it."""
    window.controller.status.emit(SessionStatus(model="m", device="cpu", dtype="float32",
                                                frame_ms=95.0, budget_ms=80.0))
    label = window.status_line.frame
    qtbot.waitUntil(lambda: "⚠" in label.text() and not label.is_elided(), timeout=2000)
    image = label.grab().toImage()
    background = QColor(image.pixel(image.width() - 1, 1)).lightness()
    reds = [QColor(image.pixel(x, y)) for x in range(image.width())
            for y in range(image.height())]
    reds = [c for c in reds if c.red() > c.green() + 40 and c.red() > c.blue() + 40]
    assert reds, "the over-budget figure is drawn in red"
    text = max(reds, key=lambda c: abs(c.lightness() - background))
    return abs(text.lightness() - background)


def test_the_red_budget_warning_is_readable_on_light_and_dark(qtbot, bare_window):
    assert _warning_contrast(qtbot, bare_window) > 90


def test_the_red_budget_warning_is_readable_on_a_dark_desktop(qtbot, dark_desktop, bare_window):
    assert _warning_contrast(qtbot, bare_window) > 90
