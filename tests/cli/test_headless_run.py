"""`python main.py run` and `bench injection`, as a user runs them (child processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sphn

REPO_ROOT = Path(__file__).resolve().parents[2]


def main_py(*args: str, data_dir: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python main.py ARGS` in a child. One torch thread: on a busy machine a second one
    spins at every parallel op waiting for a core (the injection bench took 3.4x longer at
    load 6 with two, and ran past 300 s at load 10)."""
    return subprocess.run(
        [sys.executable, "main.py", *args],
        cwd=REPO_ROOT,
        env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def stereo_44k_wav(tmp_path_factory) -> Path:
    """3.3 s of stereo 44.1 kHz audio: the run must resample and mix it down."""
    path = tmp_path_factory.mktemp("audio") / "question.wav"
    rate = 44100
    t = np.arange(int(3.3 * rate)) / rate
    pcm = np.stack([0.3 * np.sin(2 * np.pi * 220 * t), 0.2 * np.sin(2 * np.pi * 330 * t)])
    sphn.write_wav(str(path), pcm.astype(np.float32), rate)
    return path


def test_run_writes_reply_audio_of_the_input_duration_and_a_transcript(
    tiny_folder, data_dir, stereo_44k_wav, tmp_path
):
    out_wav, transcript = tmp_path / "reply.wav", tmp_path / "t.jsonl"
    result = main_py(
        "run", "--model", "tiny", "--input", str(stereo_44k_wav), "--output", str(out_wav),
        "--transcript", str(transcript), "--seed", "1", "--chunk-limit", "16",
        "--inject", "The capital of Australia is Canberra.", "--at", "1.0",
        "--inject", "word " * 300, "--at", "2",
        data_dir=data_dir,
    )
    assert result.returncode == 0, result.stderr
    reply, rate = sphn.read(str(out_wav))
    assert rate == 24000 and reply.shape == (1, round(3.3 * 24000))
    records = [json.loads(line) for line in transcript.read_text().splitlines()]
    kinds = [r["type"] for r in records]
    assert kinds[0] == "run" and kinds[-1] == "end"
    assert records[0]["model"] == "tiny" and records[-1]["frames"] == records[0]["frames"]
    texts = [r for r in records if r["type"] == "text"]
    assert texts and all(isinstance(r["frame"], int) and r["text"] for r in texts)
    spans = [r for r in records if r["type"] == "span"]
    assert [s["text"] for s in spans][0] == "The capital of Australia is Canberra."
    assert spans[0]["source"] == "cli" and spans[0]["chunks"][0]["before_frame"] == 12
    assert sum(c["k"] for c in spans[0]["chunks"]) == spans[0]["positions"]
    assert all(c["k"] <= 16 for s in spans for c in s["chunks"])
    long_span = spans[1]
    assert long_span["truncated"] and long_span["chunks"][0]["before_frame"] >= 25
    notices = [r for r in records if r["type"] == "notice"]
    assert any("truncated" in n["message"] for n in notices)  # never silently


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "nope"], "unknown model"),
        (["--input", "/nonexistent.wav"], "not found"),
        (["--inject", "x"], "--at"),
        (["--inject", "x", "--at", "99"], "outside the input"),
        (["--chunk-limit", "0"], "chunk-limit"),
        (["--device", "cuda"], "cuda"),
    ],
)
def test_bad_input_exits_non_zero_with_one_line_and_no_traceback(
    tiny_folder, data_dir, stereo_44k_wav, tmp_path, args, message
):
    base = {"--model": "tiny", "--input": str(stereo_44k_wav),
            "--output": str(tmp_path / "o.wav"), "--transcript": str(tmp_path / "o.jsonl")}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    flat = [item for pair in base.items() for item in pair]
    result = main_py("run", *flat, data_dir=data_dir)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert message in lines[0]
    assert "Traceback" not in result.stderr


def test_garbage_audio_is_a_clear_error(tiny_folder, data_dir, tmp_path):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"this is not audio")
    result = main_py("run", "--input", str(bad), "--output", str(tmp_path / "o.wav"),
                     "--transcript", str(tmp_path / "o.jsonl"), data_dir=data_dir)
    assert result.returncode == 1
    assert result.stderr.startswith("error: cannot read audio") and "Traceback" not in result.stderr


def test_bench_injection_prints_one_json_object_with_exact_prefill(tiny_folder, data_dir):
    result = main_py("bench", "injection", "--model", "tiny", "--k", "8", "--k", "32",
                     "--repeats", "3", "--json", data_dir=data_dir)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["model"] == "tiny" and report["device"] == "cpu"
    assert report["step_ms"] > 0 and isinstance(report["max_k_in_budget"], int)
    assert [row["k"] for row in report["k"]] == [8, 32]
    for row in report["k"]:
        assert row["prefill_ms"] > 0 and row["sequential_ms"] > 0
        assert row["ratio"] == pytest.approx(row["sequential_ms"] / row["prefill_ms"], rel=0.01)
        assert row["max_diff"] <= 1e-4 and row["max_diff_after_wrap"] <= 1e-4
