"""What the metrics hear in a reply: word timestamps from our streaming STT, voiced segments
from Silero VAD. For words the benchmark's own scripts use another ASR (NVIDIA
parakeet-tdt-0.6b-v2, see `report.py`); for segments they make the same Silero call as here.
"""

from __future__ import annotations

import numpy as np
import torch

from app.asr.events import AsrWord
from app.asr.kyutai_stt import KyutaiStreamingStt
from app.asr.stt_catalog import LoadedStt
from app.asr.vad import SileroModel, load_silero_model
from app.eval.fdb.metrics import Segment, Word
from app.eval.fdb.timeline_audio import ENGINE_RATE, SEGMENT_RATE, resample
from app.frames import FRAME_SAMPLES


def words_of(stt: LoadedStt, pcm_24k: np.ndarray, offset_s: float = 0.0) -> list[Word]:
    """The words in 24 kHz audio, stepped 80 ms at a time through the STT as it runs live,
    with the words still inside the model's delay flushed at the end. Times are seconds
    from the start of `pcm_24k`, plus `offset_s`."""
    pcm = np.asarray(pcm_24k, dtype=np.float32)
    pcm = np.pad(pcm, (0, -len(pcm) % FRAME_SAMPLES))
    stream = KyutaiStreamingStt(stt)
    found: list[AsrWord] = []
    with torch.no_grad():
        try:
            stream.start()
            for i in range(0, len(pcm), FRAME_SAMPLES):
                found.extend(stream.step(pcm[i : i + FRAME_SAMPLES]).words)
            found.extend(stream.flush())
        finally:
            stream.close()
    return [Word(w.text, round(w.start_s + offset_s, 4), round(w.end_s + offset_s, 4))
            for w in found]


def voiced_segments(pcm_24k: np.ndarray, vad_model: SileroModel | None = None,
                    heard_rate: int = SEGMENT_RATE) -> list[Segment]:
    """Stretches of speech in 24 kHz audio, in seconds: Silero's offline
    `get_speech_timestamps` with its defaults at 16 kHz, the call the benchmark's
    backchannel scorer makes on output.wav (times to 0.1 s, as it returns them).

    `heard_rate` is the rate of the samples Silero is given, always told they are 16 kHz.
    At 16000 (the default) the times are true. The benchmark's script hands Silero
    output.wav's samples at whatever rate the file has: `heard_rate=` that rate reproduces
    it, so a 24 kHz file is heard 1.5 times slower and every time comes out 1.5 times later
    (`--fdb-official-rates`; the reference rendered at 24 kHz)."""
    from silero_vad import get_speech_timestamps

    model = vad_model if vad_model is not None else load_silero_model()
    pcm = resample(np.asarray(pcm_24k, dtype=np.float32), ENGINE_RATE, heard_rate)
    threads = torch.get_num_threads()
    try:
        with torch.no_grad():
            found = get_speech_timestamps(torch.from_numpy(np.ascontiguousarray(pcm)), model,
                                          sampling_rate=SEGMENT_RATE, return_seconds=True)
    finally:
        torch.set_num_threads(threads)
    return [Segment(float(s["start"]), float(s["end"])) for s in found]
