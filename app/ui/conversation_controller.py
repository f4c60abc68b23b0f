"""The GUI side of a session: its listener calls become Qt signals carrying plain data.

The session's threads reach the GUI thread through the one bridge (gui_bridge.py): its
listener is a plain object that posts each call, and the controller emits the signal on the
GUI thread, so no signal is emitted from another thread and the GUI thread only draws.
Start, stop, a second start, a restart and the shutdown on close are all non-blocking:
sessions wind down on their own threads and a timer notices.
"""

from __future__ import annotations

import itertools
import threading
import time
import types
import weakref
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from app.conversation.audio_source import AudioSource
from app.conversation.session import CheckpointCache, ConversationSession, SessionStatus
from app.conversation.transcript.entries import TranscriptEntry
from app.settings.schema import AppSettings
from app.ui.gui_bridge import ToGui

# Threads a conversation runs; what is still alive of these is named when closing is slow.
CONVERSATION_THREADS = ("conversation", "duplex-engine", "orchestrator", "pipeline-router",
                        "llm-turn-", "llm-retrieval-", "streaming-asr", "user-levelling",
                        "silent-microphone", "live-audio", "file-audio", "remote-engine")


# The states a session ends in by itself (the last it says before its threads end).
ENDED_STATES = ("stopped", "error", "model_missing")

# The app's check before a conversation starts: the settings to start with, or None.
Preflight = Callable[[AppSettings], AppSettings | None]


class _SessionListener:
    """What a session's threads call: plain Python, no Qt object. Each call is posted to the
    controller on the GUI thread; the entry sinks (the autosave) run here, at once."""

    def __init__(self, controller: ConversationController) -> None:
        self.state = ToGui(controller._state_from_session)
        self.entry = ToGui(controller._entry_from_session)
        self.status = ToGui(controller._status_from_session)
        self.entry_sinks = controller.entry_sinks  # the same list: sinks added later count

    def on_state(self, state: str, detail: str) -> None:
        self.state.post(state, detail)

    def on_entry(self, entry: TranscriptEntry) -> None:
        for sink in self.entry_sinks:  # e.g. the autosave: it must not wait for the GUI
            sink(entry)
        self.entry.post(entry)

    def on_status(self, status: SessionStatus) -> None:
        self.status.post(status)


