"""`python main.py download MODEL`, for machines without a display, run as a user runs it (a
child process) against the stand-in Hugging Face Hub of tests/checkpoints/test_downloader.py
on 127.0.0.1 (HF_ENDPOINT points the child at it; nothing else is reached)."""

from __future__ import annotations

import importlib.util
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
CHUNK = 10 * 1024 * 1024  # huggingface_hub's DOWNLOAD_CHUNK_SIZE: what a child reads at once


def _downloader_tests():
    """The stand-in hub lives with the downloader's own tests; load it from there."""
    path = REPO_ROOT / "tests" / "checkpoints" / "test_downloader.py"
    spec = importlib.util.spec_from_file_location("_downloader_tests_for_cli", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


hub_tests = _downloader_tests()
STT_FILES = {  # the names models/stt/kyutai-stt-1b-en_fr.json asks for, tiny contents
    "config.json": b'{"model_type": "stt"}\n',
    "model.safetensors": random.Random(1).randbytes(1_000_000),
    "mimi-pytorch-e351c8d8@125.safetensors": random.Random(2).randbytes(200_000),
    "tokenizer_en_fr_audio_8000.model": random.Random(3).randbytes(30_000),
}
PERSONAPLEX_FILES = {  # models/personaplex.json
    "model.safetensors": random.Random(4).randbytes(300_000),
    "tokenizer-e351c8d8-checkpoint125.safetensors": random.Random(5).randbytes(50_000),
    "tokenizer_spm_32k_3.model": random.Random(6).randbytes(10_000),
    "voices.tgz": random.Random(7).randbytes(20_000),
}


@pytest.fixture()
def hub(tmp_path: Path) -> Iterator:
    with hub_tests.HubStandIn(tmp_path / "hub") as server:
        yield server


def child_env(hub, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE",
                        "HF_HUB_ENABLE_HF_TRANSFER")}
    env.update(CONTEXTSPAN_DATA_DIR=str(tmp_path / "data"), HF_HOME=str(tmp_path / "hf-home"),
               HF_ENDPOINT=hub.url, HF_HUB_DISABLE_TELEMETRY="1",
               NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost", **extra)
    return env


def download(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "main.py", "download", *args], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def percents(stderr: str) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(r"^\s*(\d+)%  ", stderr, re.M)]


def test_an_stt_downloads_by_its_catalog_id_with_progress_and_verified(hub, tmp_path):
    hub.publish("kyutai/stt-1b-en_fr", STT_FILES)
    hub.publish("kyutai/stt-1b-en_fr-candle", {"model.safetensors": b"h" * 7000})
    env = child_env(hub, tmp_path)
    result = download("kyutai-stt-1b-en_fr", env=env)
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "data" / "checkpoints" / "kyutai-stt-1b-en_fr"
    for name, data in STT_FILES.items():
        assert (folder / name).read_bytes() == data
    assert (folder / "end-of-speech" / "model.safetensors").read_bytes() == b"h" * 7000
    done = percents(result.stderr)
    assert done[0] == 0 and done[-1] == 100 and done == sorted(done) and len(done) >= 3
    assert re.search(r"100%  1\.2 MB of 1\.2 MB  [\d.]+ [kMG]?B/s", result.stderr)
    assert result.stdout.startswith(f"kyutai-stt-1b-en_fr is ready in {folder}: 5 file(s) "
                                    "verified, 1.2 MB fetched")

    again = download("kyutai-stt-1b-en_fr", env=env)  # all on disk: nothing fetched
    assert again.returncode == 0, again.stderr
    assert "1.2 MB already here" in again.stderr and "verified, 0 B fetched" in again.stdout


