"""First run: the chosen checkpoint is not on disk, so offer the three ways to get one.

Download it (size up front, a progress bar with bytes and rate, Cancel, resume later, the
integrity check's result), choose a local folder (validated by the same loader code that
will load it), or use the tiny demo model (built if needed). Network, hashing and building
all run on worker threads that report by Qt signals: the GUI thread only draws.

A speech-recognition (STT) manifest gets the same dialog with two ways: download it, or go
on without it ("None (typed questions only)"); its settings have no folder of their own.

On a machine without a GPU (asked off the GUI thread, as the app's engine would find it) a
speech model of billions of weights cannot keep real time on the CPU: the dialog then leads
with what works there and says why: a speech server (one click when its address is set),
and the tiny demo model to try the app; the download and the settings' notice come after.

The tiny demo model (for a recogniser: going on without one) sits under the choices, out of
the scrolled part, so it is in view on a small screen at a large scale and does not move when
the memory plan, made in the background with a moving bar, fills in above it.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from html import escape
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.asr.stt_catalog import SttManifest, stt_checkpoint_info
from app.checkpoints.catalog import CatalogError, Manifest, get_manifest
from app.checkpoints.downloader import (
    TOKEN_SETTINGS_URL,
    CheckpointDownloader,
    DownloadCancelled,
    DownloadError,
    DownloadPlan,
    DownloadResult,
    GatedRepoAccessError,
    IntegrityError,
    format_bytes,
)
from app.checkpoints.loader import CheckpointMissingError, checkpoint_info, ensure_built
from app.settings.schema import AppSettings, EngineSettings
from app.text_bounds import bounded
from app.ui import safe_file_dialog
from app.ui.background_jobs import BackgroundJobs
from app.ui.gui_bridge import ToGui
from app.ui.memory_plan_view import MemoryPlanView, Survey, survey_settings
from app.ui.screen_fit import keep_on_screen

TINY_MODEL_ID = "tiny"
TINY_CAPTION = "random weights — it babbles; for trying the app"
NO_STT_LABEL = "None (typed questions only)"
NO_STT_CAPTION = "the LLM still answers what you type; the model still hears you"
_PROGRESS_STEPS = 1000  # QProgressBar holds an int: show per-mille, not bytes
_RATE_WINDOW_S = 3.0
_ERROR_STYLE = "color: #b00020;"
_NOTICE_SHOWN = 600  # characters of the app's notice shown above the choices
_OK_STYLE = "color: #1b7f3b;"
_LEAST_BODY_PX = 120  # the scrolled choices keep at least this much height
_WINDOW_FRAME_PX = 40  # a title bar and frame, taken off the screen's height
# The GPU the engine would run the speech model on here, or None (only the CPU): blocks
# (it may start CUDA's driver), so it runs off the GUI thread.
GpuCheck = Callable[[], "str | None"]


def _gpu_for_speech() -> str | None:
    from app.engine.device import gpu_for_speech

    return gpu_for_speech()


def _size_of(manifest: Manifest, folder: Path) -> float | None:
    """The speech model's weights, in billions (from its architecture; None: unknown)."""
    try:
        from app.plan.footprint import checkpoint_shape

        shape = checkpoint_shape(manifest, folder)
    except Exception:  # its size is a detail of the lead; the lead stands without it
        return None
    return (shape.linear_params + shape.other_params) / 1e9


def _ignored(*_args: object) -> None:
    """A report a job's caller does not show."""


