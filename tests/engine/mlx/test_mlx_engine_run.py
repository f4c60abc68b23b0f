"""The MLX engine as an engine: `python main.py run --device mlx`, end to end on tiny-cs.

(1) The whole reference conversation shape with 8-bit weights, through the CLI: a spoken
question is recognised (tiny-stt), the model's <ret> is forced (`--ret-at`: random weights
never ask), the stand-in LLM answers, and the answer lands as one block; the transcript shows
the conversation start, the <ret>, the block (`span` and `slot`) and every frame.
(2) In fp32 and greedy, the MLX engine's transcript (every text piece, at its frame) and its
reply audio are the torch engine's for the same input, seed, <ret> and span.
(3) 8- and 4-bit weights are refused on the torch engine with a message that names MLX.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mlx.core", reason="mlx does not import here (pip install mlx[cpu])")

from app.conversation.config import ConversationConfig
from app.conversation.headless import Injection, run_headless
from app.conversation.run_request import HeadlessRun
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from tests.speech import spoken

REPO_ROOT = Path(__file__).resolve().parents[3]
RET_AT_S = 4.2  # after the question ended and the VAD closed the turn
RET_FRAME = 53  # the output lags the forced frame (52) by one
ANSWER = "Canberra is the capital city of Australia."


@pytest.fixture(scope="module")
def spoken_question(tmp_path_factory) -> Path:
    return spoken("What is the capital of Australia?", tmp_path_factory.mktemp("speech"),
                  before_s=1.0, after_s=5.0)


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def of(kind: str, records: list[dict]) -> list[dict]:
    return [r for r in records if r["type"] == kind]


def test_the_reference_conversation_shape_runs_in_8_bits_on_mlx(
        tiny_cs_folder, data_dir, spoken_question, tmp_path):
    from app.asr.stt_catalog import ensure_stt_built, get_stt_manifest

    ensure_stt_built(get_stt_manifest("tiny-stt"))
    transcript = tmp_path / "run.jsonl"
    with OllamaStandIn(models=("standin:latest",), script=[ScriptedReply(content=ANSWER)]
                       ) as standin:
        result = subprocess.run(
            [sys.executable, "main.py", "run", "--model", "tiny-cs", "--device", "mlx",
             "--precision", "q8", "--input", str(spoken_question), "--ret-at", str(RET_AT_S),
             "--asr", "tiny-stt", "--vad", "--llm", "ollama", "--llm-host", standin.url,
             "--llm-model", "standin:latest", "--tools", "calculator", "--user-name", "Ada",
             "--user-city", "Seoul", "--seed", "3", "--output", str(tmp_path / "reply.wav"),
             "--transcript", str(transcript)],
            cwd=REPO_ROOT, env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    records = _records(transcript)
    head = records[0]
    assert (head["model"], head["device"], head["dtype"]) == ("tiny-cs", "mlx", "q8")
    assert head["trigger"] == "ret_token"
    assert head["prompt_frames"] > 0  # the conversation start (persona prompt) went in
    assert [r["frame"] for r in of("ret", records)] == [RET_FRAME]
    assert of("question", records)[0]["ret_frame"] == RET_FRAME
    span = of("span", records)[0]
    assert span["text"] == ANSWER and span["ret_frame"] == RET_FRAME
    assert len(span["chunks"]) == 1 and span["chunks"][0]["k"] == span["positions"]  # a block
    slot = of("slot", records)[0]
    assert slot["span_id"] == span["span_id"] and slot["positions"] == span["positions"]
    assert 0 <= span["latency_from_ret_s"] <= 2.5
    assert of("text", records)  # the model spoke
    end = records[-1]
    assert end["type"] == "end" and end["reason"] == "end of input"
    assert end["frames"] == head["frames"]  # every frame went through the engine


def _greedy(engine) -> None:
    """Both engines choose by argmax (sampled tokens cannot match across RNGs)."""
    runtime = engine.engine.runtime
    runtime.sampling = replace(runtime.sampling, greedy=True)


def test_fp32_on_mlx_says_what_the_torch_engine_says(tiny_cs_folder, spoken_question,
                                                      tmp_path):
    import sphn

    said, audio = {}, {}
    for device, precision in (("cpu", None), ("mlx", "fp32")):
        transcript = tmp_path / f"{device}.jsonl"
        run_headless(
            ConversationConfig(model_id="tiny-cs", device=device, precision=precision or "auto"),
            HeadlessRun(spoken_question, tmp_path / f"{device}.wav", transcript,
                        (Injection("the capital of australia is canberra", 1.5),), seed=3,
                        ret_at=(1.0,), engine_hook=_greedy))
        records = _records(transcript)
        assert records[0]["device"] == device
        assert of("ret", records) and of("slot", records)
        said[device] = [(r["frame"], r["text"]) for r in of("text", records)]
        audio[device] = sphn.read(str(tmp_path / f"{device}.wav"))[0]
    assert len(said["cpu"]) > 10
    assert said["mlx"] == said["cpu"]
    assert np.abs(audio["mlx"] - audio["cpu"]).max() < 1e-3  # the same codes, decoded


@pytest.mark.parametrize("precision", ["q8", "q4"])
def test_8_and_4_bits_are_refused_on_the_torch_engine(precision, tiny_cs_folder, tmp_path,
                                                     spoken_question):
    with pytest.raises(ValueError, match=rf"{precision} runs on the MLX engine"):
        run_headless(ConversationConfig(model_id="tiny-cs", device="cpu", precision=precision),
                     HeadlessRun(spoken_question, tmp_path / "r.wav", tmp_path / "t.jsonl"))
