"""A settings tab's background job may outlive the tab (the dialog closed while Ollama had
not answered): the process survives it, and only tabs still there get their results."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
DRIVER = Path(__file__).with_name("background_jobs_driver.py")


def test_tabs_closed_while_their_jobs_run_do_not_crash_the_app() -> None:
    child = subprocess.run([sys.executable, str(DRIVER)], cwd=REPO_ROOT, capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])
    assert "Signal source has been deleted" not in child.stderr
    # The 20 tabs left open got their results; the 20 closed ones nothing.
    assert child.stdout.strip() == "delivered 20, dropped 20"
