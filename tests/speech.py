"""Spoken test questions (espeak-ng), shared by the end-to-end tests."""

from __future__ import annotations

import subprocess
from pathlib import Path


def spoken(text: str, folder: Path, before_s: float = 1.0, after_s: float = 3.0) -> Path:
    """A question spoken by espeak-ng at 24 kHz, with silence before and after."""
    import shutil

    import numpy as np
    import sphn

    espeak = shutil.which("espeak-ng")
    assert espeak, "espeak-ng is missing: installer/run-tests.sh installs it (apt espeak-ng)"
    raw = folder / "raw.wav"
    subprocess.run([espeak, "-v", "en-us", "-s", "150", "-w", str(raw), text], check=True,
                   timeout=60)
    speech, _ = sphn.read(str(raw), sample_rate=24000)
    speech = np.asarray(speech, dtype=np.float32).mean(axis=0)
    pcm = np.concatenate([np.zeros(int(before_s * 24000), np.float32), speech,
                          np.zeros(int(after_s * 24000), np.float32)])
    path = folder / "question.wav"
    sphn.write_wav(str(path), pcm, 24000)
    return path
