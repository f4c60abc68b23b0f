"""No file dialog may freeze the app on a special file (issue 19, item 4): typing `/proc/kmsg`
into Qt's own export dialog used to block the GUI thread in read(), for good. The dialog runs
in a child process (tests/ui/file_dialog_driver.py) so that a freeze is a timeout here, not a
hung test run; a FIFO beside the export folder would block any reader that opened it, and
the driver checks that nobody did."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from app.paths import REPO_ROOT
from app.ui.safe_file_dialog import special_path_reason

DRIVER = Path(__file__).with_name("file_dialog_driver.py")


def test_typing_or_choosing_a_special_file_neither_freezes_nor_reads_it(tmp_path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen",
           "CONTEXTSPAN_CONFIG_DIR": str(tmp_path / "config"),
           "CONTEXTSPAN_DATA_DIR": str(tmp_path / "data")}
    try:
        run = subprocess.run([sys.executable, str(DRIVER), str(fifo), "/proc/kmsg"],
                             cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                             timeout=90)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the GUI thread froze in the file dialog: {exc.stdout!r}") from exc
    steps = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    typed = [s for s in steps if "typed" in s]
    entered = [s for s in steps if "entered" in s]
    assert run.returncode == 0, run.stderr[-3000:]
    assert [s["typed"] for s in typed] == [str(fifo), "/proc/kmsg"], steps
    for step in typed:
        assert step["ticked"] > 0, step  # the GUI thread went on while the path was typed
        assert not step["fifo_reader"], step  # nobody opened the FIFO
    for step in entered:
        assert "Choose another file" in step["message"], step  # refused, said why
        assert step["still_fifo"] and not step["fifo_reader"], step  # not written, not read
    assert steps[-1] == {"done": True, "exported": None}
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_special_paths_are_told_apart_without_opening_them(tmp_path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert "not a regular file" in (special_path_reason(fifo) or "")
    assert "/proc" in (special_path_reason(Path("/proc/kmsg")) or "")
    assert "/sys" in (special_path_reason(Path("/sys/kernel/notes")) or "")
    assert "/dev" in (special_path_reason(Path("/dev/null")) or "")
    assert special_path_reason(tmp_path / "conversation.md") is None  # a new file
    (tmp_path / "old.md").write_text("x")
    assert special_path_reason(tmp_path / "old.md") is None  # overwritten, asked by Qt
    assert "folder" in (special_path_reason(tmp_path) or "")
