"""The desktop app as the client of a speech server: the real window, controller and session
against `serve` on the tiny model in its own process, with the Ollama stand-in as the LLM on
the app's side. Start, a typed question answered by a span that lands over the wire, the
network round trip in the status bar, Stop; the server killed mid-conversation gives a
notice and a paused conversation, which reconnects (saying the model's context is lost)
when the server is back."""

from __future__ import annotations

import threading

import pytest

from app.audio.silent_microphone import SilentMicrophone
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.settings.schema import AppSettings, EngineSettings, LlmSettings, SpeechModelSettings
from app.ui.conversation_controller import ConversationController
from app.ui.main_window import MainWindow
from tests.serve_process import ServeProcess

TOKEN = "remote-test-token-9c2e"
QUESTION = "What is the capital of Australia?"
ANSWER = "Canberra."


def settings_for(url: str, ollama: str, token: str = TOKEN) -> AppSettings:
    return AppSettings(
        speech=SpeechModelSettings(model_id="moshika", device="cpu"),  # not used: the server's
        engine=EngineSettings(mode="server", server_url=url, server_token=token,
                              connect_timeout_s=60.0),
        llm=LlmSettings(backend="ollama", host=ollama, model="standin:latest",
                        tools_enabled=False, stt_model="none"))


def remote_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "remote-engine" and t.is_alive()]


@pytest.fixture()
def window_for(qtbot):
    made: list[tuple[MainWindow, ConversationController]] = []

    def make(settings: AppSettings) -> tuple[MainWindow, ConversationController]:
        # No audio devices: the app's own no-device mode, silence at a microphone's pace.
        controller = ConversationController(lambda _settings: SilentMicrophone())
        window = MainWindow(controller, settings)
        qtbot.addWidget(window)
        window.show()
        made.append((window, controller))
        return window, controller

    yield make
    for window, controller in made:
        assert controller.shutdown(30.0)
        window.features.keeper.shutdown()


def notices(window: MainWindow, words: str) -> list:
    return [e for e in window.transcript.entries() if e.kind == "notice" and words in e.text]


def test_remote_conversation_answers_survives_a_killed_server_and_stops(
        qtbot, tiny_folder, data_dir, window_for):
    with OllamaStandIn(script=[ScriptedReply(content=ANSWER)] * 3) as standin, \
            ServeProcess(data_dir, TOKEN) as server:
        window, controller = window_for(settings_for(server.url, standin.url))
        window.start_action.trigger()
        qtbot.waitUntil(lambda: controller.state == "running", timeout=120_000)
        qtbot.waitUntil(lambda: "on " + server.url in window.status_line.model.text(),
                        timeout=10_000)

        window.input_box.editor.setPlainText(QUESTION)
        window.input_box.send_button.click()
        qtbot.waitUntil(lambda: any(e.kind == "span" and e.final and e.text == ANSWER
                                    for e in window.transcript.entries()), timeout=60_000)
        # The model's audio came back over the wire: the status bar has its round trip.
        qtbot.waitUntil(lambda: window.status_line.frame.text().startswith("network ")
                        and "ms" in window.status_line.frame.text(), timeout=30_000)
        assert window.status_line.last_status.network_rtt_ms > 0

        server.kill()  # mid-conversation, no goodbye
        qtbot.waitUntil(lambda: controller.state == "paused", timeout=30_000)
        lost = notices(window, "connection to the speech server was lost")
        assert len(lost) == 1 and "context is lost" in lost[0].text
        assert window.start_action.text() == "&Resume"
        qtbot.waitUntil(lambda: window.status_line.frame.text() == "server: disconnected",
                        timeout=10_000)
        # Paused, not broken: a typed question is still taken (its span is refused, said on
        # the answer's own entry).
        window.input_box.editor.setPlainText("And of France?")
        window.input_box.send_button.click()
        qtbot.waitUntil(lambda: any(e.kind == "span" and e.final and "speech server is down"
                                    in e.detail for e in window.transcript.entries()),
                        timeout=30_000)
        assert controller.state == "paused" and controller.running

        with ServeProcess(data_dir, TOKEN, port=server.port):  # back on the same port
            qtbot.waitUntil(lambda: controller.state == "running", timeout=120_000)
            back = notices(window, "Reconnected to the speech server")
            assert len(back) == 1 and "not in its context any more" in back[0].text

            window.start_action.trigger()  # Stop
            qtbot.waitUntil(lambda: controller.state == "stopped", timeout=30_000)
            assert all(e.final for e in window.transcript.entries())
            qtbot.waitUntil(lambda: not remote_threads(), timeout=10_000)


def test_a_wrong_token_says_so_and_starts_nothing(qtbot, tiny_folder, data_dir, window_for):
    with ServeProcess(data_dir, TOKEN) as server:
        window, controller = window_for(settings_for(server.url, "http://127.0.0.1:9",
                                                     token="wrong"))
        window.start_action.trigger()
        qtbot.waitUntil(lambda: controller.state == "error", timeout=60_000)
        assert "refused the token (401)" in window.banner.text()
        assert window.status_line.state.text() == "Could not start"  # the banner says why
        assert not remote_threads()


def test_nothing_at_the_servers_address_is_said_once_in_words(qtbot, window_for):
    """Issue 35, item 11: a speech server that is not running was reported as the network
    library words it, twice over, in the banner and again in the status bar ("cannot
    reach the speech server at …: cannot reach http://…: Cannot connect to host … ssl:default
    [Connect call failed ('127.0.0.1', 8999)]"). It is said once, plainly, with what to do."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens once the block ends
    window, controller = window_for(settings_for(f"http://127.0.0.1:{port}",
                                                 "http://127.0.0.1:9"))
    window.start_action.trigger()
    qtbot.waitUntil(lambda: controller.state == "error", timeout=60_000)
    said = window.banner.text()
    assert said.startswith(f"The conversation could not start: Nothing answers at "
                           f"127.0.0.1:{port}: no speech server runs there"), said
    assert "python main.py serve" in said and "Settings → Speech model → Speech engine" in said
    for raw in ("ssl:default", "Connect call failed", "Cannot connect to host"):
        assert raw not in said, said
    assert said.count(f"127.0.0.1:{port}") == 1, said
    assert window.status_line.state.text() == "Could not start"
    assert not remote_threads()
