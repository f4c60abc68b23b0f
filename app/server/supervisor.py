"""A server's engine (or recogniser) kept running: a failure says why, and a new one serves.

A row host (app/row_host.py) that fails mid-run tells its conversations why and stops. A
server must then serve again, and say the truth in between. Which of the two ways, and why:

- a fault in the shared step (an exception: CUDA out of memory at a spike, a bad input the
  model chokes on) ends the host's thread cleanly: its streaming state is released, the
  weights stay loaded. A NEW host on the same weights is built and warmed (seconds, not the
  minutes a reload takes), and serves;
- a step that hangs (the watchdog's StallError) leaves its thread stuck inside the device:
  nothing in this process can take the device back from it. The server exits non-zero, so
  its supervisor (systemd, Docker's restart policy, Kubernetes) starts a fresh process;
- so does a replacement that fails to warm up, and a host that fails more than
  `max_restarts` times within `window_s` (a fault that comes back is not a spike).

Between a failure and the new host's `ready`, `state` is "restarting" with the reason, so
`/health`, `/metrics` and a client who knocks are told, never "ready" with a dead thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from app.row_host import HostFailedError, RowHost

log = logging.getLogger(__name__)

Host = TypeVar("Host", bound=RowHost)  # type: ignore[type-arg]  # any row type

MAX_RESTARTS = 3
RESTART_WINDOW_S = 600.0
LOOK_EVERY_S = 0.2  # how often the supervisor looks whether its host ended


class Supervisor(Generic[Host]):
    def __init__(self, make: Callable[[], Host], warm_up_timeout_s: float,
                 on_fatal: Callable[[str], None] | None = None,
                 max_restarts: int = MAX_RESTARTS, window_s: float = RESTART_WINDOW_S) -> None:
        """`make()`: a new host, not started. `on_fatal(reason)`: called once when no host
        will serve again (the process should exit non-zero)."""
        self._make = make
        self._warm_up_timeout_s = warm_up_timeout_s
        self.on_fatal = on_fatal
        self._max_restarts = max_restarts
        self._window_s = window_s
        self._restarts: deque[float] = deque()
        self._closing = threading.Event()
        self.current: Host = make()
        self.what = self.current.what
        self.restarts = 0  # hosts built to replace a failed one
        self.failures = 0  # hosts that failed while serving
        self.restarting: str | None = None  # why a new host is warming up
        self.fatal: str | None = None  # why no host will serve again
        self.current.start()
        self._thread = threading.Thread(target=self._watch, name="supervisor", daemon=True)
        self._thread.start()

    @property
    def state(self) -> str:
        """starting, ready, restarting or failed."""
        if self.fatal is not None:
            return "failed"
        if self.restarting is not None:
            return "restarting"
        return "ready" if self.current.ready.is_set() and self.current.running else "starting"

    @property
    def reason(self) -> str | None:
        """Why it is not serving now (None while it is, or while it first starts)."""
        if self.fatal is not None:
            return self.fatal
        if self.restarting is not None:
            return f"{self.what} is restarting after a failure: {self.restarting}"
        return None

    def close(self, timeout: float = 10.0) -> bool:
        """Stop supervising and stop the host; True once its thread ended."""
        self._closing.set()
        stopped = self.current.stop(timeout)
        self._thread.join(timeout)
        return stopped

    # ---- the supervisor's thread ------------------------------------------------------------

    def _watch(self) -> None:
        while not self._closing.is_set():
            host = self.current
            while not host.finished.wait(LOOK_EVERY_S):
                if self._closing.is_set():
                    return
                if host.failure is not None:  # the watchdog: the thread itself is stuck
                    break
            if self._closing.is_set():
                return
            if not self._replace(host):
                return

    def _replace(self, host: Host) -> bool:
        """A new host for the failed one; False when none will serve."""
        reason = host.failure or "its thread stopped"
        if not host.ready.is_set():
            return self._give_up(f"{self.what} did not start: {reason}")
        self.failures += 1
        if host.running:  # stuck in a step (StallError): the device is not ours any more
            host.stop(1.0)
            if host.running:
                return self._give_up(f"{self.what} failed and its thread is stuck: {reason}")
        now = time.monotonic()
        while self._restarts and now - self._restarts[0] > self._window_s:
            self._restarts.popleft()
        if len(self._restarts) >= self._max_restarts:
            return self._give_up(f"{self.what} failed {len(self._restarts) + 1} times in "
                                 f"{self._window_s:g} s, the last: {reason}")
        self._restarts.append(now)
        self.restarting = reason
        log.error("%s failed (%s): starting a new one", self.what, reason)
        replacement = self._make()
        replacement.start()
        try:
            replacement.wait_ready(self._warm_up_timeout_s)
        except HostFailedError as exc:
            replacement.stop(1.0)
            return self._give_up(f"{self.what} could not be restarted after a failure "
                                 f"({reason}): {exc}")
        self.current = replacement
        self.restarts += 1
        self.restarting = None
        log.warning("%s serves again (restart %d)", self.what, self.restarts)
        return True

    def _give_up(self, reason: str) -> bool:
        self.fatal = reason
        self.restarting = None
        log.error("%s: giving up, the server must be restarted", reason)
        if self.on_fatal is not None:
            self.on_fatal(reason)
        return False
