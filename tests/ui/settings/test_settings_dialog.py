"""The settings dialog, driven like a user drives it (real widgets, offscreen)."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.checkpoints.catalog import DEVELOPER_MODELS_VARIABLE, Manifest, load_catalog
from app.llm.backend import LLMBackend
from app.llm.ollama_standin import OllamaStandIn
from app.settings.schema import AppSettings, AudioSettings, LlmSettings, SpeechModelSettings
from app.ui import gui_bridge, safe_file_dialog
from app.ui.background_jobs import wait_for_jobs
from app.ui.settings.audio_tab import meter_percent
from app.ui.settings.dialog import SettingsDialog
from app.ui.settings.llm_tab import connection_test_backend
from app.ui.settings.speech_tab import list_persona_voices

CATALOG = load_catalog()
STT_MODELS = {"kyutai-stt-1b-en_fr": "Kyutai STT 1B", "tiny-stt": "Tiny STT"}
WAIT_MS = 5000

# A bound for the tabs' jobs to end, not a time: the memory plan builds a 7B on meta,
# seconds on an idle machine and many more at load 10.
JOBS_END_S = 120.0


def no_voices(manifest: Manifest, folder: Path) -> list[str]:
    return []


@pytest.fixture(autouse=True)
def private_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No checkpoint of the user's is seen; no background job outlives its test."""
    monkeypatch.setenv("CONTEXTSPAN_DATA_DIR", str(tmp_path / "data"))
    yield
    assert wait_for_jobs(JOBS_END_S)


def make_dialog(qtbot, settings: AppSettings | None = None, **kwargs) -> SettingsDialog:
    kwargs.setdefault("catalog", CATALOG)
    kwargs.setdefault("stt_models", STT_MODELS)
    kwargs.setdefault("list_voices", no_voices)
    dialog = SettingsDialog(settings or AppSettings(), **kwargs)
    qtbot.addWidget(dialog)
    return dialog


def select_data(combo, data) -> None:
    index = combo.findData(data)
    assert index >= 0, data
    combo.setCurrentIndex(index)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- reflecting and editing settings -----------------------------------------------------------


def test_dialog_shows_the_settings_and_returns_them_unchanged(qtbot) -> None:
    settings = AppSettings(
        speech=SpeechModelSettings(model_id="tiny", device="cpu", precision="int8"),
        audio=AudioSettings(input_device="USB Mic", output_device="Speakers", echo_mode="headset"),
        llm=LlmSettings(
            backend="openai",
            host="http://127.0.0.1:8080/v1",
            model="qwen3:4b",
            timeout_s=12.5,
            tools_enabled=False,
            tools=("clock", "calculator"),
            search_folders=("/home/me/notes",),
            stt_model="tiny-stt",
        ),
    )
    dialog = make_dialog(qtbot, settings, list_devices=lambda: (["USB Mic"], ["Speakers"]))
    assert dialog.model_combo.currentText() == CATALOG["tiny"].display_name
    assert dialog.device_combo.currentData() == "cpu"
    assert dialog.precision_combo.currentData() == "int8"
    assert dialog.input_combo.currentText() == "USB Mic"
    assert dialog.headset_radio.isChecked()
    assert dialog.host_edit.text() == "http://127.0.0.1:8080/v1"
    assert dialog.llm_model_combo.currentText() == "qwen3:4b"
    assert not dialog.tools_group.isChecked()
    assert dialog.tool_checks["clock"].isChecked()
    assert not dialog.tool_checks["web_search"].isChecked()
    assert dialog.stt_combo.currentText() == "Tiny STT"
    assert dialog.settings() == settings
    assert make_dialog(qtbot).settings() == AppSettings()


