"""The app around its window (issue 10): the first-run choice is saved, a missing speech model
or speech recognition goes to the download dialog, settings changed during a conversation
apply at once or are offered as a restart that keeps the transcript, Esc cancels a pending
LLM request. Real widgets, the tiny model through the real loader, the stand-in Ollama."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import json
import sys
import threading
import time
from dataclasses import replace

import numpy as np
import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtTest import QTest

from app.audio.file_source import FileAudioSource
from app.checkpoints.catalog import get_manifest
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings
from app.settings.store import SettingsStore
from app.ui.app import DesktopApp
from app.ui.conversation_controller import ConversationController
from app.ui.download_dialog import NO_STT_LABEL, ModelMissingDialog
from app.ui.main_window import MainWindow
from app.ui.settings.dialog import SettingsDialog
from app.ui.transcript_panel import is_resendable

TINY_NAME = get_manifest("tiny").display_name
_LAUNCHED: list[ConversationController] = []


@pytest.fixture(autouse=True)
def _conversations_end_with_the_test():
    """A failing test must not leave a conversation running into the next one."""
    yield
    while _LAUNCHED:
        controller = _LAUNCHED.pop()
        controller.begin_shutdown()
        assert controller.wait_shutdown(15.0)


class Dialogs:
    """The real download dialog (no hub size check: no network here), answered by a script
    once it runs: "tiny", "none" or "close"."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.shown: list[ModelMissingDialog] = []

    def __call__(self, manifest, **kwargs) -> ModelMissingDialog:
        dialog = ModelMissingDialog(manifest, check_size=False, **kwargs)
        self.shown.append(dialog)
        answer = self.answers.pop(0) if self.answers else "close"
        click = {"tiny": lambda: dialog.tiny_button.click(),
                 "none": lambda: dialog.none_button.click(),
                 "close": dialog.reject}[answer]
        QTimer.singleShot(0, click)  # runs inside the dialog's exec()
        return dialog


def launch(qtbot, store: SettingsStore, dialogs: Dialogs, audio=None):
    """What run_app does, minus app.exec(): load the settings, build the window, first run."""
    settings, notice = store.load()
    sources: list[FileAudioSource] = []

    def audio_factory(_settings):
        sources.append(FileAudioSource(np.zeros(4800, np.float32)))
        return sources[-1]

    controller = ConversationController(audio or audio_factory)
    _LAUNCHED.append(controller)
    window = MainWindow(controller, settings)
    qtbot.addWidget(window)
    desktop = DesktopApp(window, controller, store, model_dialog=dialogs)
    window.show()
    desktop.first_run(notice)
    return window, controller, desktop


def notices(window) -> list[str]:
    return [e.text for e in window.transcript.entries() if e.kind == "notice"]


def spans(window) -> list:
    return [e for e in window.transcript.entries() if e.kind == "span" and e.final]


def saved(store: SettingsStore) -> dict:
    return json.loads(store.path.read_text(encoding="utf-8"))


def stop(controller, qtbot) -> None:
    controller.begin_shutdown()
    assert controller.wait_shutdown(15.0)


# ---- item 7: the first run's tiny choice is saved, and the welcome names it ---------------------


def test_the_tiny_demo_choice_is_saved_and_not_asked_again(qtbot, tiny_folder, data_dir,
                                                          tmp_path):
    store = SettingsStore(tmp_path / "settings.json")  # no file: the default (moshika) is absent
    dialogs = Dialogs("tiny")
    window, _, _ = launch(qtbot, store, dialogs)
    assert len(dialogs.shown) == 1
    assert window.settings.speech.model_id == "tiny"
    assert saved(store)["speech"]["model_id"] == "tiny"  # on disk, for the next launch
    welcome = [t for t in notices(window) if t.startswith("Press Start")]
    assert len(welcome) == 1 and TINY_NAME in welcome[0] and "moshika" not in welcome[0]

    window2, _, _ = launch(qtbot, SettingsStore(tmp_path / "settings.json"), dialogs)
    assert len(dialogs.shown) == 1  # the second launch does not ask again
    assert window2.settings.speech.model_id == "tiny"
    assert any(TINY_NAME in t for t in notices(window2) if t.startswith("Press Start"))


