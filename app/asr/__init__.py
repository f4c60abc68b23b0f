"""Streaming speech recognition of the user's voice, for the LLM side."""
