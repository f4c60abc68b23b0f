"""A checkpoint that is not on disk. Its own torch-free module: the desktop app and `run`
name this error on every path, the thin client's too (an install without torch), while
only the loader (app/checkpoints/loader.py) raises it."""

from __future__ import annotations


class CheckpointMissingError(FileNotFoundError):
    """The checkpoint's files are not on disk; the message says how to get them."""
