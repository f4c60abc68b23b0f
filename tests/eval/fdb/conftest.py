"""A small Full-Duplex-Bench-like data folder (espeak-ng speech), rendered once by the tiny
checkpoint, and the tiny STT to score it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import sphn

from tests.eval.fdb.render_settings import SPAN_ANSWER, TAIL_S
from tests.eval.fdb.runner_spy import counting_runner
from tests.speech import spoken

REPO_ROOT = Path(__file__).resolve().parents[3]


def speech_file(text: str, path: Path, rate: int, before_s: float, after_s: float) -> int:
    """`text` spoken into `path` at `rate`, with silence around it; returns its samples."""
    scratch = path.parent / ".speech"
    scratch.mkdir(parents=True, exist_ok=True)
    pcm, _ = sphn.read(str(spoken(text, scratch, before_s, after_s)), sample_rate=rate)
    for item in scratch.iterdir():
        item.unlink()
    scratch.rmdir()
    pcm = np.asarray(pcm, dtype=np.float32).mean(axis=0)
    sphn.write_wav(str(path), pcm, rate)
    return len(pcm)


@dataclass(frozen=True)
class FdbData:
    root: Path
    lengths: dict[str, tuple[int, int]]  # "task/id/file" -> (samples, rate)


def write_json(path: Path, value: object) -> None:
    path.write_text(json.dumps(value), encoding="utf-8")


@pytest.fixture(scope="session")
def fdb_data(tmp_path_factory: pytest.TempPathFactory) -> FdbData:
    """Two samples (v1 smooth turn-taking at 16 kHz; v1.5 interruption at 24 kHz with its
    clean input), plus a corrupt one whose input.wav is not audio."""
    root = tmp_path_factory.mktemp("fdb-data")
    lengths = {}
    turn = root / "candor_turn_taking" / "1"
    turn.mkdir(parents=True)
    # A second of silence after the question: the VAD (0.6 s hang) ends the user's turn.
    lengths["candor_turn_taking/1/input.wav"] = (
        speech_file("Is it your first time?", turn / "input.wav", 16000, 0.2, 1.0), 16000)
    write_json(turn / "turn_taking.json", [{"text": "[TURN-TAKING]", "timestamp": [1.0, 1.3]}])
    write_json(turn / "transcription.json", [{"speaker": 0, "item": []}])

    overlap = root / "v1_5" / "user_interruption" / "3"
    overlap.mkdir(parents=True)
    lengths["v1_5/user_interruption/3/input.wav"] = (
        speech_file("Wait, stop.", overlap / "input.wav", 24000, 0.2, 0.2), 24000)
    lengths["v1_5/user_interruption/3/clean_input.wav"] = (
        speech_file("Hello there.", overlap / "clean_input.wav", 24000, 0.1, 0.2), 24000)
    write_json(overlap / "metadata.json", {"context_text": "a", "current_turn_text": "b",
                                           "timestamps": [0.4, 0.9]})

    broken = root / "candor_pause_handling" / "2"
    broken.mkdir(parents=True)
    (broken / "input.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEnot really audio")
    write_json(broken / "pause.json", [{"text": "[PAUSE]", "timestamp": [0.5, 1.0]}])
    return FdbData(root, lengths)


@dataclass
class Rendered:
    out: Path
    report: object
    calls: list[str]
    lines: list[str]
    llm_requests: list[dict]


@pytest.fixture(scope="session")
def rendered(fdb_data: FdbData, tiny_folder: Path, tiny_stt_ready: Path,
             tmp_path_factory) -> Rendered:
    """fdb_data rendered by the tiny checkpoint through run_headless with the whole pipeline:
    tiny-stt hears the user, the stand-in Ollama answers each turn, the span is injected."""
    from dataclasses import replace

    from app.eval.fdb.render import FDB_CONVERSATION, RenderOptions, render_all
    from app.llm.ollama_standin import OllamaStandIn, ScriptedReply

    out = tmp_path_factory.mktemp("fdb-out")
    calls: list[str] = []
    lines: list[str] = []
    with OllamaStandIn(script=lambda body: ScriptedReply(content=SPAN_ANSWER)) as server:
        side = replace(FDB_CONVERSATION, device="cpu", stt_model="tiny-stt", end_of_turn="vad",
                       backend="ollama", host=server.url, model="standin:latest", tools=())
        report = render_all(fdb_data.root, out, RenderOptions(
            seed=7, conversation=side, tail_s=TAIL_S,
            chunk_limit=64),  # a fixed budget: the span lands whole in one frame anywhere
            runner=counting_runner(calls), report=lines.append)
        requests = list(server.requests)
    return Rendered(out, report, calls, lines, requests)


@pytest.fixture(scope="session")
def tiny_stt_ready(data_dir: Path) -> Path:
    """tiny-stt in the test data dir, built by the project's command in a child process
    (SentencePiece training must not run in the test process)."""
    folder = data_dir / "checkpoints" / "tiny-stt"
    if not (folder / "config.json").is_file():
        result = subprocess.run(
            [sys.executable, "main.py", "build", "tiny-stt"], cwd=REPO_ROOT,
            env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
            capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr
    return folder
