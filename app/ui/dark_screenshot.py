"""`python -m app.ui.dark_screenshot assets/screenshot-dark.png`: the same scripted screenshot
as `python main.py --screenshot`, on a dark desktop palette (Fusion style).

Like that one it runs in a throw-away data and config dir (app/ui/throwaway_dirs.py), so
making a screenshot leaves nothing in the user's config or conversation list.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].endswith(".png"):
        print("usage: python -m app.ui.dark_screenshot FILE.png", file=sys.stderr)
        return 2
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from app.ui.theme import dark_palette

    application = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(application, QApplication)  # a widgets app, not a bare core one
    application.setStyle("Fusion")
    application.setPalette(dark_palette())
    from app.ui.app import run_app

    return run_app(screenshot=Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
