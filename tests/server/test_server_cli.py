"""`python main.py serve` from the command line: it refuses an open address without a token,
serves the tiny model on a free port, and stops cleanly on SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from app.server.cli import add_serve_parser, main
from app.server.config import Limits
from app.server.threads import choose_threads
from app.wire.client import AudioFrame, EngineClient
from tests.server.helpers import TOKEN, collect, health, of, tone

REPO_ROOT = Path(__file__).resolve().parents[2]


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_serve_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["serve", *argv])


def test_defaults_listen_on_the_loopback_on_moshis_port(monkeypatch):
    monkeypatch.delenv("CONTEXTSPAN_SERVER_TOKEN", raising=False)
    args = _parse([])
    assert (args.host, args.port, args.token, args.cluster) == ("127.0.0.1", 8998, None, False)
    assert (args.idle_timeout, args.max_conversation, args.heartbeat) == (
        60.0, 3600.0, Limits().heartbeat_s)


def test_an_open_address_needs_a_token(monkeypatch, capsys):
    monkeypatch.delenv("CONTEXTSPAN_SERVER_TOKEN", raising=False)
    assert main(["--host", "0.0.0.0"]) == 1
    assert "--token" in capsys.readouterr().err
    assert main(["--idle-timeout", "nan"]) == 1
    assert "idle timeout" in capsys.readouterr().err


def test_ret_at_is_refused_for_a_model_that_never_asks(monkeypatch, capsys):
    monkeypatch.delenv("CONTEXTSPAN_SERVER_TOKEN", raising=False)
    assert main(["--model", "tiny", "--ret-at", "1.0"]) == 1
    assert "tiny does not ask with <ret>" in capsys.readouterr().err
    assert main(["--model", "tiny-cs", "--ret-at", "-1"]) == 1
    assert "--ret-at takes seconds from 0 on" in capsys.readouterr().err


def test_serve_runs_until_sigint_with_the_threads_its_start_line_says(tiny_folder, data_dir):
    env = {**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir), "CONTEXTSPAN_SERVER_TOKEN": TOKEN}
    env.pop("OMP_NUM_THREADS", None)  # the automatic rule decides
    expected = choose_threads(None, "cpu", env)
    process = subprocess.Popen(
        [sys.executable, "main.py", "serve", "--model", "tiny", "--device", "cpu",
         "--port", "0", "--chunk-limit", "16"],
        cwd=REPO_ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        deadline = time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = process.stderr.readline()
            assert line, "the server ended before it served"
            found = re.search(r"on (http://\S+): moshi", line)
            url = found.group(1) if found else None
        assert url, "the server never said where it listens"
        assert expected.describe() in line, line

        async def talk():
            status = await health(url)
            async with await EngineClient.connect(url, TOKEN) as client:
                await client.send_frame(tone(0))
                return status, await collect(client, lambda ev: of(AudioFrame, ev))

        status, events = asyncio.run(talk())
        assert status["status"] == "ready" and of(AudioFrame, events)
        assert status["torch_threads"] == expected.threads
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
