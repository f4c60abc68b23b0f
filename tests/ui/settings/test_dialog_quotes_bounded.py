"""What the settings dialog quotes from the settings file or a failing call (a model id, a
device or voice name, an error) is bounded and says it was cut (issue 19, item 24); the value
itself is kept as it was."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QComboBox, QLabel

from app.checkpoints.catalog import load_catalog
from app.settings.schema import AppSettings, AudioSettings, SpeechModelSettings
from app.ui.background_jobs import wait_for_jobs
from app.ui.settings.dialog import SettingsDialog

LONG = "n" * 200_000
SHOWN_AT_MOST = 1000

# A bound for the tabs' jobs to end, not a time: the memory plan builds a 7B on meta,
# seconds on an idle machine and many more at load 10.
JOBS_END_S = 120.0


@pytest.fixture(autouse=True)
def private_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("CONTEXTSPAN_DATA_DIR", str(tmp_path / "data"))
    yield
    assert wait_for_jobs(JOBS_END_S)


def shown_texts(dialog: SettingsDialog) -> list[str]:
    texts = [label.text() for label in dialog.findChildren(QLabel)]
    for combo in dialog.findChildren(QComboBox):
        texts += [combo.itemText(i) for i in range(combo.count())]
    return texts


def test_long_values_from_the_file_are_shown_bounded(qtbot) -> None:
    def failing_devices():
        raise OSError("PortAudio: " + LONG)

    settings = AppSettings(speech=SpeechModelSettings(model_id=LONG),
                           audio=AudioSettings(input_device=LONG, output_device=LONG))
    dialog = SettingsDialog(settings, catalog=load_catalog(), stt_models={},
                            list_voices=lambda *_: [], list_devices=failing_devices)
    qtbot.addWidget(dialog)
    texts = shown_texts(dialog)
    assert max(len(text) for text in texts) <= SHOWN_AT_MOST
    assert sum("cut:" in text for text in texts) >= 3  # model, two devices (and the error)
    got = dialog.settings()
    assert got.speech.model_id == LONG and got.audio.input_device == LONG  # values kept
