"""A file name with a right-to-left override must not spoof what it is (issue 19, item 11h):
the transcript, the context panel, the banner, Markdown and plain text draw the controls as
visible marks; the entry and the JSON transcript keep the original."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import json

from pytestqt.qtbot import QtBot

from app.conversation.transcript.entries import SpanContext, TranscriptEntry
from app.conversation.transcript.export import (
    TranscriptHeader,
    read_transcript,
    to_json,
    to_markdown,
    to_plain_text,
)
from app.display_text import BIDI_CONTROLS, visible_controls
from app.ui.context_panel import ContextPanel
from app.ui.transcript_panel import TranscriptPanel

SPOOF = "report\u202egpj.exe"  # drawn as-is it reads "reportexe.jpg"
T0 = 1_790_000_000.0


def _span() -> TranscriptEntry:
    return TranscriptEntry(1, "span", f"Contents of {SPOOF}", T0, 1.0,
                           source=f"dropped file: {SPOOF}", landed_frame=12, origin="s",
                           context=SpanContext(positions=10, in_window=10, window=375))


def test_every_bidi_control_is_shown_by_name() -> None:
    for char in ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067",
                 "\u2068", "\u2069", "\u200e", "\u200f", "\u061c"]:
        assert char in BIDI_CONTROLS
        assert visible_controls(f"a{char}b") == f"a<U+{ord(char):04X}>b"
    plain = "no controls here: عربى and עברית are fine"
    assert visible_controls(plain) is plain


def test_exports_show_the_override_and_json_keeps_it() -> None:
    entry = _span()
    header = TranscriptHeader(conversation_id="c1", title=f"About {SPOOF}")
    markdown = to_markdown([entry], header=header)
    plain = to_plain_text([entry])
    for text in (markdown, plain):
        assert "\u202e" not in text
        assert "report<U+202E>gpj.exe" in text
    saved = to_json([entry], header)
    assert read_transcript(saved)[1][0].source == f"dropped file: {SPOOF}"  # the original
    assert json.loads(saved)["header"]["title"] == f"About {SPOOF}"


def test_the_panels_draw_the_override_visibly(qtbot: QtBot) -> None:
    panel = TranscriptPanel()
    qtbot.addWidget(panel)
    panel.resize(600, 400)
    context = ContextPanel(panel.model)  # lists the spans as they arrive
    qtbot.addWidget(context)
    panel.show()
    qtbot.waitExposed(panel)
    entry = _span()
    notice = TranscriptEntry(2, "notice", f"Could not read {SPOOF}", T0 + 1, origin="s",
                             detail="warning")
    panel.upsert(entry)
    panel.upsert(notice)
    assert panel.entries()[0] is entry  # stored as it came
    panel.grab()  # paints every row: the delegate lays out what it draws
    delegate = panel._delegate  # what it laid out is what it painted
    laid_out = [cached[0] for cached in delegate._cache.values()]
    assert len(laid_out) == 2
    drawn = [text for e in laid_out for text in (e.text, delegate.meta_text(e))]
    drawn += [str(panel.model.data(panel.model.index(row))) for row in range(2)]  # tooltips
    assert all("\u202e" not in text for text in drawn)
    assert sum("report<U+202E>gpj.exe" in text for text in drawn) >= 3

    texts = [context.list.item(row).text() + context.list.item(row).toolTip()
             for row in range(context.list.count())]
    assert texts and all("\u202e" not in text for text in texts)
    assert all("report<U+202E>gpj.exe" in text for text in texts)


def test_the_banner_shows_the_override_visibly(bare_window) -> None:
    bare_window.show_error(f"Could not read {SPOOF}")
    assert "\u202e" not in bare_window.banner.text()
    assert "report<U+202E>gpj.exe" in bare_window.banner.text()
