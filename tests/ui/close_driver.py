"""Runs the real desktop app (`run_app`) for test_close_process.py, scripted through stdin.

It presses Start, waits until the conversation runs, types a question (the test's stand-in
LLM hangs on it), says "asked", then waits for a line "close" on stdin and closes the window
the way a user does, printing the monotonic time it did so and how long close() took. The
test measures when the process has exited. Not a test module itself (no test_ prefix).
"""

from __future__ import annotations

import sys
import threading
import time

from PySide6.QtCore import QObject, QTimer, Signal


class _StdinBridge(QObject):
    close_requested = Signal()


def _script(window, controller) -> None:
    bridge = _StdinBridge(window)  # lives on the GUI thread: the signal arrives queued

    def close() -> None:
        began = time.monotonic()
        print(f"closing {began:.6f}", flush=True)
        window.close()
        print(f"close-returned {time.monotonic() - began:.6f}", flush=True)

    bridge.close_requested.connect(close)

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "close":
                bridge.close_requested.emit()
                return

    threading.Thread(target=read_stdin, name="driver-stdin", daemon=True).start()

    def ask_when_running() -> None:
        if controller.state in ("running", "paused"):
            print(f"state {controller.state}", flush=True)
            controller.send_text("What is the capital of Australia?")
            print("asked", flush=True)
        elif controller.state in ("error", "stopped", "model_missing"):
            print(f"failed {controller.state}", flush=True)
        else:
            QTimer.singleShot(50, ask_when_running)

    window.start_action.trigger()
    QTimer.singleShot(50, ask_when_running)


def main() -> int:
    from app.ui.app import run_app

    return run_app(script=_script)  # ends the process itself (os._exit) after the close


if __name__ == "__main__":
    sys.exit(main())
