"""One MCP server's session (app/tools/mcp/connection.py) against real servers: the SDK-made
test server over stdio and streamable HTTP, and a hand-written one that sends garbage.
Every fault a user's server can have ends in words the user can act on, and the server's
process never outlives its session."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.settings.schema import McpServerSettings
from app.tools.base import ToolRegistry
from app.tools.mcp.connection import McpServerConnection
from app.tools.mcp.hub import McpHub
from app.tools.mcp.masking import MASK
from tests.tools.mcp.mcp_servers import (
    REPO_ROOT,
    assert_gone,
    assert_none_running_with,
    garbled_server,
    process_alive,
    read_pid,
    stdio_server,
)
from tests.waiting import wait_until

START_S = 60.0  # a loaded machine starts a Python server slowly; a healthy one is ready in 1 s


def started(settings: McpServerSettings, **options: float) -> McpServerConnection:
    connection = McpServerConnection(settings, **options)
    connection.start()
    connection.wait_until_settled(START_S)
    return connection


@pytest.fixture(scope="module")
def notes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServerConnection]:
    """One server for the tests that leave it as they found it."""
    pid_file = tmp_path_factory.mktemp("notes") / "pid"
    connection = started(stdio_server("notes", "--pid-file", str(pid_file), timeout_s=60.0))
    connection.pid_file = pid_file  # type: ignore[attr-defined]
    yield connection
    connection.close()


def test_a_stdio_server_lists_its_tools_with_their_hints_and_answers(notes):
    status = notes.status()
    assert status.state == "ready", status.message
    tools = {t.name: t for t in status.tools}
    assert tools["lookup_word"].description.startswith("Look a word up")
    assert tools["lookup_word"].read_only is True
    assert tools["add_event"].read_only is False and tools["add_event"].destructive is True
    assert tools["lookup_word"].parameters["properties"]["word"]["type"] == "string"

    outcome = notes.call("lookup_word", {"word": "otter"})
    assert outcome.error is None
    assert outcome.text == "otter: a test word of 5 letters, meaning 'kept by the server'"
    assert outcome.elapsed_ms > 0


def test_an_image_is_said_in_words_and_an_error_is_the_servers_own(notes):
    picture = notes.call("picture", {})
    assert picture.error is None
    assert picture.text.startswith("[an image (image/png, ") and "not readable" in picture.text
    assert picture.not_text and picture.not_text[0].startswith("an image (image/png")
    failed = notes.call("fail", {})
    assert failed.text == ""
    assert failed.error is not None and "the calendar is locked" in failed.error


def test_a_10_mb_result_is_read_and_cut_to_the_tools_limit_with_its_sizes(notes):
    hub = McpHub()
    lease = hub.lease([notes.settings])
    try:
        registry = ToolRegistry([], output_limit=4000, sources=[lease])
        lease.wait_settled(START_S)
        result = registry.call("big", {"megabytes": 10})
    finally:
        lease.close()
    assert result.ok, result.error
    assert len(result.content) <= 4000 and result.truncated
    cut = result.cuts[-1]
    assert cut.before == 10_000_000 and cut.after == len(result.content)
    assert result.server == "notes" and result.server_tool == "big"
    assert notes.status().state == "ready"  # the big answer cost the session nothing


def test_a_hung_call_is_given_up_after_its_timeout_and_the_server_goes_on(notes):
    outcome = notes.call("hang", {"seconds": 60}, timeout_s=2.0)
    assert outcome.error == "notes did not answer hang within 2 s"
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    cancelled = notes.call("hang", {"seconds": 60}, timeout_s=60.0, cancel=cancel)
    assert cancelled.error == "cancelled" and cancelled.elapsed_ms < 30_000
    assert notes.call("lookup_word", {"word": "still"}).error is None


def test_a_crash_fails_the_call_in_words_and_a_restart_brings_it_back(tmp_path):
    pid_file = tmp_path / "pid"
    connection = started(stdio_server("diary", "--pid-file", str(pid_file)))
    try:
        first = read_pid(pid_file)
        outcome = connection.call("crash", {})
        assert outcome.error is not None
        assert "stopped during the call" in outcome.error
        assert "exited with code 3" in outcome.error
        assert "restart it in Settings" in outcome.error
        wait_until(lambda: connection.status().state == "failed", 15)
        assert "exited with code 3" in connection.status().message
        assert connection.call("lookup_word", {"word": "x"}).error.startswith(
            "diary is not running")
        pid_file.unlink()
        connection.restart()
        assert connection.wait_until_settled(START_S).state == "ready"
        assert read_pid(pid_file) != first
        assert connection.call("lookup_word", {"word": "back"}).error is None
    finally:
        connection.close()


def test_a_crash_while_idle_is_seen_without_a_call(tmp_path):
    pid_file = tmp_path / "pid"
    connection = started(stdio_server("idle", "--pid-file", str(pid_file)))
    try:
        os.kill(read_pid(pid_file), signal.SIGKILL)
        wait_until(lambda: connection.status().state == "failed", 15,
                   message=lambda: str(connection.status()))
        assert "stopped" in connection.status().message
        assert "signal 9" in connection.status().message
    finally:
        connection.close()


@pytest.mark.parametrize("settings, words", [
    (McpServerSettings(name="ghost", command="no-such-mcp-server-command"),
     "command not found: no-such-mcp-server-command"),
    (stdio_server("broken", "--exit-at-start", "4"), "exited with code 4"),
])
def test_a_server_that_will_not_start_says_why(settings, words):
    connection = started(settings)
    try:
        status = connection.status()
        assert status.state == "failed"
        assert words in status.message, status.message
    finally:
        connection.close()


def test_a_server_that_never_answers_the_handshake_is_given_up_and_ended(tmp_path):
    pid_file = tmp_path / "pid"
    connection = started(stdio_server("mute", "--no-answer", "--pid-file", str(pid_file)),
                         start_timeout_s=3.0)
    try:
        status = connection.status()
        assert status.state == "failed"
        assert status.message == "it did not answer within 3 s of starting"
        # Its process is ended whether or not it got as far as writing its pid in 3 s.
        assert_none_running_with(str(pid_file))
    finally:
        connection.close()


def test_a_line_that_is_not_json_rpc_is_named_and_the_session_goes_on():
    connection = started(garbled_server(timeout_s=3.0))
    try:
        outcome = connection.call("garble", {})
        assert outcome.error is not None
        assert outcome.error.startswith("garbled did not answer garble within 3 s")
        assert "1 line(s) that are not JSON-RPC" in outcome.error
        assert connection.status().malformed == 1
        assert connection.call("echo", {"text": "after"}).text == "echo: after"
    finally:
        connection.close()


def test_env_secrets_are_masked_in_the_log_and_in_results(tmp_path, caplog):
    secret = "sk-test-4f9a2c71d"
    settings = stdio_server("vault", "--print-env", "VAULT_KEY", env=(f"VAULT_KEY={secret}",))
    caplog.set_level(logging.INFO, logger="app.tools.mcp")
    connection = started(settings)
    try:
        assert connection.status().state == "ready"
        told = connection.call("show_env", {"variable": "VAULT_KEY"})
    finally:
        connection.close()
    assert told.text == MASK  # the server had it (its env), the LLM is not handed it
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert f"starting with VAULT_KEY={MASK}" in logged
    assert secret not in logged
    assert "python with 5 argument(s)" in logged  # the command, never its arguments


def test_closing_ends_the_servers_process(notes, tmp_path):
    pid_file = tmp_path / "pid"
    connection = started(stdio_server("short", "--pid-file", str(pid_file)))
    pid = read_pid(pid_file)
    assert process_alive(pid)
    assert connection.close()
    assert connection.status().state == "stopped"
    assert_gone(pid)


def test_the_server_dies_with_a_parent_that_was_killed(tmp_path):
    """SIGKILL gives the app no shutdown at all: the guard ends its server, even one that
    lingers after its stdin ends and ignores SIGTERM."""
    pid_file = tmp_path / "pid"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "from app.settings.schema import McpServerSettings\n"
        "from app.tools.mcp.connection import McpServerConnection\n"
        f"c = McpServerConnection(McpServerSettings(name='held', command=sys.executable, "
        f"args=({str(Path(__file__).with_name('sdk_server.py'))!r}, '--pid-file', "
        f"{str(pid_file)!r}, '--linger')))\n"
        "c.start(); c.wait_until_settled(60); print(c.status().state, flush=True)\n"
        "time.sleep(600)\n")], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "ready"
        pid = read_pid(pid_file)
        holder.kill()
        holder.wait(10)
        assert_gone(pid)
    finally:
        if holder.poll() is None:
            holder.kill()


def test_a_streamable_http_server_gets_its_headers(http_server):
    settings = McpServerSettings(name="wiki", url=http_server,
                                 headers=("Authorization: Bearer s3cret-token",))
    connection = started(settings)
    try:
        assert connection.status().state == "ready", connection.status().message
        assert "lookup_word" in {t.name for t in connection.status().tools}
        assert connection.call("lookup_word", {"word": "web"}).text.startswith("web: a test")
        seen = connection.call("whoami", {})
    finally:
        connection.close()
    assert seen.error is None
    assert seen.text == MASK  # the header arrived; its value, a secret, never comes back


def test_an_http_server_that_is_not_there_says_so():
    from tests.tools.mcp.mcp_servers import free_port

    settings = McpServerSettings(name="away", url=f"http://127.0.0.1:{free_port()}/mcp")
    started_at = time.monotonic()
    connection = started(settings)
    try:
        status = connection.status()
        assert status.state == "failed"
        assert status.message.startswith("cannot reach http://127.0.0.1:"), status.message
        assert time.monotonic() - started_at < START_S
    finally:
        connection.close()
