"""Start the desktop app: `python main.py` (or `python main.py --screenshot FILE.png`)."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Protocol

import numpy as np
from PySide6.QtCore import QObject, QTimer, Slot

from app.conversation.transcript.entries import TranscriptEntry
from app.install_kind import engine_installed
from app.llm_backends import OLLAMA

log = logging.getLogger(__name__)


class ModelDialog(Protocol):
    """What the app asks of the missing-model dialog (download_dialog.ModelMissingDialog)."""

    def exec(self) -> int: ...
    def chosen(self) -> tuple[str, Path | None] | None: ...


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

    from app.log_setup import log_path

    log = logging.getLogger("app.ui")

    def excepthook(kind, value, tb):
        log.error("uncaught exception", exc_info=(kind, value, tb))  # the traceback: the log
        show(f"Unexpected error: {kind.__name__}: {value} (details: {log_path()})")

    def thread_hook(args):
        name = args.thread.name if args.thread else "a thread"
        log.error("uncaught exception in %s", name,
                  exc_info=(args.exc_type, args.exc_value, args.exc_traceback))
        show(f"Unexpected error in {name}: {args.exc_type.__name__}: {args.exc_value} "
             f"(details: {log_path()})")

    sys.excepthook = excepthook
    threading.excepthook = thread_hook


CLOSE_DEADLINE_S = 2.0  # from closing the window to the process's exit, at most
_EXIT_MARGIN_S = 0.1  # for flushing the logs and ending the process


def run_app(screenshot: Path | None = None,
            script: Callable[[object, object], None] | None = None) -> int:
    """The desktop app. `script(window, controller)`, when given, runs once the window is
    up (a test driver scripts a session with it)."""
    from PySide6.QtWidgets import QApplication

    from app.settings.store import SettingsStore
    from app.ui.conversation_controller import ConversationController
    from app.ui.main_window import MainWindow

    if screenshot is not None:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from app.ui.qt_messages import install_qt_message_handler

    install_qt_message_handler()  # Qt's warnings (size hints...) go to the log, not the terminal
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("ContextSpan")
    from app.ui.gui_thread_gc import GuiThreadCollector

    collector = GuiThreadCollector(app)
    collector.start()  # background threads never destroy our widgets
    if screenshot is not None:
        return _screenshot_in_throwaway_dirs(app, screenshot)
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
    desktop = DesktopApp(window, controller, store)
    window.show()
    QTimer.singleShot(0, partial(_started, desktop, notice, collector))
    if script is not None:
        QTimer.singleShot(0, lambda: script(window, controller))
    return desktop.finish(app.exec())


def _started(desktop: DesktopApp, notice: str | None, collector) -> None:
    """The window is up: the first run's questions, then start-up is over (gc.freeze)."""
    desktop.first_run(notice)
    collector.freeze_after_start_up()


