"""A run that must leave the user's files alone (`python main.py --screenshot`): the data and
config dirs point at a fresh temporary folder while it runs, and the folder is removed after.

The app finds both through `CONTEXTSPAN_DATA_DIR` and `CONTEXTSPAN_CONFIG_DIR` each time it
asks (app/paths.py, app/settings/store.py), so setting them is enough: the autosaved
conversation, the window's remembered docks and zoom, and the conversation list all come
from (and go to) the throw-away folder, never the user's.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DATA_ENV = "CONTEXTSPAN_DATA_DIR"
CONFIG_ENV = "CONTEXTSPAN_CONFIG_DIR"


@contextmanager
def throwaway_app_dirs(prefix: str = "contextspan-") -> Iterator[Path]:
    """Point the data and config dirs at `<fresh temp dir>/data` and `/config`; yields the
    temp dir. On the way out the variables are as they were and the folder is gone."""
    before = {name: os.environ.get(name) for name in (DATA_ENV, CONFIG_ENV)}
    with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        folder = Path(scratch)
        os.environ[DATA_ENV] = str(folder / "data")
        os.environ[CONFIG_ENV] = str(folder / "config")
        try:
            yield folder
        finally:
            for name, value in before.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