# ---- item 9: a missing speech model goes to the download dialog --------------------------------


def test_starting_with_a_missing_model_shows_the_download_dialog(qtbot, tiny_folder, data_dir,
                                                                tmp_path, capfd):
    store = SettingsStore(tmp_path / "settings.json")
    store.save(AppSettings(speech=SpeechModelSettings(model_id="moshika", device="cpu"),
                           llm=LlmSettings(backend="none")))
    dialogs = Dialogs("close", "close", "tiny")  # first run, then two presses of Start
    window, controller, _ = launch(qtbot, store, dialogs)
    assert len(dialogs.shown) == 1
    window.start_action.trigger()  # Start: the model is still missing
    assert len(dialogs.shown) == 2 and dialogs.shown[-1].manifest.id == "moshika"
    assert controller.state == "idle"  # nothing started, nothing failed
    assert "press Start again to download it" in window.banner.text()
    window.start_action.trigger()  # "start again to download it" does offer it again
    assert len(dialogs.shown) == 3
    qtbot.waitUntil(lambda: controller.state == "running", timeout=90_000)
    assert window.settings.speech.model_id == "tiny"
    stop(controller, qtbot)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "CheckpointMissingError" not in err


def test_a_model_missing_at_load_time_also_goes_to_the_dialog(qtbot, tiny_folder, data_dir,
                                                              tmp_path, caplog):
    store = SettingsStore(tmp_path / "settings.json")
    store.save(AppSettings(speech=SpeechModelSettings(model_id="moshika", device="cpu"),
                           llm=LlmSettings(backend="none")))
    dialogs = Dialogs("close", "tiny")
    window, controller, _ = launch(qtbot, store, dialogs)
    controller.preflight = None  # as if the files vanished after the check
    window.start_action.trigger()
    qtbot.waitUntil(lambda: len(dialogs.shown) == 2, timeout=60_000)
    qtbot.waitUntil(lambda: controller.state == "running", timeout=90_000)
    stop(controller, qtbot)
    assert not any("CheckpointMissingError" in t for t in notices(window))
    assert not window.banner.isVisible() or "CheckpointMissingError" not in window.banner.text()
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]


# ---- item 8: speech recognition that is not on disk -----------------------------------------


def test_missing_speech_recognition_offers_the_download_or_typed_only(qtbot, tiny_folder,
                                                                      data_dir, tmp_path):
    with OllamaStandIn() as standin:
        store = SettingsStore(tmp_path / "settings.json")
        store.save(AppSettings(
            speech=SpeechModelSettings(model_id="tiny", device="cpu"),
            llm=LlmSettings(backend="ollama", host=standin.url, model="standin:latest",
                            tools_enabled=False, stt_model="kyutai-stt-1b-en_fr")))
        dialogs = Dialogs("none")
        window, controller, _ = launch(qtbot, store, dialogs)
        assert not dialogs.shown  # the speech model is there: no first-run dialog
        window.start_action.trigger()
        assert len(dialogs.shown) == 1
        dialog = dialogs.shown[0]
        assert dialog.is_stt and dialog.manifest.id == "kyutai-stt-1b-en_fr"
        assert dialog.download_button.isEnabled()  # the same download as the speech model's
        assert dialog.none_button.text() == NO_STT_LABEL
        assert not dialog.folder_button.isVisibleTo(dialog)
        qtbot.waitUntil(lambda: controller.state == "running", timeout=90_000)
        assert window.settings.llm.stt_model == "none"
        assert saved(store)["llm"]["stt_model"] == "none"
        stop(controller, qtbot)


def test_the_settings_dialog_offers_no_speech_recognition(qtbot):
    dialog = SettingsDialog(AppSettings(), stt_models={"tiny-stt": "Tiny STT"})
    qtbot.addWidget(dialog)
    index = dialog.stt_combo.findData("none")
    assert index >= 0 and dialog.stt_combo.itemText(index) == NO_STT_LABEL
    dialog.stt_combo.setCurrentIndex(index)
    assert dialog.settings().llm.stt_model == "none"


# ---- item 3: settings changed during a conversation ----------------------------------------------


