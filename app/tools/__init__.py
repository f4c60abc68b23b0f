"""Tools the LLM can call. Every tool's output is size-limited, untrusted content."""
