"""Start the desktop app: `python main.py` (or `python main.py --screenshot FILE.png`)."""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np


def _live_audio_factory(settings):
    from app.audio.live_audio import LiveAudio

    audio = settings.audio
    return LiveAudio(input_device=audio.input_device, output_device=audio.output_device,
                     echo_mode=audio.echo_mode)


def _install_error_hooks(window) -> None:
    """Errors raised on any thread become a message in the window, not a dead app."""
    from PySide6.QtCore import QMetaObject, Qt

    def show(message: str) -> None:
        window._pending_error = message
        QMetaObject.invokeMethod(window, "_flush_error", Qt.ConnectionType.QueuedConnection)

    def excepthook(kind, value, tb):
        sys.__excepthook__(kind, value, tb)
        show(f"Unexpected error: {kind.__name__}: {value}")

    def thread_hook(args):
        sys.__excepthook__(args.exc_type, args.exc_value, args.exc_traceback)
        name = args.thread.name if args.thread else "a thread"
        show(f"Unexpected error in {name}: {args.exc_type.__name__}: {args.exc_value}")

    sys.excepthook = excepthook
    threading.excepthook = thread_hook


def run_app(screenshot: Path | None = None) -> int:
    from PySide6.QtCore import QTimer, Slot
    from PySide6.QtWidgets import QApplication

    from app.settings.store import SettingsStore
    from app.ui.conversation_controller import ConversationController
    from app.ui.main_window import MainWindow

    if screenshot is not None:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("ContextSpan")
    if screenshot is not None:
        return _screenshot(app, screenshot)
    store = SettingsStore()
    settings, notice = store.load()

    class Window(MainWindow):
        _pending_error = ""

        @Slot()
        def _flush_error(self) -> None:
            self.show_error(self._pending_error)

    controller = ConversationController(_live_audio_factory)
    window = Window(controller, settings)
    _install_error_hooks(window)
    controller.notice(
        f"Press Start (Ctrl+Enter) to talk to {settings.speech.model_id}. Type below to ask "
        "the assistant, or paste or drop a text to have it read. Settings choose the model, "
        "the audio devices and the LLM.", "info")
    if notice:
        controller.notice(notice, "warning")

    def open_settings() -> None:
        from app.audio.devices import list_devices
        from app.audio.test_tone import MicLevelMeter, play_test_tone_blocking
        from app.settings.settings_dialog import SettingsDialog

        dialog = SettingsDialog(window.settings, parent=window, list_devices=list_devices,
                                mic_level_probe=MicLevelMeter,
                                play_test_tone=play_test_tone_blocking)
        if dialog.exec():
            window.settings = dialog.settings()
            try:
                store.save(window.settings)
            except OSError as exc:
                window.show_error(f"Settings could not be saved: {exc}")

    window.settings_requested.connect(open_settings)
    window.show()
    QTimer.singleShot(0, lambda: _first_run_check(window))
    return app.exec()


def _first_run_check(window) -> None:
    """When the chosen checkpoint is not on disk, offer download / folder / tiny model."""
    from app.checkpoints.catalog import get_manifest
    from app.checkpoints.loader import CheckpointMissingError, checkpoint_info

    speech = window.settings.speech
    try:
        manifest = get_manifest(speech.model_id)
    except ValueError as exc:
        window.show_error(f"Settings name an unknown model: {exc}")
        return
    if manifest.source_kind == "built":
        return
    folder = Path(speech.custom_folder) if speech.custom_folder else None
    try:
        checkpoint_info(manifest, folder)
        return
    except CheckpointMissingError:
        pass
    from app.ui.download_dialog import ModelMissingDialog

    dialog = ModelMissingDialog(manifest, parent=window)
    if not dialog.exec():
        window.show_error(f"{manifest.display_name} is not on disk: open Settings to pick "
                          "another model, or start again to download it.")
        return
    choice, path = dialog.chosen()
    if choice == "tiny":
        window.settings = replace(window.settings,
                                  speech=replace(speech, model_id="tiny", custom_folder=None))
    elif choice == "folder":
        window.settings = replace(window.settings, speech=replace(speech,
                                                                  custom_folder=str(path)))


def _demo_question() -> np.ndarray:
    """Two seconds of a voiced tone, then quiet: the screenshot's 'microphone'."""
    t = np.arange(48000) / 24000
    tone = 0.1 * np.sin(2 * np.pi * 160 * t) * (t < 1.5)
    return np.concatenate([tone, np.zeros(24000)]).astype(np.float32)


def _screenshot(app, path: Path) -> int:
    """The real app on the tiny model with a short scripted conversation, to a PNG."""
    from app.audio.file_source import FileAudioSource
    from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
    from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings
    from app.ui.conversation_controller import ConversationController
    from app.ui.main_window import MainWindow

    answer = ("Canberra is the capital of Australia. It was chosen in 1908 as a compromise "
              "between Sydney and Melbourne.")
    with OllamaStandIn(script=[ScriptedReply(content=answer)],
                       models=("qwen3:4b",)) as standin:
        settings = AppSettings(
            speech=SpeechModelSettings(model_id="tiny", device="cpu"),
            llm=LlmSettings(backend="ollama", host=standin.url, model="qwen3:4b",
                            tools_enabled=False, stt_model="none"),
        )
        controller = ConversationController(lambda _s: FileAudioSource(_demo_question()))
        window = MainWindow(controller, settings)
        window.resize(1000, 680)
        window.show()
        controller.start(settings)

        def entries(kind: str) -> list:
            return [e for e in window.transcript.entries() if e.kind == kind]

        def wait(condition, seconds: float = 120.0) -> bool:
            deadline = time.monotonic() + seconds
            while not condition() and time.monotonic() < deadline:
                app.processEvents()
                time.sleep(0.02)
            return condition()

        ok = wait(lambda: controller.state == "running")
        ok = ok and wait(lambda: sum(len(e.text) for e in entries("assistant")) > 30)
        controller.send_text("What is the capital of Australia?")
        ok = ok and wait(lambda: [e for e in entries("span") if e.final])
        ok = ok and wait(lambda: len(entries("assistant")[-1].text) > 60, 20)
        controller.inject_text("Meeting notes: lunch with Ana on Friday at 12:30, "
                               "at the Italian place on King Street.", "dropped file: notes.txt")
        ok = ok and wait(lambda: len([e for e in entries("span") if e.final]) >= 2)
        last = window.transcript.entries
        ok = ok and wait(lambda: last()[-1].kind == "assistant" and len(last()[-1].text) > 40,
                         20)
        app.processEvents()
        image = window.grab()
        controller.shutdown()
    if not ok:
        print("error: the scripted conversation did not complete in time", file=sys.stderr)
        return 1
    path.parent.mkdir(parents=True, exist_ok=True)
    if not image.save(str(path)):
        print(f"error: could not write {path}", file=sys.stderr)
        return 1
    print(f"saved {path}")
    return 0
