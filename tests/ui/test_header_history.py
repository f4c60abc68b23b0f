"""A conversation that changed what it ran on says so (issue 19, item 10): its saved file and
its exports list every speech model, device, LLM and tool set it used, in order, a speech
model on a server is named with the server, and each restart of the model is marked in the
transcript where it happened."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from dataclasses import replace

from pytestqt.qtbot import QtBot

from app.conversation.session import SessionStatus
from app.conversation.transcript.entries import TranscriptEntry
from app.conversation.transcript.export import read_transcript, to_markdown
from app.conversation.transcript.saved import ConversationStore
from app.settings.schema import AppSettings, LlmSettings
from app.ui.conversation_keeper import ConversationKeeper
from app.ui.transcript_panel import TranscriptPanel

T0 = 1_790_000_000.0
FIRST = AppSettings(llm=LlmSettings(backend="ollama", host="http://127.0.0.1:11434",
                                    model="qwen3:4b",
                                    tools=("calculator", "clock", "local_search")))
SECOND = replace(FIRST, llm=replace(FIRST.llm, model="llama3.2:3b", tools_enabled=False))


def _said(entry_id: int, origin: str, text: str) -> TranscriptEntry:
    return TranscriptEntry(entry_id, "user", text, T0 + entry_id, origin=origin)


def test_every_model_device_llm_and_tool_set_is_listed_and_a_restart_is_marked(
        qtbot: QtBot, tmp_path) -> None:
    panel = TranscriptPanel()
    qtbot.addWidget(panel)
    store = ConversationStore(tmp_path)
    current = [FIRST]
    keeper = ConversationKeeper(panel, store, lambda: current[0], autosave_ms=10_000)

    # The first session: the tiny model on this computer's CPU, the first LLM, and the tools
    # it offers (local_search, without a folder, is left out: issue 35, item 12).
    keeper.note_started()
    keeper.note_status(SessionStatus(model="Tiny demo model", dtype="float32", device="cpu",
                                     tools=("calculator", "clock")))
    keeper.on_entry(_said(1, "session-1", "What is the capital of Australia?"))
    keeper.flush()
    current[0] = SECOND  # Settings: another LLM, no tools (applied while it runs)
    keeper.note_status(SessionStatus(model="Tiny demo model", dtype="float32", device="cpu"))
    keeper.on_entry(_said(2, "session-1", "And of Peru?"))
    keeper.flush()
    keeper.close_open()  # the session ended (Stop)

    # The second session: the speech model on a server's GPU.
    keeper.note_started()
    keeper.note_status(SessionStatus(model="Moshi 7B", dtype="bfloat16", device="cuda",
                                     server="http://gpu-box:8998"))
    keeper.on_entry(_said(1, "session-2", "Are you still there?"))
    keeper.flush()

    header, entries = store.load(keeper.conversation_id)
    assert header.models == ("Tiny demo model (float32)", "Moshi 7B (bfloat16)")
    assert header.devices == ("cpu", "cuda on the server at http://gpu-box:8998")
    assert header.llms == ("qwen3:4b on Ollama at http://127.0.0.1:11434",
                           "llama3.2:3b on Ollama at http://127.0.0.1:11434")
    assert header.tool_sets == (("calculator", "clock"), ())
    assert header.restarts == 1
    texts = [e.text for e in entries]
    marker = next(i for i, e in enumerate(entries) if e.kind == "notice"
                  and "started again" in e.text)
    assert texts.index("And of Peru?") < marker < texts.index("Are you still there?")
    assert "Moshi 7B" in entries[marker].text and "gpu-box" in entries[marker].text

    markdown = to_markdown(entries, header=header)
    assert "Tiny demo model (float32), then Moshi 7B (bfloat16)" in markdown
    assert "cpu, then cuda on the server at http://gpu-box:8998" in markdown
    assert "qwen3:4b on Ollama" in markdown and "then llama3.2:3b on Ollama" in markdown
    assert "calculator, clock; then none" in markdown
    again = read_transcript(store.path_of(keeper.conversation_id).read_text("utf-8"))[0]
    assert again == header  # the lists survive the JSON round trip
    keeper.shutdown()