def test_a_gated_repository_is_explained_and_hf_token_opens_it(hub, tmp_path):
    hub.publish("nvidia/personaplex-7b-v1", PERSONAPLEX_FILES, gated=True,
                tokens=("hf_good",))
    folder = tmp_path / "elsewhere"
    refused = download("personaplex", "--folder", str(folder), env=child_env(hub, tmp_path))
    assert refused.returncode == 1
    error = refused.stderr.splitlines()[-1]
    assert error.startswith("error: nvidia/personaplex-7b-v1 is gated: its licence")
    assert "HF_TOKEN" in error and "settings/tokens" in error
    assert f"{hub.url}/nvidia/personaplex-7b-v1" in error
    assert error.endswith(f"(details: {tmp_path / 'data' / 'logs' / 'contextspan.log'})")

    allowed = download("personaplex", "--folder", str(folder),
                       env=child_env(hub, tmp_path, HF_TOKEN="hf_good"))
    assert allowed.returncode == 0, allowed.stderr
    for name, data in PERSONAPLEX_FILES.items():
        assert (folder / name).read_bytes() == data


def test_a_model_built_here_is_not_downloaded(hub, tmp_path):
    result = download("tiny", env=child_env(hub, tmp_path))
    assert result.returncode == 1
    assert "'tiny' is not on Hugging Face: it is built on this machine" in result.stderr
    assert not hub.seen


def _sigint_as_in_a_terminal() -> None:
    """In the child before it runs: SIGINT at its default, so Python makes it Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_keeps_the_partial_file_says_so_and_the_next_run_resumes(hub, tmp_path):
    big = random.Random(8).randbytes(CHUNK + 1_500_000)
    files = {"model.safetensors": big,
             "tokenizer-e351c8d8-checkpoint125.safetensors": b"m" * 5000,
             "tokenizer_spm_32k_3.model": b"t" * 1000}
    hub.publish("kyutai/moshiko-pytorch-bf16", files)
    # The hub sends one whole chunk and a little more, then stalls: a partial file is on disk.
    stall = hub_tests.Fault(hold_after=CHUNK + 1000)
    hub.faults[("kyutai/moshiko-pytorch-bf16", "model.safetensors")] = stall
    # The child's read of the stalled file waits for the test's Ctrl-C: with huggingface_hub's
    # 10 s read timeout, a machine slower than that to deliver it saw the read time out, the
    # client resume the file with a request of its own, and the download finish (exit 0).
    env = child_env(hub, tmp_path, HF_HUB_DOWNLOAD_TIMEOUT="600")
    # Ctrl-C reaches the child as it reaches a terminal's foreground job: a runner started in
    # the background (`cmd &` in a script: SIGINT ignored, and inherited) would leave the
    # child deaf to it (seen: the run waited out its 120 s with the signal sent).
    proc = subprocess.Popen([sys.executable, "main.py", "download", "moshiko"], cwd=REPO_ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_sigint_as_in_a_terminal)
    lines: queue.Queue[str | None] = queue.Queue()

    def read_stderr() -> None:
        for line in proc.stderr:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read_stderr, daemon=True).start()
    seen: list[str] = []
    try:
        while not (seen and percents(seen[-1]) and percents(seen[-1])[0] > 0):
            line = lines.get(timeout=60)
            assert line is not None, "".join(seen)
            seen.append(line)
        assert stall.held.wait(timeout=60)
        # The hub holds the rest of the file until the process has ended: the Ctrl-C lands
        # mid-download however slowly the machine runs the child.
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
    finally:
        proc.kill()
        stall.release.set()
    while (line := lines.get(timeout=10)) is not None:
        seen.append(line)
    assert "Traceback" not in "".join(seen)
    message = seen[-1].strip()
    assert re.fullmatch(r"Download cancelled\. 10\.5 MB of 12\.0 MB is kept in .+; the next "
                        r"download resumes from there\.", message), message
    folder = tmp_path / "data" / "checkpoints" / "moshiko"
    assert not (folder / "model.safetensors").exists()
    partial = list(folder.glob(".cache/huggingface/download/*.incomplete"))
    assert [p.stat().st_size for p in partial] == [CHUNK]

    # The hub records a request when its handler ends: let the stalled one end first.
    wait_until(lambda: hub.gets("/blobs/kyutai/moshiko-pytorch-bf16/model.safetensors"), 30,
               interval=0.05, message="the stalled request never ended")
    hub.forget_seen()
    resumed = download("moshiko", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert (folder / "model.safetensors").read_bytes() == big
    gets = hub.gets("/blobs/kyutai/moshiko-pytorch-bf16/model.safetensors")
    assert [g.range for g in gets] == [f"bytes={CHUNK}-"]
