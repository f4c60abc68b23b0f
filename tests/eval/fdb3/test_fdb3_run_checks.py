"""`eval fdb3 run` on this CPU, what a benchmark user counts on besides the scores:

- the same run twice gives the same result files and reply audio, however busy the machine
  (a fixed span chunk limit, the stand-in's and the mock tools' scripted latencies: nothing
  measured on the machine moves a frame; the result holds no wall-clock figure); the two
  runs go one after the other, so the test does not depend on the load it finds;
- a call's arguments in the result are those the benchmark's typed function would get;
- a run in which no user turn is ever detected fails, saying so, and leaves no result to
  be scored as "answered";
- a scenario's unknown latency profile is refused before anything runs.

Real parts: make-demo's espeak-ng samples, the tiny speech model and recogniser, Silero's
VAD, the stand-in Ollama, our MCP server of the mock APIs, the CLI in a child process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app.audio_file import write_wav
from app.eval.fdb3.demo_scenarios import demo_scenarios
from app.eval.fdb3.make_demo import make_demo

REPO_ROOT = Path(__file__).resolve().parents[3]
KEPT = ("demo_housing_01", "demo_ecommerce_02")  # numbers as strings; a default left out
SPEAKER = "0123456789abcdef01234567"


def eval_cli(args: list[str], data_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "main.py", "eval", *args], cwd=REPO_ROOT,
                          env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
                          capture_output=True, text=True, timeout=1800)


def run_args(root: Path, provider: str) -> list[str]:
    return ["fdb3", "run", str(root), "--provider", provider, "--llm", "standin",
            "--asr", "tiny-stt", "--vad"]


@pytest.fixture(scope="module")
def stt_built(data_dir):
    from app.asr.stt_catalog import ensure_stt_built, get_stt_manifest

    return ensure_stt_built(get_stt_manifest("tiny-stt"))


@pytest.fixture(scope="module")
def two_samples(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fdb3") / "set"
    make_demo(root)
    for folder in root.iterdir():
        if folder.name.rsplit("_", 1)[0] not in KEPT:
            shutil.rmtree(folder)
    return root


def _same_apart_from_the_provider(result: dict) -> dict:
    """The result without what names its provider (the key, and its files' names)."""
    kept = {k: v for k, v in result.items() if k != "provider"}
    kept["contextspan"] = {k: v for k, v in result["contextspan"].items()
                           if k not in ("run_log", "output")}
    return kept


@pytest.mark.slow
def test_two_runs_give_the_same_results_and_the_calls_typed_arguments(
        tiny_folder, stt_built, data_dir, two_samples):
    first = eval_cli(run_args(two_samples, "first"), data_dir)
    assert first.returncode == 0, first.stderr
    second = eval_cli(run_args(two_samples, "second"), data_dir)
    assert second.returncode == 0, second.stderr
    folders = sorted(p for p in two_samples.iterdir() if p.is_dir())
    assert len(folders) == 2
    for folder in folders:
        one = json.loads((folder / "result_first.json").read_text())
        two = json.loads((folder / "result_second.json").read_text())
        assert one["actual_tool_calls"], folder.name  # the conversation called its tools
        assert one["contextspan"]["chunk_limit"] == 64
        assert _same_apart_from_the_provider(one) == _same_apart_from_the_provider(two), \
            folder.name
        assert (folder / "output_first.wav").read_bytes() == \
            (folder / "output_second.wav").read_bytes(), folder.name
    summary = json.loads((two_samples / "fdb3_run_first.json").read_text())
    assert set(summary["elapsed_s"]) == {f.name for f in folders}  # the machine's time
    austin = json.loads(next(two_samples.glob("demo_housing_01_*/result_first.json"))
                        .read_text())["actual_tool_calls"][0]
    assert austin["llm_args"] == {"city": "Austin", "bedrooms": "2", "max_price": "2000"}
    assert austin["args"] == {"city": "Austin", "bedrooms": 2, "max_price": 2000.0}


def _sample(root: Path, scenario: dict, pcm: np.ndarray) -> Path:
    folder = root / f"{scenario['id']}_{SPEAKER}"
    folder.mkdir(parents=True)
    write_wav(folder / "input.wav", pcm, 48000)
    (folder / "metadata.json").write_text(json.dumps(scenario))
    return folder


@pytest.mark.slow
def test_a_run_where_no_user_turn_is_ever_detected_fails(tiny_folder, stt_built, data_dir,
                                                        tmp_path):
    """Nobody speaks (the recogniser still makes up words: it has random weights), so the
    voice activity detector never ends a turn and the LLM is never asked."""
    scenario = next(s for s in demo_scenarios() if s["id"] == "demo_ecommerce_01")
    folder = _sample(tmp_path, scenario, np.zeros(4 * 48000, np.float32))
    run = eval_cli(run_args(tmp_path, "quiet"), data_dir)
    assert run.returncode == 1, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last == ("error: no user turn was detected in any of the 1 sample(s) run: the "
                    "speech recogniser never ended a user's turn, so the LLM was never asked "
                    "(check --asr; --vad ends turns by voice activity)"), run.stderr
    assert "no user turn was detected in its input" in run.stderr
    assert not (folder / "result_quiet.json").exists()  # nothing to score as answered
    assert (folder / "contextspan_run_quiet.jsonl").is_file()  # what happened, to look at
    summary = json.loads((tmp_path / "fdb3_run_quiet.json").read_text())
    assert summary["no_user_turn"] == [folder.name] and summary["ran"] == 0


def test_an_unknown_latency_profile_is_refused_before_anything_runs(data_dir, tmp_path):
    scenario = {**demo_scenarios()[0], "latency_profile": "fast"}
    folder = _sample(tmp_path, scenario, np.zeros(48000, np.float32))
    run = eval_cli(run_args(tmp_path, "ours"), data_dir)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1].startswith(
        f"error: {folder.name}: its latency_profile 'fast' is not one of instant, normal, "
        "slow (details: ")
    assert not (folder / "contextspan_run_ours.jsonl").exists()
