"""The duplex engine: Mimi + LMGen frame loop, with the Context Spanning injector."""
