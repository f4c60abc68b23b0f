"""Without the espeak-ng library (only its command), speech still comes out whole: the WAV
espeak-ng writes to a pipe (a header that claims a huge length) is read by the standard
library's reader and resampled to 24 kHz with the same length as the library path gives."""

from __future__ import annotations

import numpy as np

from app.training.tts import EspeakSynthesizer


def test_the_command_path_gives_the_same_speech_as_the_library():
    text = "The gate code is four one seven."
    with_library = EspeakSynthesizer()
    assert with_library._library is not None  # installer/run-tests.sh installs espeak-ng
    command_only = EspeakSynthesizer()
    command_only._library = None  # as on a machine where only the program is found
    spoken = command_only.synthesize(text, "user")
    reference = with_library.synthesize(text, "user")
    assert spoken.timing == "spread" and [w.word for w in spoken.words] == text.split()
    # The same speech (the program adds some trailing silence the library does not).
    def voiced(pcm: np.ndarray) -> int:
        loud = np.flatnonzero(np.abs(pcm) > 0.01)
        return int(loud[-1] - loud[0])

    assert abs(voiced(spoken.pcm) - voiced(reference.pcm)) <= 0.02 * voiced(reference.pcm)
    assert spoken.pcm.dtype == np.float32 and 0.05 < float(np.max(np.abs(spoken.pcm))) <= 1.0
    # No header bytes read as samples: the first samples are espeak-ng's leading silence.
    assert float(np.max(np.abs(spoken.pcm[:100]))) < 0.01