def test_edits_come_back_in_the_settings(qtbot, monkeypatch: pytest.MonkeyPatch) -> None:
    dialog = make_dialog(qtbot, list_devices=lambda: (["Mic 1", "Mic 2"], ["Out 1"]))
    select_data(dialog.model_combo, "moshiko")
    select_data(dialog.device_combo, "cuda")
    select_data(dialog.precision_combo, "fp8")  # the list follows the device: cuda has it
    monkeypatch.setattr(safe_file_dialog, "existing_directory", lambda *a, **k: "/models/mine")
    qtbot.mouseClick(dialog.folder_button, Qt.MouseButton.LeftButton)
    select_data(dialog.input_combo, "Mic 2")
    select_data(dialog.output_combo, "Out 1")
    dialog.headset_radio.setChecked(True)
    select_data(dialog.backend_combo, "openai")  # the default host follows the backend
    dialog.llm_model_combo.setCurrentText("llama")
    dialog.timeout_spin.setValue(45)
    dialog.tool_checks["web_search"].setChecked(False)
    monkeypatch.setattr(safe_file_dialog, "existing_directory", lambda *a, **k: "/home/me/papers")
    qtbot.mouseClick(dialog.add_folder_button, Qt.MouseButton.LeftButton)
    select_data(dialog.stt_combo, "tiny-stt")

    got = dialog.settings()
    assert got.speech == SpeechModelSettings(
        model_id="moshiko",
        custom_folder="/models/mine",
        device="cuda",
        precision="fp8",
    )
    assert got.audio == AudioSettings(
        input_device="Mic 2", output_device="Out 1", echo_mode="headset"
    )
    assert got.llm == LlmSettings(
        backend="openai",
        host="http://127.0.0.1:8080/v1",
        model="llama",
        timeout_s=45.0,
        tools=("web_fetch", "local_search", "calculator", "clock"),
        search_folders=("/home/me/papers",),
        stt_model="tiny-stt",
    )

    dialog.folders_list.setCurrentRow(0)
    qtbot.mouseClick(dialog.remove_folder_button, Qt.MouseButton.LeftButton)
    assert dialog.settings().llm.search_folders == ()


# -- persona checkpoints ---------------------------------------------------------------------------


@pytest.mark.parametrize("model_id", sorted(CATALOG))
def test_role_prompt_only_for_persona_checkpoints(qtbot, monkeypatch, model_id: str) -> None:
    monkeypatch.setenv(DEVELOPER_MODELS_VARIABLE, "1")  # the developers' models too
    dialog = make_dialog(qtbot)
    select_data(dialog.model_combo, model_id)
    persona = model_id in ("personaplex", "tiny-persona", "context-spanning-7b", "tiny-cs")
    assert dialog.role_edit.isEnabled() == persona
    assert not dialog.voice_combo.isEnabled()  # no checkpoint is on disk here
    hint = dialog.voice_hint.text()
    assert ("not on disk" in hint) if persona else ("persona" in hint)
    # Name and city: only for checkpoints trained on them.
    trained_on_profile = model_id in ("context-spanning-7b", "tiny-cs")
    assert dialog.user_name_edit.isEnabled() == trained_on_profile
    assert dialog.user_city_edit.isEnabled() == trained_on_profile


def test_name_city_and_voice_levelling_are_saved(qtbot) -> None:
    dialog = make_dialog(qtbot)
    select_data(dialog.model_combo, "context-spanning-7b")
    dialog.user_name_edit.setText("  Ada ")
    dialog.user_city_edit.setText("Seoul")
    dialog.level_check.setChecked(False)
    settings = dialog.settings()
    assert (settings.speech.user_name, settings.speech.user_city) == ("Ada", "Seoul")
    assert settings.audio.level_voice is False
    dialog.user_city_edit.clear()
    assert dialog.settings().speech.user_city is None