def test_the_settings_dialog_says_what_applies_after_a_restart(qtbot):
    idle = SettingsDialog(AppSettings(), stt_models={})
    running = SettingsDialog(AppSettings(), stt_models={}, conversation_running=True)
    for dialog in (idle, running):
        qtbot.addWidget(dialog)
        dialog.show()
    assert not idle.restart_note.isVisible()
    assert running.restart_note.isVisible() and "after a restart" in running.restart_note.text()
    running.tabs.setCurrentIndex(0)
    assert any("after a restart" in label.text() and label.isVisible()
               for label in running.tabs.widget(0).findChildren(type(running.restart_note)))


def test_live_settings_reach_the_next_request_and_a_restart_keeps_the_transcript(
        qtbot, tiny_folder, data_dir, tmp_path):
    with OllamaStandIn(script=[ScriptedReply(content="From A.")], models=("a:1",)) as first, \
            OllamaStandIn(script=[ScriptedReply(content="From B.")], models=("b:2",)) as second:
        store = SettingsStore(tmp_path / "settings.json")
        store.save(AppSettings(
            speech=SpeechModelSettings(model_id="tiny", device="cpu"),
            llm=LlmSettings(backend="ollama", host=first.url, model="a:1",
                            tools_enabled=False, stt_model="none")))
        window, controller, desktop = launch(qtbot, store, Dialogs())
        window.start_action.trigger()
        qtbot.waitUntil(lambda: controller.state == "running", timeout=90_000)
        controller.send_text("first question?")
        qtbot.waitUntil(lambda: any(e.text == "From A." for e in spans(window)), timeout=30_000)

        # What a user does in the dialog: another server, model and tools, and their name.
        new = replace(window.settings,
                      llm=replace(window.settings.llm, host=second.url, model="b:2",
                                  tools_enabled=True, tools=("calculator",)),
                      speech=replace(window.settings.speech, user_name="Ana"))
        desktop.settings_accepted(new)
        assert saved(store)["llm"]["model"] == "b:2"
        assert window.restart_banner.isVisible()
        assert "Your name" in window.restart_banner.label.text()
        controller.send_text("second question?")
        qtbot.waitUntil(lambda: any(e.text == "From B." for e in spans(window)), timeout=30_000)
        assert second.requests and second.requests[0]["model"] == "b:2"
        assert [t["function"]["name"] for t in second.requests[0]["tools"]] == ["calculator"]
        assert len(first.requests) == 1

        before = [(e.kind, e.text) for e in window.transcript.entries() if e.final]
        qtbot.mouseClick(window.restart_banner.restart_button, Qt.MouseButton.LeftButton)
        assert not window.restart_banner.isVisible()
        qtbot.waitUntil(lambda: controller.state == "stopping", timeout=5_000)
        qtbot.waitUntil(lambda: controller.state == "running", timeout=90_000)
        assert controller.settings.speech.user_name == "Ana"  # the restart took the new ones
        controller.send_text("third question?")
        qtbot.waitUntil(lambda: [e.text for e in spans(window)].count("From B.") == 2,
                        timeout=30_000)
        after = [(e.kind, e.text) for e in window.transcript.entries()]
        stop(controller, qtbot)
    for kept in [("user", "first question?"), ("span", "From A."), ("user", "second question?")]:
        assert kept in before and kept in after, kept  # the transcript stayed
    assert after.index(("user", "first question?")) < after.index(("user", "third question?"))


