"""End to end, headless: a spoken question -> ASR -> the stand-in LLM calls a tool -> a span
is injected into the tiny engine -> the transcript shows each step and where it landed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from tests.speech import spoken

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def spoken_question(tmp_path_factory) -> Path:
    """espeak-ng speaks the question; 1 s of silence before it and 3 s after."""
    return spoken("What is six times seven?", tmp_path_factory.mktemp("speech"))


def _script(body: dict) -> ScriptedReply:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return ScriptedReply(content=f"Six times seven is {last['content']}.")
    return ScriptedReply(tool_calls=[{"name": "calculator", "arguments": {"expression": "6*7"}}])


def test_spoken_question_to_tool_call_to_injected_span(
    tiny_folder, data_dir, spoken_question, tmp_path
):
    """Fed as fast as it goes, the LLM's latency replayed in frames: not `--realtime`, where
    an engine that falls behind real time on a busy machine drops a frame and fails the run
    (right for a microphone's run, but then the test's pass would depend on the load)."""
    transcript = tmp_path / "conversation.jsonl"
    with OllamaStandIn(script=_script) as standin:
        result = subprocess.run(
            [sys.executable, "main.py", "run", "--model", "tiny", "--seed", "1",
             "--input", str(spoken_question), "--output", str(tmp_path / "reply.wav"),
             "--transcript", str(transcript), "--asr", "tiny-stt", "--vad",
             "--llm", "ollama", "--llm-host", standin.url, "--llm-model", "standin:latest",
             "--tools", "calculator,clock"],
            cwd=REPO_ROOT, env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
            capture_output=True, text=True, timeout=300,
        )
        requests = list(standin.requests)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in transcript.read_text().splitlines()]
    by_type: dict[str, list[dict]] = {}
    for record in records:
        by_type.setdefault(record["type"], []).append(record)

    user = by_type["user"][0]
    assert user["end_of_turn_by"] == "vad"
    assert 1.8 < user["end"] < 3.6 <= user["detected_at"] + 0.6  # the question, then the hang
    assert user["detected_at"] >= user["end"]
    assert by_type["turn"][0]["trigger"] == "end_of_turn"
    call = by_type["tool_call"][0]
    assert call["tool"] == "calculator" and call["ok"] and call["arguments"] == {
        "expression": "6*7"}
    tool_result = requests[1]["messages"][-1]
    assert tool_result["role"] == "tool" and tool_result["tool_name"] == "calculator"
    assert tool_result["content"].endswith("42")
    queued = by_type["span_queued"][0]
    assert queued["text"] == f"Six times seven is {tool_result['content']}."
    assert queued["source"] == "llm+calculator"
    span = next(s for s in by_type["span"] if s["span_id"] == queued["span_id"])
    assert span["source"] == "llm+calculator"
    landed = span["chunks"][0]["before_frame"]
    assert landed * 0.08 >= user["end"]  # after the question ended, before the input did
    assert landed < records[0]["frames"]
    assert by_type["latency"][0]["end_of_speech_to_first_audio_ms"] is not None
    # The LLM was offered the enabled tools and got the tool's result back.
    offered = {t["function"]["name"] for t in requests[0]["tools"]}
    assert offered == {"calculator", "clock"}


def test_an_unreachable_llm_leaves_the_conversation_running(
    tiny_folder, data_dir, spoken_question, tmp_path
):
    with OllamaStandIn() as standin:
        dead_url = standin.url  # stopped when the block ends: nothing listens there
    transcript = tmp_path / "t.jsonl"
    result = subprocess.run(
        [sys.executable, "main.py", "run", "--model", "tiny", "--input", str(spoken_question),
         "--output", str(tmp_path / "o.wav"), "--transcript", str(transcript),
         "--asr", "tiny-stt", "--vad", "--llm", "ollama", "--llm-host", dead_url,
         "--tools", "none"],
        cwd=REPO_ROOT, env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in transcript.read_text().splitlines()]
    notices = [r["message"] for r in records if r["type"] == "notice"]
    assert any("unreachable" in n for n in notices)
    assert records[-1]["type"] == "end" and records[-1]["frames"] == records[0]["frames"]
    assert not [r for r in records if r["type"] == "span"]


def test_a_realtime_run_whose_engine_falls_behind_says_so_and_fails(
    tiny_folder, data_dir, spoken_question, tmp_path
):
    """`--realtime` feeds the file as a microphone would: an engine slower than real time
    (here 0.3 s more for every frame, slower than 80 ms on any machine) drops a frame, and
    the run fails saying where instead of quietly hearing less."""
    import time

    from app.conversation.config import ConversationConfig
    from app.conversation.headless import run_headless
    from app.conversation.run_request import HeadlessRun, HeadlessRunError

    def slow(engine) -> None:
        def sleep(_module, _inputs, logits):
            if logits.shape[1] == 1 and engine.ready.is_set():
                time.sleep(0.3)

        engine.checkpoint.lm.text_linear.register_forward_hook(sleep)

    transcript = tmp_path / "late.jsonl"
    with pytest.raises(HeadlessRunError, match="fell behind real time at frame"):
        run_headless(ConversationConfig(model_id="tiny", realtime=True),
                     HeadlessRun(spoken_question, tmp_path / "late.wav", transcript, seed=1,
                                 engine_hook=slow))
    last = json.loads(transcript.read_text().splitlines()[-1])
    assert last["type"] == "error" and "fell behind real time" in last["message"]
