"""The first-run dialog, driven offscreen against a local folder standing in for the hub.

The hub stand-in is the one the downloader's tests use (tests/checkpoints/test_downloader.py),
loaded by path because the test folders are not packages.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.pop("HF_HUB_OFFLINE", None)

import importlib.util
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QDialog

from app.checkpoints.catalog import Manifest, get_manifest
from app.checkpoints.downloader import format_bytes
from app.ui import download_dialog, safe_file_dialog
from app.ui.download_dialog import TINY_CAPTION, ModelMissingDialog

WAIT_MS = 10_000


def _load_hub_standin() -> ModuleType:
    name = "contextspan_hub_standin"
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).resolve().parents[1] / "checkpoints" / "test_downloader.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


standin = _load_hub_standin()


@pytest.fixture(autouse=True)
def hub_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    standin.isolate_hub_environment(tmp_path, monkeypatch)


@pytest.fixture()
def hub(tmp_path: Path) -> Iterator:
    with standin.HubStandIn(tmp_path / "hub") as server:
        yield server


@pytest.fixture()
def published(hub) -> tuple[Manifest, dict[str, bytes]]:
    files = standin.make_files()
    hub.publish("test/model", files)
    return standin.make_manifest("test/model", files), files


@pytest.fixture()
def open_dialog(qtbot) -> Iterator:
    """Opens dialogs; at teardown, checks each one's workers have finished (none left)."""
    opened: list[ModelMissingDialog] = []

    def open_(manifest: Manifest, **kwargs) -> ModelMissingDialog:
        dialog = ModelMissingDialog(manifest, **kwargs)
        qtbot.addWidget(dialog)
        dialog.show()
        opened.append(dialog)
        return dialog

    yield open_
    for dialog in opened:
        # A bound, not a time: the memory plan builds a 7B on meta, seconds on a busy machine.
        assert dialog.shutdown(60.0), "a worker thread outlived its test"


def test_download_shows_the_size_then_a_moving_bar_to_a_verified_finish(
    qtbot, open_dialog, hub, published, tmp_path, monkeypatch
):
    manifest, files = published
    gui_thread = threading.current_thread()
    slot_threads: set[threading.Thread] = set()
    original = ModelMissingDialog._on_progress

    def watched(self, done, total, name):
        slot_threads.add(threading.current_thread())
        original(self, done, total, name)

    monkeypatch.setattr(ModelMissingDialog, "_on_progress", watched)
    folder = tmp_path / "ckpt"
    dialog = open_dialog(manifest, folder=folder, endpoint=hub.url)
    total = sum(len(d) for d in files.values())
    qtbot.waitUntil(lambda: format_bytes(total) in dialog.size_label.text(), timeout=WAIT_MS)
    assert "4 files" in dialog.size_label.text()

    values: list[int] = []
    dialog.progress_bar.valueChanged.connect(values.append)
    qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    assert not dialog.tiny_button.isEnabled() and dialog.cancel_button.isEnabled()
    qtbot.waitUntil(dialog.continue_button.isEnabled, timeout=WAIT_MS)

    assert values == sorted(values) and values[-1] == 1000
    assert any(0 < v < 1000 for v in values), "the bar moves while a file streams"
    assert f"of {format_bytes(total)}" in dialog.progress_label.text()
    assert "Integrity check passed: all 4 files" in dialog.download_status.text()
    assert slot_threads == {gui_thread}, "the worker reports by queued signals"
    for name, data in files.items():
        assert (folder / name).read_bytes() == data

    qtbot.mouseClick(dialog.continue_button, Qt.MouseButton.LeftButton)
    assert dialog.result() == QDialog.DialogCode.Accepted
    assert dialog.chosen() == ("download", folder)


def test_cancel_answers_at_once_keeps_the_partial_file_and_resume_finishes(
    qtbot, open_dialog, hub, published, tmp_path, monkeypatch
):
    manifest, files = published
    # The stalled read waits for the test's release, never for huggingface_hub's 10 s read
    # timeout (which would resume the file by itself on a machine slow to click Cancel).
    monkeypatch.setattr(standin.constants, "HF_HUB_DOWNLOAD_TIMEOUT", 600)
    fault = standin.Fault(hold_after=3 * standin.TEST_CHUNK)
    hub.faults[("test/model", "model.safetensors")] = fault
    folder = tmp_path / "ckpt"
    dialog = open_dialog(manifest, folder=folder, endpoint=hub.url, check_size=False)

    qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: fault.held.is_set() and dialog.progress_bar.value() > 0,
                    timeout=WAIT_MS)
    # The worker is stuck waiting on the network; the dialog still answers.
    qtbot.mouseClick(dialog.cancel_button, Qt.MouseButton.LeftButton)
    assert "Cancelling" in dialog.download_status.text()
    assert not dialog.cancel_button.isEnabled()
    ticked = []
    QTimer.singleShot(0, lambda: ticked.append(True))
    qtbot.waitUntil(lambda: bool(ticked), timeout=WAIT_MS)
    assert dialog.busy(), "the transfer is still in flight while the GUI runs"

    fault.release.set()  # the next piece arrives, and the cancel takes effect
    qtbot.waitUntil(dialog.download_button.isEnabled, timeout=WAIT_MS)
    assert dialog.download_button.text() == "Resume download"
    assert "kept on disk" in dialog.download_status.text()
    assert not (folder / "model.safetensors").exists()
    assert dialog.result() != QDialog.DialogCode.Accepted

    hub.forget_seen()
    qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(dialog.continue_button.isEnabled, timeout=WAIT_MS)
    assert (folder / "model.safetensors").read_bytes() == files["model.safetensors"]
    ranges = [s.range for s in hub.gets("/blobs/test/model/model.safetensors")]
    assert len(ranges) == 1 and ranges[0] is not None and ranges[0] != "bytes=0-"


