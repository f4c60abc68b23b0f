"""Real MCP servers for the tests: the SDK-made `sdk_server.py` over stdio and over
streamable HTTP, the hand-written `garbled_server.py`, and a way to tell a process is gone."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from app.settings.schema import McpServerSettings
from tests.waiting import wait_until

HERE = Path(__file__).resolve().parent
SDK_SERVER = HERE / "sdk_server.py"
GARBLED_SERVER = HERE / "garbled_server.py"
REPO_ROOT = HERE.parents[2]


def stdio_server(name: str = "notes", *args: str, **fields: object) -> McpServerSettings:
    """The SDK test server as a user configures a stdio server (command, args, env)."""
    return McpServerSettings(name=name, command=sys.executable,
                             args=(str(SDK_SERVER), "--name", name, *args), **fields)


def garbled_server(name: str = "garbled", **fields: object) -> McpServerSettings:
    return McpServerSettings(name=name, command=sys.executable, args=(str(GARBLED_SERVER),),
                             **fields)


def process_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, exited but not yet reaped, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def read_pid(path: Path, timeout: float = 120.0) -> int:
    wait_until(lambda: path.is_file() and path.read_text().strip(), timeout,
               message=f"the server never wrote {path}")
    return int(path.read_text())


def assert_gone(pid: int, timeout: float = 60.0) -> None:
    wait_until(lambda: not process_alive(pid), timeout,
               message=f"the server's process {pid} is still running")


def running_with(argument: str) -> list[int]:
    """The live processes (not zombies) whose command line holds `argument`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argument.encode() in words and process_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def assert_none_running_with(argument: str, timeout: float = 60.0) -> None:
    """No process whose command line holds `argument` (a test's own path) is left: neither
    the server nor the guard it runs under, however far either got before it was ended (on a
    busy machine, a server given up after a few seconds may not have reached its first
    line)."""
    wait_until(lambda: not running_with(argument), timeout,
               message=f"still running with {argument}: {running_with(argument)}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_http(port: int, log: Path) -> Iterator[str]:
    """The SDK test server on streamable HTTP until the generator is closed; yields its
    endpoint URL."""
    with log.open("w") as out:
        process = subprocess.Popen([sys.executable, str(SDK_SERVER), "--name", "wiki",
                                    "--http", str(port)], stdout=out, stderr=subprocess.STDOUT,
                                   cwd=REPO_ROOT)
    try:
        deadline = time.monotonic() + 60.0
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the HTTP test server did not start: {log.read_text()}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
