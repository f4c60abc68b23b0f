"""A conversation that cannot start says why in words (issue 19, item 11e/f): the window's
banner gets the human message without a Python class name in front, and the terminal's one
line names the reason, not only "conversation failed"; the log file keeps the class and the
traceback."""

from __future__ import annotations

from app.audio.silent_microphone import SilentMicrophone
from app.conversation.session import CheckpointCache, ConversationSession
from app.log_setup import configure_logging, log_path
from app.settings.schema import AppSettings, EngineSettings, LlmSettings
from tests.conversation.recorder import Recorder
from tests.ports import free_port
from tests.waiting import wait_until


def test_a_failed_start_is_said_in_words_on_the_banner_and_the_terminal(
        capfd, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("CONTEXTSPAN_DATA_DIR", str(tmp_path))
    configure_logging()
    try:
        url = f"http://127.0.0.1:{free_port()}"
        settings = AppSettings(llm=LlmSettings(backend="none"),
                               engine=EngineSettings(mode="server", server_url=url,
                                                     connect_timeout_s=1.0))
        recorder = Recorder()
        session = ConversationSession(settings, recorder, lambda _s: SilentMicrophone(),
                                      CheckpointCache())
        session.start()
        assert session.join(60)
        wait_until(lambda: recorder.states and recorder.states[-1][0] == "error", 10,
                   message=f"no error state: {recorder.states}")
        detail = recorder.states[-1][1]
        assert "Error" not in detail.split(":")[0], detail  # no "RemoteEngineError: …"
        assert "127.0.0.1" in detail
        terminal = capfd.readouterr().err
        failed = [line for line in terminal.splitlines() if "conversation failed" in line]
        assert failed, terminal
        assert detail in failed[0]  # the reason, on the terminal too
        logged = log_path().read_text(encoding="utf-8")
        assert "RemoteEngineError" in logged  # the class and its traceback: the log's
    finally:
        import logging

        root = logging.getLogger()
        for handler in [h for h in root.handlers if getattr(h, "_contextspan_handler", False)]:
            root.removeHandler(handler)
            handler.close()
