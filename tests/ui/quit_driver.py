"""Runs the real desktop app (`run_app`) for test_quit_process.py, scripted through stdin.

It saves a conversation into the app's store, opens it in its read-only window, says
"viewer-open", then waits for a line "quit" on stdin and chooses Conversation → Quit the
way a user does. The test sees whether the process exits. Not a test module itself.
"""

from __future__ import annotations

import sys
import threading
import time

from PySide6.QtCore import QObject, Signal


class _StdinBridge(QObject):
    quit_requested = Signal()


SAVED_ID = "20261201-090000-abcdef"


def _script(window, _controller) -> None:
    from app.conversation.transcript.entries import TranscriptEntry
    from app.conversation.transcript.export import TranscriptHeader

    features = window.features
    header = TranscriptHeader(conversation_id=SAVED_ID, title="Lunch with Ana",
                              started=time.time() - 3600)
    features.keeper.store.save(header, [TranscriptEntry(1, "user", "Lunch with Ana on Friday?",
                                                        time.time() - 3600)])
    viewer = features.open_saved(SAVED_ID)
    print("viewer-open" if viewer is not None and viewer.isVisible() else "viewer-failed",
          flush=True)
    bridge = _StdinBridge(window)  # lives on the GUI thread: the signal arrives queued

    def quit_app() -> None:
        features.quit_action.trigger()
        print("quit-chosen", flush=True)

    bridge.quit_requested.connect(quit_app)

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "quit":
                bridge.quit_requested.emit()
                return

    threading.Thread(target=read_stdin, name="driver-stdin", daemon=True).start()


def main() -> int:
    from app.ui.app import run_app

    return run_app(script=_script)  # ends the process itself (os._exit) after the close


if __name__ == "__main__":
    sys.exit(main())
