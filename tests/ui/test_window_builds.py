"""Issue 10, what users of comparable apps expect: conversations (autosaved, listed, reopened
read-only, deletable), the LLM's pending request in the transcript with its Cancel button,
what the model knows now, push-to-talk, find, zoom, remembered geometry, Help → About."""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QColor, QKeyEvent, QPalette
from PySide6.QtWidgets import QApplication

from app.conversation.transcript.builder import TranscriptBuilder
from app.conversation.transcript.entries import TranscriptEntry
from app.conversation.transcript.export import TranscriptHeader
from app.conversation.transcript.saved import ConversationStore, title_for, worth_keeping
from app.engine import events as ev
from app.orchestrator import events as oe
from app.ui.push_to_talk import PTT_KEY


def settle() -> None:
    for _ in range(3):
        QApplication.processEvents()


def say(window, builder: TranscriptBuilder, text: str) -> None:
    for entry in builder.typed(text):
        window.controller.entry.emit(entry)


# ---- conversations -------------------------------------------------------------------------------

def test_the_store_writes_lists_loads_and_deletes(tmp_path):
    store = ConversationStore(tmp_path / "conversations")
    entries = [TranscriptEntry(1, "user", "What is the capital of Australia?", 10.0,
                               origin="a")]
    for number, started in (("20260101-000000-aaaaaa", 100.0), ("20260102-000000-bbbbbb",
                                                                 200.0)):
        store.save(TranscriptHeader(conversation_id=number, title=title_for(entries),
                                    started=started), entries)
    (store.folder / "broken.json").write_text("{", encoding="utf-8")  # skipped, not fatal
    listed = store.list()
    assert [s.conversation_id for s in listed] == ["20260102-000000-bbbbbb",
                                                    "20260101-000000-aaaaaa"]
    assert listed[0].title == "What is the capital of Australia?" and listed[0].entries == 1
    assert store.load("20260101-000000-aaaaaa")[1] == entries
    store.delete("20260101-000000-aaaaaa")
    assert [s.conversation_id for s in store.list()] == ["20260102-000000-bbbbbb"]
    assert not worth_keeping([TranscriptEntry(1, "notice", "Press Start", 1.0)])


def test_new_conversation_saves_the_old_one_which_reopens_read_only_and_deletes(
        qtbot, bare_window):
    window, features = bare_window, bare_window.features
    keeper = features.keeper
    first = TranscriptBuilder()
    say(window, first, "What is the capital of Australia?")
    first_id = keeper.conversation_id
    assert not window.has_unsaved()  # autosaved (flushed) before saying so
    assert [s.conversation_id for s in keeper.store.list()] == [first_id]

    features.new_action.trigger()
    assert window.transcript.entries() == []
    assert keeper.conversation_id != first_id
    # The old session's last words arrive after the switch: they go to its own file.
    window.controller.entry.emit(first.notice("late words of the first session"))
    say(window, TranscriptBuilder(), "And of France?")
    assert [e.text for e in window.transcript.entries()] == ["And of France?"]
    keeper.flush()
    features.refresh_list()  # read off the GUI thread
    qtbot.waitUntil(lambda: features.conversation_list.ids()[:2]
                    == [keeper.conversation_id, first_id], timeout=5000)

    viewer = features.open_saved(first_id)
    assert [e.text for e in viewer.entries()] == ["What is the capital of Australia?",
                                                  "late words of the first session"]
    assert viewer.windowTitle().endswith("(read-only) — ContextSpan")
    viewer.close()

    features.conversation_list.select(first_id)
    features.delete_saved(first_id, confirm=False)
    qtbot.waitUntil(lambda: first_id not in features.conversation_list.ids(), timeout=5000)
    assert first_id not in [s.conversation_id for s in keeper.store.list()]