def test_settings_saved_despite_a_refused_test_leave_the_running_conversation_alone(
        qtbot, tiny_folder, data_dir, tmp_path):
    """Issue 35, item 15: what Test connection refused and the user saved anyway stopped a
    working conversation (its restart could not start again, and its pending span was
    lost). Saved, it waits for the next conversation: the running one keeps its LLM and is
    offered no restart, and the transcript says why."""
    with OllamaStandIn(script=[ScriptedReply(content="From A.")] * 2, models=("a:1",)) as llm:
        store = SettingsStore(tmp_path / "settings.json")
        store.save(AppSettings(
            speech=SpeechModelSettings(model_id="tiny", device="cpu"),
            llm=LlmSettings(backend="ollama", host=llm.url, model="a:1",
                            tools_enabled=False, stt_model="none")))
        window, controller, desktop = launch(qtbot, store, Dialogs())
        window.start_action.trigger()
        qtbot.waitUntil(lambda: controller.state == "running", timeout=90_000)
        desktop.settings_accepted(replace(window.settings, speech=replace(
            window.settings.speech, user_name="Ana")))  # an earlier change: a restart offer
        assert window.restart_banner.isVisible()
        refused = replace(window.settings, llm=replace(window.settings.llm,
                                                       model="not-pulled:7b"))
        desktop.settings_accepted(refused, refused=(f"the LLM not-pulled:7b at {llm.url}",))
        assert saved(store)["llm"]["model"] == "not-pulled:7b"  # kept for the next one
        assert not window.restart_banner.isVisible()  # nothing offers to restart with it
        said = notices(window)[-1]
        assert said.startswith("Settings saved, not applied now: Test connection refused the "
                               "LLM not-pulled:7b"), said
        controller.send_text("still there?")
        qtbot.waitUntil(lambda: any(e.text == "From A." for e in spans(window)), timeout=30_000)
        assert [r["model"] for r in llm.requests] == ["a:1"]  # the working LLM still asked
        assert controller.state == "running" and controller.settings.llm.model == "a:1"
        stop(controller, qtbot)


def test_a_span_lost_to_a_restart_is_sent_again_from_its_context_menu(
        qtbot, tiny_folder, data_dir, tmp_path):
    """Issue 35, item 15: a span dropped in while the conversation restarted was lost ("not
    injected"), with no way to send it but to find the text and drop it again. Its context
    menu in the transcript (and in What the model knows) has "Send again"."""
    store = SettingsStore(tmp_path / "settings.json")
    store.save(AppSettings(speech=SpeechModelSettings(model_id="tiny", device="cpu"),
                           llm=LlmSettings(backend="none")))
    window, controller, _desktop = launch(qtbot, store, Dialogs())
    notes = "Meeting notes: lunch with Ana on Friday at 12:30."
    window.start_action.trigger()
    assert controller.inject_text(notes, "dropped file: notes.txt")  # while it loads
    controller.restart(window.settings)  # before the model took it
    panel = window.transcript

    def lost():
        return [e for e in panel.entries() if e.kind == "span" and e.text == notes
                and e.final and e.landed_frame is None]

    qtbot.waitUntil(lambda: bool(lost()), timeout=90_000)
    assert lost()[0].detail.startswith("not injected"), lost()[0].detail
    qtbot.waitUntil(lambda: controller.state == "running", timeout=90_000)
    row = panel.entries().index(lost()[0])
    where = panel.view.visualRect(panel.model.index(row)).center()
    menu = panel.context_menu(where)
    (again,) = [a for a in menu.actions() if a.text().startswith("Send again")]
    again.trigger()
    qtbot.waitUntil(lambda: any(e.kind == "span" and e.text == notes and e.landed_frame
                                is not None for e in panel.entries()), timeout=60_000)
    landed = [e for e in panel.entries() if e.text == notes and e.landed_frame is not None]
    assert landed[0].source == "dropped file: notes.txt"  # read again as it came
    # A span that is still on its way has no "Send again" yet.
    assert all(not is_resendable(e) for e in panel.entries() if not e.final)
    stop(controller, qtbot)


# ---- the request side of "a visible LLM state": Esc cancels a pending request ----------------


def test_esc_cancels_a_pending_llm_request(qtbot, tiny_folder, data_dir, tmp_path):
    hang = ScriptedReply(content="too late", first_token_delay_s=60.0)
    with OllamaStandIn(script=[hang]) as standin:
        store = SettingsStore(tmp_path / "settings.json")
        store.save(AppSettings(
            speech=SpeechModelSettings(model_id="tiny", device="cpu"),
            llm=LlmSettings(backend="ollama", host=standin.url, model="standin:latest",
                            tools_enabled=False, stt_model="none")))
        window, controller, _ = launch(qtbot, store, Dialogs())
        window.start_action.trigger()
        qtbot.waitUntil(lambda: controller.state == "running", timeout=90_000)
        controller.send_text("anyone there?")
        qtbot.waitUntil(lambda: bool(standin.requests), timeout=30_000)
        window.activateWindow()
        pressed = time.monotonic()
        QTest.keyClick(window, Qt.Key.Key_Escape)
        qtbot.waitUntil(lambda: bool(standin.hangups), timeout=5_000)
        hung_up = standin.hangups[0] - pressed
        controller.send_text("still there?")  # the conversation goes on
        qtbot.waitUntil(lambda: len(standin.requests) == 2, timeout=30_000)
        stop(controller, qtbot)
    print(f"\nEsc: the stand-in saw the request abandoned {hung_up * 1000:.0f} ms later")
    assert hung_up < 2.0


