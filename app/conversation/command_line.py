"""A conversation on a command's line: the per-conversation options a command offers
(declared on ConversationConfig's fields, in the words of options.py), added to its parser,
and its parsed arguments read back as one ConversationConfig.

`run`, `serve`, `eval qa`, `eval fdb` and `eval fdb3 run` each add what they offer with
`add_conversation_options(group, command, part)` and build their conversation with
`conversation_from_args` (tests/conversation/test_options.py fails where a command lacks an
option it should offer). Light to import: every parser is built at start (app/cli/main.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from typing import Any

from app.command_options import CliOption, add_options, declared, values_from_args
from app.conversation.config import ConversationConfig
from app.conversation.options import CONVERSATION_COMMANDS


def declared_options() -> dict[str, CliOption]:
    """Field name → its option, in the fields' order."""
    return {name: d.option for name, d in declared(ConversationConfig).items()}


def offered_options(command: str) -> tuple[str, ...]:
    """The ConversationConfig fields `command` offers, in the fields' order."""
    return tuple(name for name, option in declared_options().items()
                 if option.offered_by(command))


def add_conversation_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    command: str,
    part: str,
    *,
    only: Iterable[str] | None = None,
    skip: Iterable[str] = (),
    defaults: Mapping[str, Any] | None = None,
    notes: Mapping[str, str] | None = None,
) -> tuple[str, ...]:
    """Add to `parser` the options `command` offers in `part` (SPEECH or LLM_SIDE) of its
    help: `only` these fields, not `skip` (one the command shows in a group of its own).
    `defaults`: this command's own default for a field (its help then says it); `notes`:
    words this command adds to a field's help (what it means here)."""
    if command not in CONVERSATION_COMMANDS:
        raise ValueError(f"{command!r} is not in CONVERSATION_COMMANDS")
    return add_options(parser, ConversationConfig, command, section=part, only=only,
                       skip=skip, defaults=defaults, notes=notes, say_defaults=True)


def conversation_from_args(args: argparse.Namespace, **chosen: Any) -> ConversationConfig:
    """The conversation the parsed arguments describe: every declared option the command
    has (an absent one, None, leaves the field's default), then `chosen` (what the command
    decides itself, e.g. `server`)."""
    return ConversationConfig(**values_from_args(ConversationConfig, args, **chosen))
