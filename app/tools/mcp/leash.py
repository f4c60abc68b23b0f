"""The process a stdio MCP server runs under on Linux and macOS, so that it never outlives us.

The SDK starts a server in a process group of its own and, when a session ends, closes its
stdin and then kills the whole group. That covers every way out but one: our process dying
without running its shutdown (killed, crashed). A server then only notices when its stdin
ends, and one that hangs, or a child it started (npx starts node), never does. So the
command runs under this small guard, as `python -I leash.py -- COMMAND ARGS...`:

- the server is its child, in its group, with its stdin, stdout and stderr (the guard then
  lets go of its own copies, so the server's exit is seen at once);
- the guard watches its parent: Linux tells it the moment the parent goes (PR_SET_PDEATHSIG),
  elsewhere it looks four times a second; then it ends the group, SIGTERM first and SIGKILL
  after 2 s;
- it exits with the server's status, and says on stderr why a server that failed did
  (not found, exit code, signal): the app shows that line.

Windows needs none of it: the SDK puts a server in a Job Object that dies with us. The
script uses only the standard library and imports nothing of the app (it starts with
`python -I`, the app's packages out of reach), and in a packaged app it runs as
`app -m app.tools.mcp.leash ...` (installer/pyinstaller/entry.py calls `main`).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time

PARENT_POLL_S = 0.25
KILL_AFTER_S = 2.0
PREFIX = "contextspan-leash:"
_PR_SET_PDEATHSIG = 1


def _die_with_parent(sig: int) -> None:
    """Linux: have the kernel send `sig` when our parent ends (best effort)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _say(text: str) -> None:
    try:
        sys.stderr.write(f"{PREFIX} {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _end_group(child: subprocess.Popen) -> None:
    """The parent is gone: the server and everything it started, politely then not."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's SIGTERM is not for us
    group = os.getpgrp()
    try:
        os.killpg(group, signal.SIGTERM)
    except OSError:
        child.terminate()
    deadline = time.monotonic() + KILL_AFTER_S
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        os.killpg(group, signal.SIGKILL)  # ourselves included: nothing is left behind
    except OSError:
        child.kill()


def _let_go_of_pipes() -> None:
    """Only the server holds the session's pipes: its exit closes them at once."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        with contextlib.suppress(OSError):
            os.dup2(null, fd)
    os.close(null)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        _say("no command given")
        return 2
    parent = os.getppid()
    parent_gone = {"yes": False}

    def on_parent_death(_signum: int, _frame: object) -> None:
        parent_gone["yes"] = True

    # SIGTERM also comes from the SDK's shutdown (to the whole group, the server included):
    # the server ends and so do we. SIGUSR1 is the kernel's word that the parent died.
    signal.signal(signal.SIGUSR1, on_parent_death)
    _die_with_parent(signal.SIGUSR1)
    if os.getppid() != parent:  # it died before we could ask
        return 1
    try:
        child = subprocess.Popen(args)
    except FileNotFoundError:
        _say(f"command not found: {args[0]}")
        return 127
    except PermissionError:
        _say(f"command not executable: {args[0]}")
        return 126
    except OSError as exc:
        _say(f"cannot start {args[0]}: {exc.strerror or exc}")
        return 126
    _let_go_of_pipes()
    status: int | None = None
    while status is None:
        try:
            status = child.wait(PARENT_POLL_S)
        except subprocess.TimeoutExpired:
            if parent_gone["yes"] or os.getppid() != parent:
                _end_group(child)
                return 1
    if status < 0:
        _say(f"the server was stopped by signal {-status}")
        return 128 - status
    if status != 0:
        _say(f"the server exited with code {status}")
    return status


if __name__ == "__main__":
    sys.exit(main())
