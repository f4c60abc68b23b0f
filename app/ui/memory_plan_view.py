"""The memory plan, shown where the speech model is chosen (the first-run dialog, Settings →
Speech model): what fits on this machine ("Context Spanning 7B in 8-bit, 8.1 GB + speech
recognition 2.1 GB + qwen3:4b in Ollama 3.4 GB = 13.6 of 16 GB") and, when nothing fits,
what to change.

The plan asks Ollama over HTTP (which may hang: each question has a timeout) and may start
CUDA, so it is made on the Qt thread pool, and its answer comes back by a queued signal; a
moving bar and the seconds so far show it is being made (it took 40 to 85 s on a busy
machine). A plan for settings the user has changed since is dropped: the view shows the
newest question's answer only.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QVBoxLayout, QWidget

from app.install_kind import engine_installed, needs_full_install
from app.plan.memory_plan import MemoryReport
from app.settings.schema import AppSettings
from app.text_bounds import bounded
from app.ui.background_jobs import BackgroundJobs
from app.ui.settings.form import FAILED_COLOR, OK_COLOR

# (settings, Ollama timeout in seconds) -> the plan; may block for seconds.
Survey = Callable[[AppSettings, float], MemoryReport]
WORKING = "Working out what fits in this machine's memory…"
_SHOWN = 1200  # characters of a plan or an error shown
BUSY_BAR_PX = 80


class NothingToPlan(Exception):
    """No plan can be made here, and why in words (the thin client's install runs no model)."""


def survey_settings(settings: AppSettings, timeout_s: float) -> MemoryReport:
    if not engine_installed():
        raise NothingToPlan(_thin_client_plan(settings))
    from app.plan.memory_survey import survey_for_settings

    return survey_for_settings(settings, timeout_s=timeout_s)


def _thin_client_plan(settings: AppSettings) -> str:
    engine = settings.engine
    if engine.mode != "server":
        return needs_full_install("The speech model on this computer") + (
            "; or choose a server below.")
    recognition = settings.llm.backend != "none" and settings.llm.stt_model != "none"
    if recognition and not engine.asr_on_server:
        return ("The speech model runs on the server. Speech recognition on this computer "
                "needs the full install (torch and moshi): choose \"Speech recognition on "
                "the server\" below, or " + needs_full_install("it").split("; ", 1)[1])
    return ("This install (the thin client) loads no model: the speech model"
            + (" and speech recognition run" if recognition else " runs")
            + " on the server, the LLM in its own server.")


def runs_as_planned(report: MemoryReport) -> bool:
    """Whether the speech model's precision in the plan runs on its device at all (a plan
    for a precision the device does not run fits in memory and still cannot run)."""
    return report.precision is None or report.precision in report.device.offered()


class MemoryPlanView(QWidget):
    """The plan's lines under a heading; `refresh(settings)` asks again."""

    planned = Signal(object)  # the MemoryReport shown now
    ollama_timeout_s: float = 3.0

    def __init__(self, survey: Survey = survey_settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._survey = survey
        self._jobs = BackgroundJobs({"plan": self._planned}, parent=self)
        self.report: MemoryReport | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        # While the plan is made (40 to 85 s were seen on a busy machine: it sizes each
        # model and asks Ollama), a moving bar and the seconds so far say it is working.
        self.busy = QProgressBar(self)
        self.busy.setRange(0, 0)  # indeterminate
        self.busy.setFixedWidth(BUSY_BAR_PX)
        self.busy.setAccessibleName("Working out the memory plan")
        self.elapsed = QLabel("", self)
        self.elapsed.setWordWrap(True)
        self.elapsed.setStyleSheet("color: gray")
        self._ticker = QTimer(self)
        self._ticker.setInterval(1000)
        self._ticker.timeout.connect(self._tick)
        self._working_since = 0.0
        self.label = QLabel("")
        self.label.setTextFormat(Qt.TextFormat.PlainText)  # model names come from files
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label.setAccessibleName("Memory plan")
        layout.addWidget(self.label)
        row = QHBoxLayout()
        row.addWidget(self.busy, 0, Qt.AlignmentFlag.AlignTop)
        row.addWidget(self.elapsed, 1)
        layout.addLayout(row)
        self._working(False)

    def wait(self, timeout_s: float) -> bool:
        """Wait for a plan still being made (False if it still is after `timeout_s`)."""
        return self._jobs.wait(timeout_s)

    def refresh(self, settings: AppSettings) -> None:
        """Plan for `settings` (off the GUI thread); an older question's answer is dropped."""
        if settings.engine.mode == "server" and settings.llm.backend == "none":
            self._jobs.drop("plan")
            self._working(False)
            self._show("The speech model runs on the server: nothing of it loads here.", None)
            return
        self._show(WORKING, None)
        self._working(True)
        survey, timeout = self._survey, self.ollama_timeout_s
        self._jobs.start("plan", lambda: survey(settings, timeout))

    def text(self) -> str:
        return self.label.text()

    def _show(self, text: str, fits: bool | None) -> None:
        color = {True: OK_COLOR, False: FAILED_COLOR, None: ""}[fits]
        self.label.setStyleSheet(f"color: {color}" if color else "")
        self.label.setText(bounded(text, _SHOWN))

    def is_working(self) -> bool:
        """A plan is being made (its bar moves)."""
        return self._ticker.isActive()

    def _working(self, working: bool) -> None:
        self.busy.setVisible(working)
        self.elapsed.setVisible(working)
        if working:
            self._working_since = time.monotonic()
            self._tick()
            self._ticker.start()
        else:
            self._ticker.stop()

    def _tick(self) -> None:
        seconds = int(time.monotonic() - self._working_since)
        self.elapsed.setText(f"It sizes each model and asks Ollama: up to a minute on a busy "
                             f"machine. {seconds} s so far.")

    def _planned(self, result: object) -> None:
        self._working(False)
        if isinstance(result, NothingToPlan):
            self.report = None
            self._show(str(result), None)
            return
        if isinstance(result, Exception):
            self.report = None
            self._show(f"The memory plan could not be made: {result}", None)
            return
        assert isinstance(result, MemoryReport)
        self.report = result
        lines = result.lines()
        fits: bool | None = result.fits
        if fits and not runs_as_planned(result):
            # A green "Fits" beside a red "does not run" (MLX and int8): it would fit in
            # memory, and it still cannot run; the report's own note says why.
            lines = [line.replace("Fits:", "Would fit in memory:", 1) for line in lines]
            fits = None
        self._show("\n".join(lines), fits)
        self.planned.emit(result)
