"""After a notice (the audio paused, Resume), the model's next words read below it in a bubble
of their own, never growing the bubble above the notice (issue 19, item 11c)."""

from __future__ import annotations

from app.conversation.transcript.builder import TranscriptBuilder
from app.engine import events as ev


def _rows(builder: TranscriptBuilder, out: list, produced: list) -> None:
    for entry in produced:
        for row, old in enumerate(out):
            if old.key == entry.key:
                out[row] = entry
                break
        else:
            out.append(entry)


def test_words_after_a_notice_start_a_new_bubble_below_it() -> None:
    builder = TranscriptBuilder(clock=lambda: 1000.0, origin="s")
    rows: list = []
    _rows(builder, rows, builder.entries_for(ev.TextPiece(10, " The weather", 1)))
    _rows(builder, rows, builder.entries_for(ev.TextPiece(11, " is", 2)))
    _rows(builder, rows, [builder.notice("Audio stopped: the device failed. Paused.", "error")])
    _rows(builder, rows, [builder.notice("Listening again after Resume.", "info")])
    _rows(builder, rows, builder.entries_for(ev.TextPiece(13, " sunny", 3)))  # within 1 s
    assert [e.kind for e in rows] == ["assistant", "notice", "notice", "assistant"]
    assert rows[0].text == "The weather is" and rows[0].final
    assert rows[-1].text == "sunny" and not rows[-1].final
