"""Per-conversation options, declared once on ConversationConfig's fields, each naming the
commands that offer it.

Each field that a command line may choose carries a `CliOption` in its metadata (this
module's `cli_option(...)` writes it, app/command_options.py reads it): its flags, help, type,
choices, the command line's default, the commands that offer it (`commands=`: every command
that runs a conversation, `CONVERSATION_COMMANDS`, or those named) and its part of their
`--help` (the speech model's, `SPEECH`, or the LLM side's, `LLM_SIDE`). Each command adds
what it offers with `add_conversation_options(group, command, part)`, and
`conversation_from_args` turns the parsed arguments back into one ConversationConfig. A new
per-conversation option is one field declared, plus its use: no parser, no list of a
command's options and no args→config function is touched (tests/conversation/
test_options.py fails where a command lacks one it should offer). One the desktop app saves
too adds `saved_as(...)` beside its `cli_option(...)` (app/conversation/saved_settings.py),
its saved field (app/settings/schema.py) and its widget: `ConversationConfig.from_settings`
is not touched either.

Light to import: every parser is built at start (app/cli/main.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from app.command_options import (
    CliOption,
    ToField,
    add_options,
    declared,
    values_from_args,
)
from app.command_options import cli_option as declare

if TYPE_CHECKING:
    from app.conversation.config import ConversationConfig

# The commands that run a conversation (their parsers: app/cli/main.py, app/server/cli.py,
# app/eval/cli.py, app/eval/fdb/cli.py, app/eval/fdb3/cli.py).
RUN, SERVE, EVAL_QA, EVAL_FDB, EVAL_FDB3 = "run", "serve", "eval qa", "eval fdb", "eval fdb3 run"
CONVERSATION_COMMANDS = (RUN, SERVE, EVAL_QA, EVAL_FDB, EVAL_FDB3)
# A command's --help shows a conversation's options in two parts.
SPEECH, LLM_SIDE = "speech", "llm"


def every_command_but(*left_out: str) -> tuple[str, ...]:
    """Every command that runs a conversation except `left_out` (say why beside it)."""
    unknown = set(left_out) - set(CONVERSATION_COMMANDS)
    if unknown:
        raise ValueError(f"not a conversation's command: {', '.join(sorted(unknown))}")
    return tuple(c for c in CONVERSATION_COMMANDS if c not in left_out)


def cli_option(*flags: str, help: str, commands: Iterable[str], part: str,
               **details: Any) -> dict[str, CliOption]:
    """The field metadata declaring a conversation's command-line option: offered by
    `commands`, in `part` (SPEECH or LLM_SIDE) of their help. Absent, a value is None (and
    a flag False): the field's default, unless the command chooses (e.g. `eval fdb`'s ASR)."""
    commands = tuple(commands)
    unknown = set(commands) - set(CONVERSATION_COMMANDS)
    if unknown or not commands or part not in (SPEECH, LLM_SIDE):
        raise ValueError(f"{flags[0]}: commands among {CONVERSATION_COMMANDS} (not "
                         f"{sorted(unknown)}), part {SPEECH!r} or {LLM_SIDE!r} (not {part!r})")
    if details.get("kind", "value") == "value":
        details.setdefault("default", None)
    return declare(*flags, help=help, commands=commands, section=part, **details)


def declared_options() -> dict[str, CliOption]:
    """Field name → its option, in the fields' order."""
    from app.conversation.config import ConversationConfig

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
    from app.conversation.config import ConversationConfig

    if command not in CONVERSATION_COMMANDS:
        raise ValueError(f"{command!r} is not in CONVERSATION_COMMANDS")
    return add_options(parser, ConversationConfig, command, section=part, only=only,
                       skip=skip, defaults=defaults, notes=notes, say_defaults=True)


def conversation_from_args(args: argparse.Namespace, **chosen: Any) -> ConversationConfig:
    """The conversation the parsed arguments describe: every declared option the command
    has (an absent one, None, leaves the field's default), then `chosen` (what the command
    decides itself, e.g. `server`)."""
    from app.conversation.config import ConversationConfig

    return ConversationConfig(**values_from_args(ConversationConfig, args, **chosen))


# -- conversions the declarations use ----------------------------------------------------------

def as_str(value: Any, _chosen: Mapping[str, Any]) -> str:
    return str(value)


def as_tuple(value: Iterable[Any], _chosen: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(item) for item in value)


def tool_names(text: str, _chosen: Mapping[str, Any]) -> tuple[str, ...]:
    """`--tools a,b`: those tools; "none": none."""
    if text.strip().lower() == "none":
        return ()
    return tuple(part.strip() for part in text.split(",") if part.strip())


def when_set(value_if_set: str, value_if_not: str) -> ToField:
    """A flag that picks one of two words (`--vad`: "vad", else "auto")."""
    return lambda on, _chosen: value_if_set if on else value_if_not