def test_has_unsaved_is_true_only_when_the_conversation_cannot_be_written(
        bare_window, monkeypatch):
    keeper = bare_window.features.keeper
    say(bare_window, TranscriptBuilder(), "hello")
    assert not bare_window.has_unsaved()

    def full_disk(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(keeper.store, "save", full_disk)
    say(bare_window, TranscriptBuilder(), "and again")
    try:
        assert bare_window.has_unsaved()
        assert "No space left" in (keeper.save_error or "")
    finally:
        monkeypatch.undo()  # (closing asks before losing anything: not in a test)
    assert not bare_window.has_unsaved()


# ---- the LLM's pending request -------------------------------------------------------------------

def test_a_pending_request_shows_in_the_transcript_and_its_cancel_button_asks_to_cancel(
        qtbot, bare_window):
    window = bare_window
    builder = TranscriptBuilder()
    for entry in builder.entries_for(oe.TurnStarted(1, "What is the weather?", "typed")):
        window.controller.entry.emit(entry)
    panel = window.transcript
    index = panel.model.index(panel.model.rowCount() - 1)
    qtbot.waitUntil(lambda: panel.view.visualRect(index).height() > 0, timeout=2000)
    assert panel.entries()[-1].kind == "thinking"
    button = panel.pending_bar.cancel_button
    assert button.isVisible() and "“What is the weather?”" in panel.pending_bar.label.text()
    with qtbot.waitSignal(window.cancel_turn_requested, timeout=2000):
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    for entry in builder.entries_for(oe.TurnCancelled(1, "cancelled by the user")):
        window.controller.entry.emit(entry)
    settle()
    ended = panel.entries()[-1]
    assert ended.kind == "notice" and "cancelled by the user" in ended.text
    assert len(panel.entries()) == 1 and not button.isVisible()


# ---- what the model knows now --------------------------------------------------------------------

def test_the_side_panel_lists_spans_inside_the_window_and_greys_those_that_slid_out(
        bare_window):
    window = bare_window
    panel = window.features.context_panel
    builder = TranscriptBuilder()

    def feed(event) -> None:
        for entry in builder.entries_for(event):
            window.controller.entry.emit(entry)

    def frame(index: int, frames: int, spans: int) -> None:
        feed(ev.FrameStats(index, 10.0, 0.0, ev.ContextUsage(
            300, min(300, frames + spans), frames, spans, 0, frames + spans > 300)))

    frame(0, 10, 0)
    feed(ev.SpanAccepted(1, "typed", "Meeting notes: Friday 12:30", 30, False, 28, 28))
    feed(ev.SpanChunkInjected(1, "typed", 11, 30, 0, 1.0))
    feed(ev.SpanInjected(1, "typed", 11, 11, 30, 1))
    frame(11, 11, 30)
    frame(99, 99, 30)
    feed(ev.SpanAccepted(2, "typed", "Second note", 15, False, 13, 13))
    feed(ev.SpanChunkInjected(2, "typed", 100, 15, 0, 1.0))
    feed(ev.SpanInjected(2, "typed", 100, 100, 15, 1))
    frame(100, 100, 45)
    settle()
    first, second = panel.keys()
    assert panel.is_inside(first) and panel.is_inside(second)
    assert "30 positions · 10.0% of the window" in panel.item_for(first).text()
    assert "2 spans" in panel.summary.text() and "45 positions" in panel.summary.text()
    for index in range(101, 320):  # the first span slides out, the second stays
        frame(index, index, 45)
    settle()
    assert not panel.is_inside(first) and panel.is_inside(second)
    assert "slid out" in panel.item_for(first).text()
    disabled = panel.palette().color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text)
    assert panel.item_for(first).foreground().color() == disabled
    assert panel.item_for(second).foreground().color() != QColor(disabled)
    window.controller.state_changed.emit("stopped", "Stopped")
    settle()
    assert not panel.is_inside(second)  # a new session starts with an empty context
    assert "No injected span" in panel.summary.text()


def test_a_span_the_model_forgot_at_a_restart_is_sent_again_from_what_the_model_knows(
        qtbot, bare_window):
    """Issue 35, item 15: a span a restart took from the model is listed greyed in What the
    model knows; its context menu (or Enter on it) sends it again."""
    window = bare_window
    panel = window.features.context_panel
    builder = TranscriptBuilder()

    def feed(event) -> None:
        for entry in builder.entries_for(event):
            window.controller.entry.emit(entry)

    feed(ev.FrameStats(0, 10.0, 0.0, ev.ContextUsage(300, 10, 10, 0, 0, False)))
    feed(ev.SpanAccepted(1, "typed", "Meeting notes: Friday 12:30", 30, False, 28, 28))
    feed(ev.SpanChunkInjected(1, "typed", 11, 30, 0, 1.0))
    feed(ev.SpanInjected(1, "typed", 11, 11, 30, 1))
    window.controller.state_changed.emit("stopped", "Stopped")  # e.g. a restart
    settle()
    (key,) = panel.keys()
    assert not panel.is_inside(key) and "forgotten" in panel.item_for(key).text()
    where = panel.list.visualItemRect(panel.item_for(key)).center()
    (again,) = [a for a in panel.context_menu(where).actions()
                if a.text().startswith("Send again")]
    with qtbot.waitSignal(panel.resend_requested, timeout=2000) as sent:
        again.trigger()
    assert sent.args[0].text == "Meeting notes: Friday 12:30"
    with qtbot.waitSignal(panel.resend_requested, timeout=2000):
        panel.list.itemActivated.emit(panel.item_for(key))  # Enter on it
    # With no conversation running it is said, not lost: the text is kept in the transcript.
    assert "Start a conversation first" in window.transcript.entries()[-1].text


