"""Stop while the app is still connecting to a server that never answers (a host that
takes the connection and says nothing): the conversation ends at once, not after the
connection's timeout, and leaves no network thread behind."""

from __future__ import annotations

import threading

from app.audio.silent_microphone import SilentMicrophone
from app.conversation.session import ConversationSession
from app.settings.schema import AppSettings, EngineSettings, LlmSettings
from tests.ports import silent_port
from tests.waiting import wait_until


class Listener:
    def __init__(self) -> None:
        self.states: list[tuple[str, str]] = []

    def on_state(self, state: str, detail: str) -> None:
        self.states.append((state, detail))

    def on_entry(self, entry) -> None:
        pass

    def on_status(self, status) -> None:
        pass


def remote_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "remote-engine" and t.is_alive()]


def test_stop_ends_a_connection_attempt_to_a_silent_server() -> None:
    with silent_port() as port:  # the TCP handshake succeeds; it never answers
        url = f"http://127.0.0.1:{port}"
        listener = Listener()
        settings = AppSettings(
            engine=EngineSettings(mode="server", server_url=url, connect_timeout_s=300.0),
            llm=LlmSettings(backend="none", stt_model="none"))
        session = ConversationSession(settings, listener, lambda _s: SilentMicrophone())
        session.start()
        wait_until(lambda: ("loading", f"Connecting to the speech server at {url}…")
                   in listener.states, 20.0, message="the session never said it connects")
        wait_until(lambda: bool(remote_threads()), 20.0, message="no connection thread")
        session.request_stop()
        # Far inside the 300 s the connection attempt would take to give up by itself.
        assert session.join(20.0)
        assert listener.states[-1] == ("stopped", "Stopped")
        wait_until(lambda: not remote_threads(), 20.0, message="the connection thread lives on")
