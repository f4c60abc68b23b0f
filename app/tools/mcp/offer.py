"""The user's MCP servers into a conversation's tool registry, beside the built-in tools.

A conversation leases its servers from the process's hub when its tools are built and
releases them when its orchestrator closes the registry (the end of the conversation, or of
`run`). Two ways to report a server that cannot be had, as the assembly does for the rest:
- with a `notice` (the desktop): after a short wait for the servers to start, each one that
  failed is a warning and one still starting is said to join when ready; the conversation
  goes on with the tools it has, and a thread follows each server still starting until it
  settles: its tools joined (an info), or it did not start and why (a warning), so the
  transcript never ends on "still starting" (the thread ends with the lease, or once the
  server's own start timeout must have settled it);
- without (a headless run): every server must be up, or the run stops before it begins,
  saying which server and why (a run that asked for a tool should not quietly lack it).
A tool whose input schema no LLM request could carry is left out by its connection, which
logs it (a headless run's terminal shows it); with `notice` it is also a warning naming
its server and the tool. The server's other tools, and everyone else's, are offered.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from app.settings.schema import McpServerSettings
from app.tools.base import ToolRegistry
from app.tools.mcp.connection import ServerStatus
from app.tools.mcp.hub import McpHub, McpLease, shared_hub
from app.tools.mcp.servers_file import names_problem, server_problem

DESKTOP_WAIT_S = 3.0  # a conversation starts after this even while a server still starts
FOLLOW_POLL_S = 0.05  # how often the follower looks at a server still starting
Notice = Callable[[str, str], None]

log = logging.getLogger(__name__)


class McpStartError(RuntimeError):
    pass


def add_mcp_servers(registry: ToolRegistry, servers: Sequence[McpServerSettings],
                    notice: Notice | None = None, hub: McpHub | None = None,
                    wait_s: float = DESKTOP_WAIT_S) -> None:
    """Lease the enabled ones of `servers` and offer their tools through `registry`
    (closing the registry releases them). Raises McpStartError without `notice` when one
    does not start or the settings are unusable. `wait_s`: how long a conversation with
    `notice` waits for its servers before going on without those still starting."""
    hub = hub or shared_hub()
    wanted = [s for s in servers if s.enabled]
    problems = [f"MCP server \"{s.name[:60]}\": {p}" for s in wanted
                if (p := server_problem(s)) is not None]
    clash = names_problem(wanted)
    if clash is not None:
        problems.append(f"MCP servers: {clash}")
    if problems:
        if notice is None:
            raise McpStartError("; ".join(problems))
        for problem in problems:
            notice(f"{problem}. Its tools are off; mend it in Settings → Tools.", "warning")
        bad = {s.name for s in wanted if server_problem(s) is not None}
        wanted = [s for s in wanted if s.name not in bad]
        if clash is not None:
            wanted = []
    if not wanted:
        return
    lease = hub.lease(wanted)
    registry.add_source(lease)
    if notice is None:
        statuses = lease.wait_settled(hub.start_timeout_s + 5.0)
        failed = [s for s in statuses if s.state != "ready"]
        if failed:
            registry.close()
            raise McpStartError("; ".join(f"MCP server \"{s.name}\" did not start: {s.message}"
                                          for s in failed))
        return
    late = []
    for status in lease.wait_settled(wait_s):
        if status.state == "starting":
            notice(f"MCP server \"{status.name}\" is still starting: its tools join the "
                   "assistant as soon as it is ready.", "info")
            late.append(status.name)
        else:
            _tell_settled(status, notice, late=False, lease=lease)
    if late:
        threading.Thread(target=_follow_late_starts,
                         args=(lease, late, notice, hub.start_timeout_s + 5.0),
                         name="mcp-late-starts", daemon=True).start()


def _tell_settled(status: ServerStatus, notice: Notice, *, late: bool,
                  lease: McpLease) -> None:
    """What the transcript says of a server that has settled: the tools it left out, and
    that it failed and why; one that became ready after the conversation began, that its
    tools joined."""
    for tool in status.left_out:
        notice(f"{tool.notice(status.name)}.", "warning")
    if status.state == "failed":
        notice(f"MCP server \"{status.name}\" did not start: {status.message}. Its tools "
               "are off; restart it in Settings → Tools.", "warning")
    elif status.state == "ready" and late:
        disabled = {t for s in lease.servers if s.name == status.name for t in s.disabled_tools}
        offered = [t for t in status.tools if t.name not in disabled]
        notice(f"MCP server \"{status.name}\" is ready: its {len(offered)} tool(s) joined the "
               "assistant.", "info")


def _follow_late_starts(lease: McpLease, names: Sequence[str], notice: Notice,
                        timeout_s: float) -> None:
    """Tell how each of `names`, still starting when the conversation began, settles;
    ends when all have, when the lease is released (the conversation ended: nobody to
    tell), or after `timeout_s` (the server's own start timeout settles it before)."""
    waiting = set(names)
    deadline = time.monotonic() + timeout_s
    while waiting and not lease.released.wait(FOLLOW_POLL_S):
        for status in lease.statuses():
            if status.name in waiting and status.state != "starting":
                waiting.discard(status.name)
                _tell_settled(status, notice, late=True, lease=lease)
        if time.monotonic() >= deadline:
            log.warning("MCP servers still starting after %g s: %s", timeout_s,
                        ", ".join(sorted(waiting)))
            return
