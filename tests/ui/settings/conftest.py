"""The settings dialog's tests that ask for it (`private_dirs`) see no checkpoint of the
user's, and no background job of the dialog's (the memory plan, a connection test) outlives
the test that started it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.ui.background_jobs import wait_for_jobs

# A bound for the tabs' jobs to end, not a time: the memory plan builds a 7B on meta,
# seconds on an idle machine and many more at load 10.
JOBS_END_S = 120.0


@pytest.fixture()
def private_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("CONTEXTSPAN_DATA_DIR", str(tmp_path / "data"))
    yield
    assert wait_for_jobs(JOBS_END_S)
