"""The Context Spanning conversation shape end to end on tiny-cs, headless: a spoken question
is recognised, the model emits <ret> (forced here by biasing its text logits: the tiny model
has random weights), the stand-in LLM answers, and the span lands within 2.5 s of <ret> —
or, with a slow LLM, is dropped as late; "no information" injects nothing. The JSONL
transcript shows each step.

The run replays the LLM's latency in frames (no real time needed): the same LLM latency
gives the same conversation on a fast or a slow engine, and a longer one lands the span
later by exactly the difference in frames."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from app.conversation.config import ConversationConfig
from app.conversation.headless import run_headless
from app.conversation.run_request import HeadlessRun
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from tests.speech import spoken

RET_ID = 4
RET_AT_FRAME = 52  # 4.2 s: after the question ended and the VAD closed the turn


@pytest.fixture(scope="module")
def spoken_question(tmp_path_factory) -> Path:
    return spoken("What is the capital of Australia?", tmp_path_factory.mktemp("speech"),
                  before_s=1.0, after_s=5.0)


def force_ret_at(frame: int):
    """An engine hook: the model says <ret> at `frame` and never otherwise."""

    def hook(engine) -> None:
        def bias(_module, _inputs, logits):
            if logits.shape[1] != 1 or not engine.ready.is_set():
                return logits  # spans, the prefix and the warm-up are not frames
            logits = logits.clone()
            logits[..., RET_ID] = 1e4 if engine.frame_index == frame else -1e4
            return logits

        engine.checkpoint.lm.text_linear.register_forward_hook(bias)

    return hook


def slowed(hook, seconds_per_frame: float):
    """`hook`, and an engine whose every conversation frame takes `seconds_per_frame` more
    (a slow machine)."""

    def both(engine) -> None:
        hook(engine)

        def sleep(_module, _inputs, _logits):
            if _logits.shape[1] == 1 and engine.ready.is_set():
                time.sleep(seconds_per_frame)

        engine.checkpoint.lm.text_linear.register_forward_hook(sleep)

    return both


def run(tiny_cs_folder, stt_dir, question: Path, tmp_path: Path, reply: ScriptedReply,
        seconds_per_frame: float = 0.0, busy_llm_s: float = 0.0
        ) -> tuple[list[dict], list[dict]]:
    """`busy_llm_s`: each request takes that much longer than its script (a busy machine)."""
    transcript = tmp_path / f"t-{len(list(tmp_path.glob('t-*.jsonl')))}.jsonl"

    def busy(_body: dict) -> ScriptedReply:
        time.sleep(busy_llm_s)
        return reply

    script = busy if busy_llm_s else [reply]
    with OllamaStandIn(models=("standin:latest",), script=script) as standin:
        summary = run_headless(
            ConversationConfig(model_id="tiny-cs", stt_model="tiny-stt", end_of_turn="vad",
                               backend="ollama", host=standin.url, model="standin:latest",
                               tools=("calculator",), user_name="Ada", user_city="Seoul"),
            HeadlessRun(question, tmp_path / "reply.wav", transcript, seed=3,
                        engine_hook=slowed(force_ret_at(RET_AT_FRAME), seconds_per_frame)))
        requests = list(standin.requests)
    records = [json.loads(line) for line in transcript.read_text().splitlines()]
    assert summary.frames == records[0]["frames"]
    return records, requests


def of(kind: str, records: list[dict]) -> list[dict]:
    return [r for r in records if r["type"] == kind]


@pytest.fixture()
def stt(data_dir):
    from app.asr.stt_catalog import ensure_stt_built, get_stt_manifest

    return ensure_stt_built(get_stt_manifest("tiny-stt"))


def test_ret_leads_to_one_span_within_the_deadline(tiny_cs_folder, stt, spoken_question,
                                                   tmp_path):
    records, requests = run(tiny_cs_folder, stt, spoken_question, tmp_path,
                            ScriptedReply(content="Canberra is the capital city of Australia."))
    head = records[0]
    assert head["model"] == "tiny-cs" and head["trigger"] == "ret_token"
    assert head["paced"] == "replay (LLM latency in frames)"  # no real time needed
    rets = of("ret", records)
    assert [r["frame"] for r in rets] == [RET_AT_FRAME + 1]  # the output lags a frame
    question = of("question", records)[0]
    assert question["ret_frame"] == RET_AT_FRAME + 1 and question["question"]
    # The tiny recogniser (random weights) keeps "hearing" words in silence, so the user
    # may still count as speaking: then it waits up to 1 s (the plans are unit-tested with
    # scripted speech in tests/orchestrator/test_retrieval.py).
    assert question["plan"] in ("cache", "wait")
    user = of("user", records)[0]
    if question["plan"] == "cache":
        assert question["question"] == " ".join(user["text"].split()).lower()
    else:
        assert question["waited_ms"] <= 1000.0
    span = of("span", records)[0]
    assert span["text"] == "Canberra is the capital city of Australia."
    assert span["ret_frame"] == RET_AT_FRAME + 1
    assert 0 <= span["latency_from_ret_s"] <= 2.5
    assert len(span["chunks"]) == 1  # one block, never split
    slot = of("slot", records)[0]
    assert slot["span_id"] == span["span_id"] and slot["total_ms"] > 0
    assert not of("late", records) and not of("no_span", records)
    # The persona named the user, and the router was told who and where they are.
    assert "name: Ada; city: Seoul" in requests[0]["messages"][0]["content"]
    # Control ids never reach the text stream.
    assert all("<0x" not in r["text"] for r in of("text", records))


def test_a_slow_llm_gives_late_and_nothing_injected(tiny_cs_folder, stt, spoken_question,
                                                    tmp_path):
    records, _ = run(tiny_cs_folder, stt, spoken_question, tmp_path,
                     ScriptedReply(content="Canberra is the capital of Australia.",
                                   first_token_delay_s=3.0))
    late = of("late", records)
    assert len(late) == 1 and late[0]["seconds"] > 2.5 and late[0]["ret_frame"] == 53
    assert not of("span", records) and not of("span_queued", records)


def test_no_information_gives_no_span(tiny_cs_folder, stt, spoken_question, tmp_path):
    records, _ = run(tiny_cs_folder, stt, spoken_question, tmp_path,
                     ScriptedReply(content="(no information found)"))
    no_span = of("no_span", records)
    assert len(no_span) == 1 and no_span[0]["reason"] == "the LLM found no information"
    assert not of("span", records)


def conversation(records: list[dict]) -> dict[str, list]:
    """What must not depend on the machine's speed: the model's words, its <ret>, what was
    heard and asked, and where each span landed (each kind in its own order)."""
    keep = {
        "text": lambda r: (r["frame"], r["text"]),
        "ret": lambda r: r["frame"],
        "user": lambda r: (r["text"], r["start"], r["end"]),
        "question": lambda r: (r["ret_frame"], r["question"], r["plan"], r["waited_ms"]),
        "span": lambda r: (r["text"], [c["before_frame"] for c in r["chunks"]], r["ret_frame"]),
        "late": lambda r: (r["ret_frame"], r["seconds"]),
        "no_span": lambda r: (r["ret_frame"], r["reason"]),
    }
    return {kind: [pick(r) for r in records if r["type"] == kind] for kind, pick in keep.items()}


# Scripted latencies a little past a frame boundary: the answer reaches the conversation
# after ceil(latency / 80 ms) frames, the stand-in's declared time (the request's own time on
# the machine, a few ms or, on a busy one, more than a frame, is not counted).
FAST_LLM_S, SLOW_LLM_S = 0.41, 1.21


def test_the_llm_latency_is_replayed_in_frames_whatever_the_engine_speed(
        tiny_cs_folder, stt, spoken_question, tmp_path):
    answer = "Canberra is the capital city of Australia."
    fast, _ = run(tiny_cs_folder, stt, spoken_question, tmp_path,
                  ScriptedReply(content=answer, first_token_delay_s=FAST_LLM_S))
    slow_engine, _ = run(tiny_cs_folder, stt, spoken_question, tmp_path,
                         ScriptedReply(content=answer, first_token_delay_s=FAST_LLM_S),
                         seconds_per_frame=0.12)
    assert conversation(slow_engine) == conversation(fast)
    # Asked at the <ret> (or once the question settled, plan "wait"); the answer lands at the
    # frame it would have reached in real time.
    question = of("question", fast)[0]
    asked = question["ret_frame"] + round(question["waited_ms"] / 80.0)
    landed = of("span", fast)[0]["chunks"][0]["before_frame"]
    assert landed == asked + math.ceil(FAST_LLM_S / 0.08)

    slower_llm, _ = run(tiny_cs_folder, stt, spoken_question, tmp_path,
                        ScriptedReply(content=answer, first_token_delay_s=SLOW_LLM_S))
    later = of("span", slower_llm)[0]["chunks"][0]["before_frame"]
    assert later - landed == math.ceil(SLOW_LLM_S / 0.08) - math.ceil(FAST_LLM_S / 0.08)
    # Up to the first answer the two conversations are the same.
    assert [t for t in conversation(slower_llm)["text"] if t[0] < landed] == [
        t for t in conversation(fast)["text"] if t[0] < landed]


def test_a_scripted_llm_lands_at_the_same_frame_however_long_the_machine_takes(
        tiny_cs_folder, stt, spoken_question, tmp_path):
    """A busy machine stretches each request well past the script (here 0.3 s, almost four
    frames): the replay counts the stand-in's declared time, so the span lands at the same
    frame and the conversation is the same."""
    answer = "Canberra is the capital city of Australia."
    quick, _ = run(tiny_cs_folder, stt, spoken_question, tmp_path,
                   ScriptedReply(content=answer, first_token_delay_s=FAST_LLM_S))
    busy, _ = run(tiny_cs_folder, stt, spoken_question, tmp_path,
                  ScriptedReply(content=answer, first_token_delay_s=FAST_LLM_S),
                  busy_llm_s=0.3)
    assert of("span", busy) and conversation(busy) == conversation(quick)
