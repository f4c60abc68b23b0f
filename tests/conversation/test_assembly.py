"""Where a conversation is assembled: what cannot be had is a notice for the desktop (the
conversation goes on without it) and an error for a headless run (it asked for exactly that)."""

from __future__ import annotations

import pytest

from app.checkpoints.loader import CheckpointMissingError
from app.conversation import assembly
from app.conversation.config import ConversationConfig
from app.conversation.session import CheckpointCache

TINY = ConversationConfig(model_id="tiny", device="cpu")


def test_a_tool_setting_the_tools_refuse_is_a_notice_or_an_error():
    config = ConversationConfig(backend="ollama", tools=("no_such_tool",))
    notices: list[tuple[str, str]] = []
    tools = assembly.build_tools(config, lambda message, severity: notices.append(
        (message, severity)))
    assert tools.names() == []
    assert len(notices) == 1 and notices[0][0].startswith("Tools are off: unknown tool")
    assert notices[0][1] == "warning"
    with pytest.raises(ValueError, match="unknown tool"):
        assembly.build_tools(config)


def test_a_recogniser_not_on_disk_is_a_notice_or_an_error(data_dir):
    config = ConversationConfig(stt_model="kyutai-stt-1b-en_fr", backend="ollama")
    notices: list[str] = []
    asr = assembly.build_asr(config, "cpu", notice=lambda message, _: notices.append(message))
    assert asr is None
    assert len(notices) == 1 and "kyutai-stt-1b-en_fr is not on disk" in notices[0]
    with pytest.raises(CheckpointMissingError):
        assembly.build_asr(config, "cpu")


def test_a_server_without_its_address_leaves_the_assistant_off_with_a_notice(tiny_folder):
    config = ConversationConfig(model_id="tiny", device="cpu", backend="openai", host="")
    engine = assembly.build_engine(assembly.load_speech_model(config),
                                   assembly.engine_options(config))
    notices: list[str] = []
    pipeline = assembly.build_pipeline(engine, config, "cpu", host_flag="its address",
                                       notice=lambda message, _: notices.append(message))
    assert pipeline.orchestrator is None
    assert len(notices) == 1 and "The assistant (LLM) is off" in notices[0]
    assert "needs its address" in notices[0]
    with pytest.raises(ValueError, match="needs --llm-host"):
        assembly.build_pipeline(engine, config, "cpu")


def test_the_checkpoint_is_loaded_once_for_two_conversations(tiny_folder):
    cache, loading = CheckpointCache(), []
    first = assembly.load_speech_model(TINY, cache=cache, on_loading=loading.append)
    second = assembly.load_speech_model(TINY, cache=cache, on_loading=loading.append)
    assert second is first and len(loading) == 1 and "on cpu" in loading[0]


def test_a_live_conversation_can_switch_levelling_and_a_run_levels_only_when_asked(tiny_folder):
    config = ConversationConfig(model_id="tiny", device="cpu", level_voice=False)
    engine = assembly.build_engine(assembly.load_speech_model(config),
                                   assembly.engine_options(config, seed=1))
    assert engine.options.seed == 1
    assert assembly.build_pipeline(engine, config, "cpu", live=True).leveller is not None
    assert assembly.build_pipeline(engine, config, "cpu").leveller is None
