"""The Assistant (LLM) tab says what is wrong as it is typed, and OK does not save it: a
server address that is no URL, a timeout out of the schema's range (shown as typed, never
moved to a limit); a connection test's result goes when the backend, server or model it was
about changes (issue 19, item 9)."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QDialogButtonBox

from app.llm.backend import LLMBackend
from app.settings.schema import AppSettings, LlmSettings
from app.settings.store import field_range
from app.ui.background_jobs import wait_for_jobs
from app.ui.settings.dialog import SettingsDialog

WAIT_MS = 5000
STT_MODELS = {"kyutai-stt-1b-en_fr": "Kyutai STT 1B"}

# A bound for the tabs' jobs to end, not a time: the memory plan builds a 7B on meta,
# seconds on an idle machine and many more at load 10.
JOBS_END_S = 120.0


class ListingBackend(LLMBackend):
    name = "listing"

    def chat(self, *args, **kwargs):
        raise NotImplementedError

    def list_models(self) -> list[str]:
        return ["qwen3:4b", "llama3"]


@pytest.fixture(autouse=True)
def private_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("CONTEXTSPAN_DATA_DIR", str(tmp_path / "data"))
    yield
    assert wait_for_jobs(JOBS_END_S)


def make_dialog(qtbot, settings: AppSettings | None = None) -> SettingsDialog:
    dialog = SettingsDialog(settings or AppSettings(), stt_models=STT_MODELS,
                            list_voices=lambda *_: [],
                            backend_factory=lambda llm, timeout: ListingBackend())
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def shown(label) -> bool:
    """Shown on its tab (the tab itself may be behind another)."""
    return label.isVisibleTo(label.parentWidget()) and bool(label.text())


def press_ok(dialog: SettingsDialog) -> None:
    buttons = dialog.findChild(QDialogButtonBox)
    buttons.button(QDialogButtonBox.StandardButton.Ok).click()


@pytest.mark.parametrize(("backend", "host"), [
    ("ollama", "not a url at all"), ("ollama", "ftp://host"),
    ("ollama", "http://"), ("ollama", "http://host:99999"), ("openai", "with space.org"),
    ("openai", ""),  # an OpenAI-compatible server has no default address
    ("openai", "127.0.0.1:8080/v1"),  # its client needs the scheme; Ollama's assumes http
])
def test_a_host_that_is_no_url_is_said_at_once_and_ok_keeps_the_dialog(
        qtbot, backend, host) -> None:
    dialog = make_dialog(qtbot, AppSettings(llm=LlmSettings(backend=backend)))
    dialog.tabs.setCurrentIndex(0)
    dialog.host_edit.setText(host)
    assert shown(dialog.host_problem) and dialog.host_problem.text()  # as it is typed
    assert not dialog.test_button.isEnabled()
    press_ok(dialog)
    assert dialog.isVisible() and dialog.result() == 0  # not accepted
    assert dialog.tabs.currentWidget() is dialog.llm_tab  # where the problem is shown
    dialog.host_edit.setText("https://llm.example.org:8443/v1")
    assert not shown(dialog.host_problem) and dialog.test_button.isEnabled()
    press_ok(dialog)
    assert dialog.result() == 1


def test_a_timeout_out_of_range_is_shown_with_the_range_and_never_reset(qtbot) -> None:
    low, high = field_range(LlmSettings, "timeout_s")
    dialog = make_dialog(qtbot)
    dialog.timeout_spin.setValue(0)
    assert dialog.timeout_spin.value() == 0  # as the user typed it
    said = dialog.timeout_problem.text()
    assert shown(dialog.timeout_problem) and f"{low:g}" in said and f"{high:g}" in said
    press_ok(dialog)
    assert dialog.isVisible() and dialog.result() == 0
    dialog.timeout_spin.setValue(high + 1)
    assert dialog.timeout_spin.value() == high + 1 and shown(dialog.timeout_problem)
    dialog.timeout_spin.setValue(low)
    assert not shown(dialog.timeout_problem)
    press_ok(dialog)
    assert dialog.result() == 1 and dialog.settings().llm.timeout_s == low


def test_an_empty_ollama_host_is_its_default_not_an_error(qtbot) -> None:
    dialog = make_dialog(qtbot)
    dialog.host_edit.setText("")
    assert not shown(dialog.host_problem) and "default" in dialog.host_edit.placeholderText()
    press_ok(dialog)
    assert dialog.result() == 1


def test_without_a_backend_nothing_is_checked(qtbot) -> None:
    dialog = make_dialog(qtbot, AppSettings(llm=LlmSettings(backend="none", host="nonsense")))
    assert not shown(dialog.host_problem)
    press_ok(dialog)
    assert dialog.result() == 1


@pytest.mark.parametrize("change", ["model", "host", "backend"])
def test_a_connection_result_goes_when_what_it_was_about_changes(qtbot, change) -> None:
    dialog = make_dialog(qtbot, AppSettings(llm=LlmSettings(model="qwen3:4b")))
    dialog.test_connection()
    qtbot.waitUntil(lambda: "Connected" in dialog.connection_status.text()
                    or "model" in dialog.connection_status.text(), timeout=WAIT_MS)
    assert dialog.connection_status.text()
    if change == "model":
        dialog.llm_model_combo.setCurrentText("llama3")
    elif change == "host":
        dialog.host_edit.setText("http://127.0.0.1:11435")
    else:
        dialog.backend_combo.setCurrentIndex(dialog.backend_combo.findData("openai"))
    assert dialog.connection_status.text() == ""


def test_ollamas_own_host_port_form_is_taken_as_ollama_takes_it(qtbot) -> None:
    """Issue 28, item 7: `OLLAMA_HOST=localhost:11500` is how Ollama itself is told its
    address (http assumed); the field takes it, as the speech server's field does, and the
    real connection test reaches the server at that address."""
    from app.llm.ollama_standin import OllamaStandIn

    with OllamaStandIn(models=("qwen3:4b",)) as standin:
        bare = standin.url.removeprefix("http://")
        assert bare != standin.url and "://" not in bare  # "127.0.0.1:PORT"
        dialog = SettingsDialog(AppSettings(llm=LlmSettings(backend="ollama", model="")),
                                stt_models=STT_MODELS, list_voices=lambda *_: [])
        qtbot.addWidget(dialog)
        dialog.show()
        dialog.tabs.setCurrentWidget(dialog.llm_tab)
        dialog.host_edit.setText(bare)
        assert not shown(dialog.host_problem), dialog.host_problem.text()
        assert dialog.test_button.isEnabled()
        dialog.test_connection()
        qtbot.waitUntil(lambda: "Connected" in dialog.connection_status.text(),
                        timeout=WAIT_MS)
        press_ok(dialog)
        assert dialog.result() == 1
        assert dialog.settings().llm.host == bare  # kept as typed, as Ollama reads it


def test_a_setting_the_tab_has_no_widget_for_is_kept_by_ok(qtbot) -> None:
    """`end_of_turn` is saved (a hand edit, `"vad"`) but the tab shows no control for it:
    pressing OK must not put the default back in its place."""
    dialog = make_dialog(qtbot, AppSettings(llm=LlmSettings(end_of_turn="vad")))
    press_ok(dialog)
    assert dialog.result() == 1 and dialog.settings().llm.end_of_turn == "vad"
