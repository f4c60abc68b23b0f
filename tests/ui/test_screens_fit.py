"""Issue 28, item 1: at 200 % on a 1920×1080 screen (QT_SCALE_FACTOR=2: 960×540 to lay out
in) the main window opened at 1960×1400 with its input box, Send and status bar off the
screen, and the Settings dialog's minimum size (1200×1184) kept OK and Cancel out of reach.

Every window and dialog of the app is opened there, in a child process on Qt's offscreen
platform given that screen (`QT_QPA_PLATFORM=offscreen:configfile=…`, whose JSON names the
screen's size; offscreen's default screen is 800×800), by tests/ui/screens_driver.py: each
must lie inside the screen with its buttons (and the window's input box and status bar)
inside it, and its minimum size must fit the screen. A grab of the whole screen is saved for
each (a person can look at them: the paths are in the assertion messages).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SCREEN = {"screens": [{"name": "1920x1080", "x": 0, "y": 0, "width": 1920, "height": 1080,
                       "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]}
EXPECTED = {"main-window", "main-window-saved-too-large", "main-window-saved-off-screen",
            "settings-speech", "settings-audio", "settings-assistant", "settings-tools",
            "first-run-moshi", "first-run-gated-personaplex", "speech-recognition-download",
            "about",
            "export-file-dialog", "saved-conversation", "close-question"}


def test_the_window_and_every_dialog_fit_a_1920x1080_screen_at_200_percent(tmp_path):
    screen = tmp_path / "screen.json"
    screen.write_text(json.dumps(SCREEN), encoding="utf-8")
    pictures = tmp_path / "screens"
    env = {**os.environ, "QT_SCALE_FACTOR": "2",
           "QT_QPA_PLATFORM": f"offscreen:configfile={screen}",
           "CONTEXTSPAN_DATA_DIR": str(tmp_path / "data"),
           "CONTEXTSPAN_CONFIG_DIR": str(tmp_path / "config"),
           "PYTHONPATH": str(REPO_ROOT), "PULSE_SERVER": "unix:/nonexistent"}
    run = subprocess.run([sys.executable, str(REPO_ROOT / "tests/ui/screens_driver.py"),
                          str(pictures)], cwd=REPO_ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    results = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert {r["name"] for r in results} == EXPECTED, (run.returncode, run.stderr[-3000:])
    for result in results:
        assert result["scale"] == 2.0 and result["screen"] == "960x540+0+0", result
        assert not result["problems"], result
        assert Path(result["picture"]).stat().st_size > 10_000, result  # a real picture
    assert run.returncode == 0, run.stderr[-3000:]
