"""ContextSpan entry point: `python main.py --help`."""

import sys

from app.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