class DesktopApp(QObject):
    """What the app does around its window: the first run, the checks before a conversation
    starts (are the models on disk? offer the download), the settings dialog and applying
    its changes, and the exit deadline after the window is closed.

    Ownership runs one way, so that reference counting frees all three when the app closes:
    the window holds it (its Qt child), it holds the controller, and the controller reaches
    it only by signals and a weakly held preflight check.

    A QObject with declared slots: it hears the controller's state from the session's
    thread, and PySide can crash delivering a cross-thread signal to a plain method."""

    def __init__(self, window, controller, store, *,
                 model_dialog: Callable[..., ModelDialog] | None = None) -> None:
        from app.ui.download_dialog import ModelMissingDialog

        super().__init__(window)  # its parent: `window` below, held by no reference of ours
        self.controller = controller
        self.store = store
        self.model_dialog: Callable[..., ModelDialog] = model_dialog or ModelMissingDialog
        self._welcome: TranscriptEntry | None = None  # says which model Start talks to
        controller.preflight = self.preflight  # held weakly (we own the controller)
        controller.state_changed.connect(self._on_state)
        window.settings_requested.connect(self.open_settings)

    @property
    def window(self):
        """The app's window (our parent: a reference of ours would make it cyclic garbage,
        freed by the collector instead of when it closes)."""
        return self.parent()

    # ---- settings ---------------------------------------------------------------------------

    def use_settings(self, settings) -> None:
        """Settings the user chose: in the window, and saved at once (the next launch too)."""
        self.window.settings = settings
        try:
            self.store.save(settings)
        except OSError as exc:
            self.window.show_error(f"Settings could not be saved: {exc}")
        self._update_welcome()

    @Slot()
    def open_settings(self) -> None:
        from app.audio.devices import list_devices
        from app.audio.test_tone import MicLevelMeter, play_test_tone_blocking
        from app.engine.device import survey_devices
        from app.ui.settings.dialog import SettingsDialog

        dialog = SettingsDialog(self.window.settings, parent=self.window,
                                list_devices=list_devices, mic_level_probe=MicLevelMeter,
                                play_test_tone=play_test_tone_blocking,
                                conversation_running=self.controller.running,
                                device_survey=survey_devices)
        try:
            if dialog.exec():
                self.settings_accepted(dialog.settings(), refused=dialog.saved_refused)
        finally:
            # Built afresh at each opening (it shows the settings of now, its tabs start
            # their jobs anew) and deleted once closed, on this thread.
            dialog.deleteLater()

    def settings_accepted(self, settings, refused: tuple[str, ...] = ()) -> None:
        """Saved; the running conversation applies what it can now, the window offers a
        restart for the rest. `refused`: what Test connection refused and the user saved
        anyway: kept for the next conversation, the running one left as it is (a working
        conversation is not stopped for one that cannot start)."""
        self.use_settings(settings)
        if refused and self.controller.running:
            self.window.restart_banner.hide()  # an earlier offer would restart with them
            self.controller.notice(
                f"Settings saved, not applied now: Test connection refused "
                f"{' and '.join(refused)}. The running conversation goes on as it was; the "
                "next one you start uses the saved settings.", "warning")
            return
        waiting = self.controller.apply_settings(settings)
        self.window.restart_banner.offer(waiting)

    # ---- models on disk -----------------------------------------------------------------------

    def first_run(self, notice: str | None = None) -> None:
        """The settings' notice first, then a model offered when the chosen one is not on
        disk, then the welcome (which names the model that will talk, after that choice).
        The offer's dialog covers the window, so it shows the notice too: a repaired
        settings file is why it may ask for a model the user never chose."""
        if notice:
            self.controller.notice(notice, "warning")
        self.offer_speech_model(notice)
        self._welcome = self.controller.notice(welcome_text(self.window.settings), "info")

    def _update_welcome(self) -> None:
        """The welcome names the model Start talks to: another one chosen before the
        conversation has begun rewrites it where it stands. Once something was said it is
        history (a restart's marker names the new model), and after "New conversation" it
        is gone."""
        welcome = self._welcome
        if welcome is None:
            return
        text = welcome_text(self.window.settings)
        entries = self.window.transcript.entries()
        if text == welcome.text or any(e.kind != "notice" for e in entries):
            return
        if not any(e.entry_id == welcome.entry_id and e.text == welcome.text
                   for e in entries if e.kind == "notice"):
            return
        self._welcome = replace(welcome, text=text)
        self.controller.entry.emit(self._welcome)

    def offer_speech_model(self, notice: str | None = None) -> bool:
        """True when the chosen speech model can be loaded (on disk, built on demand, or
        just got by the dialog); False after showing why not. `notice`: shown in the
        dialog, when there is one."""
        if self.window.settings.engine.mode == "server":
            return True  # the server's model talks; nothing of it is needed here
        if not engine_installed():
            return True  # the thin client: the session says it needs the full install
        from app.checkpoints.catalog import get_manifest
        from app.checkpoints.loader import CheckpointMissingError, checkpoint_info

        speech = self.window.settings.speech
        try:
            manifest = get_manifest(speech.model_id)
        except ValueError as exc:
            self.window.show_error(f"Settings name an unknown model: {exc}")
            return False
        if manifest.source_kind == "built":
            return True
        folder = Path(speech.custom_folder) if speech.custom_folder else None
        try:
            checkpoint_info(manifest, folder)
            return True
        except CheckpointMissingError:
            pass
        shown = {"notice": notice} if notice else {}
        dialog = self.model_dialog(manifest, parent=self.window, folder=folder,
                                   plan_settings=self.window.settings, **shown)
        try:
            chosen = dialog.chosen() if dialog.exec() else None  # accepted: a choice was made
        finally:
            _delete_later(dialog)
        if chosen is None:
            self.window.show_error(f"{manifest.display_name} is not on disk: open Settings to "
                                   "pick another model, or press Start again to download it.")
            return False
        choice, path = chosen
        if choice == "server":  # the speech model on the server the settings name
            engine = replace(self.window.settings.engine, mode="server")
            self.use_settings(replace(self.window.settings, engine=engine))
            return True
        if choice == "tiny":
            speech = replace(speech, model_id="tiny", custom_folder=None)
        elif choice == "folder":
            speech = replace(speech, custom_folder=str(path))
        self.use_settings(replace(self.window.settings, speech=speech))
        return True

    def offer_speech_recognition(self) -> None:
        """Speech recognition that is not on disk: the same dialog (download, or go on with
        typed questions only). Closing it starts without recognition this time."""
        from app.asr.stt_catalog import get_stt_manifest, stt_checkpoint_info
        from app.checkpoints.catalog import CatalogError
        from app.checkpoints.loader import CheckpointMissingError

        llm, engine = self.window.settings.llm, self.window.settings.engine
        if llm.backend == "none" or llm.stt_model == "none":
            return
        if engine.mode == "server" and engine.asr_on_server:
            return  # the server recognises the words: nothing of it is needed here
        if not engine_installed():
            return  # the thin client: the session says recognition needs the full install
        try:
            manifest = get_stt_manifest(llm.stt_model)
        except CatalogError:
            return  # the session says so in the transcript
        if manifest.source_kind == "built":
            return
        try:
            stt_checkpoint_info(manifest, manifest.default_folder())
            return
        except CheckpointMissingError:
            pass
        dialog = self.model_dialog(manifest, parent=self.window)
        try:
            chosen = dialog.chosen() if dialog.exec() else None
        finally:
            _delete_later(dialog)
        if chosen is not None and chosen[0] == "none":
            self.use_settings(replace(self.window.settings,
                                      llm=replace(llm, stt_model="none")))

    def preflight(self, _settings):
        """Before a conversation starts: the models it needs, offered if missing."""
        if not self.offer_speech_model():
            return None
        self.offer_speech_recognition()
        return self.window.settings

    @Slot(str, str)
    def _on_state(self, state: str, _detail: str) -> None:
        if state == "model_missing":  # files went missing after the check: offer them again
            QTimer.singleShot(0, self._missing_after_start)

    @Slot()
    def _missing_after_start(self) -> None:
        if self.offer_speech_model():
            self.controller.start(self.window.settings)

    # ---- closing ------------------------------------------------------------------------------

    def finish(self, code: int) -> int:
        """After the window closed: `wind_down`, then end the process. It ends with os._exit
        either way: everything the app keeps is already saved, and the interpreter's own
        teardown (torch, Qt, PortAudio) takes about a second more and saves nothing."""
        self.wind_down()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def wind_down(self) -> None:
        """After the window closed (and the app's aboutToQuit, which ends the autosave): wait
        for the conversation's threads until the deadline; past it, say what still ran. All
        of closing but the process's exit (a test closes the app this way, and lives on)."""
        closed_at = self.window.closed_at or time.monotonic()
        self.controller.begin_shutdown()
        left = CLOSE_DEADLINE_S - _EXIT_MARGIN_S - (time.monotonic() - closed_at)
        if not self.controller.wait_shutdown(left):
            log.warning("closing: still running after %.1f s (%s); exiting anyway",
                        CLOSE_DEADLINE_S, ", ".join(self.controller.live_threads()) or "?")


