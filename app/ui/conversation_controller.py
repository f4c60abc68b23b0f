"""The GUI side of a session: its listener calls become Qt signals carrying plain data.

Signals emitted from the session's thread reach slots on the GUI thread as queued calls,
so the GUI thread only draws. Start, stop and a second start are all non-blocking.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from app.session import AudioSource, CheckpointCache, ConversationSession, SessionStatus
from app.settings.schema import AppSettings
from app.ui.transcript_entries import TranscriptEntry


class ConversationController(QObject):
    state_changed = Signal(str, str)  # state (idle/loading/running/stopping/stopped/error), text
    entry = Signal(object)  # TranscriptEntry
    status = Signal(object)  # SessionStatus

    def __init__(self, audio_factory: Callable[[AppSettings], AudioSource],
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._audio_factory = audio_factory
        self._cache = CheckpointCache()
        self._session: ConversationSession | None = None
        self._stopping: list[ConversationSession] = []
        self.state = "idle"
        self._local_ids = itertools.count(-1, -1)  # notices made here, apart from sessions
        self._reaper = QTimer(self)
        self._reaper.setInterval(100)
        self._reaper.timeout.connect(self._reap)
        self.state_changed.connect(self._remember_state)

    # Listener interface, called on the session's thread: only emit.
    def on_state(self, state: str, detail: str) -> None:
        self.state_changed.emit(state, detail)

    def on_entry(self, entry: TranscriptEntry) -> None:
        self.entry.emit(entry)

    def on_status(self, status: SessionStatus) -> None:
        self.status.emit(status)

    @Slot(str, str)
    def _remember_state(self, state: str, _detail: str) -> None:
        self.state = state

    @property
    def running(self) -> bool:
        return self._session is not None and self._session.running

    def start(self, settings: AppSettings) -> None:
        if self._session is not None and self._session.paused:
            self._session.resume()
            return
        if self.running:
            return
        self._session = ConversationSession(settings, self, self._audio_factory, self._cache)
        self.state_changed.emit("loading", "Starting…")
        self._session.start()

    def stop(self) -> None:
        """Ask the session to stop; it winds down on its own thread (no GUI wait)."""
        if self._session is None:
            return
        session, self._session = self._session, None
        session._stop.set()  # the session's own stop waits; we poll it from a timer instead
        self._stopping.append(session)
        self.state_changed.emit("stopping", "Stopping…")
        self._reaper.start()

    def _reap(self) -> None:
        self._stopping = [s for s in self._stopping if s.running]
        if not self._stopping:
            self._reaper.stop()

    def shutdown(self, timeout: float = 15.0) -> bool:
        """On close: stop everything and wait (bounded) so no thread outlives the window."""
        ok = True
        if self._session is not None:
            ok = self._session.stop(timeout)
            self._session = None
        for session in self._stopping:
            ok = session.stop(timeout) and ok
        self._stopping = []
        return ok

    def set_muted(self, muted: bool) -> None:
        if self._session is not None:
            self._session.set_muted(muted)

    def notice(self, message: str, severity: str = "warning") -> None:
        self.entry.emit(TranscriptEntry(next(self._local_ids), "notice", message, time.time(),
                                        detail=severity))

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
