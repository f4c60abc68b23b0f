"""A pasted text longer than the model reads: the bubble shows all of it, marks where the
model stopped reading and draws the rest greyed (issue 19, item 8), by pixels."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QRect
from PySide6.QtGui import QColor, QImage

from app.conversation.transcript.entries import TranscriptEntry
from app.conversation.transcript.export import to_plain_text
from app.ui.transcript_panel import LIGHT, TranscriptPanel, displayed_background

T0 = 1_790_000_000.0
READ = "The quarterly report says revenue grew in every region. " * 8
REST = "This part came after what the model could take. " * 40
PASTED = TranscriptEntry(
    1, "span", READ + REST, T0, 4.0, source="pasted text", landed_frame=50, origin="s",
    detail=f"126 positions in 1 chunk; the model read the first {len(READ):,} of "
           f"{len(READ + REST):,} characters", read_chars=len(READ))


@pytest.fixture()
def panel(qtbot):
    widget = TranscriptPanel()
    qtbot.addWidget(widget)
    widget.resize(640, 900)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def inked(image: QImage, rect: QRect, background: QColor) -> list[QColor]:
    return [QColor(image.pixel(x, y)) for x in range(rect.left(), rect.right())
            for y in range(rect.top(), rect.bottom())
            if QColor(image.pixel(x, y)) != background]


def test_the_bubble_shows_all_of_a_long_paste_and_marks_what_the_model_read(qtbot, panel):
    panel.upsert(PASTED)
    index = panel.model.index(0)
    qtbot.waitUntil(lambda: panel.view.visualRect(index).height() > 0, timeout=2000)
    layout = panel.delegate.row_layout(index)
    # The read part, the mark, then the rest, one under the other, all inside the bubble.
    assert not layout.mark.isNull() and not layout.unread.isNull()
    assert layout.body.bottom() < layout.mark.top() < layout.unread.top()
    assert layout.unread.bottom() < layout.detail.top() <= layout.bubble.bottom()
    assert layout.unread.height() > layout.body.height()  # the rest is the longer part

    image = panel.view.viewport().grab().toImage()
    top_left = panel.view.visualRect(index).topLeft()
    background = displayed_background(PASTED)
    read_ink = inked(image, layout.body.translated(top_left), background)
    rest_ink = inked(image, layout.unread.translated(top_left), background)
    mark_ink = inked(image, layout.mark.translated(top_left), background)
    assert len(read_ink) > 200 and len(rest_ink) > 200 and len(mark_ink) > 50
    # The rest is drawn greyed: its darkest ink is lighter than the read part's.
    assert min(c.lightness() for c in rest_ink) > min(c.lightness() for c in read_ink)
    assert LIGHT.meta.lightness() > LIGHT.text.lightness()

    # Copied as text, the whole paste and the line that says what was read.
    plain = to_plain_text([PASTED])
    assert READ + REST in plain
    assert f"the model read the first {len(READ):,} of {len(READ + REST):,} characters" in plain


def test_a_span_read_whole_has_no_mark(qtbot, panel):
    whole = TranscriptEntry(2, "span", READ, T0, 4.0, source="pasted text", origin="s",
                            landed_frame=9, detail="60 positions in 1 chunk")
    panel.upsert(whole)
    index = panel.model.index(0)
    qtbot.waitUntil(lambda: panel.view.visualRect(index).height() > 0, timeout=2000)
    layout = panel.delegate.row_layout(index)
    assert layout.mark.isNull() and layout.unread.isNull()
