"""The conversation's one config: the saved settings become it field by field, under the
settings' own names."""

from __future__ import annotations

import pytest

from app.conversation.config import ConversationConfig, SpeechServer
from app.settings.schema import (
    AppSettings,
    AudioSettings,
    EngineSettings,
    LlmSettings,
    McpServerSettings,
    McpSettings,
    SpeechModelSettings,
)


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


_EVERY_TOOL = ("web_search", "web_fetch", "local_search", "calculator", "clock")
_MY_SERVER = McpServerSettings(name="notes", command="uvx", args=("notes-mcp",))


# Each expected conversation written out as the desktop gave it before the saved fields were
# read by their declarations (`saved_as`): the reading changed, the conversation must not.
@pytest.mark.parametrize("settings, expected", [
    pytest.param(  # a first start: the catalog's model, Ollama with every tool
        AppSettings(),
        ConversationConfig(model_id="moshika", backend="ollama",
                           host="http://127.0.0.1:11434", tools=_EVERY_TOOL,
                           stt_model="kyutai-stt-1b-en_fr", level_voice=True),
        id="first start"),
    pytest.param(  # the speech model on a server that also recognises the user's words
        AppSettings(
            speech=SpeechModelSettings(model_id="context-spanning-7b", precision="bf16",
                                       user_name="Ada", user_city="Seoul"),
            llm=LlmSettings(backend="openai", host="http://10.0.0.2:8000/v1",
                            model="qwen3", timeout_s=90.0, tools_enabled=False,
                            end_of_turn="vad"),
            engine=EngineSettings(mode="server", server_url="  http://gpu-box:8998 ",
                                  server_token=" s3cret ", connect_timeout_s=5.0,
                                  asr_on_server=True)),
        ConversationConfig(model_id="context-spanning-7b", precision="bf16",
                           user_name="Ada", user_city="Seoul", backend="openai",
                           host="http://10.0.0.2:8000/v1", model="qwen3", timeout_s=90.0,
                           tools=(), stt_model="server", end_of_turn="vad",
                           level_voice=True,
                           server=SpeechServer("http://gpu-box:8998", "s3cret")),
        id="server recognises"),
    pytest.param(  # the speech model on a server, the user's words recognised here
        AppSettings(llm=LlmSettings(stt_model="tiny-stt"),
                    engine=EngineSettings(mode="server", server_url="https://gpu-box/")),
        ConversationConfig(model_id="moshika", backend="ollama",
                           host="http://127.0.0.1:11434", tools=_EVERY_TOOL,
                           stt_model="tiny-stt", level_voice=True,
                           server=SpeechServer("https://gpu-box/", None)),
        id="server, recognised here"),
    pytest.param(  # a server without a token, no LLM: no recognition, here or there
        AppSettings(
            audio=AudioSettings(input_device="USB mic", echo_mode="headset",
                                level_voice=False),
            llm=LlmSettings(backend="none", stt_model="tiny-stt"),
            engine=EngineSettings(mode="server", server_token="  ", asr_on_server=True)),
        ConversationConfig(model_id="moshika", backend="none",
                           host="http://127.0.0.1:11434", tools=_EVERY_TOOL,
                           stt_model="none", level_voice=False,
                           server=SpeechServer("http://127.0.0.1:8998", None)),
        id="server without llm"),
    pytest.param(  # a local persona checkpoint, some tools, the user's folders and servers
        AppSettings(
            speech=SpeechModelSettings(model_id="", custom_folder="/models/mine",
                                       device="mlx", precision="q4", voice="NATM1",
                                       role="a patient tutor"),
            llm=LlmSettings(host="http://127.0.0.1:11500", model="llama3.2",
                            timeout_s=0.5, tools=("clock", "local_search"),
                            search_folders=("/home/me/notes", "/srv/papers"),
                            stt_model="tiny-stt"),
            engine=EngineSettings(server_url="http://unused:1", asr_on_server=True),
            mcp=McpSettings(servers=(_MY_SERVER,))),
        ConversationConfig(model_id="", custom_folder="/models/mine", device="mlx",
                           precision="q4", voice="NATM1", role="a patient tutor",
                           backend="ollama", host="http://127.0.0.1:11500",
                           model="llama3.2", timeout_s=0.5, tools=("clock", "local_search"),
                           search_folders=("/home/me/notes", "/srv/papers"),
                           mcp_servers=(_MY_SERVER,), stt_model="tiny-stt",
                           level_voice=True),
        id="local persona with tools"),
])
def test_the_saved_settings_give_the_conversation_they_always_gave(settings, expected):
    assert ConversationConfig.from_settings(settings) == expected
