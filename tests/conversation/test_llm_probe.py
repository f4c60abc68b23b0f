"""At Start the session asks the configured LLM server whether it is there (off the GUI
thread, bounded), so the status says "unreachable" and why before the first question, not
"idle" (issue 19, item 11a). The real Ollama client talks to a closed port, to a socket
that never answers, and to the stand-in Ollama."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np

from app.audio.file_source import FileAudioSource
from app.conversation.session import CheckpointCache, ConversationSession
from app.llm.ollama_standin import OllamaStandIn
from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings


class Recorder:
    def __init__(self) -> None:
        self.states: list[tuple[str, str]] = []
        self.notices: list[str] = []
        self.statuses: list = []
        self.changed = threading.Condition()

    def on_state(self, state, detail):
        with self.changed:
            self.states.append((state, detail))
            self.changed.notify_all()

    def on_entry(self, entry):
        with self.changed:
            if entry.kind == "notice":
                self.notices.append(entry.text)
            self.changed.notify_all()

    def on_status(self, status):
        with self.changed:
            self.statuses.append(status)
            self.changed.notify_all()

    def wait(self, predicate, timeout=90.0):
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"timed out; states {self.states}, " + (
                    f"last status {self.statuses[-1]}" if self.statuses else "no status")
                self.changed.wait(remaining)


def _settings(host: str) -> AppSettings:
    return AppSettings(speech=SpeechModelSettings(model_id="tiny", device="cpu"),
                       llm=LlmSettings(backend="ollama", host=host, model="standin:latest",
                                       tools_enabled=False, stt_model="none"))


def _run_until(host: str, predicate) -> Recorder:
    recorder = Recorder()
    session = ConversationSession(_settings(host), recorder,
                                  lambda _s: FileAudioSource(np.zeros(24000, np.float32)),
                                  CheckpointCache())
    session.start()
    try:
        recorder.wait(lambda: predicate(recorder))
    finally:
        assert session.stop()
    return recorder


def _llm(recorder: Recorder) -> tuple[str, str]:
    status = recorder.statuses[-1] if recorder.statuses else None
    return (status.llm_state, status.llm_message) if status else ("", "")


def test_nothing_at_the_host_reads_unreachable_with_the_reason(tiny_folder, data_dir):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        host = f"http://127.0.0.1:{sock.getsockname()[1]}"  # closed once the block ends
    recorder = _run_until(host, lambda r: _llm(r)[0] == "unreachable")
    assert "127.0.0.1" in _llm(recorder)[1] and "not reachable" in _llm(recorder)[1]
    assert any("not reachable" in text for text in recorder.notices)  # said in the transcript


def test_a_host_that_never_answers_is_unreachable_after_the_probe_timeout(tiny_folder,
                                                                          data_dir):
    with socket.socket() as silent:  # accepts connections, never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        host = f"http://127.0.0.1:{silent.getsockname()[1]}"
        recorder = _run_until(host, lambda r: _llm(r)[0] == "unreachable")
    assert "no answer" in _llm(recorder)[1]


def test_a_server_that_answers_is_ready(tiny_folder, data_dir):
    with OllamaStandIn(models=("standin:latest",)) as standin:
        recorder = _run_until(standin.url, lambda r: "ready" in _llm(r)[1])
    assert _llm(recorder)[0] == "idle"


def test_a_model_the_server_lacks_is_said_once_with_what_to_do_about_the_model(tiny_folder,
                                                                               data_dir):
    """Issue 35, item 13: the notice quoted a reason that ends with a full stop and added
    one ("…`ollama pull standin:latest`.. The speech model…"), and for a model the server
    does not have it advised checking the server's address."""
    with OllamaStandIn(models=("other:latest",)) as standin:
        recorder = _run_until(standin.url, lambda r: any("not available" in text
                                                         for text in r.notices))
    assert _llm(recorder)[0] == "model missing"
    (notice,) = [text for text in recorder.notices if "not available" in text]
    assert ".." not in notice, notice
    assert "ollama pull standin:latest" in notice, notice
    assert "address" not in notice, notice
    assert "choose a model the server has in Settings → Assistant (LLM)" in notice, notice


def test_nothing_at_the_address_is_said_with_the_address_to_check(tiny_folder, data_dir):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        host = f"http://127.0.0.1:{sock.getsockname()[1]}"
    recorder = _run_until(host, lambda r: any("not available" in text for text in r.notices))
    (notice,) = [text for text in recorder.notices if "not available" in text]
    assert ".." not in notice and "?." not in notice, notice
    assert "its address in Settings → Assistant (LLM)" in notice, notice
