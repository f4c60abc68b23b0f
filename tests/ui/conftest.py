"""Window tests keep their remembered state and their saved conversations in a temporary
folder: never in the user's config or data dir, never shared between tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def private_window_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CONTEXTSPAN_CONFIG_DIR", str(tmp_path / "config"))
    conversations = tmp_path / "conversations"
    monkeypatch.setattr("app.conversation.transcript.saved.conversations_dir",
                        lambda: conversations)
    return tmp_path


@pytest.fixture()
def bare_window(qtbot):
    """The real main window with no conversation running (nothing to load): its
    controller's signals are emitted by the test, as a session would."""
    from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings
    from app.ui.conversation_controller import ConversationController
    from app.ui.main_window import MainWindow

    settings = AppSettings(speech=SpeechModelSettings(model_id="tiny", device="cpu"),
                           llm=LlmSettings(backend="ollama", model="qwen3:4b",
                                           tools_enabled=True, tools=("web_search", "clock")))
    controller = ConversationController(lambda _settings: None)
    window = MainWindow(controller, settings)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    yield window
    window.features.keeper.shutdown()
