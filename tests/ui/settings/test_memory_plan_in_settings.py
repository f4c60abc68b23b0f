"""The memory plan where the speech model is chosen: Settings → Speech model and the first-run
dialog show what fits (a made-up 16 GB card, qwen3:4b as a real stand-in Ollama reports it),
ask again when the model, the device or the precision changes, say what to change when
nothing fits, and never wait on the GUI thread for an Ollama that does not answer."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.checkpoints.catalog import get_manifest, load_catalog
from app.llm.ollama_standin import OllamaStandIn, StandInModel
from app.plan.footprint import short_name
from app.plan.memory_plan import GIB, DeviceMemory
from app.plan.memory_survey import survey_for_settings
from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings
from app.ui.background_jobs import wait_for_jobs
from app.ui.download_dialog import ModelMissingDialog
from app.ui.memory_plan_view import WORKING
from app.ui.settings.dialog import SettingsDialog

CATALOG = load_catalog()
WAIT_MS = 20_000
QWEN3 = StandInModel(  # what Ollama's /api/ps reports for a loaded qwen3:4b
    file_bytes=2_497_280_256, family="qwen3", parameter_size="4.0B",
    quantization_level="Q4_K_M", model_info={"general.parameter_count": 4_022_468_096},
    loaded_bytes=3_400_000_000, loaded_vram_bytes=3_400_000_000)

# A bound for the tabs' jobs to end, not a time: the memory plan builds a 7B on meta,
# seconds on an idle machine and many more at load 10.
JOBS_END_S = 120.0


@pytest.fixture(autouse=True)
def private_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("CONTEXTSPAN_DATA_DIR", str(tmp_path / "data"))
    yield
    assert wait_for_jobs(JOBS_END_S)


@pytest.fixture(scope="module")
def ollama():
    with OllamaStandIn(models=("qwen3:4b",), model_facts={"qwen3:4b": QWEN3}) as server:
        yield server


def card(gigabytes: int) -> DeviceMemory:
    total = gigabytes * GIB
    return DeviceMemory("cuda", f"A made-up {gigabytes} GB card", total, total,
                        precisions=("bf16", "int8", "fp8"))


def on_card(gigabytes: int):
    """The app's own survey, on a made-up card instead of this machine's."""
    return lambda settings, timeout_s: survey_for_settings(settings, card(gigabytes),
                                                           timeout_s=timeout_s)


def settings_for(host: str, model_id: str = "context-spanning-7b",
                 precision: str = "auto") -> AppSettings:
    return AppSettings(
        speech=SpeechModelSettings(model_id=model_id, device="cuda",
                                   precision=precision),  # type: ignore[arg-type]
        llm=LlmSettings(backend="ollama", host=host, model="qwen3:4b",
                        stt_model="kyutai-stt-1b-en_fr"))


def dialog_on(qtbot, settings: AppSettings, survey) -> SettingsDialog:
    dialog = SettingsDialog(settings, catalog=CATALOG, stt_models={},
                            list_voices=lambda *_: [], memory_survey=survey)
    qtbot.addWidget(dialog)
    return dialog


def plan_text(dialog: SettingsDialog) -> str:
    return dialog.speech_tab.memory_plan.text()


def wait_for_plan(qtbot, dialog: SettingsDialog, containing: str) -> str:
    qtbot.waitUntil(lambda: containing in plan_text(dialog), timeout=WAIT_MS)
    return plan_text(dialog)


def test_the_speech_tab_shows_what_fits_and_follows_the_precision(qtbot, ollama):
    dialog = dialog_on(qtbot, settings_for(ollama.url), on_card(16))
    text = wait_for_plan(qtbot, dialog, "Fits:")
    name = short_name(get_manifest("context-spanning-7b").display_name)
    assert f"{name} in 8-bit" in text and "speech recognition" in text
    assert "qwen3:4b in Ollama 3.2 GB" in text and "of 16 GB" in text  # 3.4e9 bytes
    assert dialog.speech_tab.memory_plan.report.precision == "int8"  # what auto loads
    # bf16 does not fit on 16 GB: the plan says so, and what to change.
    dialog.precision_combo.setCurrentIndex(dialog.precision_combo.findData("bf16"))
    text = wait_for_plan(qtbot, dialog, "Does not fit:")
    assert f"{name} in bf16" in text
    assert "load the speech model in 8-bit (Settings → Speech model → precision)" in text
    assert "run the speech engine on a server" in text


def test_the_plan_follows_the_model_and_the_llm_tabs_model(qtbot, ollama):
    dialog = dialog_on(qtbot, settings_for(ollama.url), on_card(24))
    wait_for_plan(qtbot, dialog, "in bf16")
    dialog.model_combo.setCurrentIndex(dialog.model_combo.findData("tiny"))
    wait_for_plan(qtbot, dialog, f"{short_name(get_manifest('tiny').display_name)} in ")
    # The LLM tab's choice counts too: seen when the speech tab is shown again.
    dialog.tabs.setCurrentWidget(dialog.llm_tab)
    dialog.llm_model_combo.setCurrentText("not-installed:1b")
    dialog.tabs.setCurrentWidget(dialog.speech_tab)
    text = wait_for_plan(qtbot, dialog, "not-installed:1b is not counted")
    assert "qwen3:4b" not in text


def test_nothing_fitting_says_what_to_change(qtbot, ollama):
    dialog = dialog_on(qtbot, settings_for(ollama.url), on_card(6))
    text = wait_for_plan(qtbot, dialog, "Does not fit:")
    assert "It fits with one of these changes:" in text
    assert "run the speech engine on a server" in text


def _silent_server() -> socket.socket:
    """An Ollama that accepts connections and never answers (a hung server)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    return server