def _delete_later(dialog: object) -> None:
    """A closed dialog dies on the GUI thread (a caller's own stand-in may be no QObject)."""
    if isinstance(dialog, QObject):
        dialog.deleteLater()


def welcome_text(settings) -> str:
    """The first notice: what Start does (with the model it talks to) and where to type."""
    from app.checkpoints.catalog import get_manifest

    model_id = settings.speech.model_id
    try:
        name = get_manifest(model_id).display_name
    except ValueError:
        name = model_id
    engine = settings.engine
    if engine.mode == "server":  # the server's model talks, not the local choice
        name = f"the speech model on {engine.server_url or 'the server'}"
    return (f"Press Start (Ctrl+Enter) to talk to {name}. Type below to ask the assistant, or "
            "paste or drop a text to have it read. Settings choose the model, the audio "
            "devices and the LLM.")


def _demo_question() -> np.ndarray:
    """Two seconds of a voiced tone, then quiet: the screenshot's 'microphone'."""
    from app.frames import SAMPLE_RATE

    t = np.arange(2 * SAMPLE_RATE) / SAMPLE_RATE
    tone = 0.1 * np.sin(2 * np.pi * 160 * t) * (t < 1.5)
    return np.concatenate([tone, np.zeros(SAMPLE_RATE)]).astype(np.float32)


