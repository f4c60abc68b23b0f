"""Per-conversation options, declared once on ConversationConfig's fields.

Each field that a command line may choose carries a `CliOption` in its metadata (the
`cli_option(...)` helper writes it): its flags, help, type, choices and the command line's
default. `add_conversation_options` adds the chosen fields' arguments to a parser (or an
argument group) for `run`, `serve`, `eval qa` and `eval fdb`; `conversation_from_args` turns
the parsed arguments back into one ConversationConfig. A new per-conversation option is one
field here-declared, plus its use: no parser and no args→config function is touched. One the
desktop app saves too adds `saved_as(...)` beside its `cli_option(...)`
(app/conversation/saved_settings.py), its saved field (app/settings/schema.py) and its widget:
`ConversationConfig.from_settings` is not touched either.

Light to import: every parser is built at start (app/cli/main.py).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from app.conversation.config import ConversationConfig

CLI_KEY = "cli"  # the field metadata's key
_ABSENT = object()  # no command-line default declared: the flag's absence means the field's

# The LLM side's fields every command that runs one offers (`run`, `serve`, `eval qa`,
# `eval fdb`); each adds its own (e.g. run's --realtime). A new LLM option joins here.
LLM_SIDE_OPTIONS = ("stt_model", "end_of_turn", "backend", "host", "model", "timeout_s",
                    "tools")

# What a parsed value becomes: (the parsed value, the fields chosen so far) → the field's value.
ToField = Callable[[Any, Mapping[str, Any]], Any]


@dataclass(frozen=True)
class CliOption:
    """How a command line chooses one ConversationConfig field."""

    flags: tuple[str, ...]  # "--llm-host"; more than one: aliases ("--role", "--persona")
    help: str
    # "value": one value; "flag": present or not (store_true); "list": repeatable (append)
    kind: Literal["value", "flag", "list"] = "value"
    type: Callable[[str], Any] | None = None  # argparse's type (None: the text)
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    # The command line's default where it differs from "absent: the field's default" (the
    # commands run the tiny demo model, the desktop app the catalog's default).
    default: Any = _ABSENT
    to_field: ToField | None = None  # None: the parsed value as it is

    @property
    def dest(self) -> str:
        return self.flags[0].lstrip("-").replace("-", "_")

    @property
    def parser_default(self) -> Any:
        if self.default is not _ABSENT:
            return self.default
        return {"flag": False, "list": []}.get(self.kind)


def cli_option(*flags: str, help: str, **details: Any) -> dict[str, CliOption]:
    """The field metadata declaring a command-line option (see CliOption)."""
    return {CLI_KEY: CliOption(tuple(flags), help, **details)}


def declared_options() -> dict[str, CliOption]:
    """Field name → its option, in the fields' order."""
    from app.conversation.config import ConversationConfig

    return {f.name: f.metadata[CLI_KEY] for f in dataclasses.fields(ConversationConfig)
            if CLI_KEY in f.metadata}


def _described_default(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def add_conversation_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    fields: Iterable[str],
    *,
    defaults: Mapping[str, Any] | None = None,
    notes: Mapping[str, str] | None = None,
) -> None:
    """Add the declared options of `fields` (ConversationConfig field names) to `parser`.
    `defaults`: this command's own default for a field (its help then says it); `notes`:
    words this command adds to a field's help (what it means here)."""
    from app.conversation.config import ConversationConfig

    options = declared_options()
    field_defaults = {f.name: f.default for f in dataclasses.fields(ConversationConfig)}
    defaults, notes = defaults or {}, notes or {}
    for name in fields:
        option = options[name]  # a KeyError: the field declares no option
        help_text = option.help
        if name in notes:
            help_text += f"; {notes[name]}"
        default = defaults.get(name, option.parser_default)
        said = default if name in defaults else field_defaults[name]
        numeric = isinstance(said, (int, float)) and not isinstance(said, bool)
        this_commands_own = name in defaults and default is not None
        if numeric or this_commands_own:  # (a text field's own default goes unsaid)
            help_text += f" (default {_described_default(said)})"
        extra: dict[str, Any] = {"dest": option.dest, "help": help_text, "default": default}
        if option.kind == "flag":
            extra["action"] = "store_true"
        else:
            if option.kind == "list":
                extra["action"] = "append"
                extra["default"] = list(default)
            if option.type is not None:
                extra["type"] = option.type
            if option.metavar is not None:
                extra["metavar"] = option.metavar
            if option.choices is not None:
                extra["choices"] = list(option.choices)
        parser.add_argument(*option.flags, **extra)


def conversation_from_args(args: argparse.Namespace, **chosen: Any) -> ConversationConfig:
    """The conversation the parsed arguments describe: every declared option the command
    has (an absent one, None, leaves the field's default), then `chosen` (what the command
    decides itself, e.g. `server`)."""
    from app.conversation.config import ConversationConfig

    values: dict[str, Any] = {}
    for name, option in declared_options().items():
        if name in chosen or not hasattr(args, option.dest):
            continue
        value = getattr(args, option.dest)
        if value is None:
            continue
        values[name] = value if option.to_field is None else option.to_field(value, values)
    return ConversationConfig(**{**values, **chosen})


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
