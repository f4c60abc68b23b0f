"""Settings → Speech model: where the model runs (this computer or a server), which
checkpoint and its files, device and precision, the memory plan for them, and a persona
checkpoint's voice, role and the user's name and city.

The devices are this machine's (app/engine/device.survey_devices, asked off the GUI thread):
the ones it lacks are listed greyed with why, and the precision lists what runs on the chosen
one; a saved device or precision that cannot run here is shown marked, said in red, and OK
refuses it. The memory plan (app/ui/memory_plan_view.py, made off the GUI thread) says what
fits, and is asked again when the model, the folder, the device, the precision or where it
runs changes.

A persona checkpoint's voices are listed from its folder off the GUI thread (it may unpack
an archive); a listing for a model the user has since left is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QWidget,
)

from app.checkpoints.catalog import (
    CatalogError,
    Manifest,
    developer_models_wanted,
    load_catalog,
)
from app.conversation.server_reach import check_speech_server
from app.engine.device import DeviceChoice, device_problem, find_choice, unsurveyed_devices
from app.engine.precision import AUTO, PRECISION_CHOICES, PRECISION_NAMES
from app.settings.schema import AppSettings, EngineSettings, SpeechModelSettings
from app.text_bounds import bounded
from app.ui import safe_file_dialog
from app.ui.accessible_names import name_form_rows
from app.ui.background_jobs import BackgroundJobs
from app.ui.memory_plan_view import MemoryPlanView, Survey, survey_settings
from app.ui.settings.engine_box import ProbeServer, SpeechEngineBox
from app.ui.settings.form import FAILED_COLOR, form_on, hint, put_on_top

PLAN_DELAY_MS = 300  # a burst of changes asks for one plan, after it
DEVICE_CHARS = 24  # the device list's width in characters (a long reason does not widen it)
LOOKING = "Looking at this machine's devices…"

# This machine's devices and what runs on each (app.engine.device.survey_devices); blocks
# for seconds the first time: called off the GUI thread.
DeviceSurvey = Callable[[], tuple[DeviceChoice, ...]]

# A persona checkpoint's voice prompt names (app.engine.conversation_start.list_voices).
ListVoices = Callable[[Manifest, Path], list[str]]


def list_persona_voices(manifest: Manifest, folder: Path) -> list[str]:
    # Imported here: conversation_start pulls in torch and moshi, which the dialog itself
    # does not need (the app has them loaded by the time the dialog opens).
    from app.engine.conversation_start import list_voices

    return list_voices(manifest.conversation_start, folder)


def _problem_label() -> QLabel:
    label = hint("")
    label.setVisible(False)
    return label


class SpeechTab(QWidget):
    restart_hint = "Everything on this tab applies after a restart of the conversation."

    def __init__(
        self,
        speech: SpeechModelSettings,
        engine: EngineSettings,
        *,
        catalog: Mapping[str, Manifest] | None = None,
        list_voices: ListVoices = list_persona_voices,
        server_probe: ProbeServer = check_speech_server,
        memory_survey: Survey = survey_settings,
        device_survey: DeviceSurvey | None = None,
        parent: QWidget | None = None,
    ) -> None:
        """`catalog` None: the app's own (an unreadable one is shown on the tab).
        `memory_survey`: makes the memory plan (the real one asks Ollama and the device).
        `device_survey`: this machine's devices (the app gives survey_devices); None: the
        devices by the engines' rules, not checked against this machine (and said so)."""
        super().__init__(parent)
        self._initial = speech
        # The whole settings the plan is made for (the dialog's, with the LLM tab's model);
        # alone, the tab plans with its own fields and the rest as they were saved.
        self.plan_settings: Callable[[], AppSettings] = lambda: AppSettings(
            speech=self.settings(), engine=self.engine_box.settings(engine))
        self._list_voices = list_voices
        self._voice: str | None = speech.voice
        self._jobs = BackgroundJobs({"voices": self._voices_listed,
                                     "devices": self._devices_surveyed}, parent=self)
        self._catalog_error: str | None = None
        if catalog is None:
            try:
                catalog = load_catalog()
            except CatalogError as exc:
                catalog, self._catalog_error = {}, str(exc)
        self._catalog = dict(catalog)
        form = form_on(self)

        self.model_combo = QComboBox()
        developer = developer_models_wanted()
        for model_id, manifest in self._catalog.items():
            # A developer's model (random weights for timing, a test layout) is offered
            # when asked for, or when the settings already name it.
            if developer or not manifest.for_developers or model_id == speech.model_id:
                self.model_combo.addItem(manifest.display_name, model_id)
        if self.model_combo.findData(speech.model_id) < 0:
            self.model_combo.addItem(f"{bounded(speech.model_id)} (not in the catalog)",
                                     speech.model_id)
        self.model_combo.setCurrentIndex(self.model_combo.findData(speech.model_id))
        self.model_combo.currentIndexChanged.connect(self._refresh_persona)
        form.addRow("Model:", self.model_combo)
        if self._catalog_error:
            form.addRow("", hint("The model catalog could not be read: "
                                 f"{bounded(self._catalog_error)}"))

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

        # The devices this machine has (and the others, greyed, with why): chosen from a
        # list, never typed.
        self.device_combo = QComboBox()
        self.device_combo.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.device_combo.setMinimumContentsLength(DEVICE_CHARS)
        self._device: str = speech.device  # kept while the list is filled anew
        self._choices: tuple[DeviceChoice, ...] | None = None  # None: being surveyed
        self._surveyed = device_survey is not None
        form.addRow("Device:", self.device_combo)
        self.device_hint = _problem_label()
        form.addRow("", self.device_hint)

        self.precision_combo = QComboBox()
        self.precision_combo.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.precision_combo.setMinimumContentsLength(DEVICE_CHARS)
        self._precision_tip = (
            "The speech model's weights. auto: the best that fits in this machine's memory "
            "(the plan below); 8 and 4 bits take a half and a quarter of 16-bit's memory")
        self.precision_combo.setToolTip(self._precision_tip)
        self._precision: str = speech.precision  # kept while the list is filled anew
        self._filling = False
        self.precision_combo.currentIndexChanged.connect(self._precision_chosen)
        form.addRow("Precision:", self.precision_combo)
        self.precision_hint = _problem_label()
        form.addRow("", self.precision_hint)
        self.device_combo.currentIndexChanged.connect(self._device_chosen)
        if device_survey is None:
            self._devices_surveyed(unsurveyed_devices())
        else:
            self._fill_devices()  # the saved device alone, and LOOKING under it
            self._jobs.start("devices", device_survey)

        self.memory_plan = MemoryPlanView(memory_survey)
        form.addRow("Memory:", self.memory_plan)
        self._plan_timer = QTimer(self)
        self._plan_timer.setSingleShot(True)
        self._plan_timer.setInterval(PLAN_DELAY_MS)
        self._plan_timer.timeout.connect(self.refresh_plan)
        self.model_combo.currentIndexChanged.connect(self._plan_soon)
        self.folder_edit.editingFinished.connect(self._plan_soon)

        self.voice_combo = QComboBox()
        self.voice_combo.activated.connect(self._voice_chosen)
        self.voice_hint = hint("")
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
        self.profile_hint = hint("")
        form.addRow("", self.profile_hint)

        # Where the speech model runs: on top of the tab; the model's own fields are this
        # computer's only.
        name_form_rows(form)
        self.engine_box = SpeechEngineBox(engine, probe=server_probe)
        self.engine_box.mode_changed.connect(self._engine_mode_changed)
        self.engine_box.mode_changed.connect(self._plan_soon)
        put_on_top(self, self.engine_box)
        self._engine_mode_changed(self.engine_box.mode)
        self._refresh_persona()
        self._plan_soon()

    def settings(self) -> SpeechModelSettings:
        """The speech model settings as the tab shows them now; one it has no control for
        stays as it was."""
        role = self.role_edit.toPlainText()
        return replace(
            self._initial,
            model_id=self.model_combo.currentData() or self._initial.model_id,
            custom_folder=self.folder_edit.text().strip() or None,
            device=self._device.strip() or AUTO,
            precision=self._precision,  # type: ignore[arg-type]  # one of the offered
            voice=self._voice,
            role=role if role.strip() else None,  # empty: the checkpoint's default role
            user_name=self.user_name_edit.text().strip() or None,
            user_city=self.user_city_edit.text().strip() or None,
        )

    def _engine_mode_changed(self, mode: str) -> None:
        """On a server, the server's model talks: the local model's choices do not apply."""
        local = mode == "local"
        for widget in (self.model_combo, self.folder_edit, self.folder_button,
                       self.device_combo, self.precision_combo):
            widget.setEnabled(local)
        self._show_problems()

    # ---- device, precision and the memory plan -----------------------------------------------

    def problems(self) -> list[tuple[QWidget, str]]:
        """What the tab cannot save as it is: (the field, why). Where the speech model runs
        on a server, its address; on this computer, a device it lacks or no device at all,
        and a precision that does not run on the device."""
        if self.engine_box.mode != "local":
            return self.engine_box.problems()
        return self._local_problems()

    def _local_problems(self) -> list[tuple[QWidget, str]]:
        found: list[tuple[QWidget, str]] = []
        device = self._device_problem()
        if device:
            found.append((self.device_combo, device))
        choice = self._current_choice()
        precision = choice.why_not_precision(self._precision) if choice is not None else None
        if precision and not device:
            found.append((self.precision_combo, f"{precision}."))
        return found

    def _device_problem(self) -> str | None:
        problem = device_problem(self._device)
        if problem is not None or self._choices is None or not self._surveyed:
            return problem
        choice = self._current_choice()
        if choice is None:
            return f"{bounded(self._device)} is not on this machine: choose one of the list."
        if choice.why_not is not None:
            return f"{choice.name} is not available here: {choice.why_not}."
        return None

    def _show_problems(self) -> None:
        box = getattr(self, "engine_box", None)  # made last: its mode decides at the end
        said = dict(self._local_problems()) if box is None or box.mode == "local" else {}
        for field, label in ((self.device_combo, self.device_hint),
                             (self.precision_combo, self.precision_hint)):
            label.setStyleSheet(f"color: {FAILED_COLOR}")
            label.setText(said.get(field, ""))
            label.setVisible(field in said)
        if self.device_combo not in said and self._choices is None:  # still being asked
            self.device_hint.setStyleSheet("color: gray")
            self.device_hint.setText(LOOKING)
            self.device_hint.setVisible(True)

    def _current_choice(self) -> DeviceChoice | None:
        return find_choice(self._choices, self._device) if self._choices else None

    def _devices_surveyed(self, result: object) -> None:
        if isinstance(result, Exception):  # the survey is a bug's victim: say so, go on
            self._choices = unsurveyed_devices()
            self._surveyed = False
            self._fill_devices()
            self.device_hint.setStyleSheet("color: gray")
            self.device_hint.setText("This machine's devices could not be listed: "
                                     f"{bounded(str(result))}")
            self.device_hint.setVisible(True)
            return
        assert isinstance(result, tuple)
        self._choices = result
        self._fill_devices()

    def _fill_devices(self) -> None:
        """The devices, the ones this machine lacks greyed with why; a saved device that is
        not among them stays shown (and chosen) with a mark."""
        combo = self.device_combo
        self._filling = True
        combo.clear()
        model = combo.model()
        for choice in self._choices or ():
            if choice.available:
                combo.addItem(f"{choice.name}: {choice.label}", choice.name)
            else:
                combo.addItem(f"{choice.name}: not available ({choice.why_not})", choice.name)
                if isinstance(model, QStandardItemModel):
                    item = model.item(combo.count() - 1)
                    item.setEnabled(False)
                    item.setToolTip(choice.why_not or "")
        if self._current_choice() is None:
            mark = ("not a device" if device_problem(self._device) else
                    "checking…" if self._choices is None else "not on this machine")
            combo.addItem(f"{bounded(self._device)}: {mark}", self._device)
        combo.setCurrentIndex(max(0, combo.findData(self._current_data())))
        self._filling = False
        self._fill_precisions()
        self._show_problems()

    def _current_data(self) -> str:
        """The combo's data for the device chosen ("cuda:0" is listed as "cuda")."""
        choice = self._current_choice()
        return choice.name if choice is not None else self._device

    def _device_chosen(self, index: int) -> None:
        if self._filling or index < 0:
            return
        self._device = self.device_combo.itemData(index)
        self._fill_precisions()
        self._show_problems()
        self._plan_soon()

    def _fill_precisions(self) -> None:
        """The precisions that run on the device; a saved one that does not stays shown (and
        chosen) with a mark, so that nothing the user chose changes by itself. Those that do
        not run there are named, with why, in the list's tooltip."""
        choice = self._current_choice()
        runs = choice.precisions if choice is not None else ()
        offered = [AUTO, *(p for p in PRECISION_CHOICES if p in runs)]
        self._filling = True
        self.precision_combo.clear()
        for name in offered:
            self.precision_combo.addItem(PRECISION_NAMES[name], name)
        if self._precision not in offered:
            self.precision_combo.addItem(
                f"{PRECISION_NAMES.get(self._precision, bounded(self._precision))} "
                "(not for this device)", self._precision)
        self.precision_combo.setCurrentIndex(self.precision_combo.findData(self._precision))
        self._filling = False
        elsewhere = [why for _name, why in choice.not_here] if choice is not None else []
        self.precision_combo.setToolTip("\n".join(
            [self._precision_tip, *(["Not offered here:"] + elsewhere if elsewhere else [])]))

    def _precision_chosen(self, index: int) -> None:
        if self._filling or index < 0:
            return
        self._precision = self.precision_combo.itemData(index)
        self._show_problems()
        self._plan_soon()

    def _plan_soon(self, *_args: object) -> None:
        self._plan_timer.start()  # restarted by each change: one plan after a burst

    def refresh_plan(self) -> None:
        """Ask for the plan for what the dialog shows now (off the GUI thread)."""
        self._plan_timer.stop()
        self.memory_plan.refresh(self.plan_settings())

    def _current_manifest(self) -> Manifest | None:
        return self._catalog.get(self.model_combo.currentData())

    def _checkpoint_folder(self, manifest: Manifest) -> Path:
        custom = self.folder_edit.text().strip()
        return Path(custom).expanduser() if custom else manifest.default_folder()

    def _choose_model_folder(self) -> None:
        folder = safe_file_dialog.existing_directory(
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
        self._jobs.drop("voices")  # any listing still running is for another model
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
                f"The checkpoint is not on disk yet ({bounded(str(folder))}); download or "
                "build it to "
                "choose a voice."
            )
            return
        self.voice_hint.setText("Looking for voices…")
        list_voices = self._list_voices
        self._jobs.start("voices", lambda: list_voices(manifest, folder))

    def _fill_voices(self, names: Sequence[str], listed: bool = True) -> None:
        manifest = self._current_manifest()
        default = manifest.conversation_start.default_voice if manifest else None
        self.voice_combo.clear()
        self.voice_combo.addItem(f"Default ({default})" if default else "Default", None)
        for name in names:
            self.voice_combo.addItem(name, name)
        if self._voice and self.voice_combo.findData(self._voice) < 0:
            label = f"{bounded(self._voice)} (not found)" if listed else bounded(self._voice)
            self.voice_combo.addItem(label, self._voice)
        self.voice_combo.setCurrentIndex(max(0, self.voice_combo.findData(self._voice)))

    def _voices_listed(self, result: object) -> None:
        if isinstance(result, Exception):
            self.voice_hint.setText(f"The voices could not be listed: {bounded(str(result))}")
            return
        names = list(result)  # type: ignore[call-overload]
        self._fill_voices(names)
        self.voice_combo.setEnabled(True)
        self.voice_hint.setText("" if names else "This checkpoint has no voice prompts.")

    def _voice_chosen(self, index: int) -> None:
        self._voice = self.voice_combo.itemData(index)
