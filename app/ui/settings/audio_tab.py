"""Settings → Audio: microphone and speaker (each with a test), echo cancellation or a
headset, and the voice levelling.

The audio side is injected (`list_devices`, `mic_level_probe`, `play_test_tone`), so the tab
does not depend on PortAudio and tests can drive it with plain functions. The test tone
plays for a while, so it runs on the Qt thread pool; the microphone meter is polled.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QProgressBar,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from app.settings.schema import SYSTEM_DEFAULT_ALIASES, AudioSettings
from app.text_bounds import bounded
from app.ui.accessible_names import name_form_rows
from app.ui.background_jobs import BackgroundJobs
from app.ui.settings.form import form_on, hint

SYSTEM_DEFAULT = "System default"
METER_INTERVAL_MS = 50
METER_FLOOR_DB = -60.0


class LevelMeter(Protocol):
    """A running microphone capture that the tab polls for its level.

    `level()` is called on the GUI thread every 50 ms and must not block: it returns the
    peak amplitude (linear, 0.0 to 1.0) seen since the previous call. `close()` stops the
    capture; the tab calls it when the test stops or the dialog closes.
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


def meter_percent(level: float) -> int:
    """A linear peak level (0..1) on a dB scale from -60 dBFS (0 %) to 0 dBFS (100 %),
    which is how loud speech looks to a person."""
    if level <= 0.0:
        return 0
    db = 20.0 * math.log10(min(level, 1.0))
    return round(100.0 * max(0.0, 1.0 - db / METER_FLOOR_DB))


def _device_combo(names: Sequence[str], current: str | None) -> QComboBox:
    """"System default" (None) and the devices; a saved device that is not connected now is
    kept as a choice, so opening the dialog never forgets it. The system default's alias
    (ALSA's "default") is the system default: offered once, under that name."""
    if current in SYSTEM_DEFAULT_ALIASES:
        current = None
    combo = QComboBox()
    combo.addItem(SYSTEM_DEFAULT, None)
    for name in names:
        if name not in SYSTEM_DEFAULT_ALIASES:
            combo.addItem(name, name)
    if current is not None and combo.findData(current) < 0:
        combo.addItem(f"{bounded(current)} (not connected)", current)
    combo.setCurrentIndex(max(0, combo.findData(current)))
    return combo


class AudioTab(QWidget):
    restart_hint = ("The microphone and speaker apply after a restart; echo and voice "
                    "levelling apply at once.")

    def __init__(
        self,
        audio: AudioSettings,
        *,
        list_devices: ListDevices | None = None,
        mic_level_probe: MicLevelProbe | None = None,
        play_test_tone: PlayTestTone | None = None,
        parent: QWidget | None = None,
    ) -> None:
        """A missing `list_devices`, `mic_level_probe` or `play_test_tone` leaves only the
        system default devices, or that test switched off."""
        super().__init__(parent)
        self._mic_level_probe = mic_level_probe
        self._play_test_tone = play_test_tone
        self._meter: LevelMeter | None = None
        self._jobs = BackgroundJobs({"tone": self._tone_played}, parent=self)
        form = form_on(self)

        inputs: Sequence[str] = ()
        outputs: Sequence[str] = ()
        self.audio_status = hint("")
        if list_devices is None:
            self.audio_status.setText("The audio device list is not available.")
        else:
            try:
                inputs, outputs = list_devices()
            except Exception as exc:
                self.audio_status.setText("The audio devices could not be listed: "
                                          f"{bounded(str(exc))}")
        self.input_combo = _device_combo(inputs, audio.input_device)
        self.output_combo = _device_combo(outputs, audio.output_device)
        self.input_combo.currentIndexChanged.connect(self.stop_mic_test)

        self.mic_button = QPushButton("Test microphone")
        self.mic_button.setEnabled(mic_level_probe is not None)
        if mic_level_probe is None:
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
        self.tone_button.setEnabled(play_test_tone is not None)
        if play_test_tone is None:
            self.tone_button.setToolTip("The speaker test is not available here.")
        self.tone_button.clicked.connect(self._play_tone)
        row = QHBoxLayout()
        row.addWidget(self.output_combo, 1)
        row.addWidget(self.tone_button)
        form.addRow("Speaker:", row)

        self.cancel_radio = QRadioButton("Echo cancellation (open speakers)")
        self.headset_radio = QRadioButton("Headset (no echo cancellation)")
        group = QButtonGroup(self)
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
        name_form_rows(form)

    def settings(self) -> AudioSettings:
        """The audio settings as the tab shows them now."""
        return AudioSettings(
            input_device=self.input_combo.currentData(),
            output_device=self.output_combo.currentData(),
            echo_mode="headset" if self.headset_radio.isChecked() else "cancel",
            level_voice=self.level_check.isChecked(),
        )

    def stop_mic_test(self) -> None:
        """Stops a running microphone test (another microphone chosen, the dialog closed)."""
        self._meter_timer.stop()
        meter, self._meter = self._meter, None
        self.mic_button.setText("Test microphone")
        self.mic_meter.setValue(0)
        if meter is not None:
            try:
                meter.close()
            except Exception as exc:
                self.audio_status.setText("The microphone test did not stop cleanly: "
                                          f"{bounded(str(exc))}")

    def _toggle_mic_test(self) -> None:
        if self._meter is not None:
            self.stop_mic_test()
            return
        if self._mic_level_probe is None:
            return
        try:
            self._meter = self._mic_level_probe(self.input_combo.currentData())
        except Exception as exc:
            self.audio_status.setText(f"The microphone could not be opened: {bounded(str(exc))}")
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
            self.stop_mic_test()
            self.audio_status.setText(f"The microphone stopped: {bounded(str(exc))}")
            return
        self.mic_meter.setValue(meter_percent(level))

    def _play_tone(self) -> None:
        play = self._play_test_tone
        if play is None:
            return
        device = self.output_combo.currentData()
        self.tone_button.setEnabled(False)
        speaker = bounded(device) if device else "the default speaker"
        self.audio_status.setText(f"Playing a test tone on {speaker}…")
        self._jobs.start("tone", lambda: play(device))

    def _tone_played(self, result: object) -> None:
        self.tone_button.setEnabled(True)
        if isinstance(result, Exception):
            self.audio_status.setText("The test tone could not be played: "
                                      f"{bounded(str(result))}")
        else:
            self.audio_status.setText("Test tone played.")
