"""The transcript panel, driven as a user sees it: offscreen real widgets through pytest-qt."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import time
from collections.abc import Iterator

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QColor, QGuiApplication, QImage
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.conversation.transcript.entries import TranscriptEntry
from app.conversation.transcript.export import to_plain_text
from app.ui.transcript_panel import (
    KIND_STYLES,
    NOTICE_SEVERITY_STYLES,
    TranscriptPanel,
    displayed_background,
)

T0 = 1_790_000_000.0


def one_of_each() -> list[TranscriptEntry]:
    return [
        TranscriptEntry(1, "user", "What's the weather in Lyon?", T0, 1.0),
        TranscriptEntry(2, "assistant", "Let me look that up.", T0 + 1, 2.0),
        TranscriptEntry(
            3, "tool", "web_search(query='Lyon')", T0 + 2, 2.5, detail="3 results, 900 chars"
        ),
        TranscriptEntry(
            4, "span", "Lyon: sunny, 14 °C", T0 + 3, 3.0, source="llm+web_search",
            landed_frame=38,
        ),
        TranscriptEntry(5, "notice", "Connected", T0 + 4, 4.0, detail="info"),
    ]


def chatter(count: int, start_id: int = 100) -> list[TranscriptEntry]:
    kinds = ("user", "assistant", "span", "tool", "notice")
    return [
        TranscriptEntry(
            start_id + n, kinds[n % 5], f"line {n} " + "word " * (n % 17), T0 + n, n * 0.08,
            source="typed" if n % 5 == 2 else "", landed_frame=n if n % 5 == 2 else None,
        )
        for n in range(count)
    ]


@pytest.fixture
def panel(qtbot: QtBot) -> Iterator[TranscriptPanel]:
    widget = TranscriptPanel()
    qtbot.addWidget(widget)
    widget.resize(600, 420)
    widget.show()
    qtbot.waitExposed(widget)
    yield widget


def settle(qtbot: QtBot, panel: TranscriptPanel) -> None:
    """Let the view run its delayed layout (a zero-delay timer) and follow to the bottom."""
    last = panel.model.index(panel.model.rowCount() - 1)
    qtbot.waitUntil(
        lambda: panel.view.visualRect(last).height() > 0 and bar_at_bottom(panel), timeout=2000
    )


def bar_at_bottom(panel: TranscriptPanel) -> bool:
    bar = panel.view.verticalScrollBar()
    return bar.value() == bar.maximum()


def pixel(image: QImage, point: QPoint) -> QColor:
    return QColor(image.pixel(point))


def test_each_kind_is_drawn_in_its_own_colour_and_place(
    qtbot: QtBot, panel: TranscriptPanel
) -> None:
    for entry in one_of_each():
        panel.upsert(entry)
    settle(qtbot, panel)
    image = panel.view.viewport().grab().toImage()
    width = panel.view.viewport().width()
    seen: dict[str, QColor] = {}
    bubbles = {}
    for row, entry in enumerate(panel.entries()):
        row_rect = panel.view.visualRect(panel.model.index(row))
        bubble = panel.delegate.row_layout(panel.model.index(row)).bubble.translated(
            row_rect.topLeft()
        )
        bubbles[entry.kind] = bubble
        # a point inside the bubble's padding, clear of text and the span's accent bar
        colour = pixel(image, QPoint(bubble.center().x(), bubble.top() + 3))
        assert colour == displayed_background(entry), entry.kind
        seen[entry.kind] = colour
    assert len({c.name() for c in seen.values()}) == 5  # five kinds, five fills
    # the user speaks from the right, the assistant from the left, notices are centred
    assert bubbles["user"].right() > width - 20 and bubbles["user"].left() > 40
    assert bubbles["assistant"].left() < 20 and bubbles["assistant"].right() < width - 40
    assert abs(bubbles["notice"].center().x() - width // 2) <= 2
    assert bubbles["tool"].left() > bubbles["span"].left()
    # the span carries an accent bar of its own colour at its left edge
    span = bubbles["span"]
    assert pixel(image, QPoint(span.left() + 3, span.center().y())) == KIND_STYLES["span"].accent


def test_visible_text_names_kind_time_and_span_provenance(panel: TranscriptPanel) -> None:
    for entry in one_of_each():
        panel.upsert(entry)
    delegate = panel.delegate
    labels = [delegate.header_label(entry) for entry in panel.entries()]
    assert len(set(labels)) == 5
    assert labels[3].startswith("⤵") and "Injected span" in labels[3]
    span = panel.entries()[3]
    assert delegate.meta_text(span) == "from LLM via web_search · landed before frame 38"
    for entry in panel.entries():
        stamps = delegate.header_stamps(entry)
        assert ":" in stamps and "+0:0" in stamps  # local clock and conversation clock
    typed = TranscriptEntry(9, "span", "x", T0, 1.0, source="typed", landed_frame=7)
    assert delegate.meta_text(typed) == "from text you typed · landed before frame 7"
    tooltip = panel.model.data(panel.model.index(3))
    assert "Lyon: sunny, 14 °C" in tooltip and "landed before frame 38" in tooltip


def test_warnings_and_errors_stand_out_from_other_notices() -> None:
    info = TranscriptEntry(1, "notice", "ok", T0, detail="info")
    warning = TranscriptEntry(2, "notice", "slow", T0, detail="warning")
    error = TranscriptEntry(3, "notice", "failed", T0, detail="error")
    fills = {displayed_background(e).name() for e in (info, warning, error)}
    assert len(fills) == 3
    assert displayed_background(error) == NOTICE_SEVERITY_STYLES["error"].background


def test_upsert_replaces_in_place_and_growing_text_is_paler(
    qtbot: QtBot, panel: TranscriptPanel
) -> None:
    for entry in one_of_each():
        panel.upsert(entry)
    growing = TranscriptEntry(2, "assistant", "Let me", T0 + 1, 2.0, final=False)
    panel.upsert(growing)
    assert [e.entry_id for e in panel.entries()] == [1, 2, 3, 4, 5]
    assert panel.entries()[1] == growing
    settle(qtbot, panel)
    index = panel.model.index(1)
    bubble = panel.delegate.row_layout(index).bubble.translated(
        panel.view.visualRect(index).topLeft()
    )
    image = panel.view.viewport().grab().toImage()
    pale = pixel(image, QPoint(bubble.center().x(), bubble.top() + 3))
    assert pale == displayed_background(growing)
    assert pale.lightness() > KIND_STYLES["assistant"].background.lightness()
    assert panel.delegate.header_label(growing).endswith("…")

    done = TranscriptEntry(2, "assistant", "Let me look that up, please wait.", T0 + 1, 2.0)
    panel.upsert(done)
    assert panel.entries()[1] == done and len(panel.entries()) == 5


def test_a_growing_utterance_remeasures_only_its_own_row(
    qtbot: QtBot, panel: TranscriptPanel
) -> None:
    panel.extend(chatter(400))
    settle(qtbot, panel)
    QGuiApplication.processEvents()  # the scroll bar appearing narrows the rows once
    before = panel.delegate.layouts_computed
    words: list[str] = []
    for word in ("so", "the", "weather", "in", "Lyon", "tomorrow", "is", "sunny"):
        words.append(word)
        panel.upsert(TranscriptEntry(7, "assistant", " ".join(words), T0, 9.0, final=False))
        QGuiApplication.processEvents()
    # one measurement per word (the first one being the new row): never a pass over the 400
    assert panel.delegate.layouts_computed - before <= len(words) + 1


def test_follows_new_entries_pauses_when_scrolled_up_and_resumes_at_bottom(
    qtbot: QtBot, panel: TranscriptPanel
) -> None:
    changes: list[bool] = []
    panel.followingChanged.connect(changes.append)
    bar = panel.view.verticalScrollBar()
    panel.extend(chatter(60))
    qtbot.waitUntil(lambda: bar.maximum() > 0 and bar_at_bottom(panel), timeout=2000)
    assert panel.is_following() and not panel.jump_button.isVisible()

    panel.upsert(TranscriptEntry(1000, "user", "one more", T0, 99.0))
    qtbot.waitUntil(lambda: bar_at_bottom(panel), timeout=2000)
    assert panel.is_following()

    bar.setValue(bar.maximum() // 2)  # the user scrolls up to read
    assert not panel.is_following()
    assert panel.jump_button.isVisible()
    assert changes == [False]
    held = bar.value()
    panel.upsert(TranscriptEntry(1001, "assistant", "and another " * 20, T0, 100.0))
    old_max = bar.maximum()
    qtbot.waitUntil(lambda: bar.maximum() > old_max, timeout=2000)
    assert bar.value() == held  # the text being read does not move away

    bar.setValue(bar.maximum())  # the user scrolls back down
    assert panel.is_following() and not panel.jump_button.isVisible()
    panel.upsert(TranscriptEntry(1002, "user", "and again " * 20, T0, 101.0))
    old_max = bar.maximum()
    qtbot.waitUntil(lambda: bar.maximum() > old_max and bar_at_bottom(panel), timeout=2000)

    bar.setValue(0)
    assert not panel.is_following()
    qtbot.mouseClick(panel.jump_button, Qt.MouseButton.LeftButton)
    assert panel.is_following() and bar_at_bottom(panel)
    assert changes == [False, True, False, True]


def test_copy_puts_all_entries_or_the_selected_ones_on_the_clipboard(
    panel: TranscriptPanel,
) -> None:
    entries = one_of_each()
    for entry in entries:
        panel.upsert(entry)
    clipboard = QGuiApplication.clipboard()
    copied = panel.copy_all()
    assert clipboard.text() == copied == to_plain_text(entries)
    for entry in entries:
        assert entry.text in clipboard.text()

    panel.select_rows([1, 3])
    assert panel.selected_entries() == [entries[1], entries[3]]
    panel.copy_selected()
    assert clipboard.text() == to_plain_text([entries[1], entries[3]])

    panel.view.selectionModel().clearSelection()
    panel.copy_selected()  # nothing selected: everything
    assert clipboard.text() == to_plain_text(entries)


def test_ctrl_c_in_the_view_copies_the_selection(qtbot: QtBot, panel: TranscriptPanel) -> None:
    entries = one_of_each()
    panel.extend(entries)
    panel.select_rows([0])
    panel.view.setFocus()
    qtbot.keyClick(panel.view, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    assert QGuiApplication.clipboard().text() == to_plain_text([entries[0]])


def test_long_entries_rewrap_when_the_panel_narrows(qtbot: QtBot, panel: TranscriptPanel) -> None:
    panel.upsert(TranscriptEntry(1, "span", "a fairly long span of text " * 12, T0, 1.0))
    settle(qtbot, panel)
    index = panel.model.index(0)
    wide = panel.view.visualRect(index).height()
    panel.resize(300, 420)
    qtbot.waitUntil(lambda: panel.view.visualRect(index).height() > wide, timeout=2000)


def test_clear_and_entries(panel: TranscriptPanel) -> None:
    panel.extend(one_of_each())
    got = panel.entries()
    got.clear()  # a copy: the panel keeps its own
    assert len(panel.entries()) == 5
    panel.clear()
    assert panel.entries() == []
    panel.upsert(one_of_each()[0])
    assert len(panel.entries()) == 1


def test_five_thousand_entries(qtbot: QtBot, panel: TranscriptPanel) -> None:
    entries = chatter(5000)
    for entry in entries:
        panel.upsert(entry)
    bar = panel.view.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0 and bar_at_bottom(panel), timeout=10_000)
    assert panel.entries() == entries
    panel.upsert(TranscriptEntry(100, "user", "first, revised", T0, 0.0))
    assert panel.entries()[0].text == "first, revised"
    assert len(panel.entries()) == 5000


def test_a_bubbles_two_times_say_which_is_which(panel: TranscriptPanel) -> None:
    """Issue 28, item 11: each bubble showed two unlabelled times, the clock's and the
    conversation's audio position, which drift apart by minutes on a slow machine. The
    second is labelled where it is drawn, and the tooltip says what each one is; the
    clipboard's and the export's text label it the same way."""
    late = TranscriptEntry(1, "assistant", "Hello.", T0, 754.4)  # 12:34.4 into the audio
    panel.upsert(late)
    clock = time.strftime("%H:%M:%S", time.localtime(T0))
    stamps = panel.delegate.header_stamps(late)
    assert stamps == f"{clock} · audio +12:34.4", stamps
    tooltip = panel.model.data(panel.model.index(0), Qt.ItemDataRole.ToolTipRole)
    assert f"{clock}: the time of day" in tooltip
    assert "audio +12:34.4: " in tooltip and "falls behind the clock" in tooltip
    assert f"[{clock} · audio +12:34.4]" in to_plain_text([late])
    without = TranscriptEntry(2, "notice", "Saved.", T0)  # no audio time: the clock alone
    assert panel.delegate.header_stamps(without) == clock


def test_a_span_that_was_never_injected_does_not_read_as_injected(panel: TranscriptPanel) -> None:
    """Issue 28, item 9 (its transcript wording): a span cut off by a dropped connection
    read "Injected span · not landed yet · not injected: the connection dropped". Its
    label says what became of it, and nothing says it may still land."""
    from app.conversation.transcript.entries import QUEUED, READING, closed
    from app.conversation.transcript.export import to_markdown

    queued = TranscriptEntry(1, "span", "My notes", T0, 1.0, source="typed", final=False,
                             detail=QUEUED)
    reading = TranscriptEntry(2, "span", "Long notes", T0, 1.0, source="typed", final=False,
                              detail=f"{READING}; 3 of 5 chunks")
    never = closed(queued, "the connection dropped")
    partly = closed(reading, "the connection dropped")
    for entry in (never, partly):
        panel.upsert(entry)
    delegate = panel.delegate
    said = {entry.entry_id: " · ".join((delegate.header_label(entry),
                                         delegate.meta_text(entry), entry.detail))
            for entry in (never, partly)}
    assert said[1] == "⤵ Span not injected · from text you typed · not injected: the " \
                      "connection dropped", said[1]
    assert said[2].startswith("⤵ Span partly read · from text you typed · only partly "
                              "read: the connection dropped"), said[2]
    for text in (*said.values(), to_plain_text([never, partly]), to_markdown([never, partly])):
        assert "Injected span" not in text and "not landed yet" not in text, text
    # Still on its way: it says so, and it is an "Injected span" only once it landed.
    assert delegate.meta_text(queued) == "from text you typed · not landed yet"
    assert delegate.header_label(queued) == "⤵ Span …"
    landed = TranscriptEntry(3, "span", "My notes", T0, 1.0, source="typed", landed_frame=40)
    assert delegate.header_label(landed) == "⤵ Injected span"


def test_the_cancel_button_stays_put_while_the_models_words_grow_below(
        qtbot: QtBot, panel: TranscriptPanel) -> None:
    """Issue 35, item 10 (issue 28, item 2 before it): the panel follows the newest entry,
    so the model's words growing below a pending request moved a Cancel drawn in its entry
    up (126 px in 16 s), and a click where it had been hit the assistant's bubble. Holding
    the view while the pointer was on it did not help the pointer on its way there. The
    Cancel stays where it first appeared, pointer or not, until the request ends; a click
    there cancels that request."""
    from PySide6.QtTest import QTest

    window = panel.window()
    panel.resize(600, 300)
    for entry in chatter(12):  # more than the view holds: it is scrolled to the newest
        panel.upsert(entry)
    asking = TranscriptEntry(50, "thinking", "“What is the weather?”", T0, 9.0,
                             final=False, detail="typed")
    panel.upsert(asking)
    words = "Sunny and mild in Lyon today, "
    panel.upsert(TranscriptEntry(51, "assistant", words, T0, 9.5, final=False))
    qtbot.waitUntil(lambda: panel.view.verticalScrollBar().isVisible(), timeout=2000)
    QApplication.processEvents()
    assert panel.is_following()
    first = cancel_control(panel)
    assert first.isValid() and window.rect().contains(first)
    aim = first.center()
    moved = []
    for n in range(2, 16):  # the answer grows by a line or so at a time; nobody points
        panel.upsert(TranscriptEntry(51, "assistant", words * n * 3, T0, 9.5, final=False))
        QApplication.processEvents()
        moved.append(cancel_control(panel).top() - first.top())
    assert moved == [0] * len(moved), moved  # it did not move
    bar = panel.view.verticalScrollBar()
    assert bar.value() == bar.maximum()  # the newest words are in view all the while
    cancelled: list[TranscriptEntry] = []
    panel.cancel_requested.connect(cancelled.append)
    target = window.childAt(aim)
    assert target is not None
    QTest.mouseClick(target, Qt.MouseButton.LeftButton, pos=target.mapFrom(window, aim))
    assert [e.entry_id for e in cancelled] == [50]
    panel.upsert(TranscriptEntry(50, "notice", "The request was cancelled", T0, 9.0,
                                 detail="info"))
    QApplication.processEvents()
    assert not cancel_control(panel).isValid()  # gone with the request


def cancel_control(panel: TranscriptPanel):
    """Where the pending request's Cancel is, in the window's coordinates (invalid: none)."""
    from PySide6.QtCore import QRect

    button = panel.pending_bar.cancel_button
    if not button.isVisible():
        return QRect()
    return QRect(button.mapTo(panel.window(), QPoint(0, 0)), button.size())
