"""The model's voice reaches the speaker whatever the transcript's listener is doing.

A listener that hangs (a GUI thread busy drawing, a slow transcript) holds the session's
own thread; the voice must not be waiting behind it.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from app.audio.file_source import FileAudioSource
from app.conversation.session import CheckpointCache, ConversationSession
from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings


class HangingListener:
    """Once `hang` is set, the next transcript entry blocks until `release` is."""

    def __init__(self) -> None:
        self.running = threading.Event()
        self.hang = threading.Event()
        self.hanging = threading.Event()
        self.release = threading.Event()

    def on_state(self, state, _detail):
        if state == "running":
            self.running.set()

    def on_entry(self, _entry):
        if self.hang.is_set():
            self.hanging.set()
            self.release.wait(60.0)

    def on_status(self, _status):
        pass


def wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_the_voice_plays_on_while_the_transcript_listener_hangs(tiny_folder, data_dir):
    source = FileAudioSource(np.zeros(2400, np.float32))
    listener = HangingListener()
    settings = AppSettings(speech=SpeechModelSettings(model_id="tiny", device="cpu"),
                           llm=LlmSettings(backend="none", stt_model="none"))
    session = ConversationSession(settings, listener, lambda _s: source, CheckpointCache())
    session.start()
    try:
        assert listener.running.wait(90.0)
        listener.hang.set()
        session.inject_text("A transcript entry to hang on.", "pasted text")
        assert listener.hanging.wait(30.0)  # the session's thread is held by the listener
        played = source.played_count
        # The model goes on making frames (the microphone still feeds it): they play.
        assert wait_for(lambda: source.played_count >= played + 12, 30.0), (
            f"{source.played_count - played} frames played while the listener hung")
    finally:
        listener.release.set()
        assert session.stop()
