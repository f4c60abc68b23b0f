"""The Model Context Protocol client: the user's own tool servers beside the built-in tools.

One file per idea: the `mcpServers` file (servers_file.py), one server's session on the
official SDK (connection.py) and the process guard it starts a stdio server under
(leash.py), what a call's result becomes as text (content.py), the names the LLM sees
(names.py), the user's permission for tools that change things (consent.py), a server's
tool as one of ours (tool.py), and the servers of the whole process with the leases that
keep them running (hub.py). Nothing here imports the SDK at package import: `leash.py` runs
as a bare script.
"""
