"""Command-line options declared on dataclass fields (app/command_options.py): each command's
parser has every option its requests declare, and a command given no flags asks for the
dataclass's own defaults (the flag's default and the field's are one)."""

from __future__ import annotations

import argparse

import pytest

from app.bench.requests import BENCHMARKS
from app.cli.main import build_parser
from app.command_options import declared, from_args
from app.conversation.run_request import HeadlessRun
from app.eval import cli as eval_cli
from app.eval.fdb.render import RenderOptions
from app.eval.fdb.score import ScoreOptions
from app.eval.fdb3.run_options import Fdb3RunOptions
from app.eval.judge_settings import JudgeSettings
from app.eval.qa_runner import QaRunOptions
from app.server.cli import ServeOptions

# command → the dataclasses whose declared options it offers (the conversation's:
# tests/conversation/test_options.py)
REQUESTS: dict[str, tuple[type, ...]] = {
    "run": (HeadlessRun,),
    "serve": (ServeOptions,),
    "eval qa": (QaRunOptions, JudgeSettings),
    "eval fdb": (RenderOptions, ScoreOptions, JudgeSettings),
    "eval fdb3 run": (Fdb3RunOptions,),
    "eval fdb3 score": (JudgeSettings,),
    **{f"bench {kind}": (request,) for kind, (request, _) in BENCHMARKS.items()},
}


def _parser_of(command: str) -> argparse.ArgumentParser:
    words = command.split()
    parser = eval_cli.build_parser() if words[0] == "eval" else build_parser()
    for name in words[1:] if words[0] == "eval" else words:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


@pytest.mark.parametrize("command", REQUESTS)
def test_a_command_has_every_option_its_requests_declare(command):
    by_flag = {flag: action for action in _parser_of(command)._actions
               for flag in action.option_strings}
    for request in REQUESTS[command]:
        for name, field in declared(request).items():
            flag = field.option.flags[0]
            assert flag in by_flag, f"{command} lacks {flag} ({request.__name__}.{name})"
            action = by_flag[flag]
            assert action.dest == field.option.dest
            assert action.default == field.parser_default, flag


@pytest.mark.parametrize("request_class", [
    ServeOptions, QaRunOptions, RenderOptions, ScoreOptions,
    *(request for request, _ in BENCHMARKS.values())])
def test_no_flags_ask_for_the_dataclass_defaults(request_class):
    command = next(c for c, requests in REQUESTS.items() if request_class in requests)
    words = command.split()
    args = (eval_cli.build_parser().parse_args([*words[1:], "--out", "o"])
            if words[0] == "eval" else build_parser().parse_args(words))
    assert from_args(request_class, args) == request_class()
