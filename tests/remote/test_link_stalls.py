"""The link to the speech server rides out network stalls (Wi-Fi and mobile links stall for
seconds): through a relay that holds all traffic for 2 s and then for 10 s in the middle of a
conversation (tests/remote/stalling_relay.py), against `serve` on the tiny model in its own
process. `run --server` goes on where it was and writes a reply as long as its input, every
frame answered and a span landed (a 2 s stall ended it with the 1 s heartbeat); the app's
own session stays in its conversation through a 10 s stall, says the server is not heard
and, once it is back, what the stall cost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

from app.audio_file import write_wav_24k
from app.frames import SAMPLE_RATE
from tests.remote.stalling_relay import StallingRelay
from tests.serve_process import ServeProcess
from tests.waiting import wait_until

TOKEN = "stall-token-3b9e"
ROOT = Path(__file__).resolve().parents[2]
FACT = "The meeting moved to room 4 on Thursday at ten."
SECONDS = 14.0
# The server's Opus is ~4 KB a second of audio: the stalls come ~2 s and ~5 s into the
# reply, whatever this machine's speed (the relay counts the bytes).
STALLS = ((8_000, 2.0), (20_000, 10.0))

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tiny_folder, data_dir):
    with ServeProcess(data_dir, TOKEN) as process:
        yield process


def _input(folder: Path) -> Path:
    """SECONDS of a voiced, wavering tone (Opus spends bits on it, as on speech)."""
    t = np.arange(int(SECONDS * SAMPLE_RATE)) / SAMPLE_RATE
    pcm = 0.2 * np.sin(2 * np.pi * (180 + 40 * np.sin(2 * np.pi * 3 * t)) * t)
    path = folder / "input.wav"
    write_wav_24k(path, pcm.astype(np.float32))
    return path


def test_run_on_a_server_goes_on_through_a_2_s_and_a_10_s_stall(server, data_dir, tmp_path):
    relay = StallingRelay(server.port, after_bytes=STALLS).start()
    heard, reply, transcript = _input(tmp_path), tmp_path / "reply.wav", tmp_path / "t.jsonl"
    try:
        result = subprocess.run(
            [sys.executable, "main.py", "run", "--server", relay.url, "--server-token", TOKEN,
             "--input", str(heard), "--output", str(reply), "--transcript", str(transcript),
             "--inject", FACT, "--at", "4.0"],
            cwd=ROOT, capture_output=True, text=True, timeout=600,
            env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)})
    finally:
        relay.stop()
    assert result.returncode == 0, result.stderr[-3000:]
    # Both stalls held the conversation's traffic, and it went on after them.
    assert [round(s) for s in relay.stalls_done] == [2, 10], relay.stalls_done
    assert relay.down_bytes_after_stalls > 0
    records = [json.loads(line) for line in transcript.read_text().splitlines()]
    by_type: dict[str, list[dict]] = {}
    for record in records:
        by_type.setdefault(record["type"], []).append(record)
    frames = by_type["run"][0]["frames"]
    assert by_type["end"][0]["frames"] == frames  # every frame answered
    with wave.open(str(reply)) as out, wave.open(str(heard)) as given:
        assert out.getnframes() == given.getnframes()  # the reply is as long as the input
    assert any(s["text"] == FACT for s in by_type["span"])  # the span landed
    link = by_type["link"][0]
    # The 10 s stall was seen as one (the 2 s one is at the notice's threshold: either way).
    assert link["stalls"] >= 1 and link["longest_stall_s"] > 5.0, link
    assert link["frames_not_sent"] == 0, link  # a file's frames wait: none dropped
    assert "error" not in by_type


def test_the_apps_conversation_waits_through_a_10_s_stall_and_says_so(server):
    from app.conversation.session import CheckpointCache, ConversationSession
    from app.settings.schema import (
        AppSettings,
        EngineSettings,
        LlmSettings,
        SpeechModelSettings,
    )
    from tests.remote.test_bad_link import PacedSpeaker, Recorder

    relay = StallingRelay(server.port).start()
    speaker, recorder = PacedSpeaker(), Recorder()
    settings = AppSettings(
        speech=SpeechModelSettings(model_id="tiny", device="cpu"),
        engine=EngineSettings(mode="server", server_url=relay.url, server_token=TOKEN,
                              connect_timeout_s=60.0),
        llm=LlmSettings(backend="none", stt_model="none"))
    session = ConversationSession(settings, recorder, lambda _settings: speaker,
                                  CheckpointCache(), status_interval_s=0.1)

    def notices(word: str) -> list[str]:
        return [e.text for e in list(recorder.entries.values())
                if e.kind == "notice" and word in e.text]

    try:
        session.start()
        wait_until(lambda: recorder.states and recorder.states[-1][0] in (
            "running", "error", "stopped"), 180.0)
        assert recorder.states[-1][0] == "running", recorder.states
        wait_until(lambda: speaker.frames_played >= 10, 60.0)  # the conversation flows
        relay.stall(10.0)
        wait_until(lambda: relay.stalled, 10.0)
        session.inject_text(FACT, "notes")  # sent into the stall: it must not be lost
        wait_until(lambda: notices("Nothing has come from the speech server"), 30.0)
        wait_until(lambda: notices("is back after"), 60.0)
        played_at_return = speaker.frames_played
        wait_until(lambda: any(e.kind == "span" and e.text == FACT
                               and e.landed_frame is not None
                               for e in list(recorder.entries.values())), 60.0)
        wait_until(lambda: speaker.frames_played > played_at_return + 10, 60.0)
    finally:
        assert session.stop(30.0)
        relay.stop()
    states = [state for state, _ in recorder.states]
    assert "paused" not in states and "error" not in states, recorder.states  # it held
    assert not notices("was lost"), notices("")  # no reconnect, no new conversation
    [back] = notices("is back after")
    # A microphone's frames older than the drop rule's 2 s are not sent late: said so.
    assert "of what you said" in back and "could not be sent in time" in back, back
    assert relay.stalls_done and relay.stalls_done[0] >= 10.0
