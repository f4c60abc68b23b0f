import threading

import pytest

from app.audio.test_tone import (
    MicLevelMeter,
    mic_level_probe,
    play_test_tone,
    play_test_tone_blocking,
)

pytestmark = pytest.mark.usefixtures("null_sink")


def test_the_speaker_tone_is_heard_on_the_monitor_and_ends() -> None:
    read_level, stop = mic_level_probe(None)  # the monitor of the null sink
    try:
        tone = play_test_tone("pulse", seconds=1.5, timeout_s=5.0)
        assert tone.error is None and tone.warning is None
        heard = threading.Event()
        for _ in range(100):  # bounded: up to 5 s for the tone to reach the monitor
            if read_level() > -40.0:
                heard.set()
                break
            heard.wait(0.05)
        assert heard.is_set(), read_level()
        assert tone.wait(10.0) and tone.error is None
    finally:
        stop()
    stop()  # idempotent


def test_the_dialog_meter_sees_the_blocking_tone() -> None:
    meter = MicLevelMeter(None)
    try:
        meter.level()  # reset the peak
        play_test_tone_blocking("pulse", seconds=1.0, timeout_s=5.0)
        assert meter.level() > 0.05
    finally:
        meter.close()
    meter.close()
