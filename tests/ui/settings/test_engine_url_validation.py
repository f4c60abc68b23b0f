"""Settings → Speech engine: a server address that is no URL is said as it is typed, and OK
does not save it (as the LLM tab's host, issue 19 item 9); on "This computer" the address is
not used, so it is not checked."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QDialogButtonBox

from app.settings.schema import AppSettings, EngineSettings
from app.ui.background_jobs import wait_for_jobs
from app.ui.settings.dialog import SettingsDialog

WAIT_MS = 30_000  # the speech tab's memory plan asks Ollama (a timeout of seconds)

# A bound for the tabs' jobs to end, not a time: the memory plan builds a 7B on meta,
# seconds on an idle machine and many more at load 10.
JOBS_END_S = 120.0


@pytest.fixture(autouse=True)
def private_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The dialog's background jobs (the memory plan, a test) end before the next test."""
    monkeypatch.setenv("CONTEXTSPAN_DATA_DIR", str(tmp_path / "data"))
    yield
    assert wait_for_jobs(JOBS_END_S)


def make_dialog(qtbot, settings: AppSettings) -> SettingsDialog:
    dialog = SettingsDialog(settings, catalog={}, stt_models={}, list_voices=lambda *_: [])
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def press_ok(dialog: SettingsDialog) -> None:
    buttons = dialog.findChild(QDialogButtonBox)
    assert buttons is not None
    buttons.button(QDialogButtonBox.StandardButton.Ok).click()


@pytest.mark.parametrize("url", [
    "not a url at all", "ftp://gpu-box:8998", "http://", "http://gpu-box:99999",
    "gpu box:8998", "", "   ",
])
def test_a_server_address_that_is_no_url_is_said_and_ok_keeps_the_dialog(qtbot, url):
    dialog = make_dialog(qtbot, AppSettings(engine=EngineSettings(mode="server")))
    dialog.tabs.setCurrentWidget(dialog.audio_tab)  # OK brings the problem's tab forward
    box = dialog.engine_box
    box.url_edit.setText(url)
    press_ok(dialog)
    assert dialog.isVisible() and dialog.result() == 0, f"{url!r} was saved"
    assert dialog.tabs.currentWidget() is dialog.speech_tab
    assert box.url_edit.hasFocus() or dialog.focusWidget() is box.url_edit
    assert box.url_problem.isVisibleTo(box) and box.url_problem.text()  # why, under it
    assert not box.test_button.isEnabled()  # nothing to test
    box.url_edit.setText("https://gpu-box.example.org:8998")  # as it is typed
    assert not box.url_problem.isVisibleTo(box) and box.test_button.isEnabled()
    press_ok(dialog)
    assert dialog.result() == 1


@pytest.mark.parametrize("url", [
    "http://gpu-box:8998", "https://gpu-box:8998/", "ws://127.0.0.1:8998/ws",
    "wss://gpu.example.org", "gpu-box:8998", "http://[::1]:8998",
])
def test_the_addresses_the_client_takes_are_accepted(url):
    from app.ui.settings.engine_box import server_url_problem

    assert server_url_problem(url) is None


@pytest.mark.parametrize(("url", "said"), [
    ("ftp://gpu-box", "http://"), ("http://gpu-box:99999", "port"), ("a b", "spaces"),
    ("", "Enter"), ("http://", "names no server"),
])
def test_each_problem_says_why(url, said):
    from app.ui.settings.engine_box import server_url_problem

    problem = server_url_problem(url)
    assert problem is not None and said in problem


def test_on_this_computer_the_address_is_not_checked(qtbot):
    dialog = make_dialog(qtbot, AppSettings(engine=EngineSettings(
        mode="local", server_url="not a url at all")))
    box = dialog.engine_box
    assert not box.url_problem.isVisibleTo(box)
    press_ok(dialog)
    assert dialog.result() == 1
    box.server_radio.setChecked(True)  # choosing the server shows it at once
    assert box.url_problem.isVisibleTo(box) and box.url_problem.text()
