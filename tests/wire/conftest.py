"""The tiny model's host for the wire's tests against `serve`'s server (tests/server's)."""

from tests.server.conftest import tiny_host  # noqa: F401 - a fixture, used by name
