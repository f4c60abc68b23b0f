"""Spans of a conversation whose speech model runs on a server (`serve` on the tiny model in
its own process), through the session as the desktop app runs it, with the Ollama stand-in
as the LLM: every LLM answer is shown and kept from the moment it is queued, whatever
becomes of it; the context panel holds what the server's model holds (spans slide out of
the window, those of a lost connection are gone, the share stays within the window); a
text too long for the wire is cut with its sizes said, not lost."""

from __future__ import annotations

import re
import threading
from typing import Any, cast

import pytest

from app.audio.silent_microphone import SilentMicrophone
from app.conversation.session import CheckpointCache, ConversationSession
from app.conversation.transcript.entries import TranscriptEntry, closed
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.settings.schema import AppSettings, EngineSettings, LlmSettings, SpeechModelSettings
from app.ui.context_panel import ContextPanel, describe_context
from app.ui.transcript_panel import TranscriptModel
from app.wire.events import MAX_SPAN_CHARS
from tests.conversation.recorder import Recorder
from tests.serve_process import ServeProcess

TOKEN = "remote-spans-token-5d1a"
QUESTION = "What is the capital of Australia?"
ANSWER = "Canberra is the capital of Australia."
# Well over the tiny model's 128-token span limit: each lands as 128 positions.
LONG_NOTES = " ".join(f"Item {i}: the meeting about budget line {i} moved to room {i % 7}."
                      for i in range(60))


def settings_for(url: str, ollama: str) -> AppSettings:
    return AppSettings(
        speech=SpeechModelSettings(model_id="tiny", device="cpu"),  # the server's is used
        engine=EngineSettings(mode="server", server_url=url, server_token=TOKEN,
                              connect_timeout_s=60.0),
        llm=LlmSettings(backend="ollama", host=ollama, model="standin:latest",
                        tools_enabled=False, stt_model="none"))


@pytest.fixture(scope="module")
def server(tiny_folder, data_dir):
    with ServeProcess(data_dir, TOKEN) as process:
        yield process


class StopWhen(Recorder):
    """Records the session's entries; asks its session to stop (once), on the session's own
    thread, when an entry matches `condition`: before any later event is handled."""

    def __init__(self, condition) -> None:
        super().__init__()
        self._condition = condition
        self.session: ConversationSession | None = None
        self.fired = threading.Event()

    def on_entry(self, entry):
        super().on_entry(entry)
        if not self.fired.is_set() and self._condition(entry):
            self.fired.set()
            assert self.session is not None
            self.session.request_stop()


def running_session(server: ServeProcess, standin: OllamaStandIn, make_recorder
                    ) -> tuple[ConversationSession, Any]:
    """A session running on the server; the server holds one conversation at a time, and
    the one a test before ended may still be winding down there (then: busy, try again)."""
    for _attempt in range(30):
        recorder = make_recorder()
        session = ConversationSession(settings_for(server.url, standin.url), recorder,
                                      lambda _settings: SilentMicrophone(), CheckpointCache())
        recorder.session = session
        session.start()
        recorder.wait(lambda r=recorder: r.states and r.states[-1][0] in (
            "running", "error", "stopped"), 120.0)
        if recorder.states[-1][0] == "running":
            return session, recorder
        # app/remote/link_words.py's describe_busy: the server has no free conversation
        assert "holds all the conversations it can" in recorder.states[-1][1], recorder.states
        assert session.join(10.0)
        threading.Event().wait(1.0)  # a pause between attempts, not a race's fix
    raise AssertionError("the server stayed busy")


def latest(recorder: Recorder) -> list[TranscriptEntry]:
    with recorder.changed:
        return [cast(TranscriptEntry, recorder.entries[k]) for k in sorted(recorder.entries)]


def now_of(recorder: Recorder, entry: TranscriptEntry) -> TranscriptEntry:
    """The entry as it stands now (entries are replaced as they change)."""
    return cast(TranscriptEntry, recorder.entries[entry.entry_id])


