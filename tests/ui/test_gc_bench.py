"""`python -m app.ui.gc_bench`: the full collection in the app after start-up, before and
after the gc.freeze() the app makes; the numbers it prints are about the app's real window."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_gc_bench_times_the_real_windows_collections_before_and_after_the_freeze() -> None:
    result = subprocess.run([sys.executable, "-m", "app.ui.gc_bench", "--repeats", "2"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["repeats"] == 2
    # The window's start-up made tens of thousands of objects the collector walks; after the
    # freeze it walks none of them (what a collection costs is then the app's new objects).
    assert report["objects_watched_before"] > 10_000
    assert report["objects_watched_after"] < report["objects_watched_before"] / 100
    for key in ("before_freeze_ms", "after_freeze_ms"):
        assert 0 <= report[key]["median"] <= report[key]["max"]
