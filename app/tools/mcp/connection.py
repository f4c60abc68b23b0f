"""One MCP server's session, from its start to its end, on the official SDK.

Each server has a thread of its own running an asyncio loop that holds the SDK's `Client`:
a server that hangs, floods or crashes costs its own thread only, never another server's
calls nor the conversation. Everything the rest of the app asks is a plain call that
returns within its timeout (`start`, `call`, `restart`, `close`); state changes are told
through `on_change` and read as a frozen `ServerStatus`.

What can go wrong, and what the user is told:
- it will not start (no such command, it exits, it never answers the handshake within
  `start_timeout_s`): "failed" with the reason, from the guard's or the server's last
  stderr line where there is one;
- it crashes: a stdio server's stderr ends (the guard says with which code), the session
  is "failed", its tools leave the LLM's offer; a call in flight gets the same words;
- it hangs on a call: the call is given up after the server's `timeout_s`, the server stays
  (the next call may work); lines it writes that are not JSON-RPC are counted and named in
  the error;
- it answers 10 MB: the SDK reads it, the tool cuts it to the registry's limit.
A failed server starts again from `restart()` (Settings → Tools → Restart).

Secrets: the server's env and header values are masked (masking.py) in every message and
log line made here; the command line is never logged with its arguments (they may hold
tokens too), only the program and how many arguments it has.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import sys
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx2
from mcp import Client, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from app.settings.schema import McpServerSettings
from app.tools.mcp import leash
from app.tools.mcp.content import read_result
from app.tools.mcp.input_schema import input_schema_problem
from app.tools.mcp.masking import mask
from app.tools.mcp.server_log import ServerLog
from app.tools.mcp.servers_file import env_pairs, header_pairs, secret_values

log = logging.getLogger(__name__)

StateName = Literal["stopped", "starting", "ready", "failed"]
START_TIMEOUT_S = 30.0  # `npx -y` may download its package on the first start
CLOSE_TIMEOUT_S = 10.0  # the SDK's own shutdown: stdin closed, 2 s, SIGTERM, 2 s, SIGKILL
MESSAGE_CHARS = 300
_CONNECTION_CLOSED = -32000
_EXIT_WORD_WAIT_S = 1.0  # for the guard's line on how the server ended


@dataclass(frozen=True)
class McpToolInfo:
    """A tool as its server lists it."""

    name: str  # the server's own name for it
    description: str
    parameters: Mapping[str, Any]  # JSON schema of the arguments
    read_only: bool | None = None  # MCP's readOnlyHint
    destructive: bool | None = None  # MCP's destructiveHint
    title: str = ""


@dataclass(frozen=True)
class LeftOutTool:
    """A tool its server listed that is not offered to the LLM, and why (input_schema.py)."""

    name: str  # the server's own name for it
    reason: str

    def notice(self, server: str) -> str:
        """The words that tell the user, naming the server and the tool."""
        return (f"MCP server \"{server[:60]}\": its tool {self.name[:60]!r} is left out "
                f"({self.reason}); the server's other tools work")


@dataclass(frozen=True)
class ServerStatus:
    name: str
    state: StateName
    message: str  # one line for Settings → Tools and the transcript's notices
    tools: tuple[McpToolInfo, ...] = ()
    malformed: int = 0  # lines it sent that were not JSON-RPC
    left_out: tuple[LeftOutTool, ...] = ()  # listed, but unusable by an LLM


@dataclass(frozen=True)
class CallOutcome:
    text: str
    error: str | None = None
    not_text: tuple[str, ...] = ()  # what came back that is not text (content.py)
    elapsed_ms: float = 0.0
    declared_s: float | None = None  # the time the server scripted for it (content.py)


class _SessionEnded(Exception):
    """The session cannot go on, and this says why (it did not start, or it stopped)."""


def client_version() -> str:
    try:
        return metadata.version("contextspan")
    except metadata.PackageNotFoundError:
        return "dev"


def guarded_command(command: str, args: tuple[str, ...]) -> tuple[str, list[str]]:
    """The program and arguments that start `command` under the guard (leash.py) on Linux
    and macOS; on Windows the SDK's Job Object does the guard's work."""
    if sys.platform == "win32":
        return command, list(args)
    if getattr(sys, "frozen", False):  # the packaged app runs its own modules with -m
        return sys.executable, ["-m", "app.tools.mcp.leash", "--", command, *args]
    return sys.executable, ["-I", str(Path(leash.__file__).resolve()), "--", command, *args]


# The SDK's own log lines can quote what a server sent (a line it could not parse) or a URL:
# they pass through a filter that masks every live server's secrets and keeps a traceback's
# words but not its frames (which hold the same text).
_SDK_LOGGERS = ("mcp.client.stdio", "mcp.client.streamable_http", "mcp.client.session",
                "mcp.client.client", "mcp.shared.jsonrpc_dispatcher")
_live: weakref.WeakSet[McpServerConnection] = weakref.WeakSet()
_filter_lock = threading.Lock()
_filtering: list[bool] = []


class _MaskSecrets(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        secrets = sorted({s for c in list(_live) for s in c.secrets}, key=len, reverse=True)
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            text += f" ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
            record.exc_info, record.exc_text = None, None
        record.msg, record.args = mask(text, secrets)[:MESSAGE_CHARS * 4], ()
        return True


def _mask_sdk_logs() -> None:
    with _filter_lock:
        if not _filtering:
            for name in _SDK_LOGGERS:
                logging.getLogger(name).addFilter(_MaskSecrets())
            _filtering.append(True)


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside anyio's task-group groups (ExceptionGroup, or its backport on
    Python 3.10: both have `exceptions`)."""
    inner = getattr(exc, "exceptions", None)
    if isinstance(inner, (tuple, list)) and inner:
        found: list[BaseException] = []
        for item in inner:
            found += _leaves(item)
        return found
    return [exc]


