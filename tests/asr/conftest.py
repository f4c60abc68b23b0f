"""Fixtures for the ASR tests: the tiny STT (built once, in a child process) and real speech."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_RATE = 24000
FRAME = 1920


def build_tiny_stt_in_child(folder: Path, seed: int = 1234) -> Path:
    """SentencePiece training must not run in the test process: build in a child."""
    code = (
        "import sys; from pathlib import Path; "
        "from app.asr.tiny_stt_builder import build_tiny_stt; "
        "build_tiny_stt(Path(sys.argv[1]), seed=int(sys.argv[2]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(folder), str(seed)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return folder


@pytest.fixture(scope="session")
def build_tiny_stt_child():
    """The child-process builder, for tests that build a second checkpoint."""
    return build_tiny_stt_in_child


@pytest.fixture(scope="session")
def tiny_stt_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_stt_in_child(tmp_path_factory.mktemp("stt") / "tiny-stt")


@pytest.fixture()
def tiny_stt(tiny_stt_folder: Path):
    """A freshly loaded tiny STT (float32, CPU), through the real loader."""
    from app.asr.stt_catalog import get_stt_manifest, load_stt

    return load_stt(get_stt_manifest("tiny-stt"), tiny_stt_folder, device="cpu")


def frames(audio: np.ndarray) -> list[np.ndarray]:
    """Cut 24 kHz audio into 1920-sample frames, the last one padded with silence."""
    audio = np.pad(audio.astype(np.float32), (0, -len(audio) % FRAME))
    return [audio[i : i + FRAME] for i in range(0, len(audio), FRAME)]


@pytest.fixture(scope="session")
def spoken_question(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """'What is the capital of Australia?' spoken by espeak-ng, mono float32 at 24 kHz."""
    import sphn

    espeak = shutil.which("espeak-ng")
    if espeak is None:
        pytest.fail("espeak-ng is not installed; the VAD tests need real speech "
                    "(install it with: apt-get install -y espeak-ng)")
    wav = tmp_path_factory.mktemp("speech") / "question.wav"
    with wav.open("wb") as out:
        subprocess.run(
            [espeak, "-v", "en-us", "-s", "150", "--stdout", "What is the capital of Australia?"],
            stdout=out, check=True, timeout=60,
        )
    pcm, rate = sphn.read(str(wav))
    return sphn.resample(pcm[0], rate, SAMPLE_RATE).astype(np.float32)
