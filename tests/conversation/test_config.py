"""The conversation's one config: the saved settings become it field by field, under the
settings' own names."""

from __future__ import annotations

from app.conversation.config import ConversationConfig
from app.settings.schema import AppSettings, AudioSettings, LlmSettings, SpeechModelSettings


def test_the_settings_become_the_conversation_under_their_own_names():
    settings = AppSettings(
        speech=SpeechModelSettings(model_id="tiny-persona", custom_folder="/models/mine",
                                   device="cpu", precision="int8", voice="NATF2",
                                   role="a teacher", user_name="Ada", user_city="Seoul"),
        audio=AudioSettings(level_voice=False),
        llm=LlmSettings(backend="openai", host="http://127.0.0.1:8000/v1", model="qwen",
                        timeout_s=12.0, tools=("calculator", "clock"),
                        search_folders=("/home/me/notes",), stt_model="tiny-stt",
                        end_of_turn="vad"))
    config = ConversationConfig.from_settings(settings)
    assert config == ConversationConfig(
        model_id="tiny-persona", custom_folder="/models/mine", device="cpu", precision="int8",
        voice="NATF2", role="a teacher", user_name="Ada", user_city="Seoul",
        backend="openai", host="http://127.0.0.1:8000/v1", model="qwen", timeout_s=12.0,
        tools=("calculator", "clock"), search_folders=("/home/me/notes",),
        stt_model="tiny-stt", end_of_turn="vad", level_voice=False)
    assert config.has_llm and config.has_stt and config.force_vad


def test_tools_turned_off_are_no_tools_and_no_llm_means_no_speech_recognition():
    llm = LlmSettings(backend="none", tools_enabled=False, stt_model="tiny-stt")
    config = ConversationConfig.from_settings(AppSettings(llm=llm))
    assert config.tools == ()
    # Speech recognition only feeds the LLM side: the desktop builds none without it.
    assert config.stt_model == "none" and not config.has_stt and not config.has_llm
    assert not config.force_vad and config.level_voice is True  # the settings' default


def test_the_defaults_are_a_speech_model_alone():
    config = ConversationConfig()
    assert not config.has_llm and not config.has_stt and not config.level_voice
    assert config.tools is None  # every configured tool, once there is an LLM side
