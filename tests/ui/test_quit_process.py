"""Quit quits: with a saved conversation open in its read-only window, Conversation → Quit
closes every window of the app and the process exits (issue 19, item 3).

The real app runs in a child process (tests/ui/quit_driver.py drives `run_app`), offscreen,
in a private config and data dir; nothing is started, so no model is needed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings
from app.settings.store import SettingsStore

REPO_ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("quit_driver.py")


def test_quit_with_a_saved_conversation_open_ends_the_process(tmp_path):
    config = tmp_path / "config"
    SettingsStore(config / "settings.json").save(AppSettings(
        speech=SpeechModelSettings(model_id="tiny", device="cpu"),
        llm=LlmSettings(backend="none", stt_model="none")))
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen",
           "CONTEXTSPAN_CONFIG_DIR": str(config),
           "CONTEXTSPAN_DATA_DIR": str(tmp_path / "data"),
           "PULSE_SERVER": "unix:/nonexistent"}
    app = subprocess.Popen([sys.executable, str(DRIVER)], cwd=REPO_ROOT, env=env,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        assert app.stdout is not None and app.stdin is not None
        said = app.stdout.readline().strip()  # blocks until the viewer is up (or a crash)
        assert said == "viewer-open", (said, app.poll())
        app.stdin.write("quit\n")
        app.stdin.flush()
        chose = time.monotonic()
        try:
            app.wait(timeout=15.0)
        except subprocess.TimeoutExpired:
            raise AssertionError("Quit left the process running while the saved "
                                 "conversation's window was open") from None
        exited_s = time.monotonic() - chose
    finally:
        if app.poll() is None:
            app.kill()
        out, err = app.communicate(timeout=10.0)
    assert app.returncode == 0, err
    assert "quit-chosen" in out
    assert "Traceback" not in err, err
    assert exited_s < 5.0  # the app ends itself by 2 s after the close; a loaded machine