def test_a_gated_model_explains_the_licence_and_takes_a_token(qtbot, open_dialog, hub, tmp_path):
    files = standin.make_files(20_000)
    hub.publish("org/gated", files, gated=True, tokens=("hf_good",))
    manifest = standin.make_manifest("org/gated", files, gated=True)
    dialog = open_dialog(manifest, folder=tmp_path / "ckpt", endpoint=hub.url,
                     check_size=False)
    assert f'href="{hub.url}/org/gated"' in dialog.licence_label.text()
    assert "settings/tokens" in dialog.licence_label.text()
    assert dialog.token_edit is not None and dialog.token_edit.text() == ""

    qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(dialog.download_button.isEnabled, timeout=WAIT_MS)
    assert "licence (Test Licence 1.0) must be accepted" in dialog.download_status.text()

    dialog.token_edit.setText("hf_good")
    qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(dialog.continue_button.isEnabled, timeout=WAIT_MS)
    assert (tmp_path / "ckpt" / "config.json").read_bytes() == files["config.json"]


def test_an_unreachable_hub_is_said_plainly(qtbot, open_dialog, tmp_path):
    manifest = standin.make_manifest("test/model", standin.make_files(10))
    dialog = open_dialog(manifest, folder=tmp_path / "c", endpoint=standin.closed_port_url())
    qtbot.waitUntil(lambda: "size unknown" in dialog.size_label.text(), timeout=WAIT_MS)
    qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "Could not reach" in dialog.download_status.text(),
                    timeout=WAIT_MS)
    qtbot.waitUntil(dialog.folder_button.isEnabled, timeout=WAIT_MS)


def test_a_local_folder_is_checked_by_the_loader(qtbot, open_dialog, tmp_path, monkeypatch):
    manifest = get_manifest("moshika")  # no config.json: moshi's legacy layout
    dialog = open_dialog(manifest, folder=tmp_path / "default", check_size=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert not dialog.choose_folder(empty)
    assert "missing" in dialog.folder_error.text()
    assert "tokenizer_spm_32k_3.model" in dialog.folder_error.text()
    assert dialog.isVisible() and dialog.chosen() is None

    good = tmp_path / "good"
    good.mkdir()
    for name in manifest.files.values():
        (good / name).write_bytes(b"weights")
    monkeypatch.setattr(safe_file_dialog, "existing_directory", lambda *a, **k: str(good))
    qtbot.mouseClick(dialog.folder_button, Qt.MouseButton.LeftButton)
    assert dialog.result() == QDialog.DialogCode.Accepted
    assert dialog.chosen() == ("folder", good)


def test_the_tiny_model_is_built_off_the_gui_thread_with_a_busy_indicator(
    qtbot, open_dialog, tmp_path
):
    release = threading.Event()
    built_on: list[threading.Thread] = []

    def slow_build(manifest: Manifest) -> Path:
        built_on.append(threading.current_thread())
        assert release.wait(timeout=10)
        return tmp_path / manifest.id

    dialog = open_dialog(get_manifest("moshika"), folder=tmp_path / "d", check_size=False,
                     build_tiny=slow_build)
    labels = [w.text() for w in dialog.findChildren(download_dialog.QLabel)]
    assert TINY_CAPTION in labels and "babbles" in TINY_CAPTION
    qtbot.mouseClick(dialog.tiny_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bool(built_on), timeout=WAIT_MS)
    assert dialog.tiny_busy.isVisible() and dialog.tiny_busy.maximum() == 0
    assert not dialog.download_button.isEnabled() and not dialog.folder_button.isEnabled()
    assert built_on[0] is not threading.main_thread()

    release.set()
    qtbot.waitUntil(lambda: dialog.result() == QDialog.DialogCode.Accepted, timeout=WAIT_MS)
    assert dialog.chosen() == ("tiny", tmp_path / "tiny")


def test_the_tiny_model_choice_uses_the_real_build(qtbot, open_dialog, tiny_folder, tmp_path):
    dialog = open_dialog(get_manifest("moshika"), folder=tmp_path / "d", check_size=False)
    qtbot.mouseClick(dialog.tiny_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.chosen() is not None, timeout=60_000)
    assert dialog.chosen() == ("tiny", tiny_folder)
    assert dialog.result() == QDialog.DialogCode.Accepted