def test_voices_come_from_the_checkpoint_folder(qtbot, tmp_path: Path) -> None:
    """Through the real list_voices: the voice prompt files in the checkpoint's folder."""
    folder = tmp_path / "data" / "checkpoints" / "tiny-persona" / "voices"
    folder.mkdir(parents=True)
    for name in ("TINY0.wav", "TINY1.pt", "notes.txt"):
        (folder / name).write_bytes(b"")
    settings = AppSettings(speech=SpeechModelSettings(model_id="tiny-persona", role="A pirate."))
    dialog = make_dialog(qtbot, settings, list_voices=list_persona_voices)
    qtbot.waitUntil(dialog.voice_combo.isEnabled, timeout=WAIT_MS)
    items = [dialog.voice_combo.itemText(i) for i in range(dialog.voice_combo.count())]
    assert items == ["Default (TINY0)", "TINY0", "TINY1"]
    assert dialog.role_edit.isEnabled() and dialog.role_edit.toPlainText() == "A pirate."
    dialog.voice_combo.setCurrentIndex(items.index("TINY1"))
    dialog.voice_combo.activated.emit(items.index("TINY1"))  # what a user's pick sends
    assert dialog.settings().speech.voice == "TINY1"
    assert dialog.settings().speech.role == "A pirate."

    select_data(dialog.model_combo, "tiny")  # not a persona checkpoint: both switch off
    assert not dialog.voice_combo.isEnabled() and not dialog.role_edit.isEnabled()


# -- audio ----------------------------------------------------------------------------------------


def test_device_combos_come_from_the_injected_list(qtbot) -> None:
    settings = AppSettings(audio=AudioSettings(input_device="Built-in Mic", output_device="Gone"))
    dialog = make_dialog(
        qtbot, settings, list_devices=lambda: (["Built-in Mic", "USB Mic"], ["Speakers"])
    )
    inputs = [dialog.input_combo.itemText(i) for i in range(dialog.input_combo.count())]
    outputs = [dialog.output_combo.itemText(i) for i in range(dialog.output_combo.count())]
    assert inputs == ["System default", "Built-in Mic", "USB Mic"]
    assert outputs == ["System default", "Speakers", "Gone (not connected)"]
    assert dialog.settings().audio == settings.audio  # an unplugged device is not forgotten
    dialog.input_combo.setCurrentIndex(0)
    assert dialog.settings().audio.input_device is None


def test_a_failing_device_list_is_shown_not_raised(qtbot) -> None:
    def broken() -> tuple[list[str], list[str]]:
        raise RuntimeError("PortAudio is not initialised")

    dialog = make_dialog(qtbot, list_devices=broken)
    assert "PortAudio is not initialised" in dialog.audio_status.text()
    assert dialog.input_combo.count() == 1


def test_test_speaker_plays_on_the_chosen_device(qtbot) -> None:
    played: list[str | None] = []
    dialog = make_dialog(
        qtbot, list_devices=lambda: ([], ["Speakers"]), play_test_tone=played.append
    )
    select_data(dialog.output_combo, "Speakers")
    qtbot.mouseClick(dialog.tone_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.audio_status.text() == "Test tone played.", timeout=WAIT_MS)
    assert played == ["Speakers"]
    assert dialog.tone_button.isEnabled()


def test_test_speaker_failure_is_shown(qtbot) -> None:
    def no_device(device: str | None) -> None:
        raise OSError("device busy")

    dialog = make_dialog(qtbot, play_test_tone=no_device)
    qtbot.mouseClick(dialog.tone_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "device busy" in dialog.audio_status.text(), timeout=WAIT_MS)


class FakeMeter:
    def __init__(self) -> None:
        self.closed = False

    def level(self) -> float:
        return 0.5

    def close(self) -> None:
        self.closed = True


def test_microphone_meter_follows_the_probe_and_stops(qtbot) -> None:
    opened: list[tuple[str | None, FakeMeter]] = []

    def probe(device: str | None) -> FakeMeter:
        opened.append((device, FakeMeter()))
        return opened[-1][1]

    dialog = make_dialog(qtbot, list_devices=lambda: (["USB Mic"], []), mic_level_probe=probe)
    select_data(dialog.input_combo, "USB Mic")
    qtbot.mouseClick(dialog.mic_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.mic_meter.value() == meter_percent(0.5), timeout=WAIT_MS)
    qtbot.mouseClick(dialog.mic_button, Qt.MouseButton.LeftButton)
    assert opened[0][0] == "USB Mic" and opened[0][1].closed
    assert dialog.mic_meter.value() == 0

    qtbot.mouseClick(dialog.mic_button, Qt.MouseButton.LeftButton)
    dialog.input_combo.setCurrentIndex(0)  # another microphone: the old capture stops
    assert opened[1][1].closed and dialog.mic_button.text() == "Test microphone"

    qtbot.mouseClick(dialog.mic_button, Qt.MouseButton.LeftButton)
    assert opened[2][0] is None  # the system default
    dialog.reject()  # closing the dialog stops the capture
    assert opened[2][1].closed


