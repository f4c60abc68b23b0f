"""A bad link between the app and the speech server: a TCP relay written here (this kernel has
no netem) delays each direction by 40 ± 10 ms (an 80 ± 20 ms round trip, order kept) and
holds everything for 400 ms every 5 s. The app's own session, a microphone's pace of frames,
a speaker that plays through the real jitter buffer at a sound card's pace, against `serve`
on the tiny model in its own process.

The conversation holds (never paused, nothing lost to a reconnect), late frames are counted
and shown in the status bar's words, the app says the link is slow, the queued delay stays
within its bounds (frames in flight within the drop rule's, the playback buffer within its
capacity), and a span sent across the stalls lands. Counts and bounds only: nothing here
depends on how fast this machine is."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

from app.audio.jitter_buffer import JitterBuffer
from app.conversation.session import (
    SLOW_LINK_LATE_FRAMES,
    SLOW_LINK_STEP,
    CheckpointCache,
    ConversationSession,
    SessionStatus,
)
from app.conversation.transcript.entries import TranscriptEntry
from app.frames import FRAME_S, FRAME_SAMPLES
from app.remote.remote_engine import MAX_LAG_S, OUTBOX_FRAMES
from app.settings.schema import AppSettings, EngineSettings, LlmSettings, SpeechModelSettings
from app.ui.status_line import network_words
from tests.serve_process import ServeProcess
from tests.waiting import wait_until

TOKEN = "bad-link-token-77c0"
ONE_WAY_S, JITTER_S = 0.040, 0.010
STALL_EVERY_S, STALL_S = 5.0, 0.400
STALLS = 2  # the conversation runs through this many stalls
NOTES = "The meeting moved to room 4 on Thursday at ten."


class DelayingRelay:
    """127.0.0.1:port -> the server, on its own thread and event loop. Every chunk read
    from one side is written to the other at `arrival`: its read time plus ONE_WAY_S ±
    JITTER_S, never before the chunk before it (TCP keeps order), and pushed past any stall
    window it falls in (a stall of STALL_S every STALL_EVERY_S, both ways at once)."""

    def __init__(self, target_port: int, seed: int = 7) -> None:
        self.target_port = target_port
        self.port = 0
        self.stalled_chunks = 0  # chunks a stall held: the stalls really bit
        self.stall_windows_hit: set[int] = set()
        self._random = random.Random(seed)
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="delaying-relay", daemon=True)
        self._t0 = 0.0

    def start(self) -> DelayingRelay:
        self._thread.start()
        assert self._started.wait(10)
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._t0 = self._loop.time()
        self._started.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            for task in asyncio.all_tasks(self._loop):
                task.cancel()
            with contextlib.suppress(BaseException):
                self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()

    def _arrival(self, read_at: float, after: float) -> float:
        at = max(after, read_at + ONE_WAY_S + self._random.uniform(-JITTER_S, JITTER_S))
        since = at - self._t0
        window = int(since // STALL_EVERY_S)
        if window >= 1 and since - window * STALL_EVERY_S < STALL_S:
            self.stalled_chunks += 1
            self.stall_windows_hit.add(window)
            at = self._t0 + window * STALL_EVERY_S + STALL_S  # held until the stall ends
        return at

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer),
                             return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        chunks: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                at, data = await chunks.get()
                if not data:
                    break
                await asyncio.sleep(max(0.0, at - self._loop.time()))
                writer.write(data)
                await writer.drain()
            writer.close()

        delivering = asyncio.ensure_future(deliver())
        last = 0.0
        try:
            while data := await reader.read(65536):
                last = self._arrival(self._loop.time(), last)
                chunks.put_nowait((last, data))
        except (ConnectionError, OSError):
            pass
        finally:
            chunks.put_nowait((last, b""))
            with contextlib.suppress(BaseException):
                await delivering


class PacedSpeaker:
    """A microphone of silence and a speaker that plays the model's frames through the app's
    JitterBuffer, read 10 ms at a time at a sound card's pace; the most it ever held."""

    def __init__(self) -> None:
        self.muted = False
        self.buffer = JitterBuffer()
        self.most_queued = 0  # samples
        self.frames_played = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self, on_frame: Callable[[np.ndarray], object]) -> bool:
        self._threads = [threading.Thread(target=self._microphone, args=(on_frame,),
                                          daemon=True, name="paced-microphone"),
                         threading.Thread(target=self._sound_card, daemon=True,
                                          name="paced-sound-card")]
        for thread in self._threads:
            thread.start()
        return True

    def _microphone(self, on_frame: Callable[[np.ndarray], object]) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            on_frame(np.zeros(FRAME_SAMPLES, dtype=np.float32))
            next_at += FRAME_S
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _sound_card(self) -> None:
        out = np.zeros(FRAME_SAMPLES // 8, dtype=np.float32)  # 10 ms, as a callback asks
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.buffer.read_into(out)
            next_at += FRAME_S / 8
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def play(self, frame: np.ndarray) -> None:
        self.buffer.write(frame)
        self.frames_played += 1
        self.most_queued = max(self.most_queued, self.buffer.fill)

    def levels(self) -> tuple[float, float]:
        return -100.0, -100.0

    def counters(self) -> dict[str, int]:
        return {"dropped": 0, "underruns": self.buffer.underruns,
                "overruns": self.buffer.overruns}

    def stop(self, timeout: float = 5.0) -> bool:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        return not any(t.is_alive() for t in self._threads)


class Recorder:
    def __init__(self) -> None:
        self.states: list[tuple[str, str]] = []
        self.entries: dict[int, TranscriptEntry] = {}
        self.statuses: list[SessionStatus] = []

    def on_state(self, state: str, detail: str) -> None:
        self.states.append((state, detail))

    def on_entry(self, entry: TranscriptEntry) -> None:
        self.entries[entry.entry_id] = entry

    def on_status(self, status: SessionStatus) -> None:
        self.statuses.append(status)


@pytest.fixture(scope="module")
def server(tiny_folder, data_dir):
    with ServeProcess(data_dir, TOKEN) as process:
        yield process


def test_a_bad_link_holds_the_conversation_says_it_is_slow_and_bounds_the_delay(server):
    relay = DelayingRelay(server.port).start()
    speaker = PacedSpeaker()
    recorder = Recorder()
    settings = AppSettings(
        speech=SpeechModelSettings(model_id="tiny", device="cpu"),
        engine=EngineSettings(mode="server", server_url=f"http://127.0.0.1:{relay.port}",
                              server_token=TOKEN, connect_timeout_s=60.0),
        llm=LlmSettings(backend="none", stt_model="none"))
    session = ConversationSession(settings, recorder, lambda _settings: speaker,
                                  CheckpointCache(), status_interval_s=0.1)
    try:
        session.start()
        wait_until(lambda: recorder.states and recorder.states[-1][0] in (
            "running", "error", "stopped"), 180.0)
        assert recorder.states[-1][0] == "running", recorder.states
        session.inject_text(NOTES, "notes")
        # Through STALLS stalls of the relay's, whatever this machine's speed: each window
        # it held chunks in is one the conversation's traffic went through.
        wait_until(lambda: len(relay.stall_windows_hit) >= STALLS, 60.0 + STALL_EVERY_S * 4)
        wait_until(lambda: any(e.kind == "span" and e.landed_frame is not None
                               for e in recorder.entries.values()), 60.0)
        # Enough late frames for the slow-link notice: a stall makes only the frames sent in
        # its first (STALL_S - the late margin) late, so a machine whose traffic met two
        # stalls at their ends may have fewer; the relay stalls again every STALL_EVERY_S.
        wait_until(lambda: recorder.statuses
                   and recorder.statuses[-1].late_frames >= SLOW_LINK_LATE_FRAMES,
                   30.0 + STALL_EVERY_S * 8)
        remote = session._remote
        assert remote is not None
        in_flight_at_end = remote.frames_unanswered()
        most_in_flight = remote.most_in_flight
    finally:
        assert session.stop(30.0)
        relay.stop()

    states = [state for state, _ in recorder.states]
    assert "paused" not in states and "error" not in states, recorder.states  # it held
    entries = list(recorder.entries.values())
    assert not [e for e in entries if e.kind == "notice" and "lost" in e.text], entries
    # A span sent across the stalls landed.
    assert any(e.kind == "span" and e.text == NOTES and e.landed_frame is not None
               for e in entries)
    # Late frames are counted, and shown in the status bar's words with the link's parts.
    status = recorder.statuses[-1]
    assert status.late_frames > 0 and status.audio_codec == "opus"
    text, tip = network_words(status)
    assert f"{status.late_frames} late" in text and "network " in text and "server " in text
    # The app says the link is slow: at the first few late frames, then only each time
    # they grew tenfold (the status bar counts the rest), however many this machine made.
    slow = [e for e in entries if e.kind == "notice" and "slow" in e.text]
    thresholds = [SLOW_LINK_LATE_FRAMES * SLOW_LINK_STEP ** k for k in range(6)]
    assert 1 <= len(slow) <= sum(t <= status.late_frames for t in thresholds)
    assert all("too late to be played" in e.text for e in slow)
    # The delay never grows without bound: what waits is within each stage's own limit. A
    # frame goes out only while the oldest unanswered one is at most MAX_LAG_S old, so what
    # is in flight went out in that window: the frames made in it, plus what the outbox
    # (OUTBOX_FRAMES) held when it began (a busy machine's sender catches up in a burst:
    # seen at load 10, 31 in flight); the outbox's own frames come on top at the end.
    in_flight_bound = int(MAX_LAG_S / FRAME_S) + OUTBOX_FRAMES + 2
    assert most_in_flight <= in_flight_bound
    assert in_flight_at_end <= in_flight_bound + OUTBOX_FRAMES
    assert speaker.most_queued <= speaker.buffer.capacity
    assert speaker.frames_played > 0
    assert relay.stalled_chunks > 0


def figures(url: str, token: str, seconds: float) -> dict:
    """The bad link's figures over `seconds` of a conversation with `serve` at `url` (its
    port relayed as above): what the status bar showed last and what each bound held."""
    from urllib.parse import urlsplit

    relay = DelayingRelay(urlsplit(url).port or 8998).start()
    speaker, recorder = PacedSpeaker(), Recorder()
    settings = AppSettings(
        engine=EngineSettings(mode="server", server_url=f"http://127.0.0.1:{relay.port}",
                              server_token=token, connect_timeout_s=60.0),
        llm=LlmSettings(backend="none", stt_model="none"))
    session = ConversationSession(settings, recorder, lambda _settings: speaker,
                                  CheckpointCache(), status_interval_s=0.1)
    session.start()
    wait_until(lambda: recorder.states and recorder.states[-1][0] in ("running", "error"),
               180.0)
    session.inject_text(NOTES, "notes")
    time.sleep(seconds)
    remote = session._remote
    assert remote is not None
    most_in_flight = remote.most_in_flight
    session.stop(30.0)
    relay.stop()
    last = recorder.statuses[-1]
    entries = list(recorder.entries.values())
    return {
        "seconds": seconds, "stall_windows": len(relay.stall_windows_hit),
        "chunks_held_by_stalls": relay.stalled_chunks,
        "status_bar": network_words(last)[0], "late_frames": last.late_frames,
        "frame_rtt_ms": last.frame_rtt_ms, "network_rtt_ms": last.network_rtt_ms,
        "server_ms": last.server_ms, "frames_not_sent": last.dropped_frames,
        "most_frames_in_flight": most_in_flight,
        "most_queued_for_playback_ms": round(speaker.most_queued / 24.0, 1),
        "playback_capacity_ms": round(speaker.buffer.capacity / 24.0, 1),
        "playback_overruns": speaker.buffer.overruns,
        "playback_underruns": speaker.buffer.underruns,
        "span_landed": any(e.kind == "span" and e.landed_frame is not None for e in entries),
        "slow_link_notices": sum(e.kind == "notice" and "slow" in e.text for e in entries),
        "paused_or_lost": any(s in ("paused", "error") for s, _ in recorder.states),
    }


if __name__ == "__main__":  # python -m tests.remote.test_bad_link URL TOKEN [SECONDS]
    import json
    import sys

    print(json.dumps(figures(sys.argv[1], sys.argv[2],
                             float(sys.argv[3]) if len(sys.argv) > 3 else 30.0), indent=1))
