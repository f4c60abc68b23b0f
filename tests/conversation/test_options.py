"""The per-conversation options (app/conversation/options.py): declared once on
ConversationConfig's fields with the commands that offer them, the same flags, defaults and
choices in `run`, `serve`, `eval qa`, `eval fdb` and `eval fdb3 run`, read back into the
ConversationConfig the user asked for; and the LLM backends named in one place
(app/llm_backends.py)."""

from __future__ import annotations

import argparse
import inspect
import re
import typing
from pathlib import Path

import pytest

from app.cli.main import build_parser
from app.conversation.command_line import (
    conversation_from_args,
    declared_options,
    offered_options,
)
from app.conversation.config import ConversationConfig
from app.conversation.options import CONVERSATION_COMMANDS
from app.eval import cli as eval_cli
from app.eval.fdb import cli as fdb_cli
from app.llm_backends import LLM_BACKEND_NAMES, NO_LLM, LlmBackendName

APP = Path(__file__).resolve().parents[2] / "app"
RUN_FILES = ["run", "--input", "in.wav", "--output", "out.wav", "--transcript", "t.jsonl"]


def _subparser(parser: argparse.ArgumentParser, *path: str) -> argparse.ArgumentParser:
    for name in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def _parser_of(command: str) -> argparse.ArgumentParser:
    """The parser a user meets for `command` ("eval fdb3 run": main.py hands `eval` on)."""
    words = command.split()
    if words[0] == "eval":
        return _subparser(eval_cli.build_parser(), *words[1:])
    return _subparser(build_parser(), *words)


# Where a command's conversation differs from a plain one (its own defaults).
OWN_DEFAULTS: dict[str, dict] = {
    "eval qa": {"stt_model": "kyutai-stt-1b-en_fr", "user_city": "Seoul",
                "ret_deadline_s": 10.0},
    "eval fdb": {"user_city": "Seoul"},
    "eval fdb3 run": {"user_city": "Seoul", "stt_model": "kyutai-stt-1b-en_fr"},
}


@pytest.mark.parametrize("command", CONVERSATION_COMMANDS)
def test_each_command_offers_exactly_the_conversation_options_that_name_it(command):
    """A per-conversation option names the commands that offer it (app/conversation/
    config.py); each of those commands has its flag, and no other command has it."""
    parser = _parser_of(command)
    flags = {flag for action in parser._actions for flag in action.option_strings}
    declared = declared_options()
    missing = [declared[name].flags[0] for name in offered_options(command)
               if declared[name].flags[0] not in flags]
    assert missing == [], f"{command} lacks {missing}"
    # fdb3's --llm is its own (a choice more: the stand-in), not the conversation's backend
    own = {"--llm"} if command == "eval fdb3 run" else set()
    unasked = [option.flags[0] for name, option in declared.items()
               if name not in offered_options(command) and option.flags[0] in flags - own]
    assert unasked == [], f"{command} offers {unasked}, whose declarations do not name it"


def test_the_declarations_name_only_commands_that_run_a_conversation():
    for name, option in declared_options().items():
        assert option.commands, name
        assert set(option.commands) <= set(CONVERSATION_COMMANDS), name


@pytest.mark.parametrize("command", CONVERSATION_COMMANDS)
def test_every_option_a_command_chooses_has_the_declared_flags_default_and_choices(command):
    parser, fields = _parser_of(command), offered_options(command)
    own_defaults = OWN_DEFAULTS.get(command, {})
    by_flag = {flag: action for action in parser._actions for flag in action.option_strings}
    declared = declared_options()
    for name in fields:
        option = declared[name]
        action = by_flag[option.flags[0]]
        assert tuple(action.option_strings) == option.flags, name
        assert action.dest == option.dest, name
        # absent: None (a flag False, a list empty), the field's default, or the command's
        plain = {"flag": False, "list": []}.get(option.kind or "value", option.default)
        expected_default = own_defaults.get(name, plain)
        assert action.default == expected_default, name
        assert (tuple(action.choices) if action.choices else None) == option.choices, name
        assert action.help and option.help in action.help, name
        # ...and `--help` lists it
    help_text = parser.format_help()
    assert all(declared[name].flags[0] in help_text for name in fields)


def test_the_backend_choices_are_the_registrys_in_every_command():
    for command in CONVERSATION_COMMANDS:
        llm = next(a for a in _parser_of(command)._actions if "--llm" in a.option_strings)
        own = ("standin",) if command == "eval fdb3 run" else ()  # the demo's scripted LLM
        assert tuple(llm.choices) == (*LLM_BACKEND_NAMES, *own), command
    assert LLM_BACKEND_NAMES == ("ollama", "openai")