def test_meter_scale() -> None:
    assert meter_percent(0.0) == 0
    assert meter_percent(1.0) == 100
    assert meter_percent(2.0) == 100
    assert meter_percent(0.001) == 0  # -60 dBFS
    assert 40 < meter_percent(0.1) < 80


# -- the LLM connection test ----------------------------------------------------------------------


def test_connection_test_lists_the_servers_models(qtbot) -> None:
    with OllamaStandIn(models=("qwen3:4b", "standin:latest")) as server:
        settings = AppSettings(llm=LlmSettings(host=server.url, model=""))
        dialog = make_dialog(qtbot, settings)
        qtbot.mouseClick(dialog.test_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: dialog.llm_model_combo.count() == 2, timeout=WAIT_MS)
    assert "2 model(s)" in dialog.connection_status.text()
    assert dialog.llm_model_combo.currentText() == "qwen3:4b"  # none chosen: the first
    assert dialog.test_button.isEnabled()
    assert dialog.settings().llm.model == "qwen3:4b"


def test_connection_test_says_when_the_chosen_model_is_missing(qtbot) -> None:
    with OllamaStandIn(models=("standin:latest",)) as server:
        dialog = make_dialog(qtbot, AppSettings(llm=LlmSettings(host=server.url, model="llama3")))
        dialog.test_connection()
        qtbot.waitUntil(
            lambda: "ollama pull llama3" in dialog.connection_status.text(), timeout=WAIT_MS
        )
    assert dialog.llm_model_combo.currentText() == "llama3"  # the user's choice stays
    assert dialog.llm_model_combo.findText("standin:latest") >= 0


def test_connection_test_against_a_dead_port_shows_an_error(qtbot) -> None:
    host = f"http://127.0.0.1:{free_port()}"
    dialog = make_dialog(qtbot, AppSettings(llm=LlmSettings(host=host, model="qwen3:4b")))
    qtbot.mouseClick(dialog.test_button, Qt.MouseButton.LeftButton)
    # The click returned before any answer: the dialog is still drawing and taking input.
    assert not dialog.test_button.isEnabled() and "Connecting" in dialog.connection_status.text()
    dialog.timeout_spin.setValue(20)
    qtbot.waitUntil(lambda: "not reachable" in dialog.connection_status.text(), timeout=WAIT_MS)
    assert dialog.test_button.isEnabled()
    assert dialog.settings().llm.timeout_s == 20.0


class GatedBackend(LLMBackend):
    """A server that answers only when the test says so."""

    name = "gated"

    def __init__(self, gate: threading.Event, models: list[str]) -> None:
        self.gate, self.models = gate, models

    def chat(self, *args, **kwargs):
        raise NotImplementedError

    def list_models(self) -> list[str]:
        assert self.gate.wait(WAIT_MS / 1000)
        return self.models


def test_an_answer_for_an_old_host_is_dropped(qtbot) -> None:
    gate = threading.Event()
    dialog = make_dialog(
        qtbot, backend_factory=lambda llm, timeout: GatedBackend(gate, ["old-server-model"])
    )
    dialog.test_connection()
    dialog.host_edit.setText("http://127.0.0.1:11435")
    assert "dropped" in dialog.connection_status.text() and dialog.test_button.isEnabled()
    gate.set()
    assert wait_for_jobs(JOBS_END_S)  # its result is posted
    gui_bridge.the_relay().deliver()  # and taken here, on the GUI thread (the relay's tick)
    assert dialog.llm_model_combo.count() == 0
    assert "dropped" in dialog.connection_status.text()


