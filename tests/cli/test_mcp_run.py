"""`run --mcp-config FILE` end to end: a spoken question -> ASR -> the stand-in Ollama (real
wire protocol) calls a tool of a real stdio MCP server made with the SDK -> its result lands
as a span in the tiny engine -> the server's process is gone when `run` returns, and the
server's secret is in neither the transcript nor the log; its tool with a malformed input schema
is left out, said on the terminal, and costs nothing else."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.tools.mcp.masking import MASK
from tests.speech import spoken
from tests.tools.mcp.mcp_servers import SDK_SERVER, assert_gone, read_pid

REPO_ROOT = Path(__file__).resolve().parents[2]
SECRET = "notes-token-7c1e55aa"


@pytest.fixture(scope="module")
def question(tmp_path_factory) -> Path:
    return spoken("What does otter mean?", tmp_path_factory.mktemp("speech"))


def _config(path: Path, pid_file: Path, *extra: str) -> Path:
    path.write_text(json.dumps({"mcpServers": {"notes": {
        "command": sys.executable,
        "args": [str(SDK_SERVER), "--name", "notes", "--pid-file", str(pid_file),
                 "--print-env", "NOTES_TOKEN", *extra],
        "env": {"NOTES_TOKEN": SECRET}}}}))
    return path


def _run(question: Path, tmp_path: Path, data_dir: Path, config: Path, url: str,
         *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "main.py", "run", "--model", "tiny", "--seed", "1",
         "--input", str(question), "--output", str(tmp_path / "reply.wav"),
         "--transcript", str(tmp_path / "t.jsonl"), "--asr", "tiny-stt", "--vad",
         "--llm", "ollama", "--llm-host", url, "--llm-model", "standin:latest",
         "--tools", "none", "--mcp-config", str(config), *extra],
        cwd=REPO_ROOT, env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
        capture_output=True, text=True, timeout=600)


def _script(body: dict) -> ScriptedReply:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return ScriptedReply(content=f"The notes server says {last['content']}.")
    return ScriptedReply(tool_calls=[{"name": "lookup_word", "arguments": {"word": "otter"}}])


def test_an_mcp_tool_is_called_its_result_lands_and_its_server_is_gone(
        tiny_folder, data_dir, question, tmp_path):
    pid_file = tmp_path / "pid"
    config = _config(tmp_path / "mcp.json", pid_file, "--bad-schema")
    with OllamaStandIn(script=_script) as standin:
        result = _run(question, tmp_path, data_dir, config, standin.url)
        requests = list(standin.requests)
    assert result.returncode == 0, result.stderr
    assert_gone(read_pid(pid_file), timeout=5.0)  # `run` returned: its server is gone

    records = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    offered = {t["function"]["name"] for t in requests[0]["tools"]}
    assert {"lookup_word", "add_event", "picture"} <= offered  # the server's, by their names
    # Its tool with a malformed schema is left out, said on the terminal; the rest work.
    assert "broken_lookup" not in offered
    assert ("MCP server \"notes\": its tool 'broken_lookup' is left out (its input schema is "
            "not valid JSON Schema") in result.stderr
    call = next(r for r in records if r["type"] == "tool_call")
    assert call["tool"] == "lookup_word" and call["server"] == "notes"
    assert call["server_tool"] == "lookup_word" and call["ok"]
    assert call["arguments"] == {"word": "otter"}
    assert call["result"] == "otter: a test word of 5 letters, meaning 'kept by the server'"
    assert call["elapsed_ms"] > 0
    assert requests[1]["messages"][-1] == {"role": "tool", "tool_name": "lookup_word",
                                           "content": call["result"]}
    queued = next(r for r in records if r["type"] == "span_queued")
    assert queued["text"] == f"The notes server says {call['result']}."
    assert queued["source"] == "llm+lookup_word"
    span = next(r for r in records if r["type"] == "span" and r["span_id"] == queued["span_id"])
    assert span["chunks"], "the span never landed"
    assert records[-1]["type"] == "end"

    logged = (data_dir / "logs" / "contextspan.log").read_text(encoding="utf-8")
    assert f"starting with NOTES_TOKEN={MASK}" in logged  # the server said it: masked
    assert SECRET not in logged
    assert SECRET not in (tmp_path / "t.jsonl").read_text()
    assert SECRET not in result.stderr


def test_a_server_that_will_not_start_stops_the_run_before_it_begins(
        tiny_folder, data_dir, question, tmp_path):
    pid_file = tmp_path / "pid"
    config = _config(tmp_path / "mcp.json", pid_file, "--exit-at-start", "4")
    with OllamaStandIn(script=_script) as standin:
        result = _run(question, tmp_path, data_dir, config, standin.url)
        asked = len(standin.requests)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith('error: MCP server "notes" did not start:'), result.stderr
    assert "exited with code 4" in last
    assert asked == 0
    assert_gone(read_pid(pid_file), timeout=5.0)


def test_mcp_config_without_an_llm_and_a_bad_file_are_refused(tmp_path, data_dir, question):
    bad = tmp_path / "bad.json"
    bad.write_text('{"mcpServers": {"x": {"url": "https://a.example/mcp", "command": "y"}}}')
    common = [sys.executable, "main.py", "run", "--model", "tiny", "--input", str(question),
              "--output", str(tmp_path / "r.wav"), "--transcript", str(tmp_path / "t.jsonl")]
    env = {**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)}
    alone = subprocess.run([*common, "--mcp-config", str(bad)], cwd=REPO_ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
    assert alone.returncode != 0
    assert "--mcp-config needs --llm" in alone.stderr
    both = subprocess.run([*common, "--llm", "ollama", "--mcp-config", str(bad)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert both.returncode != 0
    assert 'server "x" in' in both.stderr and 'has both "command" and "url"' in both.stderr


def test_serve_reads_the_same_file_into_its_conversations(tmp_path):
    import argparse

    from app.conversation.options import conversation_from_args
    from app.server.cli import add_serve_parser

    parser = argparse.ArgumentParser()
    add_serve_parser(parser.add_subparsers(dest="command"))
    config = _config(tmp_path / "mcp.json", tmp_path / "pid")
    conversation = conversation_from_args(parser.parse_args(
        ["serve", "--llm", "ollama", "--mcp-config", str(config)]))
    assert conversation is not None
    (server,) = conversation.mcp_servers
    assert server.name == "notes" and server.env == (f"NOTES_TOKEN={SECRET}",)
    with pytest.raises(ValueError, match="--mcp-config needs --llm"):
        conversation_from_args(parser.parse_args(["serve", "--mcp-config", str(config)]))