def test_run_reads_every_flag_into_the_conversation_the_user_asked_for():
    args = build_parser().parse_args([
        *RUN_FILES, "--model", "tiny-cs", "--device", "cpu", "--dtype", "float32",
        "--precision", "fp32", "--folder", "/ck", "--voice", "v1", "--persona", "a tutor",
        "--user-name", "Ada", "--user-city", "Turin", "--asr", "tiny-stt", "--vad",
        "--llm", "openai", "--llm-host", "http://127.0.0.1:8080/v1", "--llm-model", "m",
        "--llm-timeout", "12", "--tools", "calculator, clock", "--folder-search", "/d1",
        "--folder-search", "/d2", "--realtime", "--level-voice", "--compile"])
    assert conversation_from_args(args) == ConversationConfig(
        model_id="tiny-cs", custom_folder="/ck", device="cpu", dtype="float32",
        precision="fp32", voice="v1", role="a tutor", user_name="Ada", user_city="Turin",
        backend="openai", host="http://127.0.0.1:8080/v1", model="m", timeout_s=12.0,
        tools=("calculator", "clock"), search_folders=("/d1", "/d2"), stt_model="tiny-stt",
        end_of_turn="vad", level_voice=True, realtime=True, compile_step=True)


def test_without_flags_each_command_runs_the_tiny_model_alone_with_its_own_defaults():
    plain = ConversationConfig(model_id="tiny")
    assert conversation_from_args(build_parser().parse_args(RUN_FILES)) == plain
    assert conversation_from_args(build_parser().parse_args(["serve"])) == plain
    qa = eval_cli.build_parser().parse_args(["qa", "--out", "o"])
    assert conversation_from_args(qa) == ConversationConfig(
        model_id="tiny", stt_model="kyutai-stt-1b-en_fr", user_city="Seoul",
        ret_deadline_s=10.0)
    fdb = eval_cli.build_parser().parse_args(["fdb", "--out", "o"])
    assert fdb_cli.conversation_config(fdb) == ConversationConfig(model_id="tiny",
                                                                  user_city="Seoul")


def test_serve_and_eval_read_the_same_flags_the_same_way():
    flags = ["--model", "tiny-cs", "--llm", "ollama", "--llm-host", "http://h:1",
             "--llm-model", "q", "--tools", "none", "--vad", "--asr", "tiny-stt"]
    served = conversation_from_args(build_parser().parse_args(["serve", *flags]))
    asked = conversation_from_args(eval_cli.build_parser().parse_args(["qa", "--out", "o",
                                                                       *flags]))
    assert served.backend == asked.backend == "ollama"
    assert served.tools == asked.tools == ()
    assert served.end_of_turn == asked.end_of_turn == "vad"
    assert (served.model_id, served.host, served.model, served.stt_model) == (
        asked.model_id, asked.host, asked.model, asked.stt_model) == (
        "tiny-cs", "http://h:1", "q", "tiny-stt")
    # eval fdb3: the benchmark's tools are the only ones; --llm standin is Ollama's wire
    from app.eval.fdb3.run import Fdb3RunOptions, _conversation

    fdb3 = eval_cli.build_parser().parse_args(["fdb3", "run", "d", "--provider", "p",
                                               "--llm", "openai", "--llm-model", "q",
                                               "--vad", "--asr", "tiny-stt"])
    chosen = _conversation(Fdb3RunOptions("p", conversation_from_args(fdb3),
                                          llm=fdb3.llm), None)
    assert (chosen.backend, chosen.host, chosen.model, chosen.tools, chosen.end_of_turn,
            chosen.stt_model) == ("openai", "", "q", (), "vad", "tiny-stt")
    # eval fdb: with --llm and no --asr, the samples are heard by the --stt model
    fdb = eval_cli.build_parser().parse_args(["fdb", "--out", "o", "--llm", "ollama"])
    assert fdb_cli.conversation_config(fdb).stt_model == fdb.stt


def test_the_llm_backends_are_named_only_in_the_registry():
    """Outside app/llm_backends.py no module spells a backend's name: a new backend is a row
    there. (Ollama's web search, a search provider of the tools, is another thing.)"""
    search_provider = {APP / "tools" / "web_search.py", APP / "tools" / "default_tools.py"}
    spelled = []
    for path in APP.rglob("*.py"):
        if path == APP / "llm_backends.py" or path in search_provider:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"""["'](ollama|openai)["']""", line):
                spelled.append(f"{path.relative_to(APP)}:{number}: {line.strip()}")
    assert spelled == []
    # The settings file's type says the same names.
    assert typing.get_args(LlmBackendName) == (*LLM_BACKEND_NAMES, NO_LLM)


def test_the_settings_dialog_offers_the_registrys_backends():
    from app.ui.settings import llm_tab

    assert [name for name, _ in llm_tab.BACKENDS] == [*LLM_BACKEND_NAMES, NO_LLM]
    assert llm_tab.host_problem("", "openai") is not None  # an OpenAI server needs its URL
    assert llm_tab.host_problem("", "ollama") is None  # Ollama has its own default


def test_a_run_is_one_config_and_one_request_not_twenty_keywords():
    from app.conversation.headless import run_conversation, run_headless
    from app.server.engine_host import EngineHost

    assert list(inspect.signature(run_headless).parameters) == ["config", "run"]
    assert len(inspect.signature(run_conversation).parameters) <= 7
    assert list(inspect.signature(EngineHost.load).parameters) == [
        "config", "engine_options", "slots"]
