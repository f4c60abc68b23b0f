"""A real speech server in its own process (`python -m app.server.cli`, what `python main.py
serve` runs) on the tiny model, for tests of the app as its client: it can be killed like
a crashed server, and started again on the same port."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
_SERVING = re.compile(r"serving \S+ \(\S+\) on (\S+):")


class ServeProcess:
    def __init__(self, data_dir: Path, token: str | None, port: int = 0,
                 args: tuple[str, ...] = ()) -> None:
        """`args`: more `serve` arguments (e.g. "--slots", "3")."""
        self.data_dir = data_dir
        self.args = args
        self.token = token
        self.port = port
        self.url = ""
        self._process: subprocess.Popen | None = None
        self.log: list[str] = []  # the server's stderr, for a failing test's message

    def start(self, timeout: float = 180.0) -> str:
        """Start and wait for its "serving ... on URL" line; returns the URL."""
        env = {**os.environ, "CONTEXTSPAN_DATA_DIR": str(self.data_dir)}
        # One torch thread: on a shared two-core machine, torch's default of one thread a
        # core fights the test process and every other job, and the tiny model falls from
        # real time (~25 ms a frame) to ~500 ms a frame.
        env.setdefault("OMP_NUM_THREADS", "1")
        env.pop("CONTEXTSPAN_SERVER_TOKEN", None)
        if self.token:
            env["CONTEXTSPAN_SERVER_TOKEN"] = self.token  # kept out of `ps`, as advised
        self._process = subprocess.Popen(
            [sys.executable, "-m", "app.server.cli", "--model", "tiny", "--device", "cpu",
             "--port", str(self.port), "--seed", "1", "--chunk-limit", "16", *self.args],
            cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True)
        lines: queue.Queue[str | None] = queue.Queue()
        stderr = self._process.stderr
        assert stderr is not None

        def read() -> None:  # drains stderr for the server's whole life (a full pipe blocks)
            for line in stderr:
                self.log.append(line.rstrip())
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, name="serve-stderr", daemon=True).start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            match = _SERVING.search(line)
            if match:
                self.url = match.group(1)
                self.port = int(self.url.rsplit(":", 1)[1])
                return self.url
        self.kill()
        raise RuntimeError("the server did not start:\n" + "\n".join(self.log[-20:]))

    def kill(self) -> None:
        """SIGKILL: no goodbye on the socket, as when the server crashes."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    def __enter__(self) -> ServeProcess:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.kill()
