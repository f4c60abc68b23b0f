"""`python main.py --screenshot` leaves the user's files alone (issue 19, item 5): its demo
conversation is not saved into the user's list, the window does not restore the user's
docks and conversation titles, and the throw-away data and config dir it ran in is removed.

The run is the real command in a child process, in a "user" data dir that holds a saved
conversation and the tiny checkpoint, and a "user" config dir that holds settings."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from app.conversation.transcript.entries import TranscriptEntry
from app.conversation.transcript.export import TranscriptHeader
from app.conversation.transcript.saved import ConversationStore
from app.settings.schema import AppSettings
from app.settings.store import SettingsStore

REPO_ROOT = Path(__file__).resolve().parents[2]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_screenshot_runs_in_a_throwaway_dir_and_leaves_the_users_files(tiny_folder, tmp_path):
    user_data = tmp_path / "user-data"
    (user_data / "checkpoints").mkdir(parents=True)
    (user_data / "checkpoints" / "tiny").symlink_to(tiny_folder)  # built once per session
    saved = ConversationStore(user_data / "conversations")
    saved.save(TranscriptHeader(conversation_id="20261130-180000-a1b2c3",
                                title="Lunch with Ana", started=time.time() - 86400),
               [TranscriptEntry(1, "user", "Lunch with Ana on Friday?", time.time() - 86400)])
    user_config = tmp_path / "user-config"
    SettingsStore(user_config / "settings.json").save(AppSettings())
    conversations_before = _files(user_data / "conversations")
    config_before = _files(user_config)
    scratch = tmp_path / "tmp"  # the run's TMPDIR: where its throw-away dir is made
    scratch.mkdir()
    picture = tmp_path / "shot.png"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "TMPDIR": str(scratch),
           "CONTEXTSPAN_DATA_DIR": str(user_data), "CONTEXTSPAN_CONFIG_DIR": str(user_config),
           "PULSE_SERVER": "unix:/nonexistent"}
    result = subprocess.run([sys.executable, "main.py", "--screenshot", str(picture)],
                            cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                            timeout=400)
    assert result.returncode == 0, result.stderr
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert _files(user_data / "conversations") == conversations_before  # no demo saved
    assert _files(user_config) == config_before  # no window state, no settings written
    made_in = [line for line in result.stdout.splitlines() if "throw-away" in line]
    assert made_in and str(scratch) in made_in[0], result.stdout  # a fresh dir under TMPDIR
    assert list(scratch.iterdir()) == []  # ... removed afterwards
