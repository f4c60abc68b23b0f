"""`python -m app.ui.dark_screenshot assets/screenshot-dark.png`: the same scripted screenshot
as `python main.py --screenshot`, on a dark desktop palette (Fusion style).

The window's remembered state and the autosaved conversation go to a temporary folder, so
making a screenshot leaves nothing in the user's config or conversation list.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].endswith(".png"):
        print("usage: python -m app.ui.dark_screenshot FILE.png", file=sys.stderr)
        return 2
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    with tempfile.TemporaryDirectory(prefix="contextspan-screenshot-") as scratch:
        os.environ["CONTEXTSPAN_CONFIG_DIR"] = str(Path(scratch) / "config")
        from PySide6.QtWidgets import QApplication

        import app.conversation.transcript.saved as store
        from app.ui.theme import dark_palette

        store.conversations_dir = lambda: Path(scratch) / "conversations"
        application = QApplication.instance() or QApplication(sys.argv[:1])
        application.setStyle("Fusion")
        application.setPalette(dark_palette())
        from app.ui.app import run_app

        return run_app(screenshot=Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
