"""Issue 35, item 17: on a busy machine the audio callbacks stop coming for a couple of
seconds while the devices are still there; the conversation paused and waited for a Resume
by hand each time. Now it opens the devices again by itself after a stall, and says so;
real PortAudio streams on the private PulseAudio's null sink, the tiny model, a session
without Qt. The first streams' capture callback is held up (as a busy machine does); the
second streams run freely."""

from __future__ import annotations

import threading

import numpy as np

from app.audio.live_audio import LiveAudio
from app.conversation.session import CheckpointCache, ConversationSession
from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings
from tests.conversation.test_session import Recorder


def test_a_stalled_audio_starts_again_by_itself_with_a_notice(null_sink, tiny_folder,
                                                              data_dir) -> None:
    release = threading.Event()
    opened: list[LiveAudio] = []

    def busy_machine(_mic: np.ndarray, _far: np.ndarray, _sent: np.ndarray) -> None:
        busy_machine.frames += 1  # type: ignore[attr-defined]
        if busy_machine.frames == 10:  # type: ignore[attr-defined]
            release.wait(10.0)  # the callback's thread gets no CPU for a while

    busy_machine.frames = 0  # type: ignore[attr-defined]

    def devices(_settings: AppSettings) -> LiveAudio:
        tap = busy_machine if not opened else None  # only the first streams stall
        opened.append(LiveAudio(echo_mode="headset", stall_timeout_s=0.5, frame_tap=tap))
        return opened[-1]

    recorder = Recorder()
    settings = AppSettings(speech=SpeechModelSettings(model_id="tiny", device="cpu"),
                           llm=LlmSettings(backend="none"))
    session = ConversationSession(settings, recorder, devices, CheckpointCache())
    session.start()
    try:
        recorder.wait(lambda: ("running", "Listening") in recorder.states, timeout=120)
        recorder.wait(lambda: any(s == "paused" for s, _ in recorder.states), timeout=60)
        release.set()  # the machine catches up
        paused_at = max(i for i, (s, _) in enumerate(recorder.states) if s == "paused")
        # No Resume is pressed: it runs again by itself.
        recorder.wait(lambda: ("running", "Listening") in recorder.states[paused_at:],
                      timeout=60)
        recorder.wait(lambda: any("back" in e.text for e in recorder.of("notice")),
                      timeout=30)
        assert len(opened) == 2  # the devices were opened again
        notices = [e.text for e in recorder.of("notice")]
        stalled = [t for t in notices if "stalled" in t]
        assert len(stalled) == 1 and "starts again by itself" in stalled[0], notices
        assert "press Resume" not in stalled[0], stalled[0]
        assert any("started again by itself after the stall" in t for t in notices), notices
        assert session.running and not session.paused
    finally:
        release.set()
        assert session.stop()