class McpServerConnection:
    def __init__(self, settings: McpServerSettings, *,
                 start_timeout_s: float = START_TIMEOUT_S,
                 on_change: Callable[[], None] | None = None) -> None:
        self.settings = settings
        self.start_timeout_s = start_timeout_s
        self._on_change = on_change
        self._secrets = secret_values(settings)
        _live.add(self)
        _mask_sdk_logs()
        self._lock = threading.Lock()
        self._status = ServerStatus(settings.name, "stopped", "not started")
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Client | None = None
        self._wake: asyncio.Event | None = None
        self._scope: anyio.CancelScope | None = None
        self._stopping = False
        self._gone: str | None = None  # why the server is gone, seen by a call or its stderr
        self._malformed: list[str] = []
        self._server_log: ServerLog | None = None

    # ---- any thread -----------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def secrets(self) -> tuple[str, ...]:
        return self._secrets

    def status(self) -> ServerStatus:
        with self._lock:
            return replace(self._status, malformed=len(self._malformed))

    def start(self) -> None:
        """Start the session on its own thread; returns at once (`status` follows it)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stopping = False
            self._gone = None
            self._malformed = []
            self._status = ServerStatus(self.name, "starting", "starting…")
            self._thread = threading.Thread(target=self._run, name=f"mcp-{self.name}"[:60],
                                            daemon=True)
            thread = self._thread
        self._changed()
        thread.start()

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> bool:
        """End the session and the server's process; True when its thread has ended. A
        server still starting is given up on at once (the SDK's shutdown still ends its
        process)."""
        with self._lock:
            self._stopping = True
            thread, loop, scope = self._thread, self._loop, self._scope
        if loop is not None and scope is not None:
            with contextlib.suppress(RuntimeError):  # the loop has just ended
                loop.call_soon_threadsafe(scope.cancel)
        if thread is None:
            return True
        thread.join(max(0.0, timeout))
        return not thread.is_alive()

    def restart(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        self.close(timeout)
        self.start()

    def wait_until_settled(self, timeout: float) -> ServerStatus:
        """Wait (bounded) until the server is ready or has failed; its status then."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.status()
            if status.state != "starting" or time.monotonic() >= deadline:
                return status
            time.sleep(0.02)

    def call(self, tool: str, arguments: Mapping[str, Any], timeout_s: float | None = None,
             cancel: threading.Event | None = None) -> CallOutcome:
        """Call `tool` (the server's name for it); every failure is an outcome with
        `error`, and the wait ends at the timeout or the cancel, whichever comes first."""
        started = time.monotonic()
        timeout = self.settings.timeout_s if timeout_s is None else timeout_s
        with self._lock:
            loop, client, status = self._loop, self._client, self._status
        if status.state != "ready" or loop is None or client is None:
            return self._outcome(started, error=f"{self.name} is not running ({status.message})")
        try:
            future = asyncio.run_coroutine_threadsafe(
                self._call(client, tool, dict(arguments), timeout), loop)
        except RuntimeError:  # the loop ended between the read and now
            return self._outcome(started, error=f"{self.name} has just stopped")
        deadline = started + timeout + 5.0  # the call's own timeout answers before this
        while True:
            try:
                text, error, not_text, declared = future.result(timeout=0.05)
                return self._outcome(started, text, error, not_text, declared)
            except concurrent.futures.TimeoutError:
                if cancel is not None and cancel.is_set():
                    future.cancel()
                    return self._outcome(started, error="cancelled")
                if time.monotonic() >= deadline:
                    future.cancel()
                    return self._outcome(started, error=self._timed_out(tool, timeout))
            except concurrent.futures.CancelledError:
                return self._outcome(started, error=f"{self.name} stopped during the call")

    # ---- the session's thread ---------------------------------------------------------

    def _changed(self) -> None:
        if self._on_change is not None:
            try:
                self._on_change()
            except Exception:  # a listener's bug must not end a session
                log.exception("an MCP status listener failed")

    def _set(self, state: StateName, message: str,
             tools: tuple[McpToolInfo, ...] | None = None,
             left_out: tuple[LeftOutTool, ...] | None = None) -> None:
        with self._lock:
            self._status = ServerStatus(
                self.name, state, mask(message, self._secrets)[:MESSAGE_CHARS],
                self._status.tools if tools is None else tools, len(self._malformed),
                self._status.left_out if left_out is None else left_out)
        self._changed()

    def _set_tools(self, tools: tuple[McpToolInfo, ...],
                   left_out: tuple[LeftOutTool, ...]) -> None:
        """Ready with `tools`; each tool left out is said in the log (the terminal of a
        headless run) and in the status the Settings tab and the conversation show."""
        for tool in left_out:
            log.warning("%s", mask(tool.notice(self.name), self._secrets))
        message = f"ready: {len(tools)} tool(s)"
        if left_out:
            message += "; left out: " + ", ".join(f"{t.name[:60]!r} ({t.reason})"
                                                  for t in left_out)
        self._set("ready", message, tools, left_out)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # the thread reports, never dies silently
            log.exception("MCP server %s: its session thread failed", self.name)
            self._set("failed", f"internal error: {type(exc).__name__}")
        finally:
            with self._lock:
                self._loop = self._wake = self._scope = None

    async def _main(self) -> None:
        """The session, inside one cancel scope: its deadline is the start's timeout until
        the server is ready, and close() cancels it (the SDK's shielded shutdown still ends
        the process)."""
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        settings = self.settings
        where = (f"{Path(settings.command).name} with {len(settings.args)} argument(s)"
                 if settings.transport == "stdio" else mask(settings.url.split("?")[0],
                                                            self._secrets))
        server_log = ServerLog(self.name, self._secrets) if settings.transport == "stdio" \
            else None
        self._server_log = server_log
        ready = False
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + self.start_timeout_s) \
                    as scope:
                with self._lock:
                    self._loop, self._wake, self._scope = loop, wake, scope
                    if self._stopping:
                        scope.cancel()
                log.info("MCP server %s: starting (%s)", self.name, where)
                async with self._make_client(server_log) as client:
                    if server_log is not None:
                        server_log.spawned()
                        self._watch_stderr_end(server_log, loop, wake)
                    tools, left_out = await self._list_tools(client)
                    scope.deadline = math.inf
                    ready = True
                    with self._lock:
                        self._client = client
                    self._set_tools(tools, left_out)
                    log.info("MCP server %s: ready with %d tool(s)", self.name, len(tools))
                    await self._until_stopped_or_gone(wake)
            if scope.cancelled_caught and not self._stopping and not ready:
                raise _SessionEnded(f"it did not answer within {self.start_timeout_s:g} s of "
                                    f"starting{self._malformed_note()}")
        except BaseException as exc:  # every way out is described
            if not self._stopping:
                why = self._describe(exc, server_log)
                log.warning("MCP server %s: %s", self.name, why)
                self._set("failed", why)
        finally:
            with self._lock:
                self._client = None
            if server_log is not None:
                server_log.close()
            if self._stopping:
                log.info("MCP server %s: stopped", self.name)
                self._set("stopped", "stopped")

    @contextlib.asynccontextmanager
    async def _make_client(self, server_log: ServerLog | None) -> AsyncIterator[Client]:
        settings = self.settings
        common: dict[str, Any] = {
            "read_timeout_seconds": settings.timeout_s, "message_handler": self._on_message,
            "client_info": types.Implementation(name="ContextSpan", version=client_version())}
        if settings.transport == "stdio":
            assert server_log is not None and server_log.for_server is not None
            command, args = guarded_command(settings.command, settings.args)
            params = StdioServerParameters(command=command, args=args,
                                           env=env_pairs(settings) or None)
            async with Client(stdio_client(params, errlog=server_log.for_server),
                              **common) as client:
                yield client
            return
        async with httpx2.AsyncClient(headers=header_pairs(settings),
                                      timeout=httpx2.Timeout(30.0, read=300.0)) as http, \
                Client(streamable_http_client(settings.url, http_client=http),
                       **common) as client:
            yield client

    async def _list_tools(self, client: Client
                          ) -> tuple[tuple[McpToolInfo, ...], tuple[LeftOutTool, ...]]:
        """The server's tools that can be offered, and those left out (their schema would
        make every LLM request fail: input_schema.py)."""
        found: list[McpToolInfo] = []
        left_out: list[LeftOutTool] = []
        cursor: str | None = None
        for _ in range(100):  # pages; a server that pages for ever is cut off
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            for tool in page.tools:
                hints = tool.annotations
                schema = dict(tool.input_schema or {}) or {"type": "object", "properties": {}}
                problem = input_schema_problem(schema)
                if problem is not None:
                    left_out.append(LeftOutTool(tool.name, problem))
                    continue
                found.append(McpToolInfo(
                    tool.name, tool.description or tool.title or "", schema,
                    hints.read_only_hint if hints else None,
                    hints.destructive_hint if hints else None, tool.title or ""))
            cursor = page.next_cursor
            if not cursor:
                break
        return tuple(found), tuple(left_out)

    async def _on_message(self, message: object) -> None:
        """What the SDK surfaces besides answers: transport faults (a line that is not
        JSON-RPC) and the server's notice that its tools changed."""
        if isinstance(message, Exception):
            with self._lock:
                self._malformed.append(mask(str(message).splitlines()[0] if str(message)
                                            else type(message).__name__, self._secrets))
            self._changed()
            return
        if isinstance(message, types.ToolListChangedNotification):
            with self._lock:
                client = self._client
            if client is not None:
                try:
                    tools, left_out = await self._list_tools(client)
                except Exception as exc:  # the old list stays
                    log.info("MCP server %s: listing its changed tools failed: %s",
                             self.name, mask(str(exc), self._secrets))
                    return
                self._set_tools(tools, left_out)

    def _watch_stderr_end(self, server_log: ServerLog, loop: asyncio.AbstractEventLoop,
                          wake: asyncio.Event) -> None:
        """A stdio server's stderr ends when its process does: the session learns of a
        crash while idle, not at the next call."""

        def ended() -> None:
            with self._lock:
                if not self._stopping and self._gone is None:
                    self._gone = "it stopped"
            with contextlib.suppress(RuntimeError):  # the loop has ended already
                loop.call_soon_threadsafe(wake.set)

        server_log.when_ended(ended)

    async def _until_stopped_or_gone(self, wake: asyncio.Event) -> None:
        """Until close() (which cancels this task) or the server is gone."""
        while True:
            await wake.wait()
            wake.clear()
            with self._lock:
                stopping, gone = self._stopping, self._gone
            if stopping:
                return
            if gone is not None:
                raise _SessionEnded(await self._ended_words(gone))

    async def _ended_words(self, gone: str) -> str:
        """`gone`, with the guard's word on how the process ended (it comes on stderr at
        about the time stdout ends: waited for a moment, off the loop)."""
        server_log = self._server_log
        if server_log is not None:
            await asyncio.to_thread(server_log.wait_ended, _EXIT_WORD_WAIT_S)
            why = server_log.why_failed()
            if why:
                return f"{gone} ({why}); restart it in Settings → Tools"
        return f"{gone}; restart it in Settings → Tools"

    async def _call(self, client: Client, tool: str, arguments: dict[str, Any],
                    timeout_s: float
                    ) -> tuple[str, str | None, tuple[str, ...], float | None]:
        try:
            with anyio.fail_after(timeout_s):
                result = await client.call_tool(tool, arguments, read_timeout_seconds=timeout_s)
        except TimeoutError:
            return "", self._timed_out(tool, timeout_s), (), None
        except MCPError as exc:
            if exc.code == _CONNECTION_CLOSED or "timed out" in exc.message:
                if "timed out" in exc.message:
                    return "", self._timed_out(tool, timeout_s), (), None
                with self._lock:
                    if self._gone is None:
                        self._gone = "it stopped during a call"
                    wake = self._wake
                if wake is not None:
                    wake.set()
                return ("", f"{self.name} {await self._ended_words('stopped during the call')}",
                        (), None)
            return "", mask(f"{self.name} refused the call: {exc.message}",
                            self._secrets)[:MESSAGE_CHARS], (), None
        except ValidationError:
            return "", f"{self.name} sent an answer that is not a valid MCP result", (), None
        read = read_result(result)
        error = None if read.error is None else mask(f"{self.name} says {read.error}",
                                                     self._secrets)
        # A server that hands back its own key (its env) does not get it into a transcript.
        return mask(read.text, self._secrets), error, read.not_text, read.declared_s

    def _timed_out(self, tool: str, timeout_s: float) -> str:
        return (f"{self.name} did not answer {tool} within {timeout_s:g} s"
                f"{self._malformed_note()}")

    def _malformed_note(self) -> str:
        with self._lock:
            count, first = len(self._malformed), (self._malformed[:1] or [""])[0]
        if not count:
            return ""
        return f" (it sent {count} line(s) that are not JSON-RPC, the first: {first[:120]})"

    def _describe(self, exc: BaseException, server_log: ServerLog | None) -> str:
        """Why the session ended, in one line the user can act on."""
        leaves = _leaves(exc)
        first = next((e for e in leaves if isinstance(e, _SessionEnded)), leaves[0])
        if isinstance(first, _SessionEnded):
            return str(first)
        if isinstance(first, FileNotFoundError):
            return f"command not found: {self.settings.command}"
        if isinstance(first, httpx2.HTTPStatusError):
            return f"the server answered HTTP {first.response.status_code}"
        if isinstance(first, httpx2.HTTPError):
            return f"cannot reach {self.settings.url.split('?')[0]}: {first}"
        if isinstance(first, MCPError) and first.code == _CONNECTION_CLOSED:
            why = server_log.why_failed() if server_log is not None else None
            return f"it ended before it answered ({why})" if why else \
                "it ended before it answered"
        if isinstance(first, OSError):
            return f"cannot start it: {first.strerror or first}"
        why = server_log.why_failed() if server_log is not None else None
        text = f"{type(first).__name__}: {first}".strip()
        return f"{text} ({why})" if why else text

    def _outcome(self, started: float, text: str = "", error: str | None = None,
                 not_text: tuple[str, ...] = (), declared_s: float | None = None
                 ) -> CallOutcome:
        return CallOutcome(text, error, not_text,
                           round((time.monotonic() - started) * 1000.0, 3), declared_s)

