"""A headless run's outputs tell the truth: paths are checked before the run, a failed run
never leaves a finished-looking transcript or a WAV that claims missing audio, text that is
not valid UTF-8 never stops it, and only spans that landed are counted."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sphn

from app.audio_file import write_wav_24k
from app.conversation.config import ConversationConfig
from app.conversation.headless import run_headless
from app.conversation.run_request import HeadlessRun, HeadlessRunError, Injection

REPO_ROOT = Path(__file__).resolve().parents[2]
TINY = ConversationConfig(model_id="tiny")


@pytest.fixture(scope="module")
def two_seconds(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("audio") / "in.wav"
    t = np.arange(48000) / 24000
    sphn.write_wav(str(path), (0.2 * np.sin(2 * np.pi * 200 * t)).astype(np.float32), 24000)
    return path


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_bad_output_paths_fail_before_the_model_loads(tiny_folder, two_seconds, tmp_path,
                                                      monkeypatch):
    import app.checkpoints.loader as loader  # assembly imports it where a model loads

    loads = []
    monkeypatch.setattr(loader, "load_checkpoint", lambda *a, **k: loads.append(a))
    folder = tmp_path / "a-folder"
    folder.mkdir()
    cases = [
        (folder, tmp_path / "t.jsonl", "is a folder"),
        (two_seconds, tmp_path / "t.jsonl", "is the input"),
        (tmp_path / "same.out", tmp_path / "same.out", "named twice"),
    ]
    for output, transcript, message in cases:
        with pytest.raises(HeadlessRunError, match=message):
            run_headless(TINY, HeadlessRun(two_seconds, output, transcript))
    assert loads == [] and not (tmp_path / "t.jsonl").exists()


def test_a_folder_that_takes_no_file_fails_before_the_model_loads(tiny_folder, two_seconds,
                                                                 tmp_path, monkeypatch):
    """`/proc` exists and passes the permission check (as root too) but takes no file; a full
    disk takes the file but not its data. Both are found by making the temporary files."""
    import app.audio_file as audio_file
    import app.checkpoints.loader as loader  # assembly imports it where a model loads

    loads = []
    monkeypatch.setattr(loader, "load_checkpoint", lambda *a, **k: loads.append(a))
    transcript = tmp_path / "t.jsonl"
    with pytest.raises(HeadlessRunError, match="cannot write /proc/r.wav"):
        run_headless(TINY, HeadlessRun(two_seconds, Path("/proc/r.wav"), transcript))
    with pytest.raises(HeadlessRunError, match="cannot write /proc/t.jsonl"):
        run_headless(TINY, HeadlessRun(two_seconds, tmp_path / "r.wav", Path("/proc/t.jsonl")))

    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(audio_file.os, "fsync", full_disk)
    with pytest.raises(HeadlessRunError, match=r"cannot write .*r.wav.*No space left"):
        run_headless(TINY, HeadlessRun(two_seconds, tmp_path / "r.wav", transcript))
    assert loads == [] and list(tmp_path.iterdir()) == []  # no probe left behind


def test_a_reply_that_cannot_be_written_ends_the_transcript_with_that_error(
        tiny_folder, two_seconds, tmp_path, monkeypatch):
    """The disk fills while the conversation runs: the run exits with the error and its
    transcript ends with it, not with a normal "end" line."""
    import app.conversation.headless as headless

    def full_disk(path, pcm):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(headless, "write_wav_24k", full_disk)
    out, transcript = tmp_path / "r.wav", tmp_path / "t.jsonl"
    with pytest.raises(HeadlessRunError, match="cannot write the reply audio .*No space"):
        run_headless(TINY, HeadlessRun(two_seconds, out, transcript))
    lines = records(transcript)
    assert lines[-1]["type"] == "error" and "No space left" in lines[-1]["message"]
    assert not [r for r in lines if r["type"] == "end"]
    assert not out.exists() and not list(tmp_path.glob(".*partial"))


def test_a_failed_run_ends_its_transcript_with_the_error_and_writes_no_audio(
        tiny_folder, two_seconds, tmp_path):
    out, transcript = tmp_path / "r.wav", tmp_path / "t.jsonl"
    with pytest.raises(HeadlessRunError, match="NO-SUCH-VOICE"):
        run_headless(ConversationConfig(model_id="tiny-persona", voice="NO-SUCH-VOICE"),
                     HeadlessRun(two_seconds, out, transcript))
    lines = records(transcript)
    assert lines[-1]["type"] == "error" and "NO-SUCH-VOICE" in lines[-1]["message"]
    assert not [r for r in lines if r["type"] == "end"]
    assert not out.exists() and not list(tmp_path.glob(".*partial"))


def test_a_full_disk_leaves_no_wav_claiming_the_full_length(tmp_path, monkeypatch):
    def half_then_full(path, pcm, rate):
        Path(path).write_bytes(b"RIFF" + b"\0" * 100)  # a header, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sphn, "write_wav", half_then_full)
    target = tmp_path / "reply.wav"
    with pytest.raises(OSError, match="No space"):
        write_wav_24k(target, np.zeros(24000, np.float32))
    assert not target.exists() and list(tmp_path.iterdir()) == []


def test_text_that_is_not_utf8_is_escaped_not_fatal(tiny_folder, data_dir, two_seconds,
                                                   tmp_path):
    """Odd bytes in an argument reach Python as lone surrogates (surrogateescape)."""
    transcript = tmp_path / "t.jsonl"
    odd = b"caf\xe9 \xff bytes".decode("utf-8", "surrogateescape")
    result = subprocess.run(
        [sys.executable, "main.py", "run", "--model", "tiny", "--input", str(two_seconds),
         "--output", str(tmp_path / "r.wav"), "--transcript", str(transcript),
         "--inject", odd, "--at", "0.5", "--source", odd],
        cwd=REPO_ROOT, env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
        capture_output=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = records(transcript)  # every line is valid JSON
    span = [r for r in lines if r["type"] == "span"][0]
    assert span["source"] == odd  # the escape decodes back to what was given
    assert lines[-1]["type"] == "end"


def test_only_landed_spans_are_counted_and_a_cut_span_keeps_its_chunks(tiny_folder,
                                                                      two_seconds, tmp_path):
    transcript = tmp_path / "t.jsonl"
    summary = run_headless(TINY, HeadlessRun(
        two_seconds, tmp_path / "r.wav", transcript,
        (Injection("The capital of Australia is Canberra.", 0.2),
         Injection("   ", 0.3),  # nothing to inject: refused
         Injection("word " * 100, 1.8)),  # the input ends while it is going in
        chunk_limit=8, seed=1))
    lines = records(transcript)
    spans = [r for r in lines if r["type"] == "span"]
    complete = [s for s in spans if s.get("complete", True)]
    cut = [s for s in spans if s.get("complete") is False]
    assert summary.spans == len(complete) == 1
    assert len(cut) == 1 and cut[0]["chunks"] and sum(c["k"] for c in cut[0]["chunks"]) < (
        cut[0]["positions"])
    assert any("not injected" in r.get("message", "") for r in lines if r["type"] == "notice")
    assert lines[-1]["type"] == "end"
