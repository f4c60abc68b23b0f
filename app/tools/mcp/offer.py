"""The user's MCP servers into a conversation's tool registry, beside the built-in tools.

A conversation leases its servers from the process's hub when its tools are built and
releases them when its orchestrator closes the registry (the end of the conversation, or of
`run`). Two ways to report a server that cannot be had, as the assembly does for the rest:
- with a `notice` (the desktop): after a short wait for the servers to start, each one that
  failed is a warning and one still starting is said to join when ready; the conversation
  goes on with the tools it has;
- without (a headless run): every server must be up, or the run stops before it begins,
  saying which server and why (a run that asked for a tool should not quietly lack it).
A tool whose input schema no LLM request could carry is left out by its connection, which
logs it (a headless run's terminal shows it); with `notice` it is also a warning naming
its server and the tool. The server's other tools, and everyone else's, are offered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app.settings.schema import McpServerSettings
from app.tools.base import ToolRegistry
from app.tools.mcp.hub import McpHub, shared_hub
from app.tools.mcp.servers_file import names_problem, server_problem

DESKTOP_WAIT_S = 3.0  # a conversation starts after this even while a server still starts
Notice = Callable[[str, str], None]


class McpStartError(RuntimeError):
    pass


def add_mcp_servers(registry: ToolRegistry, servers: Sequence[McpServerSettings],
                    notice: Notice | None = None, hub: McpHub | None = None) -> None:
    """Lease the enabled ones of `servers` and offer their tools through `registry`
    (closing the registry releases them). Raises McpStartError without `notice` when one
    does not start or the settings are unusable."""
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
    for status in lease.wait_settled(DESKTOP_WAIT_S):
        for tool in status.left_out:
            notice(f"{tool.notice(status.name)}.", "warning")
        if status.state == "failed":
            notice(f"MCP server \"{status.name}\" did not start: {status.message}. Its tools "
                   "are off; restart it in Settings → Tools.", "warning")
        elif status.state == "starting":
            notice(f"MCP server \"{status.name}\" is still starting: its tools join the "
                   "assistant as soon as it is ready.", "info")