def test_a_server_that_never_answers_times_out(qtbot) -> None:
    gate = threading.Event()
    dialog = make_dialog(
        qtbot, backend_factory=lambda llm, timeout: GatedBackend(gate, ["late-model"])
    )
    dialog.connection_timeout_s = dialog.connection_grace_s = 0.1
    dialog.test_connection()
    qtbot.waitUntil(lambda: "No answer" in dialog.connection_status.text(), timeout=WAIT_MS)
    assert dialog.test_button.isEnabled()
    gate.set()
    assert wait_for_jobs(JOBS_END_S)  # its result is posted
    gui_bridge.the_relay().deliver()  # and taken here, on the GUI thread (the relay's tick)
    assert dialog.llm_model_combo.count() == 0  # the late answer is ignored


def test_no_backend_disables_the_llm_controls(qtbot) -> None:
    dialog = make_dialog(qtbot)
    select_data(dialog.backend_combo, "none")
    assert not dialog.test_button.isEnabled() and not dialog.host_edit.isEnabled()
    assert dialog.settings().llm.backend == "none"
    select_data(dialog.backend_combo, "ollama")
    assert dialog.test_button.isEnabled()


def test_default_backend_factory_builds_each_backend() -> None:
    ollama = connection_test_backend(LlmSettings(backend="ollama", host="http://127.0.0.1:1"), 2.0)
    openai = connection_test_backend(
        LlmSettings(backend="openai", host="http://127.0.0.1:1/v1"), 2.0)
    assert ollama.name == "Ollama" and openai.name == "OpenAI-compatible server"
    with pytest.raises(ValueError):
        connection_test_backend(LlmSettings(backend="none"), 2.0)


# -- developers' models ---------------------------------------------------------------------------


def _offered(combo) -> dict[str, str]:
    return {combo.itemData(i): combo.itemText(i) for i in range(combo.count())}


DEVELOPER_SPEECH = {"moshi-7b-random", "tiny-cs"}


def test_developers_models_are_offered_only_when_asked_for(qtbot, monkeypatch) -> None:
    """Issue 35, item 18: Settings offered users "Moshi 7B architecture with random weights
    (GPU timing only)", "… (random weights, for tests)" and a random-weight recogniser. They
    are offered when CONTEXTSPAN_DEVELOPER_MODELS=1 asks for them (or the settings already
    name one); the tiny demo model stays offered to everyone."""
    from app.asr.stt_catalog import load_stt_catalog

    assert {m for m, manifest in CATALOG.items() if manifest.for_developers} == \
        DEVELOPER_SPEECH
    monkeypatch.delenv(DEVELOPER_MODELS_VARIABLE, raising=False)
    dialog = make_dialog(qtbot, catalog=None, stt_models=None)  # the app's own catalogs
    speech, stt = _offered(dialog.model_combo), _offered(dialog.stt_combo)
    assert not DEVELOPER_SPEECH & set(speech), speech
    for name in speech.values():
        assert "GPU timing only" not in name and "for tests" not in name, name
    assert "tiny" in speech and "context-spanning-7b" in speech
    assert "tiny-stt" not in stt and "kyutai-stt-1b-en_fr" in stt, stt

    monkeypatch.setenv(DEVELOPER_MODELS_VARIABLE, "1")
    dialog = make_dialog(qtbot, catalog=None, stt_models=None)
    assert set(_offered(dialog.model_combo)) >= DEVELOPER_SPEECH
    assert "tiny-stt" in _offered(dialog.stt_combo)
    assert set(load_stt_catalog()) <= set(_offered(dialog.stt_combo))


def test_a_developers_model_the_settings_name_stays_shown(qtbot, monkeypatch) -> None:
    monkeypatch.delenv(DEVELOPER_MODELS_VARIABLE, raising=False)
    settings = AppSettings(speech=SpeechModelSettings(model_id="moshi-7b-random"),
                           llm=LlmSettings(stt_model="tiny-stt"))
    dialog = make_dialog(qtbot, settings, catalog=None, stt_models=None)
    assert dialog.model_combo.currentData() == "moshi-7b-random"
    assert dialog.stt_combo.currentData() == "tiny-stt"
    assert "tiny-cs" not in _offered(dialog.model_combo)
    assert dialog.settings().speech.model_id == "moshi-7b-random"
