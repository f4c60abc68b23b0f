"""The thin client: the app and `run --server` in a process where the engine's packages
(torch, moshi, bitsandbytes, ...) do not import (engine_blocker.py), against a real `serve`
on the tiny model with its recognition (`--asr tiny-stt --vad`) in its own process, the
Ollama stand-in as the LLM. What this proves on CI with one venv, a real client venv
(`bash installer/bootstrap.sh client`) was built once to confirm (docs/client.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import wave
from pathlib import Path

import pytest

from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from tests.remote.engine_blocker import ROOT, client_env, engine_only_modules, write_blocker
from tests.serve_process import ServeProcess
from tests.speech import spoken

TOKEN = "thin-client-token-41a7"
ANSWER = "Canberra is the capital of Australia."
# The modules the client's paths load: the desktop app, the session and its assembly, the
# headless run, the remote engine and the wire, the settings' tabs and the memory plan.
CLIENT_MODULES = (
    "app.cli.main", "app.ui.app", "app.ui.main_window", "app.ui.settings.dialog",
    "app.ui.memory_plan_view", "app.ui.conversation_controller", "app.ui.status_line",
    "app.conversation.session", "app.conversation.assembly", "app.conversation.pipeline",
    "app.conversation.headless", "app.conversation.remote_run", "app.remote.remote_engine",
    "app.wire.client", "app.wire.opus", "app.orchestrator.orchestrator", "app.asr.stt_catalog",
    "app.llm.factory", "app.llm.ollama_backend", "app.llm.openai_compat_backend",
    "app.tools.default_tools", "app.audio.live_audio",
)


@pytest.fixture(scope="module")
def blocker(tmp_path_factory) -> Path:
    return write_blocker(tmp_path_factory.mktemp("thin-client"))


@pytest.fixture(scope="module")
def tiny_stt(data_dir: Path) -> Path:
    result = subprocess.run([sys.executable, "main.py", "build", "tiny-stt"], cwd=ROOT,
                            env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return data_dir / "checkpoints" / "tiny-stt"


@pytest.fixture(scope="module")
def server(tiny_folder, tiny_stt, data_dir):
    # --vad: the tiny STT's random weights never end a turn by themselves; Silero's VAD
    # ends it at the silence after the question.
    with ServeProcess(data_dir, TOKEN, args=("--asr", "tiny-stt", "--vad")) as process:
        yield process


@pytest.fixture(scope="module")
def question(tmp_path_factory) -> Path:
    return spoken("What is the capital of Australia?", tmp_path_factory.mktemp("speech"),
                  before_s=1.0, after_s=3.0)


def _client(blocker: Path, data_dir: Path, *args: str, timeout: float = 300
            ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout,
                          env=client_env(blocker, CONTEXTSPAN_DATA_DIR=str(data_dir)))


def test_the_blocker_refuses_the_engine_and_the_client_modules_load_without_it(
        blocker, data_dir):
    assert {"torch", "moshi", "bitsandbytes"} <= set(engine_only_modules())
    code = ("import importlib, sys\n"
            "try:\n    import torch\nexcept ModuleNotFoundError as e:\n"
            "    assert e.name == 'torch', e\nelse:\n    raise SystemExit('torch imported')\n"
            f"for name in {CLIENT_MODULES!r}:\n    importlib.import_module(name)\n"
            "print(' '.join(sorted({m.partition('.')[0] for m in sys.modules})))\n")
    result = _client(blocker, data_dir, "-c", code, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = set(result.stdout.split())
    assert not loaded & set(engine_only_modules())
    assert {"PySide6", "aiohttp", "sphn", "ollama"} <= loaded


def test_run_on_a_server_with_its_recognition_holds_the_conversation_from_a_client(
        blocker, data_dir, server, question, tmp_path):
    """The issue's "done when": from a client without torch, `run --server URL --asr
    server` holds a conversation whose reply is as long as the input, the user's words come
    from the server's recognition (they start the LLM's turn), a span lands, and the audio
    is Opus at under 100 kbit/s each way."""
    transcript, reply = tmp_path / "conversation.jsonl", tmp_path / "reply.wav"
    with OllamaStandIn(models=("standin:latest",),
                       script=[ScriptedReply(content=ANSWER)] * 4) as standin:
        result = _client(
            blocker, data_dir, "main.py", "run", "--server", server.url, "--asr", "server",
            "--server-token", TOKEN, "--llm", "ollama", "--llm-host", standin.url,
            "--llm-model", "standin:latest", "--tools", "none", "--input", str(question),
            "--output", str(reply), "--transcript", str(transcript))
        asked = [r["messages"][-1]["content"] for r in standin.requests]
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in transcript.read_text().splitlines()]
    by_type: dict[str, list[dict]] = {}
    for record in records:
        by_type.setdefault(record["type"], []).append(record)

    frames = by_type["run"][0]["frames"]
    assert by_type["end"][0]["frames"] == frames  # every frame answered
    with wave.open(str(reply)) as wav, wave.open(str(question)) as heard:
        assert wav.getnframes() == heard.getnframes()  # the reply is as long as the input
    user = by_type["user"][0]
    assert user["end_of_turn_by"] == "server" and user["text"].strip()
    assert 1.0 <= user["end"] <= frames * 0.08
    turn = by_type["turn"][0]
    assert turn["trigger"] == "end_of_turn" and turn["question"] == user["text"]
    assert user["text"] in asked  # the LLM was asked what the server heard
    queued = next(q for q in by_type["span_queued"] if q["text"] == ANSWER)
    span = next(s for s in by_type["span"] if s["span_id"] == queued["span_id"])
    assert span["source"] == "llm" and span["chunks"]
    assert 0 < span["chunks"][-1]["before_frame"] <= frames
    link = by_type["link"][0]
    assert link["audio_codec"] == "opus" and link["frames_not_sent"] == 0
    print(f"\nlink: {link}")
    # The audio is ~27 kbit/s each way; the server's words come once each (`user_words`):
    # the whole utterance with every word made it 97 kbit/s down.
    assert link["kbit_s_up"] < 100 and link["kbit_s_down"] <= 40, link


def test_the_app_on_a_server_with_its_recognition_from_a_client(
        blocker, data_dir, server, question, tmp_path):
    """The desktop app without torch: Settings opens on every tab and says what needs the
    full install; a conversation on the server hears the question through the server's
    recognition, the LLM's answer lands, the status bar names the link's parts."""
    out = tmp_path / "app.json"
    with OllamaStandIn(models=("standin:latest",),
                       script=[ScriptedReply(content=ANSWER)] * 4) as standin:
        result = _client(blocker, data_dir, "-m", "tests.remote.thin_client_app", server.url,
                         TOKEN, standin.url, str(question), str(out), timeout=420)
    assert result.returncode == 0, result.stderr[-3000:]
    shown = json.loads(out.read_text())
    assert "thin client" in shown["plan_on_server"]
    assert "needs the full install" in shown["plan_here"]
    assert "needs the full install" in shown["install_note"]
    assert "pip install -e" in shown["install_note"] and "[engine]" in shown["install_note"]
    assert shown["asr_checkbox_saved"] is True
    state, banner = shown["local_start"]
    assert state == "error" and "could not start" in banner
    assert "needs the full install" in banner and "[engine]" in banner
    entries = shown["entries"]
    heard = [e for e in entries if e["kind"] == "user" and e["final"] and e["text"].strip()]
    assert heard, entries  # the server's words, as the user's turn
    assert any(e["kind"] == "span" and e["text"] == ANSWER and e["landed_frame"] is not None
               for e in entries), entries
    assert not any("needs the full install" in e["text"] for e in entries)  # none was needed
    assert shown["status_network"].startswith("network ") and " · server " in \
        shown["status_network"]
    assert shown["audio_codec"] == "opus"
    assert "running" in shown["states"] and shown["states"][-1] == "stopped"
    assert shown["shutdown"] is True
    assert not set(shown["modules"]) & set(engine_only_modules())


@pytest.mark.parametrize("command", [
    ("run", "--input", "{wav}", "--output", "{tmp}/r.wav", "--transcript", "{tmp}/t.jsonl"),
    ("serve", "--model", "tiny", "--port", "0"),
    ("build", "tiny"),
])
def test_what_needs_the_engine_says_it_needs_the_full_install(
        blocker, data_dir, question, tmp_path, command):
    args = [a.format(wav=question, tmp=tmp_path) for a in command]
    result = _client(blocker, data_dir, "main.py", *args, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert "needs the full install" in line and "pip install -e" in line and "[engine]" in line
    assert "Traceback" not in result.stderr and "No module named" not in line
