"""Issue 28, item 10: what the status bar says is true, and each field says what it means.

The real main window (tests/ui/conftest.py `bare_window`: an LLM configured, qwen3:4b on
Ollama), its controller's signals emitted as a session emits them."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtWidgets import QApplication

from app.conversation.session import SessionStatus
from app.settings.schema import LlmSettings


def _settle(rounds: int = 10) -> None:
    for _ in range(rounds):
        QApplication.processEvents()


def _running(window, **status) -> None:
    window.controller.state_changed.emit("running", "Listening")
    window.controller.status.emit(SessionStatus(
        model="Tiny demo model", device="cpu", dtype="float32", frame_ms=20.0,
        budget_ms=76.0, context_window=3000, llm_state="idle", **status))
    _settle()


def test_a_stopped_conversation_names_the_llm_it_will_ask_not_off(bare_window):
    line = bare_window.status_line
    assert line.llm.text() == "LLM: qwen3:4b", line.llm.text()  # never run yet
    assert "asked once a conversation runs" in line.llm.toolTip()
    _running(bare_window)
    bare_window.controller.state_changed.emit("stopped", "Stopped")
    _settle()
    assert line.llm.text() == "LLM: qwen3:4b"  # "LLM: off" was said here
    # No LLM at all: then it is off, and the tooltip says where to set one.
    bare_window.settings = replace(bare_window.settings, llm=LlmSettings(backend="none"))
    assert line.llm.text() == "LLM: off"
    assert "Settings → Assistant (LLM)" in line.llm.toolTip()


def test_the_state_says_speaking_while_the_model_talks(bare_window):
    line = bare_window.status_line
    _running(bare_window, speaker_db=-18.0)
    assert line.state.text() == "Speaking (and listening)", line.state.text()
    assert "hears you while it speaks" in line.state.toolTip()
    _running(bare_window, speaker_db=-120.0)
    assert line.state.text() == "Listening"


def test_each_llm_state_says_what_it_means(bare_window):
    line = bare_window.status_line
    _running(bare_window)
    assert line.llm.text() == "LLM: idle"
    assert "qwen3:4b" in line.llm.toolTip() and "waiting for a question" in line.llm.toolTip()
    bare_window.controller.status.emit(SessionStatus(llm_state="thinking", model="m"))
    _settle()
    assert "answering" in line.llm.toolTip()


def test_the_audio_counts_say_what_each_one_is(bare_window):
    line = bare_window.status_line
    _running(bare_window, dropped_frames=2377, underruns=376, overruns=493)
    assert line.audio.text() == "audio: 2377 lost · 376 gaps · 493 skips", line.audio.text()
    tip = line.audio.toolTip()
    assert tip != line.audio.text() and not tip.startswith(line.audio.text())
    assert "2377 microphone frames (190.2 s)" in tip and "never heard" in tip
    assert "376 gaps" in tip and "silence" in tip
    assert "493 skips" in tip and "dropped" in tip


def test_the_more_mark_says_what_it_holds(bare_window):
    window = bare_window
    window.resize(640, 480)
    _running(window, dropped_frames=2377, underruns=376, overruns=493, context_used=1234)
    more = window.status_line.fields.more
    assert more.isVisible() and more.text().startswith("+")
    hidden = int(more.text()[1:])
    first, *rest = more.toolTip().splitlines()
    assert first == (f"{hidden} more status field{'s' if hidden > 1 else ''}, hidden for want "
                     "of room (widen the window to see them):"), first
    assert len(rest) >= hidden


def test_the_more_marks_tooltip_on_screen_follows_the_mark(bare_window):
    """Issue 35, item 13: the "+N" mark changes as the figures change (a field in warning
    red takes its room first), but a tooltip already on screen is not redrawn by Qt: "+2"
    stood beside "1 more status field". The tooltip on screen says what the mark says."""
    from PySide6.QtWidgets import QToolTip

    window = bare_window
    window.resize(500, 480)
    more = window.status_line.fields.more
    calm = {"frame_ms": 20.0, "llm_state": "idle"}
    busy = {"frame_ms": 120.0, "llm_state": "unreachable", "asr_dropped_frames": 3}
    counts = {**calm, "dropped_frames": 2377, "underruns": 376, "overruns": 493,
              "context_used": 1234}

    def show(**figures) -> None:
        window.controller.status.emit(SessionStatus(
            model="Tiny demo model", device="cpu", dtype="float32", budget_ms=76.0,
            context_window=3000, **{**counts, **figures}))
        _settle()

    window.controller.state_changed.emit("running", "Listening")
    show(**calm)
    before = more.text()
    QToolTip.showText(more.mapToGlobal(more.rect().center()), more.toolTip(), more)  # hover
    _settle()
    assert QToolTip.isVisible() and QToolTip.text().startswith(f"{before[1:]} more")
    show(**busy)
    assert more.text() != before, "the figures must change the mark for this test"
    hidden = int(more.text()[1:])
    assert QToolTip.isVisible()
    assert QToolTip.text().startswith(f"{hidden} more status field"), (more.text(),
                                                                      QToolTip.text())
    QToolTip.hideText()
