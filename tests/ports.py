"""Ports on 127.0.0.1 for tests of a client whose server is not there: one that nothing listens
on, and one that takes connections and never says a word."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


def free_port() -> int:
    """A port nothing listens on: bound to learn a free number, then closed. A connection
    there is refused at once; a server the test starts may listen there."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def silent_port() -> Iterator[int]:
    """A port that takes connections while the block runs (the kernel completes the TCP
    handshake) and never answers: a hung server, or one still loading."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]
