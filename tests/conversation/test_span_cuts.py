"""Every cut on a span's way to the speech model is stated with its sizes, and what the
model read of a long text is marked: a live session on the tiny model (128-token spans),
the Ollama stand-in as the LLM, through the session as the desktop app runs it."""

from __future__ import annotations

import re

import numpy as np

from app.audio.file_source import FileAudioSource
from app.conversation.session import MAX_DROPPED_TEXT_CHARS, CheckpointCache, ConversationSession
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from tests.conversation.recorder import Recorder
from tests.conversation.test_session import settings

HUGE_REPLY = "The answer is long. " * 250_000  # 5,000,000 characters


def final_spans(recorder: Recorder) -> list:
    return [e for e in recorder.of("span") if e.final]


def test_a_5_mb_answer_and_a_long_paste_say_every_cut_with_its_sizes(tiny_folder, data_dir):
    assert len(HUGE_REPLY) == 5_000_000
    pasted = " ".join(f"Line {i} of the pasted report says the figure is {i * 7}."
                      for i in range(400))[:20_000]
    dropped = "x " * (MAX_DROPPED_TEXT_CHARS // 2 + 500)  # over the dropped-text bound
    source = FileAudioSource(np.zeros(24000, np.float32))  # then silence, as a microphone
    recorder = Recorder()
    reply = ScriptedReply(content=HUGE_REPLY, chunk_chars=500_000)
    with OllamaStandIn(script=[reply]) as standin:
        session = ConversationSession(settings(standin.url), recorder, lambda _s: source,
                                      CheckpointCache())
        session.start()
        try:
            recorder.wait(lambda: ("running", "Listening") in recorder.states, 120.0)
            session.send_text("Tell me everything.")
            recorder.wait(lambda: [e for e in final_spans(recorder) if e.source.startswith(
                "standin")], 120.0)
            session.inject_text(pasted, "pasted text")
            session.inject_text(dropped, "dropped file: big.txt")
            recorder.wait(lambda: len(final_spans(recorder)) == 3, 60.0)
        finally:
            assert session.stop()
    answer, paste, big = sorted(final_spans(recorder), key=lambda e: e.entry_id)

    # The LLM's reply: from 5,000,000 characters to the span's length, then to the model's
    # token limit; both said, with the sizes before and after.
    assert "the LLM's reply cut: 5,000,000 → " in answer.detail, answer.detail
    assert f"→ {len(answer.text):,} characters" in answer.detail
    assert "tokens (the speech model's span limit" in answer.detail
    assert answer.detail.index("the LLM's reply cut") < answer.detail.index(" tokens (")

    # The paste: all of it in the entry, the part the model read marked.
    assert paste.text == pasted
    assert paste.read_chars is not None and 0 < paste.read_chars < len(pasted)
    assert f"the model read the first {paste.read_chars:,} of 20,000 characters" in (
        paste.detail)
    assert re.search(r"the span's content cut: [\d,]+ → [\d,]+ tokens", paste.detail)
    assert paste.read_chars < 2_000  # ~120 tokens of prose, not the whole text

    # A dropped file over the session's bound: cut, and said on its entry.
    assert len(big.text) == MAX_DROPPED_TEXT_CHARS
    assert (f"the text cut: {len(dropped):,} → {MAX_DROPPED_TEXT_CHARS:,} characters"
            in big.detail)
    assert not [e for e in recorder.of("notice") if "only the first" in e.text]