def test_an_answer_queued_behind_a_file_is_a_span_entry_at_once_and_kept_on_close(server):
    reply = ScriptedReply(content=ANSWER, first_token_delay_s=4.0)  # after the 6 files
    with OllamaStandIn(script=[reply] * 30) as standin:
        # Stop the moment the app says anything about the answer, on the session's thread
        # (as the window's Stop): before the fix it said only "The LLM answered …: its span
        # is below", and no entry held the answer.
        session, recorder = running_session(server, standin, lambda: StopWhen(
            lambda e: ANSWER in e.text or e.text.startswith("The LLM answered")))
        session.send_text(QUESTION)
        recorder.wait(lambda: recorder.of("thinking"))
        for n in range(6):  # ~48 frames of span positions, ahead of the answer
            session.inject_text(LONG_NOTES, f"dropped file: notes{n}.txt")
        # The first file is in the transcript (below the question) before the LLM answers.
        recorder.wait(lambda: [e for e in recorder.of("span") if "notes0" in e.source], 30.0)
        assert recorder.fired.wait(60.0), "nothing was said about the answer"
        assert session.join(30.0)
    answers = [e for e in latest(recorder) if e.kind == "span" and e.text == ANSWER]
    assert len(answers) == 1, [e.text for e in latest(recorder)]
    answer = answers[0]
    assert answer.source == "standin:latest on Ollama"
    assert not answer.final and answer.detail.startswith("queued"), answer.detail
    # What the window (and the saved conversation) makes of it when the conversation ends.
    saved = closed(answer)
    assert saved.final and "not injected: the conversation stopped" in saved.detail
    # Never the claim that it reached the voice when it did not.
    assert not [e for e in latest(recorder) if "reached the voice" in e.text]


def share_of(summary: str) -> float:
    match = re.search(r"\(([\d.]+)% of its", summary)
    return float(match.group(1)) if match else 0.0


def test_the_context_panel_holds_what_the_servers_model_holds(server, qapp):
    with OllamaStandIn(script=[ScriptedReply(content=ANSWER)] * 3) as standin:
        session, recorder = running_session(server, standin, Recorder)
        try:
            # 4 × 128 positions: more than the 375-position window holds.
            for n in range(4):
                session.inject_text(LONG_NOTES, f"dropped file: part{n}.txt")
            recorder.wait(lambda: len([e for e in recorder.of("span") if e.final]) == 4, 90.0)
            # A little later: the frames after them push the first one further out.
            first = min((e for e in recorder.of("span")), key=lambda e: e.entry_id)
            recorder.wait(lambda: (context := now_of(recorder, first).context) is not None
                          and context.in_window == 0, 60.0)

            model = TranscriptModel()
            panel = ContextPanel(model)
            model.extend(latest(recorder))
            assert 0 < share_of(panel.summary.text()) <= 100.0, panel.summary.text()
            spans = [e for e in latest(recorder) if e.kind == "span"]
            held = sum(e.context.in_window for e in spans if e.context is not None)
            assert held <= 375
            assert "slid out of the window" in describe_context(now_of(recorder, first))

            # The server dies: its model's context goes with it, and the panel says so.
            server.kill()
            recorder.wait(lambda: any(s == "paused" for s, _ in recorder.states), 30.0)
            recorder.wait(lambda: all(e.context is not None and e.context.in_window == 0
                                      for e in recorder.of("span")), 10.0)
            model.extend(latest(recorder))
            assert panel.summary.text() == "No injected span is in the model's context now."
            last = max(spans, key=lambda e: e.entry_id)
            assert "lost" in describe_context(now_of(recorder, last))

            # A question asked while the server is down: its answer is a span entry that
            # says it was not injected and why (not a notice without the answer).
            session.send_text("And of France?")
            recorder.wait(lambda: [e for e in recorder.of("span")
                                   if e.text == ANSWER and e.final], 30.0)
            refused, = [e for e in recorder.of("span") if e.text == ANSWER]
            assert "not injected" in refused.detail and "down" in refused.detail
        finally:
            assert session.stop(30.0)
            server.kill()
            server.start()  # for the tests after this one


def test_a_paste_longer_than_the_wire_takes_is_cut_with_its_sizes_said(server):
    text = ("The quarterly report says revenue grew in every region. " * 400)[:20_000]
    with OllamaStandIn(script=[]) as standin:
        session, recorder = running_session(server, standin, Recorder)
        try:
            session.inject_text(text, "pasted text")
            recorder.wait(lambda: [e for e in recorder.of("span") if e.final]
                          or [e for e in recorder.of("notice") if "at most" in e.text], 60.0)
            span, = recorder.of("span")
            assert span.final and span.landed_frame is not None, span.detail
            assert span.text == text  # the bubble shows all of it
            assert f"20,000 → {MAX_SPAN_CHARS:,} characters" in span.detail, span.detail
            # The server's token limit, with the sizes it sent (not "kept 128 of 128").
            cut = re.search(r"the span's content cut: ([\d,]+) → ([\d,]+) tokens", span.detail)
            assert cut is not None, span.detail
            assert int(cut.group(1).replace(",", "")) > int(cut.group(2).replace(",", ""))
            assert span.read_chars is not None and 0 < span.read_chars < MAX_SPAN_CHARS
            assert f"the model read the first {span.read_chars:,} of 20,000 characters" in (
                span.detail)
        finally:
            assert session.stop(30.0)
