"""The MCP servers of this process, and the leases that keep them running.

A server's process is shared by whoever needs it at the moment: the conversation's tools,
Settings → Tools showing its tool list, a second conversation started while the first
winds down. Each holds a lease on the servers it was given; a server starts with its first
lease and stops when its last lease is released, so nothing runs that nobody uses and
`run` ends with no server process left. A server is the same server while its launch (name,
command, arguments, environment, URL, headers) is the same; its consent, disabled tools and
call timeout are the lease's own and change nothing of the process.

One hub per process (`shared_hub()`), like the processes it supervises: the desktop's
Settings tab and the conversation must see the same servers (a restart from Settings is the
conversation's server restarted), and the process closes them all when it exits (atexit, on
top of each lease's release and of the guard in leash.py). Tests make hubs of their own.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from app.settings.schema import McpServerSettings
from app.tools.base import Tool
from app.tools.mcp.connection import (
    CLOSE_TIMEOUT_S,
    START_TIMEOUT_S,
    McpServerConnection,
    ServerStatus,
)
from app.tools.mcp.consent import ConsentBroker, shared_broker
from app.tools.mcp.names import assign_names
from app.tools.mcp.tool import McpTool

log = logging.getLogger(__name__)

LaunchKey = tuple[str, str, tuple[str, ...], tuple[str, ...], str, tuple[str, ...]]


def launch_key(server: McpServerSettings) -> LaunchKey:
    return (server.name.strip(), server.command, server.args, server.env, server.url,
            server.headers)


@dataclass
class _Entry:
    connection: McpServerConnection
    leases: int = 0


class McpHub:
    def __init__(self, *, start_timeout_s: float = START_TIMEOUT_S,
                 consent: ConsentBroker | None = None) -> None:
        self.start_timeout_s = start_timeout_s
        self.consent = consent or shared_broker()
        self._lock = threading.Lock()
        self._entries: dict[LaunchKey, _Entry] = {}
        self._version = 0

    @property
    def version(self) -> int:
        """Grows with every change of any server's state (the Settings tab polls it)."""
        with self._lock:
            return self._version

    def _changed(self) -> None:
        with self._lock:
            self._version += 1

    def lease(self, servers: Sequence[McpServerSettings]) -> McpLease:
        """A lease on the enabled ones of `servers`, starting those not running yet."""
        held: list[tuple[McpServerSettings, McpServerConnection]] = []
        to_start: list[McpServerConnection] = []
        with self._lock:
            for server in servers:
                if not server.enabled:
                    continue
                key = launch_key(server)
                entry = self._entries.get(key)
                if entry is None:
                    entry = self._entries[key] = _Entry(McpServerConnection(
                        server, start_timeout_s=self.start_timeout_s,
                        on_change=self._changed))
                    to_start.append(entry.connection)
                entry.leases += 1
                held.append((server, entry.connection))
            self._version += 1
        for connection in to_start:
            connection.start()
        return McpLease(self, held)

    def _release(self, servers: Sequence[McpServerSettings]) -> None:
        """The lease is over: servers nobody leases any more are stopped (bounded)."""
        closing: list[McpServerConnection] = []
        with self._lock:
            for server in servers:
                key = launch_key(server)
                entry = self._entries.get(key)
                if entry is None:
                    continue
                entry.leases -= 1
                if entry.leases <= 0:
                    del self._entries[key]
                    closing.append(entry.connection)
            self._version += 1
        _close_all(closing, CLOSE_TIMEOUT_S)

    def restart(self, name: str) -> bool:
        """Restart every running server named `name` (Settings → Tools → Restart); False
        when none is."""
        with self._lock:
            found = [e.connection for k, e in self._entries.items() if k[0] == name.strip()]
        for connection in found:
            connection.restart()
        return bool(found)

    def status_of(self, server: McpServerSettings) -> ServerStatus | None:
        with self._lock:
            entry = self._entries.get(launch_key(server))
        return entry.connection.status() if entry is not None else None

    def running(self) -> list[ServerStatus]:
        with self._lock:
            connections = [e.connection for e in self._entries.values()]
        return [c.status() for c in connections]

    def close_all(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Stop every server (the app is closing), whoever leases it."""
        with self._lock:
            closing = [e.connection for e in self._entries.values()]
            self._entries.clear()
            self._version += 1
        _close_all(closing, timeout)


def _close_all(connections: Sequence[McpServerConnection], timeout: float) -> None:
    """Close them side by side: n hung servers cost one timeout, not n."""
    if not connections:
        return
    threads = [threading.Thread(target=c.close, args=(timeout,), name=f"mcp-close-{c.name}"[:60],
                                daemon=True) for c in connections]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout + 1.0
    for thread, connection in zip(threads, connections, strict=True):
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            log.warning("MCP server %s did not stop within %g s", connection.name, timeout)


class McpLease:
    """Servers held for one user of them (a conversation's tools, the Settings tab): their
    tools as ours (a `ToolSource` of the registry), their states, and the release."""

    def __init__(self, hub: McpHub, held: Sequence[tuple[McpServerSettings,
                                                         McpServerConnection]]) -> None:
        self._hub = hub
        self._held = list(held)
        self._released = False
        self._lock = threading.Lock()
        # Set when the lease ends: whoever follows its servers (offer.py) stops then.
        self.released = threading.Event()

    @property
    def servers(self) -> list[McpServerSettings]:
        return [settings for settings, _ in self._held]

    def statuses(self) -> list[ServerStatus]:
        return [connection.status() for _, connection in self._held]

    def wait_settled(self, timeout: float) -> list[ServerStatus]:
        """Wait (bounded) until no server is still starting; their states then."""
        deadline = time.monotonic() + timeout
        for _, connection in self._held:
            connection.wait_until_settled(max(0.0, deadline - time.monotonic()))
        return self.statuses()

    def tools(self, reserved: Collection[str] = ()) -> list[Tool]:
        """The enabled tools of the servers that are ready now, with unique names."""
        offered = []
        for settings, connection in self._held:
            status = connection.status()
            if status.state != "ready":
                continue
            disabled = set(settings.disabled_tools)
            offered += [(settings, connection, info) for info in status.tools
                        if info.name not in disabled]
        names = assign_names([(s.name, info.name) for s, _, info in offered], reserved)
        return [McpTool(names[(s.name, info.name)], info, connection, s, self._hub.consent)
                for s, connection, info in offered]

    def restart(self, name: str) -> None:
        for settings, connection in self._held:
            if settings.name == name:
                connection.restart()

    def close(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        self.released.set()
        self._hub._release(self.servers)


_shared: McpHub | None = None
_shared_lock = threading.Lock()


def shared_hub() -> McpHub:
    """The process's hub (see the module's docstring); its servers stop at exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = McpHub()
            atexit.register(_shared.close_all)
        return _shared
