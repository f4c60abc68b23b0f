"""`eval fdb3 make-demo DIR`: a small set in the released layout, spoken by espeak-ng, so the
whole benchmark path (run, then score) is tested on a CPU: the 12 scenarios of
demo_scenarios.py (4 domains, easy to hard), three speakers, 48 kHz as the release is."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from app.audio_file import write_wav
from app.eval.fdb3.demo_scenarios import VOICES, demo_scenarios
from app.eval.fdb3.layout import INPUT, METADATA

RATE = 48000  # the release's rate
LEAD_S = 1.0  # silence before the user speaks


class MakeDemoError(RuntimeError):
    pass


def speaker_id(voice: str) -> str:
    """A 24-hex speaker id, as the release's folder names carry."""
    return hashlib.md5(voice.encode()).hexdigest()[:24]


def _speak(text: str, voice: str) -> np.ndarray:
    import sphn

    espeak = shutil.which("espeak-ng")
    if espeak is None:
        raise MakeDemoError("espeak-ng is not installed (Debian/Ubuntu: apt install espeak-ng)")
    with tempfile.TemporaryDirectory() as scratch:
        raw = Path(scratch) / "raw.wav"
        try:
            subprocess.run([espeak, "-v", voice, "-s", "150", "-w", str(raw), text],
                           check=True, timeout=60, capture_output=True)
        except (subprocess.SubprocessError, OSError) as exc:
            raise MakeDemoError(f"espeak-ng failed on {text[:60]!r}: {exc}") from exc
        pcm, _ = sphn.read(str(raw), sample_rate=RATE)
    return np.asarray(pcm, dtype=np.float32).mean(axis=0)


def make_demo(out: Path) -> list[Path]:
    """Write the demo set into `out` (new or empty); returns the sample folders."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise MakeDemoError(f"{out} exists and is not an empty folder: choose a new one")
    folders = []
    for index, scenario in enumerate(demo_scenarios()):
        voice = VOICES[index % len(VOICES)]
        folder = out / f"{scenario['id']}_{speaker_id(voice)}"
        folder.mkdir(parents=True)
        speech = _speak(scenario["dialogue"][-1]["user"], voice)
        pcm = np.concatenate([np.zeros(int(LEAD_S * RATE), np.float32), speech,
                              np.zeros(int(0.5 * RATE), np.float32)])
        write_wav(folder / INPUT, pcm, RATE)
        (folder / METADATA).write_text(json.dumps({**scenario, "speaker": voice}, indent=1,
                                                  ensure_ascii=False) + "\n", encoding="utf-8")
        folders.append(folder)
    return folders
