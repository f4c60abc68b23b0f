"""Remote mode's words are true (issue 28, items 8 and 9): the status bar names the parts of
a frame's round trip; a killed server (no close frame, 1006) is not "the server closed the
connection"; a busy server is said once and a conversation that never started did not
"stop"; a span that never landed is not an "Injected span" that has "not landed yet"."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import numpy as np
import pytest
from aiohttp import web

from app.audio.silent_microphone import SilentMicrophone
from app.conversation.session import SessionStatus
from app.conversation.transcript.builder import TranscriptBuilder
from app.conversation.transcript.entries import closed
from app.conversation.transcript.export import entry_heading, to_markdown
from app.engine import events as ev
from app.remote.events import ConnectionLost
from app.remote.remote_engine import RemoteEngine, RemoteEngineError, RemoteOptions
from app.settings.schema import AppSettings
from app.ui.conversation_controller import ConversationController
from app.ui.main_window import MainWindow
from app.ui.status_line import StatusLine
from app.ui.transcript_panel import TranscriptPanel
from app.wire import events as wire
from tests.waiting import wait_until


class _TinyWs:
    """An aiohttp `/ws` on its own thread: `ready`, then what `behave(ws)` does."""

    def __init__(self, behave) -> None:
        self._behave = behave
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _TinyWs:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc_info) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def handler(request: web.Request) -> web.StreamResponse:
            return await self._behave(request)

        app = web.Application()
        app.router.add_get("/ws", handler)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                self._loop.run_until_complete(runner.cleanup())
            self._loop.close()


async def _ready_then_vanish(request: web.Request) -> web.StreamResponse:
    """Answers like a server, then dies as a killed one does: no close frame at all."""
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    await ws.send_str(wire.encode_event(wire.Ready(model="tiny", context_window=100)))
    async for message in ws:
        if message.type == web.WSMsgType.BINARY:
            await ws.send_bytes(message.data)  # one answer, then gone
            assert request.transport is not None
            request.transport.abort()
            break
    return ws


async def _busy(request: web.Request) -> web.StreamResponse:
    """As `serve` answers on /ws when every slot holds a conversation."""
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    await ws.send_str(wire.encode_event(wire.Busy(
        "the engine holds another conversation: try again when it ends", 5)))
    await ws.close(code=1013, message=b"busy")
    return ws


def test_a_server_that_vanished_did_not_close_the_connection() -> None:
    with _TinyWs(_ready_then_vanish) as server:
        engine = RemoteEngine(RemoteOptions(server.url, audio=wire.PCM))
        assert engine.connect()
        engine.start()
        engine.push_frame(np.zeros(1920, dtype=np.float32))
        lost: list[ConnectionLost] = []

        def dropped() -> bool:
            while not engine.events.empty():
                event = engine.events.get()
                if isinstance(event, ConnectionLost):
                    lost.append(event)
            return bool(lost)

        wait_until(dropped, 30.0)
        engine.stop()
    reason = lost[0].reason
    assert "closed the connection" not in reason
    assert "1006" in reason and "without a word from the server" in reason


def test_a_busy_server_is_said_once_and_the_conversation_could_not_start(qtbot) -> None:
    with _TinyWs(_busy) as server:
        engine = RemoteEngine(RemoteOptions(server.url))
        with pytest.raises(RemoteEngineError) as raised:
            engine.connect()
    message = str(raised.value)
    assert message.lower().count("conversation") == 1, message  # not said twice over
    assert "try again in 5 s" in message and message.count("try again") == 1

    # The window's banner, as the session's states reach it: loading, then the error.
    controller = ConversationController(lambda _settings: SilentMicrophone())
    window = MainWindow(controller, AppSettings())
    qtbot.addWidget(window)
    window._show_state("loading", "Connecting to the speech server…")
    window._show_state("error", message)
    shown = window.banner.text()
    assert shown.startswith("The conversation could not start: "), shown
    assert "stopped" not in shown
    # One that ran and then failed did stop.
    window._show_state("loading", "Connecting…")
    window._show_state("running", "Listening")
    window._show_state("error", "the engine failed")
    assert window.banner.text().startswith("The conversation stopped: ")


def test_the_status_bar_names_the_parts_of_the_round_trip(qtbot) -> None:
    line = StatusLine()
    qtbot.addWidget(line)
    line.show_status(SessionStatus(model="tiny", server="http://gpu:8998", frame_rtt_ms=6961.0,
                                   network_rtt_ms=2.0, server_ms=6959.0, late_frames=20,
                                   audio_codec="opus"))
    text, tip = line.frame.text(), line.frame.toolTip()
    assert text == "network 2 ms · server 6959 ms · 20 late"
    assert "round trip" in tip and "at the server" in tip and "Opus" in tip


def test_a_span_that_never_landed_is_not_an_injected_span_waiting_to_land(qtbot) -> None:
    builder = TranscriptBuilder()
    entries = builder.remember_span(3, "Room 4 on Thursday.", "notes")
    entry = entries[-1]
    for update in builder.entries_for(ev.SpanRejected(
            3, "notes", "the connection to the speech server was lost: the connection broke "
                        "without a word from the server (close code 1006)")):
        entry = update
    entry = closed(entry)
    panel = TranscriptPanel()
    qtbot.addWidget(panel)
    panel.upsert(entry)
    words = " · ".join([panel.delegate.header_label(entry), panel.delegate.meta_text(entry),
                        panel.delegate.detail_text(entry), entry_heading(entry),
                        to_markdown([entry])])
    assert "not injected" in words  # what became of it is said
    assert "Injected span" not in words and "not landed yet" not in words, words
