"""The moshi adapter refuses a moshi other than the one its accessors were read against, at
import, saying which versions and what to do; the pinned one loads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import moshi
import pytest

from app.moshi_internals import READ_AGAINST, MoshiVersionError, check_moshi_version

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_the_installed_moshi_is_the_one_the_accessors_were_read_against() -> None:
    assert moshi.__version__ == READ_AGAINST
    check_moshi_version(moshi.__version__)


def test_another_version_is_refused_with_the_reason() -> None:
    with pytest.raises(MoshiVersionError, match=r"read against moshi 0\.2\.13, but moshi "
                                                r"0\.3\.0 is installed"):
        check_moshi_version("0.3.0")


def test_the_refusal_comes_at_import() -> None:
    """Before anything reads a state through the adapter: importing it fails."""
    child = subprocess.run(
        [sys.executable, "-c",
         "import moshi; moshi.__version__ = '0.3.0'; import app.moshi_internals"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert child.returncode != 0
    assert "MoshiVersionError" in child.stderr
    assert "moshi 0.3.0 is installed" in child.stderr
