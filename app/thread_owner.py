"""A worker that owns one thread for its life: started once, stopped by an event, joined with
a timeout. The engine (engine/local_engine.py) and the frame-fed stages (frame_worker.py)
are such workers; their `_run` is the thread's body and ends when `_stop` is set."""

from __future__ import annotations

import threading


class ThreadOwner:
    def __init__(self, thread_name: str) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._thread_name = thread_name

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{self._thread_name} runs once; make a new one to start again")
        self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop now and wait. True when the thread has ended (or never started)."""
        self._stop.set()
        self._wake()
        return self.join(timeout)

    def join(self, timeout: float = 10.0) -> bool:
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _wake(self) -> None:
        """A thread waiting on something else than `_stop` is woken here (a subclass's)."""

    def _run(self) -> None:  # pragma: no cover - every subclass has its own
        raise NotImplementedError
