"""The LLM backends' registry rows carry their factory and their memory-footprint hook
(app/llm_backends.py): `make_backend` and the memory plan ask the row, so a new backend is a
row and its file, not a branch in each."""

from __future__ import annotations

from typing import Any

import pytest

from app import llm_backends
from app.llm.backend import LLMBackend
from app.llm.factory import make_backend
from app.llm.ollama_standin import OllamaStandIn
from app.llm_backends import LLM_BACKENDS, OLLAMA_BACKEND, OPENAI_BACKEND, LlmBackendKind
from app.plan.memory_plan import DeviceMemory
from app.plan.memory_survey import survey_memory

GIB = 1024**3
A_CPU = DeviceMemory("cpu", "made-up cpu 16 GB", 16 * GIB, 16 * GIB)


def test_every_row_names_a_factory_and_a_footprint_hook_that_exist():
    for row in LLM_BACKENDS:
        assert callable(row.build_function()), row.name
        assert callable(row.footprint_function()), row.name


def test_each_rows_factory_builds_a_backend_on_the_server_chosen():
    with OllamaStandIn(models=("standin:latest",)) as standin:
        ollama = make_backend(OLLAMA_BACKEND.name, standin.url, "standin:latest")
        assert "standin:latest" in ollama.list_models()
    openai = make_backend(OPENAI_BACKEND.name, "http://127.0.0.1:9/v1", "m")
    assert isinstance(openai, LLMBackend)
    with pytest.raises(ValueError, match="--judge-host"):  # its URL is needed, by its flag
        make_backend(OPENAI_BACKEND.name, None, "m", flag="--judge-host")
    with pytest.raises(ValueError, match="unknown LLM backend"):
        make_backend("no-such-backend")


def test_the_memory_plan_says_what_each_rows_hook_says():
    unknown_size = survey_memory(None, device_memory=A_CPU, stt_model=None,
                                 llm_backend=OPENAI_BACKEND.name)
    assert any("OpenAI-compatible server's model" in note for note in unknown_size.notes)
    with OllamaStandIn(models=("standin:latest",)) as standin:
        counted = survey_memory(None, device_memory=A_CPU, stt_model=None,
                                llm_backend=OLLAMA_BACKEND.name, llm_host=standin.url,
                                llm_model="standin:latest")
    assert [p.label for p in counted.plan.parts] == ["standin:latest in Ollama"]


def test_a_new_row_is_all_a_new_backend_needs(monkeypatch):
    """A row whose hooks are Ollama's client and the unknown-size note: the factory and the
    memory plan use them, neither spelled the new name."""
    name: Any = "loopback"  # not one of the settings file's names
    row = LlmBackendKind(
        name, "Loopback", "the loopback", "http://127.0.0.1:1", "", host_required=False,
        bare_host_scheme="http", factory="app.llm.ollama_backend:from_choice",
        memory_footprint="app.llm.openai_footprint:openai_footprint")
    monkeypatch.setattr(llm_backends, "LLM_BACKENDS", (*LLM_BACKENDS, row))
    with OllamaStandIn(models=("standin:latest",)) as standin:
        built = make_backend("loopback", standin.url, "standin:latest")
        assert "standin:latest" in built.list_models()
    plan = survey_memory(None, device_memory=A_CPU, stt_model=None, llm_backend="loopback")
    assert any("not report its size" in note for note in plan.notes)
