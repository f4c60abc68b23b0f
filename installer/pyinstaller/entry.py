"""The packaged app's entry point (the script PyInstaller freezes).

In a frozen app `sys.executable` is the app's own binary, not a Python interpreter, so a
child process the app starts as `sys.executable -m app.some.module ARGS` (the tiny
checkpoint's tokenizer is trained that way) arrives here. Such calls are sent to that
module's `main(argv)`; everything else is the normal command line (`app.cli.main`).
"""

from __future__ import annotations

import importlib
import multiprocessing
import sys


def run_module(module: str, argv: list[str]) -> int:
    """Run one of the app's own modules the way `python -m module argv...` would."""
    if module != "app" and not module.startswith("app."):
        print(f"error: the packaged app only runs its own modules, not {module}",
              file=sys.stderr)
        return 2
    target = importlib.import_module(module)
    entry = getattr(target, "main", None)
    if entry is None:
        print(f"error: {module} has no main()", file=sys.stderr)
        return 2
    sys.argv = [module, *argv]
    result = entry(argv)
    return result if isinstance(result, int) else 0


def main() -> int:
    argv = sys.argv[1:]
    if len(argv) >= 2 and argv[0] == "-m":
        return run_module(argv[1], argv[2:])
    multiprocessing.freeze_support()
    from app.cli.main import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
