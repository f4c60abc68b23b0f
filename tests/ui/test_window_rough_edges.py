"""Issue 10, rough edges: the keyboard, what Stop leaves on screen, mute, and the export."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QToolBar

from app.conversation.session import SessionStatus
from app.conversation.transcript.entries import TranscriptEntry
from app.conversation.transcript.export import iso_time, read_transcript
from app.ui import safe_file_dialog
from app.ui.theme import warning_color
from app.ui.ui_state import documents_dir


def settle() -> None:
    for _ in range(3):
        QApplication.processEvents()


def make_active(qtbot, window) -> None:
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=2000)


# ---- keyboard ------------------------------------------------------------------------------------

def test_tab_in_the_text_box_moves_the_focus_and_types_nothing(qtbot, bare_window):
    make_active(qtbot, bare_window)
    editor = bare_window.input_box.editor
    editor.setFocus()
    qtbot.waitUntil(editor.hasFocus, timeout=2000)
    qtbot.keyClick(editor, Qt.Key.Key_Tab)
    assert editor.toPlainText() == ""
    assert QApplication.focusWidget() is bare_window.input_box.send_button


def test_the_toolbar_is_reachable_with_tab(qtbot, bare_window):
    make_active(qtbot, bare_window)
    toolbar = bare_window.findChildren(QToolBar)[0]
    start = toolbar.widgetForAction(bare_window.start_action)
    start.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(start.hasFocus, timeout=2000)
    seen = []
    for _ in range(12):
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        seen.append(QApplication.focusWidget())
    mute = toolbar.widgetForAction(bare_window.mute_action)
    settings = toolbar.widgetForAction(bare_window.settings_action)
    assert seen[0] is mute  # toolbar buttons first, then the transcript and the text box
    assert seen.index(settings) < seen.index(bare_window.transcript.view) \
        < seen.index(bare_window.input_box.editor)


def test_every_action_has_a_shortcut_and_a_mnemonic(bare_window):
    actions = [a for menu in bare_window.features.menus for a in menu.actions()
               if not a.isSeparator()]
    assert len(actions) >= 18 and bare_window.cancel_request_action in actions
    for action in actions:
        assert not action.shortcut().isEmpty(), action.text()
        assert "&" in action.text(), action.text()
    for menu in bare_window.features.menus:
        assert menu.title().startswith("&")
        letters = [a.text()[a.text().index("&") + 1].lower() for a in menu.actions()
                   if not a.isSeparator()]
        assert len(letters) == len(set(letters)), menu.title()  # one key, one action
    assert bare_window.cancel_request_action.shortcut().toString() == "Esc"
    box = bare_window.input_box
    assert "&" in box.send_button.text() and "&" in box.read_button.text()


def test_ctrl_l_focuses_the_text_box(qtbot, bare_window):
    make_active(qtbot, bare_window)
    bare_window.transcript.view.setFocus()
    qtbot.waitUntil(bare_window.transcript.view.hasFocus, timeout=2000)
    qtbot.keyClick(bare_window.transcript.view, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier)
    assert bare_window.input_box.editor.hasFocus()


# ---- after Stop, and mute ------------------------------------------------------------------------

LOUD = SessionStatus(model="Tiny demo model", device="cpu", dtype="float32", frame_ms=31.0,
                     context_used=400, context_window=3000, llm_state="thinking",
                     mic_db=-12.0, speaker_db=-9.0)


def test_after_stop_no_stale_figures_dark_meters_and_no_partial_bubble(qtbot, bare_window,
                                                                       tmp_path, monkeypatch):
    window, controller = bare_window, bare_window.controller
    controller.state_changed.emit("running", "Listening")
    controller.entry.emit(TranscriptEntry(1, "assistant", "Canberra is the", time.time(), 3.0,
                                          final=False, origin="s1"))
    controller.status.emit(LOUD)
    settle()
    line = window.status_line
    assert "frame 31/80" in line.frame.text() and window.mic_meter.level() > 0
    controller.state_changed.emit("stopped", "Stopped")
    settle()
    assert [line.model.text(), line.frame.text(), line.context.text()] == ["", "", ""]
    assert line.llm.text() == "LLM: qwen3:4b"  # the LLM it will ask, not "thinking" (issue 28)
    for meter in (window.mic_meter, window.speaker_meter):
        assert meter.level() == 0 and not meter.is_active()
    last = window.transcript.entries()[-1]
    assert last.kind == "assistant" and last.final
    target = tmp_path / "talk.md"
    monkeypatch.setattr(safe_file_dialog, "save_file_name",
                        lambda *_a, **_k: (str(target), "Markdown (*.md)"))
    window.export_action.trigger()
    markdown = target.read_text(encoding="utf-8")
    assert "Canberra is the" in markdown and "partial" not in markdown


def test_frames_the_speech_recognizer_missed_are_shown_in_red_until_stop(qtbot, bare_window):
    window, controller = bare_window, bare_window.controller
    controller.state_changed.emit("running", "Listening")
    controller.status.emit(LOUD)
    settle()
    line = window.status_line
    assert line.asr.text() == ""  # nothing missed, nothing said
    controller.status.emit(dataclasses.replace(LOUD, asr_dropped_frames=25))
    settle()
    assert line.asr.text() == "speech recognition missed 2.0 s"
    assert "25 audio frames" in line.asr.toolTip() and "too busy" in line.asr.toolTip()
    assert line.asr.colour() == warning_color(line.palette())
    controller.state_changed.emit("stopped", "Stopped")
    settle()
    assert line.asr.text() == "" and line.asr.toolTip() == ""


def test_mute_changes_the_button_and_the_meter_shows_muted(qtbot, bare_window):
    window, controller = bare_window, bare_window.controller
    controller.state_changed.emit("running", "Listening")
    controller.status.emit(LOUD)
    settle()
    assert window.mute_action.iconText() == "Mute mic" and window.mic_meter.level() > 0
    window.mute_action.trigger()
    controller.status.emit(LOUD)  # the device still reports a level: the meter ignores it
    settle()
    assert window.mute_action.isChecked() and window.mute_action.iconText() == "Unmute mic"
    assert window.mic_meter.is_muted() and window.mic_meter.level() == 0
    assert window.speaker_meter.level() > 0
    window.mute_action.trigger()
    controller.status.emit(LOUD)
    settle()
    assert window.mute_action.iconText() == "Mute mic" and window.mic_meter.level() > 0


def test_ctrl_m_mutes_while_the_window_has_the_focus(qtbot, bare_window):
    make_active(qtbot, bare_window)
    editor = bare_window.input_box.editor
    editor.setFocus()
    qtbot.keyClick(editor, Qt.Key.Key_M, Qt.KeyboardModifier.ControlModifier)
    assert bare_window.mute_action.isChecked()
    qtbot.keyClick(editor, Qt.Key.Key_M, Qt.KeyboardModifier.ControlModifier)
    assert not bare_window.mute_action.isChecked()


# ---- export --------------------------------------------------------------------------------------

@pytest.fixture()
def save_dialog(monkeypatch):
    """Stands in for the file dialog: records where it opened, answers with `answers`."""
    opened: list[Path] = []
    answers: list[Path] = []

    def ask(_parent, _caption, directory, _filters):
        opened.append(Path(directory))
        return str(answers.pop(0)), "Markdown (*.md)"

    monkeypatch.setattr(safe_file_dialog, "save_file_name", ask)
    return opened, answers


def test_the_export_dialog_opens_in_documents_then_remembers_the_folder(bare_window, tmp_path,
                                                                        save_dialog):
    opened, answers = save_dialog
    folder = tmp_path / "exports"
    folder.mkdir()
    bare_window.controller.entry.emit(TranscriptEntry(1, "user", "hi", time.time(), origin="s"))
    answers += [folder / "one.md", folder / "two.json"]
    bare_window.export_action.trigger()
    assert opened[0].parent == documents_dir()
    bare_window.export_action.trigger()
    assert opened[1].parent == folder
    for name in ("one.md", "two.json"):
        assert stat.S_IMODE(os.stat(folder / name).st_mode) == 0o600


def test_the_export_names_the_llm_the_conversations_start_and_what_it_ran_on(
        bare_window, tmp_path, save_dialog):
    from app.conversation.transcript.builder import TranscriptBuilder, llm_label
    from app.engine import events as ev

    window, controller = bare_window, bare_window.controller
    opened, answers = save_dialog
    app_started = time.time() - 3600  # the welcome notice, an hour before the conversation
    controller.entry.emit(TranscriptEntry(-1, "notice", "Press Start", app_started,
                                          detail="info"))
    controller.state_changed.emit("loading", "Starting…")
    started = window.features.keeper.started
    assert started is not None and started - app_started > 3000
    # The tools the session offers the LLM (issue 35, item 12), not the settings' list.
    controller.status.emit(dataclasses.replace(LOUD, tools=("clock", "web_search")))
    builder = TranscriptBuilder(llm=llm_label("ollama", "qwen3:4b"))
    for entry in builder.typed("Weather in Lyon?") + builder.entries_for(
            ev.SpanAccepted(1, "llm+web_search", "Sunny.", 4, False, 2, 2)):
        controller.entry.emit(entry)
    answers += [tmp_path / "talk.md", tmp_path / "talk.json"]
    window.export_action.trigger()
    window.export_action.trigger()
    markdown = (tmp_path / "talk.md").read_text(encoding="utf-8")
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
    assert f"_Started {stamp}" in markdown  # the conversation's start, not the app's
    assert "from qwen3:4b on Ollama via web_search" in markdown
    assert "from `llm` (llm)" not in markdown
    assert "- Speech model: Tiny demo model (float32)" in markdown
    payload = json.loads((tmp_path / "talk.json").read_text(encoding="utf-8"))
    header = payload["header"]
    assert header["started"] == iso_time(started)
    assert header["model"].startswith("Tiny demo model") and header["device"] == "cpu"
    assert header["llm"] == "qwen3:4b on Ollama at http://127.0.0.1:11434"
    assert header["tools"] == ["clock", "web_search"]
    assert all(isinstance(e["time"], str) and "T" in e["time"] for e in payload["entries"])
    _header, entries = read_transcript((tmp_path / "talk.json").read_text(encoding="utf-8"))
    assert [e.text for e in entries] == [e.text for e in window.transcript.entries()]


def test_a_paused_conversation_can_still_be_stopped(bare_window, monkeypatch):
    """Paused (no audio device, or unplugged): the main button resumes, a second one stops."""
    stopped = []
    monkeypatch.setattr(bare_window.controller, "stop", lambda: stopped.append(True))
    assert not bare_window.stop_action.isVisible()
    bare_window.controller.state_changed.emit("paused", "Paused: no microphone")
    settle()
    assert bare_window.start_action.text() == "&Resume"
    assert bare_window.stop_action.isVisible()
    bare_window.stop_action.trigger()
    assert stopped == [True]
    bare_window.controller.state_changed.emit("running", "Listening")
    settle()
    assert not bare_window.stop_action.isVisible()