def test_a_hung_ollama_never_freezes_the_dialog(qtbot):
    with _silent_server() as server:
        host = f"http://127.0.0.1:{server.getsockname()[1]}"
        dialog = dialog_on(qtbot, settings_for(host), on_card(16))
        dialog.speech_tab.memory_plan.ollama_timeout_s = 0.5
        dialog.speech_tab.refresh_plan()  # returns at once: the plan is made off this thread
        assert plan_text(dialog) == WORKING
        text = wait_for_plan(qtbot, dialog, "Fits:")
    assert "qwen3:4b is not counted: Ollama is not reachable" in text


def test_the_first_run_dialog_shows_the_plan_for_the_model_asked_for(qtbot, ollama):
    manifest = get_manifest("context-spanning-7b")
    dialog = ModelMissingDialog(manifest, check_size=False,
                                plan_settings=settings_for(ollama.url), memory_survey=on_card(16))
    qtbot.addWidget(dialog)
    view = dialog.memory_plan
    assert view is not None
    qtbot.waitUntil(lambda: "Fits:" in view.text(), timeout=WAIT_MS)
    assert f"{short_name(manifest.display_name)} in 8-bit" in view.text()
    assert "of 16 GB" in view.text()


def test_a_precision_the_device_does_not_run_is_not_a_green_fits(qtbot, ollama):
    """Issue 35, item 13: with MLX and int8 the speech tab said in red that int8 does not run
    on MLX and, beside it, in green "Fits: … in 8-bit": both cannot be true. The plan says
    it would fit in memory, without the green, and its note says why it cannot run."""
    from app.engine.device import DeviceChoice
    from app.ui.settings.form import OK_COLOR

    mlx_runs = ("fp32", "q8", "q4")
    machine = DeviceMemory("cpu", "MLX on this CPU (x86_64)", 24 * GIB, 20 * GIB,
                           precisions=mlx_runs)
    settings = AppSettings(
        speech=SpeechModelSettings(model_id="tiny", device="mlx", precision="int8"),
        llm=LlmSettings(backend="ollama", host=ollama.url, model="qwen3:4b", stt_model="none"))
    dialog = SettingsDialog(
        settings, catalog=CATALOG, stt_models={}, list_voices=lambda *_: [],
        device_survey=lambda: (DeviceChoice("mlx", "the MLX engine on this CPU (x86_64)",
                                            precisions=mlx_runs),),
        memory_survey=lambda s, timeout_s: survey_for_settings(s, machine,
                                                               timeout_s=timeout_s))
    qtbot.addWidget(dialog)
    dialog.show()
    text = wait_for_plan(qtbot, dialog, "int8 does not run on")
    hint = dialog.speech_tab.precision_hint
    qtbot.waitUntil(hint.isVisible, timeout=WAIT_MS)
    assert "int8 does not run" in hint.text(), hint.text()
    assert "Fits:" not in text, text
    assert "Would fit in memory:" in text, text
    assert OK_COLOR not in dialog.speech_tab.memory_plan.label.styleSheet()
    # A precision that runs there: the plan is a plain "Fits", green again.
    dialog.precision_combo.setCurrentIndex(dialog.precision_combo.findData("q8"))
    text = wait_for_plan(qtbot, dialog, "Fits:")
    assert OK_COLOR in dialog.speech_tab.memory_plan.label.styleSheet()