def test_a_span_read_frame_by_frame_is_in_what_the_model_knows_as_the_status_bar_counts_it(
        bare_window):
    """Issue 35, item 13: a span read in chunks (one position a frame on a busy CPU) is in
    the model's context from its first chunk, and the status bar counted it ("18
    injected") while "What the model knows" said no span was in the context until the
    whole span had landed, seconds later. Both say the same at every frame."""
    from app.conversation.session import SessionStatus

    window = bare_window
    panel = window.features.context_panel
    builder = TranscriptBuilder()

    def feed(event) -> None:
        for entry in builder.entries_for(event):
            window.controller.entry.emit(entry)

    text = "Meeting notes: lunch with Ana on Friday at 12:30, the Italian place on King St."
    for entry in builder.remember_span(1, text, "typed"):
        window.controller.entry.emit(entry)
    feed(ev.FrameStats(0, 10.0, 0.0, ev.ContextUsage(375, 10, 10, 0, 0, False)))
    feed(ev.SpanAccepted(1, "typed", text, 30, False, 28, 28))
    for read in range(1, 19):  # a position a frame, as the adaptive chunk limit reads it
        frames = 10 + read
        feed(ev.SpanChunkInjected(1, "typed", frames, 1, read - 1, 1.0))
        usage = ev.ContextUsage(375, frames + read, frames, read, read, False)
        feed(ev.FrameStats(frames, 10.0, 0.0, usage))
        window.controller.status.emit(SessionStatus(
            model="Tiny", device="cpu", context_used=usage.used, context_window=375,
            span_positions_in_window=read))
        settle()
        assert f"({read} injected)" in window.status_line.context.text()
        assert "The model has 1 span in its context" in panel.summary.text(), read
        assert f": {read} positions" in panel.summary.text(), panel.summary.text()
    (key,) = panel.keys()
    assert "18 positions read so far" in panel.item_for(key).text()
    assert not window.transcript.entries()[-1].final  # still being read
    feed(ev.SpanChunkInjected(1, "typed", 29, 12, 18, 1.0))
    feed(ev.SpanInjected(1, "typed", 29, 29, 30, 19))
    settle()
    assert "30 positions · 8.0% of the window" in panel.item_for(key).text()


# ---- push-to-talk, find, zoom --------------------------------------------------------------------

def press(widget, kind: QEvent.Type, key: Qt.Key, repeat: bool = False) -> None:
    QApplication.sendEvent(widget, QKeyEvent(kind, key, Qt.KeyboardModifier.NoModifier, "",
                                             repeat))


def test_push_to_talk_unmutes_only_while_the_key_is_held(qtbot, bare_window):
    window = bare_window
    window.features.push_to_talk_action.trigger()
    assert window.mute_action.isChecked() and window.mic_meter.is_muted()
    editor = window.input_box.editor  # works with the focus in the text box
    press(editor, QEvent.Type.KeyPress, PTT_KEY)
    assert not window.mute_action.isChecked() and not window.mic_meter.is_muted()
    press(editor, QEvent.Type.KeyPress, PTT_KEY, repeat=True)
    assert not window.mute_action.isChecked()
    press(editor, QEvent.Type.KeyRelease, PTT_KEY)
    assert window.mute_action.isChecked()
    assert window.features.state.push_to_talk  # remembered
    window.features.push_to_talk_action.trigger()
    assert not window.mute_action.isChecked()


def test_find_in_the_transcript_and_zoom(qtbot, bare_window):
    window = bare_window
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=2000)
    builder = TranscriptBuilder()
    for text in ("weather in Lyon?", "a note", "and Lyon tomorrow?"):
        say(window, builder, text)
    qtbot.keyClick(window.input_box.editor, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    bar = window.features.search_bar
    assert bar.isVisible() and bar.field.hasFocus()
    qtbot.keyClicks(bar.field, "lyon")
    assert bar.count.text() == "1 of 2"
    assert window.transcript.selected_entries()[0].text == "weather in Lyon?"
    qtbot.keyClick(bar.field, Qt.Key.Key_Return)
    assert window.transcript.selected_entries()[0].text == "and Lyon tomorrow?"
    qtbot.keyClick(bar.field, Qt.Key.Key_Escape)
    assert not bar.isVisible()

    before = window.transcript.delegate.body_point_size
    qtbot.keyClick(window.transcript.view, Qt.Key.Key_Plus, Qt.KeyboardModifier.ControlModifier)
    assert window.transcript.zoom == 1
    assert window.transcript.delegate.body_point_size > before
    qtbot.keyClick(window.transcript.view, Qt.Key.Key_Minus,
                   Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClick(window.transcript.view, Qt.Key.Key_Minus,
                   Qt.KeyboardModifier.ControlModifier)
    assert window.transcript.zoom == -1 and window.features.state.zoom == -1


# ---- geometry, About -----------------------------------------------------------------------------

def test_the_window_remembers_its_size_and_text_size(qtbot, bare_window):
    from app.ui.conversation_controller import ConversationController
    from app.ui.main_window import MainWindow

    bare_window.resize(700, 520)  # inside the offscreen screen (800 x 600)
    bare_window.transcript.zoom_in()
    settle()
    bare_window.close()
    again = MainWindow(ConversationController(lambda _s: None), bare_window.settings)
    qtbot.addWidget(again)
    assert (again.width(), again.height()) == (700, 520)
    assert again.transcript.zoom == 1
    again.features.keeper.shutdown()


def test_about_names_the_version_the_model_and_the_device(bare_window):
    import importlib.metadata

    box = bare_window.features.show_about()
    text = box.text()
    assert importlib.metadata.version("contextspan") in text
    assert "Tiny demo model" in text and "Device: cpu" in text
    from app.log_setup import log_path

    assert f"Log: {log_path()}" in text  # where the details of any error are
    box.close()