def test_test_connection_keeps_the_focus(qtbot):
    with OllamaStandIn(models=("qwen3:4b",)) as server:
        dialog = SettingsDialog(AppSettings(llm=LlmSettings(host=server.url, model="")),
                                stt_models={})
        qtbot.addWidget(dialog)
        dialog.show()
        dialog.tabs.setCurrentIndex(2)
        dialog.activateWindow()
        dialog.test_button.setFocus()
        qtbot.waitUntil(dialog.test_button.hasFocus, timeout=5_000)
        dialog.test_button.click()
        qtbot.waitUntil(lambda: dialog.llm_model_combo.count() == 1, timeout=10_000)
    assert dialog.test_button.hasFocus(), dialog.focusWidget()
    assert not dialog.timeout_spin.hasFocus()


def test_a_saved_precision_the_device_does_not_offer_is_kept_and_marked(qtbot):
    settings = AppSettings(speech=SpeechModelSettings(device="mlx", precision="int8"))
    dialog = SettingsDialog(settings, stt_models={})
    qtbot.addWidget(dialog)
    combo = dialog.precision_combo
    assert [combo.itemData(i) for i in range(combo.count())] == [
        "auto", "fp32", "bf16", "q8", "q4", "int8"]
    assert "not for this device" in combo.currentText()
    assert dialog.settings().speech.precision == "int8"  # nothing changes by itself
    dialog.device_combo.setCurrentIndex(dialog.device_combo.findData("cuda"))  # it runs it
    assert combo.currentData() == "int8" and "not for" not in combo.currentText()


# ---- item 5: the process-level deadline after closing ------------------------------------------


def test_past_the_deadline_the_app_exits_anyway_and_says_what_still_ran(
        qtbot, tiny_folder, data_dir, tmp_path, monkeypatch, caplog):
    import logging

    from app.ui import app as app_module

    store = SettingsStore(tmp_path / "settings.json")
    store.save(AppSettings(speech=SpeechModelSettings(model_id="tiny", device="cpu"),
                           llm=LlmSettings(backend="none")))
    window, controller, desktop = launch(qtbot, store, Dialogs())
    _LAUNCHED.remove(controller)  # no conversation runs; its wait_shutdown is faked below
    waited: list[float] = []
    exits: list[int] = []
    monkeypatch.setattr(controller, "wait_shutdown", lambda t: waited.append(t) or False)
    monkeypatch.setattr(controller, "live_threads", lambda: ["llm-turn-3", "conversation"])
    monkeypatch.setattr(app_module.os, "_exit", exits.append)
    monkeypatch.setattr(app_module.logging, "shutdown", lambda: None)
    window.close()
    with caplog.at_level(logging.WARNING, logger="app.ui.app"):
        desktop.finish(0)
    assert exits == [0]
    assert len(waited) == 1 and 1.0 < waited[0] < 2.0  # what is left of the 2 s
    assert "llm-turn-3, conversation" in caplog.text and "exiting anyway" in caplog.text


