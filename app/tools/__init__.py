"""Tools the LLM can call: the built-in ones (one file each) and the user's MCP servers'
(mcp/). Every tool's output is size-limited, untrusted content."""