def _screenshot_in_throwaway_dirs(app, path: Path) -> int:
    """The screenshot in a throw-away data and config dir: its demo conversation never
    joins the user's list, and the window shows none of the user's conversations, docks or
    zoom. The tiny model is read from the user's checkpoints when it is built there (it is
    only read), else built in the throw-away dir."""
    from app.checkpoints.catalog import get_manifest
    from app.checkpoints.loader import CheckpointMissingError, checkpoint_info
    from app.ui.throwaway_dirs import throwaway_app_dirs

    tiny = get_manifest("tiny").default_folder()  # the user's, before the dirs change
    try:
        checkpoint_info(get_manifest("tiny"), tiny)
        built: Path | None = tiny
    except CheckpointMissingError:
        built = None
    with throwaway_app_dirs(prefix="contextspan-screenshot-") as scratch:
        code = _screenshot(app, path, built)
    if code == 0:
        print(f"saved {path} (made in a throw-away data and config dir, {scratch}, "
              "now removed)")
    return code


def _screenshot(app, path: Path, tiny_folder: Path | None = None) -> int:
    """The real app on the tiny model with a short scripted conversation, to a PNG.
    `tiny_folder`: where the tiny model is built (None: its folder in the data dir)."""
    from app.audio.file_source import FileAudioSource
    from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
    from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings
    from app.ui.conversation_controller import ConversationController
    from app.ui.main_window import MainWindow

    # No LLM runs here: the answer is the stand-in server's scripted text, and the model
    # name the transcript shows says so.
    answer = ("Canberra is the capital of Australia. It was chosen in 1908 as a compromise "
              "between Sydney and Melbourne.")
    scripted = "scripted-answer"
    with OllamaStandIn(script=[ScriptedReply(content=answer)], models=(scripted,)) as standin:
        settings = AppSettings(
            speech=SpeechModelSettings(model_id="tiny", device="cpu",
                                       custom_folder=str(tiny_folder) if tiny_folder else None),
            llm=LlmSettings(backend=OLLAMA, host=standin.url, model=scripted,
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
        window.features.keeper.shutdown()  # its last write lands before the dir goes
        window.features.state.sync()
    if not ok:
        print("error: the scripted conversation did not complete in time", file=sys.stderr)
        return 1
    path.parent.mkdir(parents=True, exist_ok=True)
    if not image.save(str(path)):
        print(f"error: could not write {path}", file=sys.stderr)
        return 1
    return 0
