"""The stand-in Ollama declares the time it scripts (first-token delay plus chunk delays) and
the Ollama backend reports it, however long the request really took: a replayed run counts
that time, not a busy machine's (app/orchestrator/replay_clock.py). A server that declares
nothing (a real Ollama) gives None: its time is measured."""

from __future__ import annotations

import time
from typing import Any

import pytest

from app.llm.backend import ChatMessage
from app.llm.ollama_backend import OllamaBackend, OllamaSettings
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply

HELLO = [ChatMessage("user", "Say hello.")]


def ask(standin: OllamaStandIn) -> float | None:
    backend = OllamaBackend(OllamaSettings(host=standin.url, model="standin:latest",
                                           timeout_s=10.0))
    try:
        return backend.chat(HELLO).declared_s
    finally:
        backend.close()


def test_the_declared_time_is_the_script_s_whatever_the_request_took():
    reply = ScriptedReply(content="Hello there, friend.", first_token_delay_s=0.05,
                          chunk_delay_s=0.01, chunk_chars=8)  # 3 fragments + the final line

    def busy_machine(_body: dict[str, Any]) -> ScriptedReply:
        time.sleep(0.3)  # the server's machine is slow to answer: not part of the script
        return reply

    with OllamaStandIn(script=busy_machine) as standin:
        assert ask(standin) == pytest.approx(0.05 + 3 * 0.01)
    with OllamaStandIn(script=[ScriptedReply(content="Hi.")]) as standin:
        assert ask(standin) == 0.0


def test_a_server_that_declares_nothing_is_measured(monkeypatch):
    from app.llm import ollama_standin

    monkeypatch.setattr(ollama_standin, "DECLARED_LATENCY_HEADER", "X-Something-Else")
    with OllamaStandIn(script=[ScriptedReply(content="Hi.")]) as standin:
        assert ask(standin) is None
