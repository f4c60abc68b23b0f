"""With a voice-activity detector on (`--vad`), only the user speaking again cancels the turn
in flight, not words alone: the tiny recogniser has random weights and makes words of
silence all along (a real one does of noise), which cancelled the turn as "the user spoke
again" and threw a tool's answer away mid-call.

End to end, headless: espeak-ng speech -> the tiny recogniser and Silero's VAD -> the
stand-in Ollama calls the calculator, then takes 3 s of conversation time to answer ->
the span lands, or the turn is cancelled. On silence after the question the answer lands;
when the user speaks again before it is back, the turn is cancelled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sphn

from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from tests.speech import spoken

REPO_ROOT = Path(__file__).resolve().parents[2]
ANSWER_S = 3.0  # the stand-in's scripted time for its answer, after the tool


@pytest.fixture(scope="module")
def question_then_silence(tmp_path_factory) -> Path:
    return spoken("What is six times seven?", tmp_path_factory.mktemp("silence"), after_s=7.0)


@pytest.fixture(scope="module")
def question_then_more_speech(tmp_path_factory) -> Path:
    """The question, 1.5 s of silence (the turn starts 0.6 s into it), then the user
    speaks again while the answer is being made."""
    folder = tmp_path_factory.mktemp("speech")
    first, _ = sphn.read(str(spoken("What is six times seven?", folder, after_s=1.5)),
                         sample_rate=24000)
    again, _ = sphn.read(str(spoken("No wait, tell me the weather in Paris instead.", folder,
                                    before_s=0.0, after_s=4.0)), sample_rate=24000)
    path = folder / "twice.wav"
    sphn.write_wav(str(path), np.concatenate([first[0], again[0]]).astype(np.float32), 24000)
    return path


def _script(body: dict) -> ScriptedReply:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return ScriptedReply(content=f"Six times seven is {last['content']}.",
                             first_token_delay_s=ANSWER_S)
    return ScriptedReply(tool_calls=[{"name": "calculator", "arguments": {"expression": "6*7"}}])


def _run(audio: Path, tmp_path: Path, data_dir: Path) -> list[dict]:
    transcript = tmp_path / "t.jsonl"
    with OllamaStandIn(script=_script) as standin:
        result = subprocess.run(
            [sys.executable, "main.py", "run", "--model", "tiny", "--seed", "1",
             "--input", str(audio), "--output", str(tmp_path / "reply.wav"),
             "--transcript", str(transcript), "--asr", "tiny-stt", "--vad",
             "--llm", "ollama", "--llm-host", standin.url, "--llm-model", "standin:latest",
             "--tools", "calculator"],
            cwd=REPO_ROOT, env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in transcript.read_text().splitlines()]


def _of(kind: str, records: list[dict]) -> list[dict]:
    return [r for r in records if r["type"] == kind]


def test_words_made_of_silence_do_not_cancel_the_turn(tiny_folder, data_dir,
                                                      question_then_silence, tmp_path):
    records = _run(question_then_silence, tmp_path, data_dir)
    turn = _of("turn", records)[0]
    assert [c["turn_id"] for c in _of("tool_call", records)] == [turn["turn_id"]]
    assert _of("turn_cancelled", records) == []
    queued = _of("span_queued", records)
    assert [q["turn_id"] for q in queued] == [turn["turn_id"]]
    assert queued[0]["text"].startswith("Six times seven is")
    span = next(s for s in _of("span", records) if s["span_id"] == queued[0]["span_id"])
    assert span["chunks"], "the answer never landed"


def test_the_user_speaking_again_cancels_the_turn(tiny_folder, data_dir,
                                                  question_then_more_speech, tmp_path):
    records = _run(question_then_more_speech, tmp_path, data_dir)
    first = _of("turn", records)[0]
    cancelled = _of("turn_cancelled", records)
    assert cancelled and cancelled[0]["turn_id"] == first["turn_id"]
    assert cancelled[0]["reason"] == "the user spoke again"
    assert first["turn_id"] not in {q["turn_id"] for q in _of("span_queued", records)}
