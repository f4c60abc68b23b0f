"""ContextSpan: a full-duplex voice assistant with Context Spanning injection."""

__version__ = "0.1.0"