class ConversationController(QObject):
    # state: idle/loading/running/paused/stopping/stopped/error/model_missing, and a text
    state_changed = Signal(str, str)
    entry = Signal(object)  # TranscriptEntry
    status = Signal(object)  # SessionStatus

    def __init__(self, audio_factory: Callable[[AppSettings], AudioSource],
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._audio_factory = audio_factory
        self._cache = CheckpointCache()
        self._session: ConversationSession | None = None
        self._stopping: list[ConversationSession] = []
        self._listeners: dict[ConversationSession, _SessionListener] = {}
        self._closing: list[ConversationSession] = []
        self._start_when_stopped: AppSettings | None = None
        self.state = "idle"
        self._preflight: Callable[[], Preflight | None] = lambda: None
        self._local_ids = itertools.count(-1, -1)  # notices made here, apart from sessions
        # Called with each session entry on the session's thread, before the signal: for
        # what must go on while the GUI thread is busy (the autosave). Must return at once.
        self.entry_sinks: list[Callable[[TranscriptEntry], None]] = []
        self._reaper = QTimer(self)
        self._reaper.setInterval(100)
        self._reaper.timeout.connect(self._reap)
        self.state_changed.connect(self._remember_state)

    @property
    def preflight(self) -> Preflight | None:
        """Called before a conversation starts (the app checks the models are on disk and
        offers the download); returns the settings to start with, or None to not start.
        A bound method is held weakly: its object (the app, DesktopApp) owns this controller,
        and a strong hold back would make the two a cycle that only the collector frees."""
        return self._preflight()

    @preflight.setter
    def preflight(self, check: Preflight | None) -> None:
        if isinstance(check, types.MethodType):
            self._preflight = weakref.WeakMethod(check)
        else:
            self._preflight = lambda: check

    # What the session's listener posted, on the GUI thread.
    def _state_from_session(self, state: str, detail: str) -> None:
        self.state_changed.emit(state, detail)
        if state in ENDED_STATES:  # its threads wind down: the reaper notices the end
            self._reaper.start()

    def _entry_from_session(self, entry: TranscriptEntry) -> None:
        self.entry.emit(entry)

    def _status_from_session(self, status: SessionStatus) -> None:
        self.status.emit(status)

    @Slot(str, str)
    def _remember_state(self, state: str, _detail: str) -> None:
        self.state = state

    @property
    def running(self) -> bool:
        return self._session is not None and self._session.running

    @property
    def settings(self) -> AppSettings | None:
        """The settings the running conversation was built with (None: none runs)."""
        return self._session.settings if self._session is not None else None

    def start(self, settings: AppSettings) -> None:
        if self._session is not None and self._session.paused:
            self._session.resume()
            return
        if self.running:
            return
        preflight = self.preflight
        if preflight is not None:
            checked = preflight(settings)
            if checked is None:
                return
            settings = checked
        listener = _SessionListener(self)
        self._session = ConversationSession(settings, listener, self._audio_factory,
                                            self._cache)
        self._listeners[self._session] = listener
        listener.state.expect()  # the bridge polls until this session has ended
        self.state_changed.emit("loading", "Starting…")
        self._session.start()

    def stop(self) -> None:
        """Ask the session to stop; it winds down on its own thread (no GUI wait)."""
        if self._session is None:
            return
        session, self._session = self._session, None
        session.request_stop()  # closes a pending LLM request at once
        self._stopping.append(session)
        self.state_changed.emit("stopping", "Stopping…")
        self._reaper.start()

    def restart(self, settings: AppSettings) -> None:
        """Stop the conversation and start a new one with `settings` once the old one has
        shut down (they share the loaded checkpoint). The transcript stays in the window."""
        self._start_when_stopped = settings
        self.stop()
        self._reaper.start()

    def _reap(self) -> None:
        self._forget_ended()
        self._stopping = [s for s in self._stopping if s.running]
        ending = self._session in self._listeners and self.state in ENDED_STATES
        if self._stopping or ending:
            return
        self._reaper.stop()
        settings, self._start_when_stopped = self._start_when_stopped, None
        if settings is not None and self._session is None:
            self.start(settings)

    def _forget_ended(self) -> None:
        """Sessions whose threads ended: the bridge stops waiting for them (what they posted
        is still delivered)."""
        for session in [s for s in self._listeners if not s.running]:
            self._listeners.pop(session).state.settle()

    def apply_settings(self, settings: AppSettings) -> tuple[str, ...]:
        """Settings changed (dialog OK): the running conversation applies what it can at
        once; returns what needs a restart, in words (empty when nothing runs)."""
        session = self._session
        if session is None or not session.running:
            return ()
        return session.apply_settings(settings)

    def cancel_pending_turn(self) -> None:
        """Esc or the thinking entry's Cancel: drop the LLM request in flight, if any."""
        if self._session is not None:
            self._session.cancel_pending_turn()

    # ---- closing ----------------------------------------------------------------------------

    def begin_shutdown(self) -> None:
        """On close: every session winds down on its own thread; returns at once."""
        self._start_when_stopped = None
        self._reaper.stop()
        sessions = ([self._session] if self._session is not None else []) + self._stopping
        self._session, self._stopping = None, []
        for session in sessions:
            session.request_stop()
        self._closing += sessions

    def wait_shutdown(self, timeout: float) -> bool:
        """After begin_shutdown: wait (bounded) for the sessions; True when all ended."""
        deadline = time.monotonic() + timeout
        ended = all([s.join(deadline - time.monotonic()) for s in self._closing])
        self._forget_ended()
        return ended

    @staticmethod
    def live_threads() -> list[str]:
        """Names of the conversation threads still running (for the log on a slow exit)."""
        return sorted(t.name for t in threading.enumerate() if t.is_alive()
                      and t.name.startswith(CONVERSATION_THREADS))

    def shutdown(self, timeout: float = 15.0) -> bool:
        """Stop everything and wait (bounded): for callers that must not leave threads
        behind (the screenshot run, tests). Closing the window uses begin_shutdown."""
        self.begin_shutdown()
        return self.wait_shutdown(timeout)

    # ---- talking to the conversation ----------------------------------------------------------

    def set_muted(self, muted: bool) -> None:
        if self._session is not None:
            self._session.set_muted(muted)

    def notice(self, message: str, severity: str = "warning") -> TranscriptEntry:
        """A notice of the app's own, into the transcript; returns it (emitting an entry
        with its id again rewrites it in place)."""
        entry = TranscriptEntry(next(self._local_ids), "notice", message, time.time(),
                                detail=severity)
        self.entry.emit(entry)
        return entry

    def send_text(self, text: str) -> bool:
        """False (and a notice) when no conversation runs: the caller keeps the text."""
        if self._session is None:
            self.notice("Start a conversation first: your text is kept in the box.")
            return False
        self._session.send_text(text)
        return True

    def inject_text(self, text: str, source: str) -> bool:
        if self._session is None:
            self.notice("Start a conversation first, then drop or paste the text again.")
            return False
        self._session.inject_text(text, source)
        return True
