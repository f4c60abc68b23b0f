"""The settings dialog: speech model, audio devices, and the LLM side, from one AppSettings.

Everything slow happens off the GUI thread: the LLM connection test (network), listing a
persona checkpoint's voices (may unpack an archive) and the test tone (plays for a while)
run on the Qt thread pool and report back by a queued signal. A result that arrives after
what it was about has changed (another host, another model) is dropped, so the dialog never
shows an answer to a question the user no longer asks.

The audio side is injected (`list_devices`, `mic_level_probe`, `play_test_tone`), so the
dialog does not depend on PortAudio and tests can drive it with plain functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from PySide6.QtCore import QObject, QThreadPool, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QRadioButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.checkpoints.catalog import CatalogError, Manifest, load_catalog
from app.llm.backend import BackendHealth, LLMBackend, LLMError
from app.llm.ollama_backend import DEFAULT_HOST as OLLAMA_DEFAULT_HOST
from app.llm.ollama_backend import OllamaBackend, OllamaSettings
from app.llm.openai_compat_backend import DEFAULT_BASE_URL as OPENAI_DEFAULT_BASE_URL
from app.llm.openai_compat_backend import OpenAICompatBackend, OpenAICompatSettings
from app.remote.probe import probe_server
from app.settings.schema import (
    AppSettings,
    AudioSettings,
    LlmSettings,
    SpeechModelSettings,
)
from app.tools.default_tools import ALL_TOOLS
from app.ui.settings.engine_box import ProbeServer, SpeechEngineBox

DEVICES = ("auto", "cuda", "mps", "cpu")
DTYPES = ("auto", "bfloat16", "float16", "float32")
BACKENDS = (
    ("ollama", "Ollama"),
    ("openai", "OpenAI-compatible server (llama.cpp, LM Studio, vLLM)"),
    ("none", "None (the speech model talks on its own)"),
)
DEFAULT_HOSTS = {"ollama": OLLAMA_DEFAULT_HOST, "openai": OPENAI_DEFAULT_BASE_URL}
TOOL_LABELS = {
    "calculator": "Calculator",
    "clock": "Clock and date",
    "local_search": "Search my folders",
    "web_fetch": "Read web pages",
    "web_search": "Web search",
}
SYSTEM_DEFAULT = "System default"
STT_NONE = ("none", "None (typed questions only)")
RESTART_NOTE = (
    "A conversation is running. The assistant (LLM, server, model, timeout, tools and "
    "folders), the echo mode and the voice levelling apply at once; the rest applies after a "
    "restart of the conversation, which the window offers after OK (the transcript stays)."
)
RESTART_HINTS = (  # per tab, in tab order
    "Everything on this tab applies after a restart of the conversation.",
    "The microphone and speaker apply after a restart; echo and voice levelling apply at once.",
    "Applies at once, except speech recognition (after a restart).",
)
METER_INTERVAL_MS = 50
METER_FLOOR_DB = -60.0


class LevelMeter(Protocol):
    """A running microphone capture that the dialog polls for its level.

    `level()` is called on the GUI thread every 50 ms and must not block: it returns the
    peak amplitude (linear, 0.0 to 1.0) seen since the previous call. `close()` stops the
    capture; the dialog calls it when the test stops or the dialog closes.
    """

    def level(self) -> float: ...

    def close(self) -> None: ...


# Opens a capture on the named input device (None: the system default) and returns at once;
# raises (any exception, its text is shown) when the device cannot be opened.
MicLevelProbe = Callable[[str | None], LevelMeter]
# (input device names, output device names), as the audio layer names them.
ListDevices = Callable[[], tuple[Sequence[str], Sequence[str]]]
# Plays a short tone on the named output device (None: default). Runs off the GUI thread, so
# it may block until the tone is over; raises when the device cannot play.
PlayTestTone = Callable[[str | None], None]
# A backend for the connection test, built from the form's LLM settings and a timeout.
BackendFactory = Callable[[LlmSettings, float], LLMBackend]
# A persona checkpoint's voice prompt names (app.engine.conversation_start.list_voices).
ListVoices = Callable[[Manifest, Path], list[str]]


def make_backend(llm: LlmSettings, timeout_s: float) -> LLMBackend:
    """The backend the app would use, with a short timeout for a connection test."""
    connect = min(3.0, timeout_s)
    if llm.backend == "ollama":
        return OllamaBackend(
            OllamaSettings(
                host=llm.host, model=llm.model, timeout_s=timeout_s, connect_timeout_s=connect
            )
        )
    if llm.backend == "openai":
        return OpenAICompatBackend(
            OpenAICompatSettings(
                base_url=llm.host, model=llm.model, timeout_s=timeout_s, connect_timeout_s=connect
            )
        )
    raise ValueError(f"no backend to test for {llm.backend!r}")


def check_connection(factory: BackendFactory, llm: LlmSettings, timeout_s: float) -> BackendHealth:
    """Health of the server, with its model list. With no model chosen yet, a reachable
    server is a success: the point is to fill the list to choose from."""
    backend = factory(llm, timeout_s)
    try:
        if not llm.model:
            models = tuple(backend.list_models())
            return BackendHealth(True, f"Connected: {len(models)} model(s) available.", models)
        return backend.health()
    finally:
        close = getattr(backend, "close", None)
        if callable(close):
            close()


def list_persona_voices(manifest: Manifest, folder: Path) -> list[str]:
    # Imported here: conversation_start pulls in torch and moshi, which the dialog itself
    # does not need (the app has them loaded by the time the dialog opens).
    from app.engine.conversation_start import list_voices

    return list_voices(manifest.conversation_start, folder)


def _stt_models() -> dict[str, str]:
    from app.asr.stt_catalog import load_stt_catalog  # torch again: see list_persona_voices

    return {m.id: m.display_name for m in load_stt_catalog().values()}


class _JobSignals(QObject):
    """Carries a background job's result to the GUI thread (queued: it lives there).

    It has no parent, so a job finishing after the dialog is gone emits into a live object
    whose connection Qt has already dropped with the dialog."""

    finished = Signal(str, int, object)  # job kind, token, result value or the exception


class SettingsDialog(QDialog):
    """Edits a copy of AppSettings; `settings()` returns the edited one (Ok or not)."""

    #: The connection test's backend timeout, and the extra wait before the dialog gives up
    #: on an answer (the backend's own timeouts should have fired by then).
    connection_timeout_s: float = 8.0
    connection_grace_s: float = 2.0

    def __init__(
        self,
        settings: AppSettings,
        parent: QWidget | None = None,
        *,
        catalog: Mapping[str, Manifest] | None = None,
        stt_models: Mapping[str, str] | None = None,
        list_devices: ListDevices | None = None,
        mic_level_probe: MicLevelProbe | None = None,
        play_test_tone: PlayTestTone | None = None,
        backend_factory: BackendFactory = make_backend,
        list_voices: ListVoices = list_persona_voices,
        server_probe: ProbeServer = probe_server,
        conversation_running: bool = False,
    ) -> None:
        """`conversation_running`: opened during a conversation, the dialog says which
        settings apply at once and which after a restart of the conversation."""
        super().__init__(parent)
        self.setWindowTitle("ContextSpan settings")
        self.setMinimumWidth(600)
        self._initial = settings
        self._list_devices = list_devices
        self._mic_level_probe = mic_level_probe
        self._play_test_tone = play_test_tone
        self._backend_factory = backend_factory
        self._list_voices = list_voices
        self._voice: str | None = settings.speech.voice
        self._meter: LevelMeter | None = None
        self._tokens: dict[str, int] = {"connection": 0, "voices": 0, "tone": 0}
        self._connection_pending = False
        self._focus_parked = False
        self._watchdog = QTimer(self)  # the connection test's own deadline
        self._watchdog.setSingleShot(True)
        self._watchdog.timeout.connect(self._connection_timed_out)
        self._watchdog_token = 0
        self._jobs = _JobSignals()
        self._jobs.finished.connect(self._on_job_finished)

        self._catalog_error: str | None = None
        if catalog is None:
            try:
                catalog = load_catalog()
            except CatalogError as exc:
                catalog, self._catalog_error = {}, str(exc)
        self._catalog = dict(catalog)
        if stt_models is None:
            try:
                stt_models = _stt_models()
            except CatalogError:
                stt_models = {}
        self._stt_models = dict(stt_models)

        tabs = QTabWidget()
        tabs.addTab(self._build_speech_tab(settings.speech), "Speech model")
        tabs.addTab(self._build_audio_tab(settings.audio), "Audio")
        tabs.addTab(self._build_llm_tab(settings.llm), "Assistant (LLM)")
        # Where the speech model runs: on top of its tab; the model's own fields are this
        # computer's only.
        self.engine_box = SpeechEngineBox(settings.engine, probe=server_probe)
        self.engine_box.mode_changed.connect(self._engine_mode_changed)
        tabs.widget(0).layout().insertWidget(0, self.engine_box)
        self._engine_mode_changed(self.engine_box.mode)
        self.tabs = tabs
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        self.restart_note = QLabel(RESTART_NOTE)
        self.restart_note.setWordWrap(True)
        self.restart_note.setVisible(conversation_running)
        layout.addWidget(self.restart_note)
        layout.addWidget(tabs)
        layout.addWidget(buttons)
        self._restart_hints: list[QLabel] = []
        for tab in range(tabs.count()):
            hint = _hint(RESTART_HINTS[tab])
            hint.setVisible(conversation_running)
            tabs.widget(tab).layout().insertWidget(0, hint)
            self._restart_hints.append(hint)

        self._refresh_persona()
        self._backend_changed()

    # -- the result ------------------------------------------------------------------------

    def settings(self) -> AppSettings:
        """The settings as the form shows them now."""
        role = self.role_edit.toPlainText()
        speech = SpeechModelSettings(
            model_id=self.model_combo.currentData() or self._initial.speech.model_id,
            custom_folder=self.folder_edit.text().strip() or None,
            device=self.device_combo.currentText().strip() or "auto",
            dtype=self.dtype_combo.currentText(),
            quantize=self._initial.speech.quantize,  # kept as saved, not used (see the tab)
            voice=self._voice,
            role=role if role.strip() else None,  # empty: the checkpoint's default role
            user_name=self.user_name_edit.text().strip() or None,
            user_city=self.user_city_edit.text().strip() or None,
        )
        audio = AudioSettings(
            input_device=self.input_combo.currentData(),
            output_device=self.output_combo.currentData(),
            echo_mode="headset" if self.headset_radio.isChecked() else "cancel",
            level_voice=self.level_check.isChecked(),
        )
        llm = LlmSettings(
            backend=self.backend_combo.currentData(),
            host=self.host_edit.text().strip(),
            model=self.llm_model_combo.currentText().strip(),
            timeout_s=float(self.timeout_spin.value()),
            tools_enabled=self.tools_group.isChecked(),
            tools=self._checked_tools(),
            search_folders=tuple(
                self.folders_list.item(i).text() for i in range(self.folders_list.count())
            ),
            stt_model=self.stt_combo.currentData() or self._initial.llm.stt_model,
        )
        return replace(self._initial, speech=speech, audio=audio, llm=llm,
                       engine=self.engine_box.settings(self._initial.engine))

    def _engine_mode_changed(self, mode: str) -> None:
        """On a server, the server's model talks: the local model's choices do not apply."""
        local = mode == "local"
        for widget in (self.model_combo, self.folder_edit, self.folder_button,
                       self.device_combo, self.dtype_combo):
            widget.setEnabled(local)

    def done(self, result: int) -> None:
        """Every way out (Ok, Cancel, Esc, the close box) stops a running microphone test."""
        self._stop_mic_test()
        super().done(result)

    # -- speech model ----------------------------------------------------------------------

    def _build_speech_tab(self, speech: SpeechModelSettings) -> QWidget:
        page, form = _form_page()

        self.model_combo = QComboBox()
        for model_id, manifest in self._catalog.items():
            self.model_combo.addItem(manifest.display_name, model_id)
        if self.model_combo.findData(speech.model_id) < 0:
            self.model_combo.addItem(f"{speech.model_id} (not in the catalog)", speech.model_id)
        self.model_combo.setCurrentIndex(self.model_combo.findData(speech.model_id))
        self.model_combo.currentIndexChanged.connect(self._refresh_persona)
        form.addRow("Model:", self.model_combo)
        if self._catalog_error:
            form.addRow("", _hint(f"The model catalog could not be read: {self._catalog_error}"))

        self.folder_edit = QLineEdit(speech.custom_folder or "")
        self.folder_edit.setPlaceholderText("Default: downloaded or built by ContextSpan")
        self.folder_edit.editingFinished.connect(self._refresh_persona)
        self.folder_button = QPushButton("Custom folder…")
        self.folder_button.setToolTip("Use checkpoint files from a folder of your own")
        self.folder_button.clicked.connect(self._choose_model_folder)
        clear = QPushButton("Use default")
        clear.clicked.connect(self._clear_model_folder)
        row = QHBoxLayout()
        row.addWidget(self.folder_edit, 1)
        row.addWidget(self.folder_button)
        row.addWidget(clear)
        form.addRow("Files:", row)

        self.device_combo = QComboBox()
        self.device_combo.setEditable(True)  # "cuda:1" and the like are valid too
        self.device_combo.addItems(DEVICES)
        self.device_combo.setCurrentText(speech.device)
        form.addRow("Device:", self.device_combo)

        self.dtype_combo = QComboBox()
        self.dtype_combo.addItems(DTYPES)
        if self.dtype_combo.findText(speech.dtype) < 0:
            self.dtype_combo.addItem(speech.dtype)
        self.dtype_combo.setCurrentText(speech.dtype)
        self.dtype_combo.setToolTip("auto: the precision the checkpoint was published in")
        form.addRow("Precision:", self.dtype_combo)

        # No "8-bit weights" choice: moshi's int8 path (bitsandbytes, CUDA only) has not been
        # verified on a GPU here, and the setting was never read. SpeechModelSettings keeps
        # its `quantize` field so older settings files load; it is ignored.

        self.voice_combo = QComboBox()
        self.voice_combo.activated.connect(self._voice_chosen)
        self.voice_hint = _hint("")
        form.addRow("Voice:", self.voice_combo)
        form.addRow("", self.voice_hint)

        self.role_edit = QPlainTextEdit(speech.role or "")
        self.role_edit.setFixedHeight(80)
        form.addRow("Role prompt:", self.role_edit)

        self.user_name_edit = QLineEdit(speech.user_name or "")
        self.user_name_edit.setPlaceholderText("Optional")
        self.user_city_edit = QLineEdit(speech.user_city or "")
        self.user_city_edit.setPlaceholderText("Optional")
        form.addRow("Your name:", self.user_name_edit)
        form.addRow("Your city:", self.user_city_edit)
        self.profile_hint = _hint("")
        form.addRow("", self.profile_hint)
        return page

    def _current_manifest(self) -> Manifest | None:
        return self._catalog.get(self.model_combo.currentData())

    def _checkpoint_folder(self, manifest: Manifest) -> Path:
        custom = self.folder_edit.text().strip()
        return Path(custom).expanduser() if custom else manifest.default_folder()

    def _choose_model_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(
            self, "Choose a checkpoint folder", self.folder_edit.text().strip()
        )
        if folder:
            self.folder_edit.setText(folder)
            self._refresh_persona()

    def _clear_model_folder(self) -> None:
        self.folder_edit.clear()
        self._refresh_persona()

    def _refresh_persona(self) -> None:
        """Voice and role are a persona checkpoint's (PersonaPlex); voices come from its
        folder, so the voice list needs the checkpoint on disk."""
        self._tokens["voices"] += 1  # any listing still running is for another model
        manifest = self._current_manifest()
        persona = manifest is not None and manifest.conversation_start.kind == "persona_prompt"
        self.role_edit.setEnabled(persona)
        profile = persona and manifest is not None and (
            manifest.conversation_start.profile_sentences)
        self.user_name_edit.setEnabled(bool(profile))
        self.user_city_edit.setEnabled(bool(profile))
        self.profile_hint.setText(
            "The model was trained to hear your name and city at the start of a conversation."
            if profile else "Your name and city apply to checkpoints trained on them "
            "(Context Spanning 7B).")
        self.voice_combo.setEnabled(False)
        self._fill_voices([], listed=False)
        if manifest is None or not persona:
            self.role_edit.setPlaceholderText("")
            self.voice_hint.setText(
                "Voice and role prompts apply to persona checkpoints (PersonaPlex) only."
            )
            return
        default_role = manifest.conversation_start.default_role
        self.role_edit.setPlaceholderText(f"Default: {default_role}" if default_role else "")
        folder = self._checkpoint_folder(manifest)
        if not folder.is_dir():
            self.voice_hint.setText(
                f"The checkpoint is not on disk yet ({folder}); download or build it to "
                "choose a voice."
            )
            return
        self.voice_hint.setText("Looking for voices…")
        list_voices = self._list_voices
        self._start_job("voices", lambda: list_voices(manifest, folder))

    def _fill_voices(self, names: Sequence[str], listed: bool = True) -> None:
        manifest = self._current_manifest()
        default = manifest.conversation_start.default_voice if manifest else None
        self.voice_combo.clear()
        self.voice_combo.addItem(f"Default ({default})" if default else "Default", None)
        for name in names:
            self.voice_combo.addItem(name, name)
        if self._voice and self.voice_combo.findData(self._voice) < 0:
            label = f"{self._voice} (not found)" if listed else self._voice
            self.voice_combo.addItem(label, self._voice)
        self.voice_combo.setCurrentIndex(max(0, self.voice_combo.findData(self._voice)))

    def _voices_listed(self, result: object) -> None:
        if isinstance(result, Exception):
            self.voice_hint.setText(f"The voices could not be listed: {result}")
            return
        names = list(result)  # type: ignore[call-overload]
        self._fill_voices(names)
        self.voice_combo.setEnabled(True)
        self.voice_hint.setText("" if names else "This checkpoint has no voice prompts.")

    def _voice_chosen(self, index: int) -> None:
        self._voice = self.voice_combo.itemData(index)

    # -- audio -----------------------------------------------------------------------------

    def _build_audio_tab(self, audio: AudioSettings) -> QWidget:
        page, form = _form_page()
        inputs: Sequence[str] = ()
        outputs: Sequence[str] = ()
        self.audio_status = _hint("")
        if self._list_devices is None:
            self.audio_status.setText("The audio device list is not available.")
        else:
            try:
                inputs, outputs = self._list_devices()
            except Exception as exc:
                self.audio_status.setText(f"The audio devices could not be listed: {exc}")
        self.input_combo = _device_combo(inputs, audio.input_device)
        self.output_combo = _device_combo(outputs, audio.output_device)
        self.input_combo.currentIndexChanged.connect(self._stop_mic_test)

        self.mic_button = QPushButton("Test microphone")
        self.mic_button.setEnabled(self._mic_level_probe is not None)
        if self._mic_level_probe is None:
            self.mic_button.setToolTip("The microphone test is not available here.")
        self.mic_button.clicked.connect(self._toggle_mic_test)
        self.mic_meter = QProgressBar()
        self.mic_meter.setRange(0, 100)
        self.mic_meter.setTextVisible(False)
        self.mic_meter.setFixedHeight(12)
        self._meter_timer = QTimer(self)
        self._meter_timer.setInterval(METER_INTERVAL_MS)
        self._meter_timer.timeout.connect(self._poll_meter)
        row = QHBoxLayout()
        row.addWidget(self.input_combo, 1)
        row.addWidget(self.mic_button)
        form.addRow("Microphone:", row)
        form.addRow("Level:", self.mic_meter)

        self.tone_button = QPushButton("Test speaker")
        self.tone_button.setEnabled(self._play_test_tone is not None)
        if self._play_test_tone is None:
            self.tone_button.setToolTip("The speaker test is not available here.")
        self.tone_button.clicked.connect(self._play_tone)
        row = QHBoxLayout()
        row.addWidget(self.output_combo, 1)
        row.addWidget(self.tone_button)
        form.addRow("Speaker:", row)

        self.cancel_radio = QRadioButton("Echo cancellation (open speakers)")
        self.headset_radio = QRadioButton("Headset (no echo cancellation)")
        group = QButtonGroup(page)
        group.addButton(self.cancel_radio)
        group.addButton(self.headset_radio)
        (self.headset_radio if audio.echo_mode == "headset" else self.cancel_radio).setChecked(True)
        box = QVBoxLayout()
        box.addWidget(self.cancel_radio)
        box.addWidget(self.headset_radio)
        form.addRow("Echo:", box)
        self.level_check = QCheckBox("Level my voice to -24 LUFS (noise gate, gain, limiter)")
        self.level_check.setToolTip(
            "The loudness the speech model was trained on; the recogniser hears the same "
            "levelled voice. Turn off to hear the microphone as it is.")
        self.level_check.setChecked(audio.level_voice)
        form.addRow("Voice level:", self.level_check)
        form.addRow("", self.audio_status)
        return page

    def _toggle_mic_test(self) -> None:
        if self._meter is not None:
            self._stop_mic_test()
            return
        if self._mic_level_probe is None:
            return
        try:
            self._meter = self._mic_level_probe(self.input_combo.currentData())
        except Exception as exc:
            self.audio_status.setText(f"The microphone could not be opened: {exc}")
            return
        self.audio_status.setText("Speak: the bar follows your voice.")
        self.mic_button.setText("Stop test")
        self._meter_timer.start()

    def _poll_meter(self) -> None:
        if self._meter is None:
            return
        try:
            level = float(self._meter.level())
        except Exception as exc:
            self._stop_mic_test()
            self.audio_status.setText(f"The microphone stopped: {exc}")
            return
        self.mic_meter.setValue(meter_percent(level))

    def _stop_mic_test(self) -> None:
        self._meter_timer.stop()
        meter, self._meter = self._meter, None
        self.mic_button.setText("Test microphone")
        self.mic_meter.setValue(0)
        if meter is not None:
            try:
                meter.close()
            except Exception as exc:
                self.audio_status.setText(f"The microphone test did not stop cleanly: {exc}")

    def _play_tone(self) -> None:
        play = self._play_test_tone
        if play is None:
            return
        device = self.output_combo.currentData()
        self.tone_button.setEnabled(False)
        self.audio_status.setText(f"Playing a test tone on {device or 'the default speaker'}…")
        self._start_job("tone", lambda: play(device))

    def _tone_played(self, result: object) -> None:
        self.tone_button.setEnabled(True)
        if isinstance(result, Exception):
            self.audio_status.setText(f"The test tone could not be played: {result}")
        else:
            self.audio_status.setText("Test tone played.")

    # -- LLM -------------------------------------------------------------------------------

    def _build_llm_tab(self, llm: LlmSettings) -> QWidget:
        page, form = _form_page()

        self.backend_combo = QComboBox()
        for key, label in BACKENDS:
            self.backend_combo.addItem(label, key)
        self.backend_combo.setCurrentIndex(max(0, self.backend_combo.findData(llm.backend)))
        self._backend = self.backend_combo.currentData()
        self.backend_combo.currentIndexChanged.connect(self._backend_changed)
        form.addRow("Backend:", self.backend_combo)

        self.host_edit = QLineEdit(llm.host)
        self.host_edit.textChanged.connect(self._connection_target_changed)
        form.addRow("Server:", self.host_edit)

        self.llm_model_combo = QComboBox()
        self.llm_model_combo.setEditable(True)
        self.llm_model_combo.setCurrentText(llm.model)
        self.llm_model_combo.lineEdit().setPlaceholderText("Test the connection to list models")
        self.test_button = QPushButton("Test connection")
        self.test_button.clicked.connect(self.test_connection)
        row = QHBoxLayout()
        row.addWidget(self.llm_model_combo, 1)
        row.addWidget(self.test_button)
        form.addRow("Model:", row)
        self.connection_status = QLabel("")
        self.connection_status.setWordWrap(True)
        form.addRow("", self.connection_status)

        self.timeout_spin = QDoubleSpinBox()
        self.timeout_spin.setRange(1.0, 600.0)
        self.timeout_spin.setDecimals(1)
        self.timeout_spin.setSuffix(" s")
        self.timeout_spin.setValue(llm.timeout_s)
        form.addRow("Reply timeout:", self.timeout_spin)

        self.tools_group = QGroupBox("Let the assistant use tools")
        self.tools_group.setCheckable(True)
        self.tools_group.setChecked(llm.tools_enabled)
        tools_layout = QVBoxLayout(self.tools_group)
        self.tool_checks: dict[str, QCheckBox] = {}
        for name in ALL_TOOLS:
            check = QCheckBox(TOOL_LABELS.get(name, name))
            check.setChecked(name in llm.tools)
            tools_layout.addWidget(check)
            self.tool_checks[name] = check
        tools_layout.addWidget(QLabel("Folders that “Search my folders” may read:"))
        self.folders_list = QListWidget()
        self.folders_list.addItems(list(llm.search_folders))
        self.folders_list.setMaximumHeight(90)
        tools_layout.addWidget(self.folders_list)
        add, remove = QPushButton("Add folder…"), QPushButton("Remove")
        add.clicked.connect(self._add_search_folder)
        remove.clicked.connect(self._remove_search_folder)
        self.add_folder_button, self.remove_folder_button = add, remove
        row = QHBoxLayout()
        row.addWidget(add)
        row.addWidget(remove)
        row.addStretch(1)
        tools_layout.addLayout(row)
        form.addRow(self.tools_group)

        self.stt_combo = QComboBox()
        for model_id, name in self._stt_models.items():
            self.stt_combo.addItem(name, model_id)
        if self.stt_combo.findData(STT_NONE[0]) < 0:
            self.stt_combo.addItem(STT_NONE[1], STT_NONE[0])
        if self.stt_combo.findData(llm.stt_model) < 0:
            self.stt_combo.addItem(f"{llm.stt_model} (not in the catalog)", llm.stt_model)
        self.stt_combo.setCurrentIndex(self.stt_combo.findData(llm.stt_model))
        form.addRow("Speech recognition:", self.stt_combo)
        return page

    def _checked_tools(self) -> tuple[str, ...]:
        """Checked tools, in the order the settings listed them, new ones after."""
        checked = [name for name, box in self.tool_checks.items() if box.isChecked()]
        ordered = [name for name in self._initial.llm.tools if name in checked]
        return tuple(ordered + [name for name in checked if name not in ordered])

    def _add_search_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose a folder the assistant may search")
        if folder:
            self.add_search_folder(folder)

    def add_search_folder(self, folder: str) -> None:
        existing = {self.folders_list.item(i).text() for i in range(self.folders_list.count())}
        if folder not in existing:
            self.folders_list.addItem(folder)

    def _remove_search_folder(self) -> None:
        for item in self.folders_list.selectedItems():
            self.folders_list.takeItem(self.folders_list.row(item))

    def _backend_changed(self) -> None:
        """A host left at one backend's default follows the switch to the other's default."""
        new = self.backend_combo.currentData()
        old, self._backend = self._backend, new
        if self.host_edit.text().strip() == DEFAULT_HOSTS.get(old) and new in DEFAULT_HOSTS:
            self.host_edit.setText(DEFAULT_HOSTS[new])
        enabled = new != "none"
        for widget in (self.host_edit, self.llm_model_combo, self.timeout_spin):
            widget.setEnabled(enabled)
        self._connection_target_changed()

    def _connection_target_changed(self) -> None:
        """Whatever test is running asked about another server: its answer is dropped."""
        self._tokens["connection"] += 1
        if self._connection_pending:
            self._connection_pending = False
            self._show_connection("Server changed; the earlier test was dropped.", None)
        self._connection_watchdog_stop()
        self.test_button.setEnabled(self.backend_combo.currentData() != "none")
        self.test_button.setText("Test connection")

    def test_connection(self) -> None:
        """Ask the server for its health and model list, off the GUI thread."""
        llm = self.settings().llm
        if llm.backend == "none":
            return
        timeout = self.connection_timeout_s
        factory = self._backend_factory
        self._connection_pending = True
        # Disabling the focused button would hand the focus to the next field (the timeout);
        # park it on the model list the test fills, and give it back when the test ends.
        self._focus_parked = self.test_button.hasFocus()
        if self._focus_parked:
            self.llm_model_combo.setFocus()
        self.test_button.setEnabled(False)
        self.test_button.setText("Testing…")
        self._show_connection(f"Connecting to {llm.host}…", None)
        self._watchdog_token = self._start_job(
            "connection", lambda: check_connection(factory, llm, timeout)
        )
        self._watchdog.start(int((timeout + self.connection_grace_s) * 1000))

    def _connection_watchdog_stop(self) -> None:
        self._watchdog.stop()

    def _test_button_back(self) -> None:
        self.test_button.setEnabled(True)
        self.test_button.setText("Test connection")
        parked, self._focus_parked = self._focus_parked, False
        if parked and self.llm_model_combo.hasFocus():  # the user has not moved on
            self.test_button.setFocus()

    @Slot()
    def _connection_timed_out(self) -> None:
        if self._watchdog_token != self._tokens["connection"] or not self._connection_pending:
            return
        seconds = self._watchdog.interval() / 1000
        self._tokens["connection"] += 1  # a late answer is dropped
        self._connection_pending = False
        self._test_button_back()
        host = self.host_edit.text().strip()
        self._show_connection(f"No answer from {host} within {seconds:g} s.", False)

    def _connection_tested(self, result: object) -> None:
        self._connection_pending = False
        self._connection_watchdog_stop()
        self._test_button_back()
        if isinstance(result, LLMError):
            self._show_connection(str(result), False)
            return
        if isinstance(result, Exception):
            self._show_connection(f"The test failed: {result}", False)
            return
        assert isinstance(result, BackendHealth)
        if result.models:
            current = self.llm_model_combo.currentText().strip()
            self.llm_model_combo.clear()
            self.llm_model_combo.addItems(list(result.models))
            self.llm_model_combo.setCurrentText(current or result.models[0])
        self._show_connection(result.message, result.ok)

    def _show_connection(self, text: str, ok: bool | None) -> None:
        color = {True: "#2e7d32", False: "#c62828", None: ""}[ok]
        self.connection_status.setStyleSheet(f"color: {color}" if color else "")
        self.connection_status.setText(text)

    # -- background jobs -------------------------------------------------------------------

    def _start_job(self, kind: str, fn: Callable[[], Any]) -> int:
        """Run `fn` on the thread pool; its result comes back to `_on_job_finished`."""
        self._tokens[kind] += 1
        token = self._tokens[kind]
        signals = self._jobs

        def job() -> None:
            try:
                result: object = fn()
            except Exception as exc:  # shown to the user, never raised in a pool thread
                result = exc
            signals.finished.emit(kind, token, result)

        QThreadPool.globalInstance().start(job)
        return token

    @Slot(str, int, object)  # a declared slot: PySide delivers cross-thread calls safely
    def _on_job_finished(self, kind: str, token: int, result: object) -> None:
        if token != self._tokens.get(kind):
            return  # stale: the question changed while the job ran
        {
            "connection": self._connection_tested,
            "voices": self._voices_listed,
            "tone": self._tone_played,
        }[kind](result)


def meter_percent(level: float) -> int:
    """A linear peak level (0..1) on a dB scale from -60 dBFS (0 %) to 0 dBFS (100 %),
    which is how loud speech looks to a person."""
    if level <= 0.0:
        return 0
    db = 20.0 * math.log10(min(level, 1.0))
    return round(100.0 * max(0.0, 1.0 - db / METER_FLOOR_DB))


def _device_combo(names: Sequence[str], current: str | None) -> QComboBox:
    """"System default" (None) and the devices; a saved device that is not connected now is
    kept as a choice, so opening the dialog never forgets it."""
    combo = QComboBox()
    combo.addItem(SYSTEM_DEFAULT, None)
    for name in names:
        combo.addItem(name, name)
    if current is not None and combo.findData(current) < 0:
        combo.addItem(f"{current} (not connected)", current)
    combo.setCurrentIndex(max(0, combo.findData(current)))
    return combo


def _form_page() -> tuple[QWidget, QFormLayout]:
    """A tab page whose form keeps to the top, however tall the dialog is."""
    page = QWidget()
    outer = QVBoxLayout(page)
    form = QFormLayout()
    outer.addLayout(form)
    outer.addStretch(1)
    return page, form


def _hint(text: str) -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    label.setStyleSheet("color: gray")
    return label
