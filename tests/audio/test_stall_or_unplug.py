"""A stall is not an unplug (issue 19, item 11b): on a loaded machine the audio callbacks
come late while the device is still there, and the message used to read "device
unplugged". Real PortAudio streams on the private PulseAudio's null sink: the capture
callback is held up (as a busy machine does), the device stays listed, and the report says
the audio stalled and that the device is still connected."""

from __future__ import annotations

import threading

import numpy as np

from app.audio.devices import listed_now
from app.audio.live_audio import LiveAudio
from tests.waiting import wait_until


def test_late_callbacks_with_the_device_still_listed_read_as_a_stall(null_sink) -> None:
    release = threading.Event()
    frames = [0]

    def busy_machine(_mic: np.ndarray, _far: np.ndarray, _sent: np.ndarray) -> None:
        frames[0] += 1
        if frames[0] == 10:  # the callback's thread gets no CPU for a while
            release.wait(6.0)

    errors: list[str] = []
    audio = LiveAudio(lambda _frame: True, errors.append, echo_mode="headset",
                      stall_timeout_s=0.5, frame_tap=busy_machine)
    assert audio.start()
    try:
        wait_until(lambda: errors, 30, interval=0.05, message="no failure was reported")
    finally:
        release.set()
        audio.stop()
    message = errors[0]
    assert "unplugged" not in message, message
    assert "stalled" in message and "still connected" in message, message
    assert audio.input_name in message
    assert audio.failure == "stall"


def test_a_fresh_device_list_names_the_devices_in_use(null_sink) -> None:
    listed = listed_now()
    assert listed is not None
    audio = LiveAudio(lambda _frame: True, echo_mode="headset")
    assert audio.start()
    try:
        assert audio.input_name in listed[0] and audio.output_name in listed[1]
    finally:
        audio.stop()
