"""The server image's own parts (installer/server/), as far as a machine without Docker can
check them: every file its Dockerfile copies exists, and its health check tells a ready
server from none."""

from __future__ import annotations

import asyncio
import importlib.util
import re
from pathlib import Path

from tests.ports import free_port
from tests.server.helpers import run_server

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER_DIR = REPO_ROOT / "installer" / "server"


def _healthcheck():
    spec = importlib.util.spec_from_file_location("healthcheck", SERVER_DIR / "healthcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_file_the_dockerfile_copies_is_in_the_repository():
    dockerfile = (SERVER_DIR / "Dockerfile").read_text()
    sources = [source for line in re.findall(r"^COPY (.+)$", dockerfile, re.M)
               for source in line.split()[:-1]]
    assert "installer/server/healthcheck.py" in sources
    missing = [source for source in sources if not (REPO_ROOT / source).exists()]
    assert missing == []
    assert 'CMD ["python", "installer/server/healthcheck.py"]' in dockerfile


def test_the_health_check_is_healthy_only_while_the_server_is_ready(tiny_host):
    healthcheck = _healthcheck()

    async def body(server, url):  # the check blocks: off the loop that serves
        loop = asyncio.get_running_loop()
        ready = await loop.run_in_executor(None, healthcheck.status, server.port)
        tiny_host.stuck = "an engine thread did not stop"  # what /health then says
        try:
            stuck = await loop.run_in_executor(None, healthcheck.status, server.port)
        finally:
            tiny_host.stuck = None
        return ready, stuck

    assert run_server(tiny_host, body) == ("ready", "error")
    assert healthcheck.status(free_port()) is None
