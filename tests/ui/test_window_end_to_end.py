"""The real window on the tiny model, with real PortAudio streams on a private PulseAudio
null sink and the stand-in Ollama server: Start, ask, Stop, Start, ask, New conversation,
reopen the first, export both, close. Both transcripts come out intact and in order."""

from __future__ import annotations

import json
import os
import stat
import threading
import time

import pytest

from app.bench.audio_bench import PrivatePulseAudio
from app.conversation.transcript.export import read_transcript
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.settings.schema import AppSettings, AudioSettings, LlmSettings, SpeechModelSettings
from app.ui import safe_file_dialog
from app.ui.app import _live_audio_factory
from app.ui.conversation_controller import ConversationController
from app.ui.main_window import MainWindow

QUESTIONS = ("What is the capital of Australia?", "And of France?", "And of Italy?")
ANSWERS = ("Canberra.", "Paris.", "Rome.")


@pytest.fixture()
def pulse():
    with PrivatePulseAudio(timeout_s=15.0) as daemon:
        yield daemon


def said(entries) -> list[str]:
    """What the user typed and what was injected, in order."""
    return [e.text for e in entries if e.kind in ("user", "span")]


def test_two_conversations_survive_stop_start_new_reopen_export_and_close(
        qtbot, pulse, tiny_folder, data_dir, tmp_path, monkeypatch):
    threads_before = set(threading.enumerate())
    with OllamaStandIn(script=[ScriptedReply(content=a) for a in ANSWERS]) as standin:
        settings = AppSettings(
            speech=SpeechModelSettings(model_id="tiny", device="cpu"),
            audio=AudioSettings(echo_mode="headset"),
            llm=LlmSettings(backend="ollama", host=standin.url, model="standin:latest",
                            tools_enabled=False, stt_model="none"))
        controller = ConversationController(_live_audio_factory)
        window = MainWindow(controller, settings)
        qtbot.addWidget(window)
        window.show()
        features = window.features

        def ask(question: str, answer: str) -> None:
            window.input_box.editor.setPlainText(question)
            window.input_box.send_button.click()
            qtbot.waitUntil(lambda: any(e.kind == "span" and e.final and e.text == answer
                                        for e in window.transcript.entries()), timeout=30_000)

        def start() -> None:
            window.start_action.trigger()
            qtbot.waitUntil(lambda: controller.state == "running", timeout=90_000)

        start()
        ask(QUESTIONS[0], ANSWERS[0])
        window.start_action.trigger()  # Stop
        qtbot.waitUntil(lambda: controller.state == "stopped", timeout=30_000)
        first_session = window.transcript.entries()
        assert all(e.final for e in first_session)  # nothing left "partial" by the stop

        start()
        ask(QUESTIONS[1], ANSWERS[1])
        entries = window.transcript.entries()
        assert entries[: len(first_session)] == first_session  # untouched by session two
        assert said(entries) == [QUESTIONS[0], ANSWERS[0], QUESTIONS[1], ANSWERS[1]]
        first_id = features.keeper.conversation_id

        features.new_action.trigger()  # saved; the conversation starts again, empty
        assert said(window.transcript.entries()) == []
        qtbot.waitUntil(lambda: controller.state == "running", timeout=90_000)
        ask(QUESTIONS[2], ANSWERS[2])
        assert said(window.transcript.entries()) == [QUESTIONS[2], ANSWERS[2]]

        features.show_list()  # read off the GUI thread
        qtbot.waitUntil(lambda: first_id in features.conversation_list.ids(), timeout=5000)
        viewer = features.open_saved(first_id)
        assert viewer is not None
        assert said(viewer.entries()) == [QUESTIONS[0], ANSWERS[0], QUESTIONS[1], ANSWERS[1]]
        assert all(e.final for e in viewer.entries())

        exports = iter([tmp_path / "second.md", tmp_path / "first.json"])
        monkeypatch.setattr(safe_file_dialog, "save_file_name",
                            lambda *_args, **_kw: (str(next(exports)), "Markdown (*.md)"))
        window.export_action.trigger()
        viewer.export_button.click()
        second = (tmp_path / "second.md").read_text(encoding="utf-8")
        header, first = read_transcript((tmp_path / "first.json").read_text(encoding="utf-8"))
        assert said(first) == [QUESTIONS[0], ANSWERS[0], QUESTIONS[1], ANSWERS[1]]
        assert QUESTIONS[2] in second and ANSWERS[2] in second and ANSWERS[0] not in second
        assert "- LLM: standin:latest on Ollama at http://127.0.0.1" in second
        assert header.conversation_id == first_id and "Tiny" in header.model
        assert header.llm.startswith("standin:latest on Ollama at http://127.0.0.1")
        assert json.loads((tmp_path / "first.json").read_text())["entries"][0]["time"][:2] == "20"
        for name in ("second.md", "first.json"):
            assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o600

        viewer.close()
        closing = time.monotonic()
        window.close()
        closed_in = time.monotonic() - closing
        assert controller.wait_shutdown(15.0)
        print(f"window.close() returned in {closed_in * 1000:.0f} ms; "
              f"conversation threads ended {time.monotonic() - closing:.2f} s after close")
        assert closed_in < 1.0
    saved = features.keeper.store.list()
    assert len(saved) == 2  # both conversations are on disk, the newest first
    assert saved[1].conversation_id == first_id
    leftover = {t for t in set(threading.enumerate()) - threads_before if t.is_alive()
                and t.name.startswith(("conversation", "duplex-engine", "orchestrator",
                                       "pipeline-router", "live-audio"))}
    assert not leftover
