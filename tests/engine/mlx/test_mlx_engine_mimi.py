"""`python main.py run --device mlx --mimi mlx|torch`: the MLX engine with either Mimi, end
to end on tiny-cs (its conversation start, a span as a block), through the CLI.

The two runs (same input, seed, span and chunk limit) must write the same transcript, every
text piece at its frame, and reply audio equal to within one step of the 16-bit WAV: the
codes the LM hears are the same and the decoders agree to float rounding. `--debug` shows
which Mimi each run loaded, so a flag that never reached the engine would be seen.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mlx.core", reason="mlx does not import here (pip install mlx[cpu])")

from app.audio_file import read_mono_24k, write_wav_24k
from app.frames import SAMPLE_RATE

REPO_ROOT = Path(__file__).resolve().parents[3]
WAV_STEP = 1.0 / 32768.0  # one step of a 16-bit sample
LOADED = {"mlx": "Mimi on MLX (moshi_mlx, CPU)", "torch": "Mimi on torch (CPU)"}
CLOCK_KEYS = ("over_budget", "elapsed", "wall")  # with every *_ms and *_s


def _without_timings(value: object) -> object:
    """A transcript record with what the clock measured left out (it differs run to run)."""
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items()
                if not k.endswith(("_ms", "_s")) and k not in CLOCK_KEYS}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def _run(data_dir: Path, tmp_path: Path, wav: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "main.py", "--debug", "run", "--model", "tiny-cs", "--device", "mlx",
         "--precision", "fp32", "--input", str(wav), "--seed", "3", "--chunk-limit", "32",
         "--inject", "Canberra is the capital city of Australia.", "--at", "1.0", *extra],
        cwd=REPO_ROOT, env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
        capture_output=True, text=True, timeout=600)


def test_either_mimi_gives_the_mlx_engine_the_same_conversation(tiny_cs_folder, data_dir,
                                                                 tmp_path):
    t = np.arange(4 * SAMPLE_RATE) / SAMPLE_RATE
    wav = tmp_path / "in.wav"
    write_wav_24k(wav, (0.3 * np.sin(2 * np.pi * 220 * t) * (np.sin(np.pi * t) > 0)
                        ).astype(np.float32))
    transcripts, replies = {}, {}
    for mimi in ("mlx", "torch"):
        out, transcript = tmp_path / f"reply-{mimi}.wav", tmp_path / f"run-{mimi}.jsonl"
        result = _run(data_dir, tmp_path, wav, "--mimi", mimi, "--output", str(out),
                      "--transcript", str(transcript))
        assert result.returncode == 0, result.stderr
        assert LOADED[mimi] in result.stderr
        assert LOADED["mlx" if mimi == "torch" else "torch"] not in result.stderr
        transcripts[mimi] = [json.loads(line) for line in transcript.read_text().splitlines()]
        replies[mimi] = read_mono_24k(out)

    mlx_run, torch_run = transcripts["mlx"], transcripts["torch"]
    assert mlx_run[0]["prompt_frames"] > 0  # tiny-cs's conversation start went in
    assert [r["type"] for r in mlx_run].count("span") == 1
    assert _without_timings(mlx_run) == _without_timings(torch_run)
    assert len(replies["mlx"]) == len(replies["torch"]) == len(t)
    assert float(np.abs(replies["mlx"] - replies["torch"]).max()) <= 2 * WAV_STEP
    assert float(np.abs(replies["mlx"]).max()) > 0.01  # the model did speak


def test_mimi_is_refused_on_the_torch_engine(tiny_folder, data_dir, tmp_path):
    wav = tmp_path / "in.wav"
    write_wav_24k(wav, np.zeros(SAMPLE_RATE, dtype=np.float32))
    result = subprocess.run(
        [sys.executable, "main.py", "run", "--model", "tiny", "--device", "cpu", "--mimi",
         "mlx", "--input", str(wav), "--output", str(tmp_path / "o.wav"), "--transcript",
         str(tmp_path / "t.jsonl")],
        cwd=REPO_ROOT, env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
        capture_output=True, text=True, timeout=600)
    assert result.returncode != 0
    assert "--mimi mlx chooses the MLX engine's Mimi (--device mlx)" in result.stderr
    assert not (tmp_path / "o.wav").exists()
