"""The desktop conversation and the user's MCP servers, without Qt: a server added in Settings
during a conversation offers its tools from the next question, a call shows in the transcript
with server, tool, arguments, result and time, a tool that changes things asks the window
(the process's consent broker) while the voice is told to wait, and the server stops with
the conversation. The tiny model, a file as the microphone, the stand-in LLM, a real stdio
server made with the SDK."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from app.audio.file_source import FileAudioSource
from app.conversation.session import CheckpointCache, ConversationSession
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.settings.schema import AppSettings, LlmSettings, McpSettings, SpeechModelSettings
from app.tools.mcp.consent import shared_broker
from tests.conversation.test_session import Recorder
from tests.tools.mcp.mcp_servers import assert_gone, read_pid, stdio_server
from tests.waiting import wait_until


def _script(body: dict) -> ScriptedReply:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return ScriptedReply(content=f"Noted: {last['content']}")
    offered = {t["function"]["name"] for t in body.get("tools") or []}
    if "add the dentist" in last["content"] and "add_event" in offered:
        return ScriptedReply(tool_calls=[{"name": "add_event",
                                          "arguments": {"title": "dentist", "day": "Monday"}}])
    if "lookup_word" in offered:
        return ScriptedReply(tool_calls=[{"name": "lookup_word", "arguments": {"word": "otter"}}])
    return ScriptedReply(content="No tools here.")


def test_a_server_added_live_is_used_asks_before_changing_and_stops_with_it(
        tiny_folder, data_dir, tmp_path):
    recorder = Recorder()
    source = FileAudioSource(np.zeros(2400, np.float32))
    pid_file, events = tmp_path / "pid", tmp_path / "events.txt"
    server = stdio_server("notes", "--pid-file", str(pid_file), "--events-file", str(events))
    broker = shared_broker()
    detach = broker.attach_prompt()  # what the window's consent bar does
    with OllamaStandIn(script=_script) as standin:
        before = AppSettings(
            speech=SpeechModelSettings(model_id="tiny", device="cpu"),
            llm=LlmSettings(backend="ollama", host=standin.url, model="standin:latest",
                            tools_enabled=False, stt_model="none"))
        session = ConversationSession(before, recorder, lambda _s: source, CheckpointCache())
        session.start()
        try:
            recorder.wait(lambda: ("running", "Listening") in recorder.states, timeout=90)
            session.send_text("what does otter mean?")
            recorder.wait(lambda: any(e.text == "No tools here." for e in recorder.of("span")),
                          timeout=30)
            after = replace(before, mcp=McpSettings(servers=(server,)))
            assert session.apply_settings(after) == ()  # tool servers apply at once
            session.send_text("what does otter mean?")
            recorder.wait(lambda: any(e.text.startswith("notes: lookup_word(")
                                      for e in recorder.of("tool")), timeout=90)
            tool = next(e for e in recorder.of("tool") if e.text.startswith("notes:"))
            assert tool.text == ("notes: lookup_word(word='otter')\n→ otter: a test word of 5 "
                                 "letters, meaning 'kept by the server'")
            assert tool.detail.startswith("ok; 61 characters; in ")
            session.send_text("please add the dentist on Monday")
            wait_until(lambda: broker.pending(), 60, message="add_event never asked")
            recorder.wait(lambda: any(e.source == "wait" for e in recorder.of("span")),
                          timeout=30)
            assert any("waits for your permission" in e.text for e in recorder.of("notice"))
            assert not events.exists()  # nothing done before the user says so
            broker.answer(broker.pending()[0].request_id, "allow")
            recorder.wait(lambda: any(e.text.startswith("Noted: Added 'dentist'")
                                      for e in recorder.of("span")), timeout=60)
            assert events.read_text() == "dentist|Monday\n"
            pid = read_pid(pid_file)
        finally:
            detach()
            assert session.stop()
    assert_gone(pid)  # the conversation's lease was the only one


def _with_tools(notice: str) -> list[str]:
    """The tool names an "assistant now asks … with tools: a, b." notice lists."""
    assert ", with tools: " in notice, notice
    return notice.split(", with tools: ", 1)[1].rstrip(".").split(", ")


def test_the_llm_notice_and_the_status_name_the_tools_really_offered(tiny_folder, data_dir):
    """Issue 35, item 12: "The assistant now asks … with tools:" listed the settings' tools
    (local_search, which is left out without a folder) and not the 10 MCP tools offered,
    and said "without tools" while MCP tools were on; the export header took the same
    list. The notice and the session's status (which the header reads) name what the LLM
    is given."""
    recorder = Recorder()
    source = FileAudioSource(np.zeros(2400, np.float32))
    with OllamaStandIn(script=[ScriptedReply(content="ok")]) as standin:
        first = AppSettings(
            speech=SpeechModelSettings(model_id="tiny", device="cpu"),
            llm=LlmSettings(backend="ollama", host=standin.url, model="standin:latest",
                            tools_enabled=True, tools=("calculator", "local_search"),
                            stt_model="none"),
            mcp=McpSettings(servers=(stdio_server("notes"),)))
        session = ConversationSession(first, recorder, lambda _s: source, CheckpointCache())
        session.start()
        try:
            wait_until(lambda: recorder.statuses and "lookup_word" in
                       recorder.statuses[-1].tools, 120,
                       message="the MCP server's tools were never offered")
            offered = recorder.statuses[-1].tools
            assert "calculator" in offered and "add_event" in offered
            assert "local_search" not in offered  # no folder chosen: left out
            asks = len([e for e in recorder.of("notice") if "now asks" in e.text])
            other_model = replace(first, llm=replace(first.llm, model="other:latest"))
            session.apply_settings(other_model)
            recorder.wait(lambda: len([e for e in recorder.of("notice")
                                       if "now asks" in e.text]) > asks, timeout=60)
            notice = [e.text for e in recorder.of("notice") if "now asks" in e.text][-1]
            assert sorted(_with_tools(notice)) == sorted(offered), notice
            # The built-in tools off, the MCP server's still on: not "without tools".
            asks += 1
            session.apply_settings(replace(other_model, llm=replace(other_model.llm,
                                                                    tools_enabled=False)))
            recorder.wait(lambda: len([e for e in recorder.of("notice")
                                       if "now asks" in e.text]) > asks, timeout=60)
            notice = [e.text for e in recorder.of("notice") if "now asks" in e.text][-1]
            assert "without tools" not in notice, notice
            listed = _with_tools(notice)
            assert "lookup_word" in listed and "calculator" not in listed, notice
            wait_until(lambda: "calculator" not in recorder.statuses[-1].tools, 30,
                       message="the status kept the built-in tools")
            assert sorted(recorder.statuses[-1].tools) == sorted(listed)
        finally:
            assert session.stop()
