"""Issue 10, broken items 1 and 2: a second session never overwrites the first one's
entries; status text never widens the window or keeps it from being made narrow."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication

from app.conversation.session import SessionStatus
from app.conversation.transcript.builder import TranscriptBuilder
from app.conversation.transcript.entries import TranscriptEntry
from app.ui.transcript_panel import TranscriptPanel


def test_two_sessions_numbering_from_one_both_stay_in_the_panel_in_order(qtbot):
    panel = TranscriptPanel()
    qtbot.addWidget(panel)
    first, second = TranscriptBuilder(), TranscriptBuilder()
    one = first.typed("first session, first entry") + [first.notice("first, second")]
    two = second.typed("second session, first entry") + [second.notice("second, second")]
    for entry in one + two:
        panel.upsert(entry)
    assert [e.text for e in panel.entries()] == [e.text for e in one + two]
    grown = TranscriptEntry(1, "user", "first session, revised", 0.0, origin=first.origin)
    panel.upsert(grown)  # an update finds its own entry, not the other session's
    assert panel.entries()[0] == grown and panel.entries()[2] == two[0]


def test_the_window_neither_widens_with_status_text_nor_refuses_800_px(bare_window, qtbot):
    window = bare_window
    window.resize(980, 700)
    window.features.list_dock.show()  # both side panels too
    QApplication.processEvents()
    assert window.width() == 980
    quiet_minimum = window.minimumSizeHint().width()
    controller = window.controller
    controller.state_changed.emit("running", "Listening")
    controller.status.emit(SessionStatus(
        model="Context Spanning 7B (the paper's released checkpoint, fine-tuned) " * 2,
        device="cuda:0 NVIDIA GeForce RTX 4090 Laptop GPU", dtype="bfloat16",
        frame_ms=123456.789, budget_ms=80.0, context_used=2999, context_window=3000,
        span_positions_in_window=123456, llm_state="error",
        llm_message="ConnectionRefusedError: " + "refused " * 40,
        dropped_frames=1234567, asr_dropped_frames=7654321, underruns=7654321,
        overruns=99999))
    for _ in range(5):
        QApplication.processEvents()
    assert window.width() == 980
    line = window.status_line
    assert line.model.is_elided()
    assert line.model.toolTip().startswith("Context Spanning 7B")  # the whole text is kept
    controller.state_changed.emit(
        "error", "CheckpointShapeMismatchBetweenManifestAndWeightsError: " + "x " * 120)
    for _ in range(5):
        QApplication.processEvents()
    assert window.width() == 980  # did not grow by itself
    assert window.banner.isVisible()  # the error, in the banner too
    assert window.minimumSizeHint().width() <= quiet_minimum < 800  # text adds nothing
    assert window.minimumWidth() < 800
    window.resize(800, 600)
    QApplication.processEvents()
    assert window.width() == 800
    # Said in the banner; the status bar says only that it stopped (issue 35, item 11), its
    # tooltip the whole message.
    assert line.state.text() == "Stopped after an error"
    assert line.state.toolTip().startswith("Stopped after an error: CheckpointShapeMismatch")