class _Job:
    """One blocking call on a daemon thread; what it reports (progress, stage, its result
    or its exception) reaches the dialog's methods on the GUI thread through the bridge
    (gui_bridge.py), and a dialog closed by then gets nothing."""

    def __init__(self, work: Callable[[_Job], Any], name: str, *,
                 succeeded: Callable[[Any], None], failed: Callable[[Exception], None],
                 progress: Callable[[int, int, str], None] = _ignored,
                 stage: Callable[[str, str], None] = _ignored) -> None:
        self.cancel = threading.Event()
        self._work = work
        self._succeeded, self._failed = ToGui(succeeded), ToGui(failed)
        self._progress, self._stage = ToGui(progress), ToGui(stage)
        self.worker = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._succeeded.expect()  # the bridge polls until the result is in
        self.worker.start()

    def progress(self, done: int, total: int, file_name: str) -> None:
        """The worker's thread: done bytes, total bytes, file name."""
        self._progress.post(done, total, file_name)

    def stage(self, stage: str, file_name: str) -> None:
        """The worker's thread."""
        self._stage.post(stage, file_name)

    def _run(self) -> None:
        try:
            result = self._work(self)
        except Exception as exc:  # reported to the user, never raised into Qt
            self._failed.post_last(exc)
        else:
            self._succeeded.post_last(result)