def _gui_thread_waits_inside_close() -> bool:
    """The GUI thread is inside the window's closeEvent, waiting on a thread or an event."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    names: set[str] = set()
    while frame is not None:
        names.add(frame.f_code.co_name)
        frame = frame.f_back
    return "closeEvent" in names and bool(names & {"join", "wait", "wait_for", "shutdown"})


class SlowToStop(FileAudioSource):
    """An audio driver that takes its time to close its streams (it happens): its `stop`
    returns once the test says the window's close has returned, and notes meanwhile
    whether the GUI thread sat inside the close waiting for it."""

    def __init__(self, pcm: np.ndarray, close_returned: threading.Event) -> None:
        super().__init__(pcm)
        self._close_returned = close_returned
        self.close_waited_for_it = False
        self.stopped = threading.Event()

    def stop(self, timeout: float = 5.0) -> bool:
        super().stop(timeout)
        while not self._close_returned.wait(0.01):
            if _gui_thread_waits_inside_close():
                self.close_waited_for_it = True
        self.stopped.set()
        return True


def test_closing_the_window_does_not_wait_for_the_conversation(qtbot, tiny_folder, data_dir,
                                                               tmp_path):
    store = SettingsStore(tmp_path / "settings.json")
    store.save(AppSettings(speech=SpeechModelSettings(model_id="tiny", device="cpu"),
                           llm=LlmSettings(backend="none")))
    close_returned = threading.Event()
    audio: list[SlowToStop] = []

    def slow_audio(_settings: object) -> SlowToStop:
        audio.append(SlowToStop(np.zeros(4800, np.float32), close_returned))
        return audio[-1]

    window, controller, _ = launch(qtbot, store, Dialogs(), audio=slow_audio)
    window.start_action.trigger()
    qtbot.waitUntil(lambda: controller.state == "running", timeout=90_000)
    window.close()
    close_returned.set()
    assert not window.isVisible()
    assert controller.wait_shutdown(15.0)  # it does finish, in the background
    assert audio and audio[0].stopped.is_set()
    assert not audio[0].close_waited_for_it


# ---- issue 28, item 5: one answer for what runs ------------------------------------------------


def test_int8_on_the_cpu_is_said_int8_by_the_plan_the_status_and_the_header(
        qtbot, tiny_folder, data_dir, tmp_path):
    """int8 on this CPU got three answers: the plan said "Fits: … in 8-bit" and "int8 is not
    offered on This computer's CPU", the log "57 linear layers at int8", the status bar and
    the saved header "(float32)". What runs is read from the loaded model, and the plan
    asks the device what runs on it."""
    import torch

    from app.engine.quantize import int8_unavailable_reason
    from app.plan.memory_survey import survey_for_settings

    auto_is_the_cpu = not (torch.cuda.is_available() or torch.backends.mps.is_available())
    if int8_unavailable_reason(torch.device("cpu")) is not None:
        pytest.fail("this test needs bitsandbytes' int8 kernels on the CPU (they run here)")
    settings = AppSettings(speech=SpeechModelSettings(model_id="tiny", device="cpu",
                                                      precision="int8"),
                           llm=LlmSettings(backend="none"))
    for device in ("cpu", "auto") if auto_is_the_cpu else ("cpu",):  # auto: this CPU here
        chosen = replace(settings, speech=replace(settings.speech, device=device))
        plan = survey_for_settings(chosen, timeout_s=0.5).lines()
        assert any("in 8-bit" in line for line in plan), plan
        assert not any("not offered" in line or "does not run" in line for line in plan), plan
    store = SettingsStore(tmp_path / "settings.json")
    store.save(settings)
    window, controller, _ = launch(qtbot, store, Dialogs())
    window.start_action.trigger()
    qtbot.waitUntil(lambda: controller.state == "running", timeout=90_000)
    qtbot.waitUntil(lambda: window.status_line.model.text() != "", timeout=10_000)
    assert window.status_line.model.text().endswith("cpu · int8"), window.status_line.model.text()
    header = window.features.keeper.header()
    assert header.model.endswith("(int8)") and "float32" not in header.model, header
    stop(controller, qtbot)


def test_a_conversation_on_a_device_that_is_no_device_stops_with_words_not_torchs(
        qtbot, tiny_folder, data_dir, tmp_path):
    """Issue 28, item 4: a settings file with device "banana" stopped the conversation with
    torch's "Expected one of cpu, cuda, ipu, xpu, …" in the banner and the status bar."""
    store = SettingsStore(tmp_path / "settings.json")
    store.save(AppSettings(speech=SpeechModelSettings(model_id="tiny", device="banana"),
                           llm=LlmSettings(backend="none")))
    window, controller, _ = launch(qtbot, store, Dialogs())
    window.start_action.trigger()
    qtbot.waitUntil(lambda: controller.state == "error", timeout=90_000)
    assert window.status_line.state.text() == "Could not start"  # the banner says why
    for said in (window.banner.text(), window.status_line.state.toolTip()):
        assert "is not a device: choose auto, cpu, cuda" in said, said
        assert "Expected one of" not in said, said
