"""Closed dialogs and windows die when they close, on the GUI thread (issue 25): each one the
app opens (Settings with each of its tabs shown and the tool-server editor opened from the
Tools tab, the missing-model dialog, the export's file dialog, About, a saved conversation's
window) is opened and closed ROUNDS times through the app's own code, and then

- none of their Qt objects is cyclic garbage: with gc.DEBUG_SAVEALL the collector keeps
  everything it would have freed in gc.garbage, and no PySide wrapper may be there (a wrapper
  only the collector frees is freed on whichever thread trips a collection: the crash that
  app/ui/gui_thread_gc.py guards against);
- none of them is left behind as a child of the window (a dialog never deleted grows the
  window by one hidden dialog per opening).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
import shiboken6  # noqa: E402
from PySide6.QtCore import QCoreApplication, QEvent, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication, QDialog, QWidget  # noqa: E402

from app.conversation.transcript.entries import TranscriptEntry  # noqa: E402
from app.conversation.transcript.export import TranscriptHeader  # noqa: E402
from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings  # noqa: E402
from app.settings.store import SettingsStore  # noqa: E402
from app.ui.app import DesktopApp  # noqa: E402
from app.ui.conversation_controller import ConversationController  # noqa: E402
from app.ui.download_dialog import ModelMissingDialog  # noqa: E402
from app.ui.main_window import MainWindow  # noqa: E402
from app.ui.memory_plan_view import NothingToPlan  # noqa: E402

ROUNDS = 20
NOT_ON_DISK = "moshiko"  # a catalogued speech model no test downloads


def _no_plan(_settings: AppSettings, _timeout_s: float):
    raise NothingToPlan("no plan in this test")


def _missing_model_dialog(manifest, **kwargs) -> ModelMissingDialog:
    """The real dialog, without the hub's size check and the memory plan (no network, and
    the plan's 7B on meta 20 times over is slow)."""
    return ModelMissingDialog(manifest, check_size=False, memory_survey=_no_plan,
                              gpu_check=lambda: None, **kwargs)


@pytest.fixture()
def desktop(qtbot, tmp_path, monkeypatch) -> Iterator[DesktopApp]:
    monkeypatch.setenv("CONTEXTSPAN_DATA_DIR", str(tmp_path / "data"))
    settings = AppSettings(speech=SpeechModelSettings(model_id="tiny", device="cpu"),
                           llm=LlmSettings(backend="ollama", model="qwen3:4b"))
    controller = ConversationController(lambda _settings: None)
    window = MainWindow(controller, settings)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    desktop = DesktopApp(window, controller, SettingsStore(),
                         model_dialog=_missing_model_dialog)
    yield desktop
    window.features.keeper.shutdown()


def _settle() -> None:
    """What was closed is deleted now (deleteLater runs from the event loop)."""
    for _ in range(3):
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        QApplication.processEvents()


def _answer_the_dialog(then: Callable[[QDialog], None] | None = None) -> None:
    """Once a modal dialog runs (`exec`), do `then` with it and close it (Cancel)."""
    polls = [0]

    def poll() -> None:
        dialog = QApplication.activeModalWidget()
        if not isinstance(dialog, QDialog):
            polls[0] += 1
            if polls[0] < 500:
                QTimer.singleShot(10, poll)
            return
        if then is not None:
            then(dialog)
        dialog.reject()

    QTimer.singleShot(0, poll)


def _wrappers_left_to_the_collector(open_and_close: Callable[[], None]) -> list[str]:
    """Open and close ROUNDS times; the Qt wrappers that only the cyclic collector would free."""
    open_and_close()  # a first opening fills caches (imports, Qt's own) that stay
    _settle()
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(ROUNDS):
            open_and_close()
            _settle()
        gc.collect()
        return sorted(type(o).__name__ for o in gc.garbage if isinstance(o, shiboken6.Object))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()


def _dialogs_of(window: QWidget) -> list[str]:
    return [type(d).__name__ for d in window.findChildren(QDialog)]


def _show_every_tab_and_the_server_editor(dialog: QDialog) -> None:
    tabs = dialog.tabs  # type: ignore[attr-defined]
    for index in range(tabs.count()):
        tabs.setCurrentIndex(index)
        QApplication.processEvents()
    _answer_the_dialog()  # the tool-server editor, opened from the Tools tab
    dialog.tools_tab.add_button.click()  # type: ignore[attr-defined]


@pytest.mark.own_collector
def test_settings_and_its_tabs_die_when_closed(desktop) -> None:
    def open_and_close() -> None:
        _answer_the_dialog(_show_every_tab_and_the_server_editor)
        desktop.open_settings()

    assert _wrappers_left_to_the_collector(open_and_close) == []
    assert _dialogs_of(desktop.window) == []


@pytest.mark.own_collector
def test_the_missing_model_dialog_dies_when_closed(desktop) -> None:
    missing = desktop.window.settings
    desktop.window.settings = AppSettings(
        speech=SpeechModelSettings(model_id=NOT_ON_DISK, device="cpu"), llm=missing.llm)

    def open_and_close() -> None:
        _answer_the_dialog()
        assert not desktop.offer_speech_model()  # closed: the model is still not there

    assert _wrappers_left_to_the_collector(open_and_close) == []
    assert _dialogs_of(desktop.window) == []


@pytest.mark.own_collector
def test_the_export_dialog_and_about_die_when_closed(desktop) -> None:
    window = desktop.window

    def open_and_close() -> None:
        _answer_the_dialog()
        window.export_action.trigger()
        window.features.show_about().close()

    assert _wrappers_left_to_the_collector(open_and_close) == []
    assert _dialogs_of(window) == []


@pytest.mark.own_collector
def test_a_saved_conversations_window_dies_when_closed(desktop) -> None:
    features = desktop.window.features
    header = TranscriptHeader(conversation_id="20261201-100000-abcdef", title="Lunch with Ana")
    features.keeper.store.save(header, [TranscriptEntry(1, "user", "Lunch on Friday?", 0.0)])

    def open_and_close() -> None:
        viewer = features.open_saved(header.conversation_id)
        assert viewer is not None
        QApplication.processEvents()
        viewer.close_button.click()

    assert _wrappers_left_to_the_collector(open_and_close) == []
    assert features.viewers == []  # the app forgot each one as it was deleted