class ModelMissingDialog(QDialog):
    """Shown when `manifest`'s checkpoint is not on disk. After `exec()` returns Accepted,
    `chosen()` is ("download" | "folder" | "tiny", the checkpoint's folder); for a speech
    recognition manifest ("download" | "none", its folder).

    `endpoint` replaces https://huggingface.co (tests use a local stand-in); `token` is the
    Hugging Face token from the settings (else HF_TOKEN); `build_tiny` and `validate` are
    the loader's own functions unless a caller (a test) needs to watch them.
    """

    def __init__(
        self,
        manifest: Manifest | SttManifest,
        parent: QWidget | None = None,
        *,
        folder: Path | None = None,
        endpoint: str | None = None,
        token: str | None = None,
        tiny: Manifest | None = None,
        build_tiny: Callable[[Manifest], Path] = ensure_built,
        validate: Callable[[Path], object] | None = None,
        check_size: bool = True,
        notice: str | None = None,
        plan_settings: AppSettings | None = None,
        memory_survey: Survey = survey_settings,
        gpu_check: GpuCheck = _gpu_for_speech,
    ) -> None:
        """`notice`: what the app has to tell before anything else (the settings file was
        repaired, so the model asked for here may be a default the user never chose); shown
        at the top, since this dialog covers the window that also lists it."""
        super().__init__(parent)
        self.manifest = manifest
        self.folder = Path(folder) if folder is not None else manifest.default_folder()
        self.endpoint = endpoint
        self._tiny = tiny
        self._build_tiny = build_tiny
        self.is_stt = isinstance(manifest, SttManifest)
        def default_check(path: Path) -> object:
            if isinstance(manifest, SttManifest):
                return stt_checkpoint_info(manifest, path)
            return checkpoint_info(manifest, path)

        self._validate = validate or default_check
        self._chosen: tuple[str, Path | None] | None = None
        self._jobs: list[_Job] = []
        self._download_job: _Job | None = None
        self._rate_samples: deque[tuple[float, int]] = deque()
        self._plan_failed = False  # the size label says why the size is unknown
        self.setWindowTitle("Speech recognition not on disk" if self.is_stt
                            else "Model not on disk")
        self.setMinimumWidth(560)

        # The choices scroll when the screen is short (a gated model's licence text, a
        # notice): Continue and Close below them never do.
        self.body = QWidget()
        layout = QVBoxLayout(self.body)
        layout.setContentsMargins(0, 0, 0, 0)
        self.choices_area = QScrollArea(self)
        self.choices_area.setWidget(self.body)
        self.choices_area.setWidgetResizable(True)
        self.choices_area.setFrameShape(QFrame.Shape.NoFrame)
        self.choices_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.choices_area.setMinimumHeight(_LEAST_BODY_PX)
        self.notice_label: QLabel | None = None
        if notice:
            self.notice_label = QLabel(
                bounded(notice, _NOTICE_SHOWN) + " (This notice is also in the window.)")
            self.notice_label.setTextFormat(Qt.TextFormat.PlainText)  # a file's data
            self.notice_label.setWordWrap(True)
            self.notice_label.setStyleSheet(_ERROR_STYLE)
            layout.addWidget(self.notice_label)
        what = "The speech recognition model " if self.is_stt else ""
        intro = QLabel(
            f"{what}<b>{escape(manifest.display_name)}</b> is not on this computer yet "
            f"(it belongs in {escape(str(self.folder))}). Choose how to go on:"
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)
        # What fits in this machine's memory with the model asked for (made off the GUI
        # thread), before gigabytes are downloaded for it.
        self.memory_plan: MemoryPlanView | None = None
        if plan_settings is not None and not self.is_stt:
            self.memory_plan = MemoryPlanView(memory_survey)
            layout.addWidget(self.memory_plan)
            self.memory_plan.refresh(plan_settings)
        layout.addWidget(self._download_box(token))
        folder_box = self._folder_box()
        layout.addWidget(folder_box)
        folder_box.setVisible(not self.is_stt)  # the STT setting names a model, not a folder
        # The way on that needs no download (the tiny demo model; for a recogniser, none)
        # stays in view under the choices, whatever the screen's size and whatever the plan
        # above says once it is made: at 1366×768 and 200 % it was below the fold.
        self.alternative_box = self._none_box() if self.is_stt else self._tiny_box()
        self._layout = layout
        # What works on a machine without a GPU, put first once the machine has said so.
        self.lead_label = QLabel("")
        self.lead_label.setWordWrap(True)
        self.lead_label.setTextFormat(Qt.TextFormat.PlainText)
        self.lead_label.setVisible(False)
        self.server_button: QPushButton | None = None
        self._server_url = ""
        default_url = EngineSettings().server_url
        if plan_settings is not None and plan_settings.engine.server_url.strip() not in (
                "", default_url):
            self._server_url = plan_settings.engine.server_url.strip()
        self.machine_checked = True  # a recogniser, or a built model: nothing to lead with
        self._machine_jobs = BackgroundJobs({"machine": self._machine_known}, parent=self)
        if isinstance(manifest, Manifest) and manifest.source_kind != "built":
            self.machine_checked = False
            speech, folder_now = manifest, self.folder

            def machine() -> tuple[str | None, float | None]:
                return gpu_check(), _size_of(speech, folder_now)

            self._machine_jobs.start("machine", machine)

        self.buttons = QDialogButtonBox()
        self.continue_button = self.buttons.addButton(
            "Continue", QDialogButtonBox.ButtonRole.AcceptRole
        )
        self.continue_button.setEnabled(False)
        self.close_button = self.buttons.addButton(QDialogButtonBox.StandardButton.Close)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addStretch(1)
        outer = QVBoxLayout(self)
        outer.addWidget(self.choices_area, 1)
        outer.addWidget(self.alternative_box)
        outer.addWidget(self.buttons)

        if check_size and manifest.hf_repo:
            self.check_size()

    # -- layout -------------------------------------------------------------------------------

    def _download_box(self, token: str | None) -> QGroupBox:
        box = QGroupBox("Download it from Hugging Face")
        column = QVBoxLayout(box)
        repo = self.manifest.hf_repo or "?"
        self.size_label = QLabel(f"{escape(repo)} · licence {escape(self.manifest.licence)}")
        self.size_label.setWordWrap(True)
        column.addWidget(self.size_label)

        self.token_edit: QLineEdit | None = None
        if self.manifest.gated:
            hub = (self.endpoint or "https://huggingface.co").rstrip("/")
            page = f"{hub}/{repo}"
            self.licence_label = QLabel(
                "<b>This model is gated:</b> its licence must be accepted before it can be "
                "downloaded. Sign in on Hugging Face, accept the licence on "
                f'<a href="{escape(page)}">the model page</a>, then paste a read token from '
                f'<a href="{TOKEN_SETTINGS_URL}">your token settings</a> here (or set HF_TOKEN).'
            )
            self.licence_label.setWordWrap(True)
            self.licence_label.setOpenExternalLinks(True)
            self.licence_label.setTextInteractionFlags(
                Qt.TextInteractionFlag.TextBrowserInteraction
            )
            column.addWidget(self.licence_label)
            self.token_edit = QLineEdit(token or os.environ.get("HF_TOKEN", ""))
            self.token_edit.setPlaceholderText("Hugging Face token (hf_…)")
            self.token_edit.setEchoMode(QLineEdit.EchoMode.Password)
            column.addWidget(self.token_edit)
        self._token = token

        self.progress_bar = QProgressBar()
        self.progress_bar.setRange(0, _PROGRESS_STEPS)
        self.progress_bar.setVisible(False)
        column.addWidget(self.progress_bar)
        self.progress_label = QLabel("")
        column.addWidget(self.progress_label)

        row = QHBoxLayout()
        self.download_button = QPushButton("Download")
        self.download_button.clicked.connect(self.start_download)
        self.cancel_button = QPushButton("Cancel download")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel_download)
        row.addWidget(self.download_button)
        row.addWidget(self.cancel_button)
        row.addStretch(1)
        column.addLayout(row)
        if not self.manifest.hf_repo:  # a "local" catalog entry: nothing to download
            self.size_label.setText("This model is not published on Hugging Face.")
            self.download_button.setEnabled(False)

        self.download_status = QLabel("")
        self.download_status.setWordWrap(True)
        self.download_status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        column.addWidget(self.download_status)
        return box

    def _folder_box(self) -> QGroupBox:
        box = QGroupBox("Use files already on this computer")
        column = QVBoxLayout(box)
        self.folder_button = QPushButton("Choose a local folder…")
        self.folder_button.clicked.connect(self._ask_for_folder)
        column.addWidget(self.folder_button, alignment=Qt.AlignmentFlag.AlignLeft)
        self.folder_error = QLabel("")
        self.folder_error.setWordWrap(True)
        self.folder_error.setStyleSheet(_ERROR_STYLE)
        column.addWidget(self.folder_error)
        return box

    def _none_box(self) -> QGroupBox:
        box = QGroupBox("Go on without speech recognition")
        row = QHBoxLayout(box)
        self.none_button = QPushButton(NO_STT_LABEL)
        self.none_button.clicked.connect(self.use_none)
        self.alternative_button = self.none_button
        row.addWidget(self.none_button)
        caption = QLabel(NO_STT_CAPTION)
        caption.setWordWrap(True)  # or it widens the choices past the window, cutting them
        caption.setStyleSheet("font-style: italic;")
        row.addWidget(caption, 1)
        return box

    def _tiny_box(self) -> QGroupBox:
        box = QGroupBox("Try the app without a download")
        column = QVBoxLayout(box)
        row = QHBoxLayout()
        self.tiny_button = QPushButton("Use the tiny demo model")
        self.tiny_button.clicked.connect(self.use_tiny)
        self.alternative_button = self.tiny_button
        row.addWidget(self.tiny_button)
        caption = QLabel(TINY_CAPTION)
        caption.setWordWrap(True)  # or it widens the choices past the window, cutting them
        caption.setStyleSheet("font-style: italic;")
        row.addWidget(caption, 1)
        column.addLayout(row)
        self.tiny_busy = QProgressBar()
        self.tiny_busy.setRange(0, 0)  # indeterminate: the build reports no fraction
        self.tiny_busy.setVisible(False)
        column.addWidget(self.tiny_busy)
        self.tiny_status = QLabel("")
        self.tiny_status.setWordWrap(True)
        self.tiny_status.setVisible(False)  # no empty line under the button: shown with words
        column.addWidget(self.tiny_status)
        return box

    # -- public API ---------------------------------------------------------------------------

    def chosen(self) -> tuple[str, Path | None] | None:
        """("download" | "folder" | "tiny", its folder), ("none", the folder) for a
        recogniser, or ("server", None): run the speech model on the server in the settings."""
        return self._chosen

    def use_server(self) -> None:
        """The speech model on the server the settings name (Settings → Speech engine)."""
        self._chosen = ("server", None)
        self.accept()

    def _machine_known(self, result: object) -> None:
        """The machine's answer: without a GPU, what works here goes first, with why."""
        self.machine_checked = True
        if isinstance(result, Exception) or not isinstance(result, tuple):
            return  # unknown: the dialog stays as it is
        gpu, billions = result
        if gpu is not None:
            return
        size = f"{billions:.1f} billion weights" if billions else "billions of weights"
        what = self.manifest.display_name  # a plain-text label: drawn as it is
        lines = [
            f"This computer has no GPU the speech model can use. On its CPU, "
            f"{what} ({size}) needs seconds for each 80 ms of speech: it "
            "cannot keep up with a conversation in real time. What works here:",
        ]
        if self._server_url:
            lines.append(f"• The speech server at {self._server_url}: the model runs there, "
                         "this computer hears and speaks.")
        else:
            lines.append("• A speech server: a machine with a GPU runs `python main.py serve`, "
                         "then Settings → Speech model → Runs on: Server.")
        lines.append("• The tiny demo model, to try the app now (below; it babbles: its "
                     "weights are random).")
        lines.append(f"The download of {what} below is for a machine with a GPU, or a folder "
                     "of its files for one later.")
        self.lead_label.setText("\n".join(lines))
        self.lead_label.setVisible(True)
        first: list[QWidget] = [self.lead_label]
        if self._server_url:
            self.server_button = QPushButton(f"Use the speech server at "
                                             f"{bounded(self._server_url, 60)}")
            self.server_button.clicked.connect(self.use_server)
            first.append(self.server_button)
        for position, widget in enumerate(first):
            self._layout.insertWidget(position, widget)
        (self.server_button or self.tiny_button).setDefault(True)
        # Not grown for it: the user may have sized the dialog; what works is at the top.
        self.choices_area.verticalScrollBar().setValue(0)

    def busy(self) -> bool:
        """True while a download, a size check or a build is running."""
        return any(job.worker.is_alive() for job in self._jobs)

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Cancel what can be cancelled and wait for the workers, the memory plan's and the
        machine check's too; False if one is still busy."""
        deadline = time.monotonic() + timeout_s
        for job in self._jobs:
            job.cancel.set()
        for job in self._jobs:
            job.worker.join(max(0.0, deadline - time.monotonic()))
        others = [self._machine_jobs.wait] + (
            [self.memory_plan.wait] if self.memory_plan is not None else [])
        done = [wait(max(0.0, deadline - time.monotonic())) for wait in others]
        return not self.busy() and all(done)

    def check_size(self) -> None:
        """Ask the hub (off the GUI thread) how big the download is and what is already here."""
        downloader = self._downloader()
        self.size_label.setText(f"{self._source_text()} · checking the download size…")
        job = self._new_job(lambda job: downloader.plan(), "model-size-check",
                            succeeded=self._on_planned, failed=self._on_plan_failed)
        job.start()

    def start_download(self) -> None:
        if self._download_job is not None:
            return
        downloader = self._downloader()
        self._set_choices_enabled(False)
        self.cancel_button.setEnabled(True)
        self.progress_bar.setVisible(True)
        self.download_status.setStyleSheet("")
        self.download_status.setText("Connecting…")
        self._rate_samples.clear()
        self._refit_later()

        def work(job: _Job) -> DownloadResult:
            return downloader.download(
                cancel=job.cancel, on_progress=job.progress, on_stage=job.stage
            )

        job = self._new_job(work, "model-download", succeeded=self._on_downloaded,
                            failed=self._on_download_failed, progress=self._on_progress,
                            stage=self._on_stage)
        self._download_job = job
        job.start()

    def cancel_download(self) -> None:
        if self._download_job is None:
            return
        self._download_job.cancel.set()
        self.cancel_button.setEnabled(False)
        self.download_status.setText(
            "Cancelling… (after the piece in flight; what has arrived is kept)"
        )

    def choose_folder(self, folder: Path) -> bool:
        """Accept `folder` if the loader finds the checkpoint's files in it."""
        folder = Path(folder)
        try:
            self._validate(folder)
        except (CheckpointMissingError, CatalogError, OSError, ValueError) as exc:
            self.folder_error.setText(f"That folder cannot be used: {exc}")
            self._refit_later()
            return False
        self.folder_error.setText("")
        self._chosen = ("folder", folder)
        self.accept()
        return True

    def use_none(self) -> None:
        """Speech recognition: go on with typed questions only (the settings say "none")."""
        self._chosen = ("none", self.folder)
        self.accept()

    def use_tiny(self) -> None:
        """Build the tiny model if needed (seconds, off the GUI thread), then accept it."""
        self._set_choices_enabled(False)
        self.tiny_busy.setVisible(True)
        self.tiny_status.setStyleSheet("")
        self.tiny_status.setText("Preparing the tiny demo model…")
        self.tiny_status.setVisible(True)
        tiny, build = self._tiny, self._build_tiny

        def work(job: _Job) -> Path:
            manifest = tiny or get_manifest(TINY_MODEL_ID)
            return Path(build(manifest))

        job = self._new_job(work, "tiny-model-build", succeeded=self._on_tiny_ready,
                            failed=self._on_tiny_failed)
        job.start()

    # -- Qt overrides -------------------------------------------------------------------------

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self._fit()

    def done(self, result: int) -> None:
        """Closing stops a download (its partial files stay for next time)."""
        for job in self._jobs:
            job.cancel.set()
        super().done(result)

    # -- slots (GUI thread) -------------------------------------------------------------------

    def _on_planned(self, plan: DownloadPlan) -> None:
        self._plan_failed = False
        size = format_bytes(plan.total_bytes)
        if plan.bytes_on_disk:
            text = (f"{size} in {len(plan.files)} files, {format_bytes(plan.bytes_on_disk)} "
                    f"already here: {format_bytes(plan.bytes_to_fetch)} left to download")
            self.download_button.setText("Resume download")
        else:
            text = f"{size} to download ({len(plan.files)} files)"
        self.size_label.setText(f"{self._source_text()} · {text}")
        self._refit_later()

    def _on_plan_failed(self, exc: Exception) -> None:
        self._plan_failed = True
        self.size_label.setText(f"{self._source_text()} · size unknown: {exc}")
        self._refit_later()

    def _on_progress(self, done: int, total: int, name: str) -> None:
        now = time.monotonic()
        self._rate_samples.append((now, done))
        while len(self._rate_samples) > 2 and now - self._rate_samples[0][0] > _RATE_WINDOW_S:
            self._rate_samples.popleft()
        t0, d0 = self._rate_samples[0]
        rate = (done - d0) / (now - t0) if now > t0 else 0.0
        self.progress_bar.setValue(int(_PROGRESS_STEPS * done / total) if total else 0)
        parts = [f"{format_bytes(done)} of {format_bytes(total)}"]
        if rate > 0:
            parts.append(f"{format_bytes(rate)}/s")
        if name:
            parts.append(name)
        self.progress_label.setText(" · ".join(parts))

    def _on_stage(self, stage: str, name: str) -> None:
        text = {
            "planning": "Asking the hub for the file list…",
            "downloading": f"Downloading {name}…",
            "verifying": f"Checking {name} against the hub's checksum…",
        }.get(stage, stage)
        self.download_status.setText(text)

    def _on_downloaded(self, result: DownloadResult) -> None:
        self._download_job = None
        self.progress_bar.setValue(_PROGRESS_STEPS)
        self.cancel_button.setEnabled(False)
        skipped = ""
        if result.skipped:
            skipped = f" ({', '.join(result.skipped)} is not on the hub; skipped.)"
        self.download_status.setStyleSheet(_OK_STYLE)
        self.download_status.setText(
            f"Downloaded. Integrity check passed: all {len(result.verified)} files match the "
            f"hub's checksums.{skipped}"
        )
        self._chosen = ("download", result.folder)
        self.continue_button.setEnabled(True)
        self.continue_button.setDefault(True)
        self.continue_button.setFocus()

    def _on_download_failed(self, exc: Exception) -> None:
        self._download_job = None
        self._show_failure(exc)
        self._refit_later()

    def _show_failure(self, exc: Exception) -> None:
        self.cancel_button.setEnabled(False)
        self._set_choices_enabled(True)
        self.download_button.setText("Try again")
        if self.progress_bar.value() <= 0:  # nothing arrived: no empty bar to stare at
            self.progress_bar.setVisible(False)
        if self._plan_failed:  # the size check's reason is said once, by the status below
            self.size_label.setText(f"{self._source_text()} · size unknown")
        if isinstance(exc, DownloadCancelled):
            self.download_status.setStyleSheet("")
            self.download_button.setText("Resume download")
            self.download_status.setText(str(exc))
            return
        self.download_status.setStyleSheet(_ERROR_STYLE)
        if isinstance(exc, IntegrityError):
            self.download_status.setText(f"Integrity check failed: {exc}")
        elif isinstance(exc, DownloadError):
            self.download_status.setText(str(exc))
        else:
            self.download_status.setText(f"The download failed: {type(exc).__name__}: {exc}")
        if isinstance(exc, GatedRepoAccessError) and self.token_edit is not None:
            self.token_edit.setFocus()
            self.token_edit.selectAll()

    def _on_tiny_ready(self, folder: Path) -> None:
        self.tiny_busy.setVisible(False)
        self._chosen = ("tiny", folder)
        self.accept()

    def _on_tiny_failed(self, exc: Exception) -> None:
        self.tiny_busy.setVisible(False)
        self._set_choices_enabled(True)
        self.tiny_status.setStyleSheet(_ERROR_STYLE)
        self.tiny_status.setText(f"The tiny model could not be built: {exc}")
        self.tiny_status.setVisible(True)
        self._refit_later()

    def _ask_for_folder(self) -> None:
        path = safe_file_dialog.existing_directory(  # never reads a /proc file on this thread
            self, "Choose the folder that holds the checkpoint", str(Path.home())
        )
        if path:
            self.choose_folder(Path(path))

    # -- helpers ------------------------------------------------------------------------------

    def _downloader(self) -> CheckpointDownloader:
        token = self._token
        if self.token_edit is not None:
            token = self.token_edit.text().strip() or None
        return CheckpointDownloader.for_manifest(
            self.manifest, self.folder, endpoint=self.endpoint, token=token
        )

    def _source_text(self) -> str:
        return f"{self.manifest.hf_repo} · licence {self.manifest.licence}"

    def _new_job(self, work: Callable[[_Job], Any], name: str, **reports: Any) -> _Job:
        """A job, to start; `reports`: the dialog's methods that take what it reports."""
        job = _Job(work, name, **reports)
        self._jobs.append(job)  # kept: closing the dialog cancels it, `shutdown` waits for it
        return job

    def _fit(self) -> None:
        """Grow to the height the word-wrapped labels need at this width (a top-level
        window's size hint ignores height-for-width, so long messages would be squashed),
        but no taller than the screen: beyond that the choices scroll."""
        viewport = self.choices_area.viewport()
        body = self.body.heightForWidth(viewport.width())
        needed = max(body, self.body.minimumSizeHint().height()) \
            + self.height() - viewport.height()
        screen = self.screen()
        if screen is not None:
            needed = min(needed, screen.availableGeometry().height() - _WINDOW_FRAME_PX)
        if needed > self.height():
            self.resize(self.width(), needed)
        keep_on_screen(self)  # grown, or opened on a smaller screen: back inside it

    def _refit_later(self) -> None:
        # After the new text has been laid out; not at all once the dialog is gone.
        QTimer.singleShot(0, self, self._fit)

    def _set_choices_enabled(self, enabled: bool) -> None:
        self.download_button.setEnabled(enabled and bool(self.manifest.hf_repo))
        self.folder_button.setEnabled(enabled)
        self.alternative_button.setEnabled(enabled)
        if self.token_edit is not None:
            self.token_edit.setEnabled(enabled)
