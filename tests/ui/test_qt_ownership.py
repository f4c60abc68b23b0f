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

The main window too: built with its controller and DesktopApp as run_app builds them, shown,
and closed as the app closes (Quit: the closeEvent, the event loop's end with aboutToQuit,
then DesktopApp.wind_down: all of DesktopApp.finish but the process's exit), ROUNDS times.
Then no Qt wrapper is in gc.garbage, reference counting alone freed each round's window,
features, autosave keeper, controller and DesktopApp (the app owns its controller, which
holds its preflight check weakly: a strong hold made the two a cycle), no thread the
window started runs on (the autosave's writer), and there are no more top-level widgets.
"""

from __future__ import annotations

import gc
import os
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
import shiboken6
from PySide6.QtCore import QCoreApplication, QEvent, QTimer
from PySide6.QtWidgets import QApplication, QDialog, QWidget

from app.conversation.transcript.entries import TranscriptEntry
from app.conversation.transcript.export import TranscriptHeader
from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings
from app.settings.store import SettingsStore
from app.ui.app import DesktopApp
from app.ui.conversation_controller import ConversationController
from app.ui.download_dialog import ModelMissingDialog
from app.ui.main_window import MainWindow
from app.ui.memory_plan_view import NothingToPlan

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


@contextmanager
def _refcounting_only() -> Iterator[None]:
    """Automatic collection off, and what a collection frees kept in gc.garbage (DEBUG_SAVEALL):
    inside, only reference counting frees anything, and `_cyclic_qt_wrappers` names the rest."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()


def _cyclic_qt_wrappers() -> list[str]:
    """The Qt wrappers that only the cyclic collector would free (inside `_refcounting_only`)."""
    gc.collect()
    return sorted(type(o).__name__ for o in gc.garbage if isinstance(o, shiboken6.Object))


def _wrappers_left_to_the_collector(open_and_close: Callable[[], None]) -> list[str]:
    """Open and close ROUNDS times; the Qt wrappers that only the cyclic collector would free."""
    open_and_close()  # a first opening fills caches (imports, Qt's own) that stay
    _settle()
    with _refcounting_only():
        for _ in range(ROUNDS):
            open_and_close()
            _settle()
        return _cyclic_qt_wrappers()


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
def test_the_export_dialog_about_and_help_die_when_closed(desktop) -> None:
    window = desktop.window

    def open_and_close() -> None:
        _answer_the_dialog()
        window.export_action.trigger()
        window.features.show_about().close()
        window.features.show_help().close()  # Help → ContextSpan help (issue 35, item 19)

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


def _launch(settings: AppSettings) -> tuple[MainWindow, DesktopApp]:
    """What run_app opens (app/ui/app.py), without its error hooks: the controller, its
    window, the app around them (the window's child: the caller holds the window, as
    run_app does); the window shown, then the first run's welcome."""
    controller = ConversationController(lambda _settings: None)
    window = MainWindow(controller, settings)
    desktop = DesktopApp(window, controller, SettingsStore(), model_dialog=_missing_model_dialog)
    window.show()
    desktop.first_run(None)
    return window, desktop


def _close_as_the_app_does(desktop: DesktopApp) -> int:
    """run_app's end but the process's exit: the user quits (the window's closeEvent), the
    event loop ends with the last window (aboutToQuit: the autosave's last write), then
    DesktopApp.finish's wind-down. Returns the event loop's exit code (1: the guard ended a
    loop the close never ended)."""
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    others = [type(w).__name__ for w in app.topLevelWidgets()
              if w.isVisible() and w is not desktop.window]
    assert app.quitOnLastWindowClosed() and not others, f"the loop would outlive it: {others}"
    QTimer.singleShot(0, desktop.window.features.quit_action.trigger)
    guard = QTimer()  # a hang becomes a failure
    guard.setSingleShot(True)
    guard.timeout.connect(partial(app.exit, 1))
    guard.start(60_000)
    code = app.exec()
    guard.stop()
    desktop.wind_down()
    return code


def _threads_started_since(before: list[threading.Thread]) -> list[str]:
    """The threads started since `before` that do not end (one that ends by itself, a job
    reading the saved list, is waited for: bounded)."""
    def started() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t not in before and t.is_alive()]

    deadline = time.monotonic() + 30.0
    while started() and time.monotonic() < deadline:
        time.sleep(0.01)
    return sorted(t.name for t in started())


@pytest.mark.own_collector
def test_the_main_window_and_its_app_die_when_closed(qapp, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CONTEXTSPAN_DATA_DIR", str(tmp_path / "data"))
    settings = AppSettings(speech=SpeechModelSettings(model_id="tiny", device="cpu"),
                           llm=LlmSettings(backend="ollama", model="qwen3:4b"))
    opened: list[weakref.ref] = []

    def open_and_close() -> None:
        window, desktop = _launch(settings)
        opened.extend(weakref.ref(part) for part in
                      (window, window.features, window.features.keeper, desktop,
                       desktop.controller))
        assert _close_as_the_app_does(desktop) == 0

    open_and_close()  # a first opening fills caches (imports, Qt's own) that stay
    _settle()
    before = threading.enumerate()
    windows = len(QApplication.topLevelWidgets())
    opened.clear()
    with _refcounting_only():
        for _ in range(ROUNDS):
            open_and_close()
            _settle()
        alive = sorted(type(part()).__name__ for part in opened if part() is not None)
        wrappers = _cyclic_qt_wrappers()
    assert wrappers == [], f"{len(wrappers)} in gc.garbage: {Counter(wrappers)}"
    assert alive == [], f"{len(alive)} still alive: {Counter(alive)}"  # refcounting freed them
    assert _threads_started_since(before) == []  # the close stopped what the window started
    assert len(QApplication.topLevelWidgets()) == windows
