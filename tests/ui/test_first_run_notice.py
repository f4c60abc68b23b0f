"""The settings file's notice is not hidden behind the first-run dialog (issue 19, item 9):
a repaired settings file may be why the dialog asks for a model the user never chose, so the
dialog itself says it, bounded, and the window lists it before the welcome."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel

from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings
from app.settings.store import SettingsStore
from tests.ui.test_desktop_app import Dialogs, launch, notices


class WatchedDialogs(Dialogs):
    """Dialogs that note what the user can read in each one while it is open."""

    def __init__(self, *answers: str) -> None:
        super().__init__(*answers)
        self.readable: list[list[str]] = []

    def __call__(self, manifest, **kwargs):
        made = []
        # Queued before the scripted answer: it runs first, inside the dialog's exec().
        QTimer.singleShot(0, lambda: self.readable.append(
            [label.text() for label in made[0].findChildren(QLabel) if label.isVisible()]))
        made.append(super().__call__(manifest, **kwargs))
        return made[0]


def test_the_settings_notice_is_in_the_first_run_dialog(qtbot, data_dir, tmp_path) -> None:
    store = SettingsStore(tmp_path / "settings.json")
    store.save(AppSettings(speech=SpeechModelSettings(model_id="moshika", device="cpu"),
                           llm=LlmSettings(backend="none", model="qwen3:4b")))
    # One bad byte: the model chosen (moshika, not on disk) is kept, "qwen3:4b" is lost.
    store.path.write_bytes(store.path.read_bytes().replace(b"qwen3:4b", b"qwen3\xff4b"))
    dialogs = WatchedDialogs("close")
    window, _, _ = launch(qtbot, store, dialogs)
    assert len(dialogs.shown) == 1 and dialogs.shown[0].manifest.id == "moshika"
    [readable] = dialogs.readable
    assert any("had problems" in text and "'llm.model'" in text for text in readable)
    said = notices(window)
    reset = next(i for i, text in enumerate(said) if "had problems" in text)
    welcome = next(i for i, text in enumerate(said) if text.startswith("Press Start"))
    assert reset < welcome  # read first, as it happened first


def test_a_long_notice_is_bounded_in_the_dialog(qtbot, data_dir, tmp_path) -> None:
    store = SettingsStore(tmp_path / "settings.json")
    store.save(AppSettings(speech=SpeechModelSettings(model_id="moshika", device="cpu"),
                           llm=LlmSettings(backend="none")))
    dialogs = WatchedDialogs("close")
    window, controller, desktop = launch(qtbot, store, dialogs)
    dialogs.readable.clear()
    desktop.first_run("The settings file had problems: " + "x" * 100_000)
    [readable] = dialogs.readable[-1:]
    [shown] = [text for text in readable if "had problems" in text]
    assert len(shown) < 1000 and "cut:" in shown


def test_the_welcome_names_the_model_chosen_since(qtbot, data_dir, tmp_path) -> None:
    """Issue 28, item 12: the welcome names the model Start will talk to. Another model
    chosen in Settings before the conversation begins changes it in place (it kept naming
    the first one); once something was said, the welcome is history and stays."""
    from dataclasses import replace

    from app.checkpoints.catalog import get_manifest
    from app.conversation.transcript.entries import TranscriptEntry

    store = SettingsStore(tmp_path / "settings.json")
    settings = AppSettings(speech=SpeechModelSettings(model_id="tiny", device="cpu"),
                           llm=LlmSettings(backend="none"))
    store.save(settings)
    window, controller, desktop = launch(qtbot, store, WatchedDialogs())
    tiny, persona = (get_manifest(m).display_name for m in ("tiny", "tiny-persona"))

    def welcomes() -> list[str]:
        return [text for text in notices(window) if text.startswith("Press Start")]

    assert len(welcomes()) == 1 and tiny in welcomes()[0]
    chosen = replace(settings, speech=replace(settings.speech, model_id="tiny-persona"))
    desktop.settings_accepted(chosen)
    assert len(welcomes()) == 1 and persona in welcomes()[0] and tiny not in welcomes()[0]
    assert window.transcript.entries()[0].text == welcomes()[0]  # where it was: first
    controller.entry.emit(TranscriptEntry(1, "user", "Hello", 0.0, origin="session-1"))
    desktop.settings_accepted(settings)
    assert len(welcomes()) == 1 and persona in welcomes()[0]  # the conversation has begun
