"""Issue 35, item 19: no tray and no notifications. A user away from the window (another
window in front) is told what they need: the conversation stopped on an error, or the
assistant's answer reached the voice; nothing while the window is in front, nothing else
(their own typed span, a notice, an answer still queued), each answer once, and nothing once
View → Desktop notifications is off (remembered). The real window and its controller's
signals, as a session emits them; what the tray would show is collected from the
notifier's signal (the offscreen platform has no tray: the window then has no icon, and no
error)."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QSystemTrayIcon, QWidget

from app.conversation.transcript.entries import TranscriptEntry
from app.ui.tray import AwayNotifier, Notification
from app.ui.ui_state import UiState

ANSWER = ("It will rain in Lyon from four o'clock, about 6 mm, and clear up by the evening; "
          "tomorrow is dry and warmer, up to 21 degrees, with a light wind from the south.")


def _answer(entry_id: int, **fields: object) -> TranscriptEntry:
    """The LLM's answer as the transcript has it once it reached the voice."""
    values: dict = {"source": "llm", "landed_frame": 420, "final": True, "origin": "s1",
                    "detail": "31 positions in 1 chunk"}
    values.update(fields)
    return TranscriptEntry(entry_id, "span", ANSWER, 0.0, **values)


@pytest.fixture()
def away(qtbot, bare_window):
    """The window, a notifier on it, and another window to put in front."""
    shown: list[Notification] = []
    notifier = AwayNotifier(bare_window, bare_window.features.notify_action.isChecked)
    notifier.notification.connect(shown.append)
    other = QWidget()
    qtbot.addWidget(other)
    other.setWindowTitle("another app")

    def step_away() -> None:
        other.show()
        other.activateWindow()
        qtbot.waitUntil(lambda: not bare_window.isActiveWindow(), timeout=10_000)

    def come_back() -> None:
        bare_window.activateWindow()
        qtbot.waitUntil(bare_window.isActiveWindow, timeout=10_000)

    come_back()
    yield bare_window, notifier, shown, step_away, come_back


def test_away_from_the_window_the_answer_and_a_stopping_error_are_told(away):
    window, _notifier, shown, step_away, _come_back = away
    controller = window.controller
    controller.state_changed.emit("loading", "tiny")
    controller.state_changed.emit("running", "")
    step_away()
    # What a user away needs no notification for.
    controller.entry.emit(TranscriptEntry(1, "user", "what about the weather", 0.0,
                                          origin="s1"))
    controller.entry.emit(TranscriptEntry(2, "notice", "The assistant now asks qwen3:4b.",
                                          0.0, detail="info", origin="s1"))
    controller.entry.emit(_answer(3, source="typed"))  # the user's own text, read
    controller.entry.emit(_answer(4, landed_frame=None, final=False,
                                  detail="queued: waiting for the speech model"))
    assert shown == []
    controller.entry.emit(_answer(4))  # the same answer, landed
    controller.entry.emit(_answer(4, detail="31 positions in 1 chunk; 40% of the window"))
    assert len(shown) == 1, shown
    assert shown[0].title == "The assistant answered" and shown[0].severity == "info"
    assert shown[0].message.startswith("It will rain in Lyon from four o'clock")
    assert len(shown[0].message) == 140 and shown[0].message.endswith("…")
    controller.entry.emit(_answer(5, source="llm+web_search"))
    assert len(shown) == 2

    controller.state_changed.emit("error", "The speech model stopped: CUDA out of memory.")
    assert shown[2] == Notification("The conversation stopped",
                                    "The speech model stopped: CUDA out of memory.", "error")
    controller.state_changed.emit("stopped", "")
    controller.state_changed.emit("loading", "tiny")
    controller.state_changed.emit("error", "tiny is not on disk")  # never got to running
    assert shown[3] == Notification("The conversation could not start", "tiny is not on disk",
                                    "error")
    assert len(shown) == 4


def test_nothing_is_told_while_the_window_is_in_front(away):
    window, _notifier, shown, step_away, come_back = away
    controller = window.controller
    controller.state_changed.emit("running", "")
    controller.entry.emit(_answer(1))
    controller.state_changed.emit("error", "The LLM server is gone.")
    assert shown == []
    step_away()
    controller.entry.emit(_answer(2))
    assert [n.title for n in shown] == ["The assistant answered"]
    come_back()
    controller.entry.emit(_answer(3))
    assert len(shown) == 1


def test_turned_off_nothing_is_told_and_the_choice_is_remembered(away):
    window, _notifier, shown, step_away, _come_back = away
    features = window.features
    assert features.notify_action.isChecked()  # on unless turned off
    view_menu = features.menus[1]
    assert features.notify_action in view_menu.actions()
    features.notify_action.trigger()  # View → Desktop notifications: off
    step_away()
    window.controller.state_changed.emit("running", "")
    window.controller.entry.emit(_answer(1))
    window.controller.state_changed.emit("error", "The LLM server is gone.")
    assert shown == []
    features.state.sync()
    assert UiState(features.state.path).notifications is False  # the next launch too
    features.notify_action.trigger()
    window.controller.entry.emit(_answer(2))
    assert len(shown) == 1


def test_without_a_tray_there_is_no_icon_and_no_error(bare_window):
    tray = bare_window.features.tray
    assert QSystemTrayIcon.isSystemTrayAvailable() is (tray.icon is not None)
    tray.show_notification(Notification("The assistant answered", "Hello"))  # nowhere: fine


def test_into_the_tray_and_back_and_no_quit_while_hidden(qtbot, bare_window):
    """The tray's Hide leaves the conversation going with no window shown: closing another
    window then (help) must not quit the app; Show brings the window back in front."""
    from PySide6.QtWidgets import QApplication

    tray = bare_window.features.tray
    app = QApplication.instance()
    assert app.quitOnLastWindowClosed()
    tray.hide_window()
    assert not bare_window.isVisible() and not app.quitOnLastWindowClosed()
    tray.show_window()
    qtbot.waitExposed(bare_window)
    assert bare_window.isVisible() and app.quitOnLastWindowClosed()
