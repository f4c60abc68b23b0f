"""Command-line options declared on dataclass fields: the parsers are derived from them.

A field a command line chooses carries a `CliOption` in its metadata (`cli_option(...)`
writes it): its flags and help; what the field's annotation does not say (a type, choices, a
command-line default other than the field's); the commands that offer it and the part of
their `--help` it stands in. `add_options(parser, Cls, command)` adds to a parser (or an
argument group) the options of `Cls` that `command` offers, in the fields' order;
`from_args(Cls, args)` reads the parsed arguments back into one `Cls`. The value is typed
where it is used, and the flag, its default and the field cannot disagree. (As
huggingface/speech-to-speech's HfArgumentParser does, on argparse, so that help and errors
stay the command line's own.)

ConversationConfig's options (app/conversation/options.py) are the shared ones: each says
which commands offer it. A command's own settings (`serve`'s network, an evaluation's run, a
benchmark's request) are dataclasses of their own, offered by whoever adds them.

Light to import: every parser is built at start (app/cli/main.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

CLI_KEY = "cli"  # the field metadata's key

# What a parsed value becomes: (the parsed value, the fields read so far) → the field's value.
ToField = Callable[[Any, Mapping[str, Any]], Any]
Kind = Literal["value", "flag", "list"]
_T = TypeVar("_T")


class _FieldDefault:
    def __repr__(self) -> str:
        return "the field's default"


FIELD_DEFAULT: Any = _FieldDefault()  # no command-line default declared: the field's is it
# Annotations a parsed text is turned into (any other: the text itself, or `type=`).
_PARSED_TYPES: dict[str, Callable[[str], Any]] = {"int": int, "float": float, "Path": Path}


@dataclass(frozen=True)
class CliOption:
    """How a command line chooses one dataclass field."""

    flags: tuple[str, ...]  # "--llm-host"; more than one: aliases ("--role", "--persona")
    help: str | None = None
    # The commands that offer it ("run", "eval fdb3 run"); (): every command that adds the
    # dataclass's options. A new command that should offer an option is named here.
    commands: tuple[str, ...] = ()
    section: str = ""  # the part of a command's --help it stands in (the command's group)
    # "value": one value; "flag": present or not (store_true); "list": repeatable (append).
    # None: "flag" for a bool field, else "value".
    kind: Kind | None = None
    # argparse's type; None: int, float or Path when the field is one (or a tuple of them,
    # for a list), else the text. Not inferred where `to_field` turns the value.
    type: Callable[[str], Any] | None = None
    metavar: str | None = None
    choices: tuple[Any, ...] | None = None
    # The command line's default where it is not the field's: e.g. None, for "not given"
    # (the command then decides), or a demo model where the app's default is another.
    default: Any = FIELD_DEFAULT
    required: bool = False
    to_field: ToField | None = None  # None: the parsed value as it is (a list: a tuple)

    @property
    def dest(self) -> str:
        return self.flags[0].lstrip("-").replace("-", "_")

    def offered_by(self, command: str) -> bool:
        return not self.commands or command in self.commands


def cli_option(*flags: str, help: str | None = None, **details: Any) -> dict[str, CliOption]:
    """The field metadata declaring a command-line option (see CliOption)."""
    if "choices" in details and details["choices"] is not None:
        details["choices"] = tuple(details["choices"])
    if "commands" in details:
        details["commands"] = tuple(details["commands"])
    return {CLI_KEY: CliOption(tuple(flags), help, **details)}


@dataclass(frozen=True)
class Declared:
    """One field's option, with what its field says: the parser's kind, type and default."""

    name: str  # the field
    option: CliOption
    kind: Kind
    type: Callable[[str], Any] | None
    field_default: Any  # None where the field has none (a required field)

    @property
    def parser_default(self) -> Any:
        option = self.option
        if option.default is not FIELD_DEFAULT:
            default = option.default
        elif self.kind == "flag":
            default = False
        else:
            default = self.field_default
        if self.kind == "list" and default is not None:
            return list(default)  # argparse appends to a copy of it
        return default


def _base_type(annotation: Any) -> str:
    """The annotation's type without `| None`, and a tuple's or list's items', as text:
    "int" for `int | None` and for `tuple[int, ...]`."""
    if not isinstance(annotation, str):  # a module without `from __future__ import annotations`
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        origin = typing.get_origin(annotation)
        if origin in (typing.Union, types.UnionType):
            return _base_type(args[0]) if len(args) == 1 else ""  # several: none inferred
        if origin in (tuple, list):
            return _base_type(args[0]) if args else ""
        return getattr(annotation, "__name__", str(annotation))
    parts = [p for p in annotation.replace(" ", "").split("|") if p != "None"]
    text = parts[0] if len(parts) == 1 else "|".join(parts)
    for sequence in ("tuple[", "list["):
        if text.startswith(sequence):
            return text[len(sequence):-1].split(",")[0]
    return text


def _declared(field: dataclasses.Field, option: CliOption) -> Declared:
    base = _base_type(field.type)
    kind = option.kind or ("flag" if base == "bool" else "value")
    parsed_type = option.type
    if parsed_type is None and option.to_field is None and kind != "flag":
        parsed_type = _PARSED_TYPES.get(base)
    if field.default is not dataclasses.MISSING:
        field_default = field.default
    elif field.default_factory is not dataclasses.MISSING:
        field_default = field.default_factory()  # read when the parser is built (e.g. $VAR)
    else:
        field_default = None
    return Declared(field.name, option, kind, parsed_type, field_default)


def declared(cls: type) -> dict[str, Declared]:
    """Field name → its option, in the fields' order (the fields that declare one)."""
    return {f.name: _declared(f, f.metadata[CLI_KEY]) for f in dataclasses.fields(cls)
            if CLI_KEY in f.metadata}


def offered(cls: type, command: str, section: str | None = None) -> tuple[str, ...]:
    """The fields of `cls` whose options `command` offers (in `section`, when given)."""
    return tuple(name for name, d in declared(cls).items() if d.option.offered_by(command)
                 and (section is None or d.option.section == section))


def _described_default(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def add_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    command: str = "",
    *,
    section: str | None = None,
    only: Iterable[str] | None = None,
    skip: Iterable[str] = (),
    defaults: Mapping[str, Any] | None = None,
    notes: Mapping[str, str] | None = None,
    say_defaults: bool = False,
) -> tuple[str, ...]:
    """Add to `parser` the options of `cls` that `command` offers, in the fields' order:
    those of `section` when given, of `only` these fields when given, not of `skip`.
    `defaults`: this command's own default for a field; `notes`: words this command adds to
    a field's help (what it means here); `say_defaults`: the help says a numeric default,
    and a command's own. Returns the fields added."""
    chosen = declared(cls)
    names = offered(cls, command, section)
    if only is not None:
        wanted = set(only)
        names = tuple(name for name in names if name in wanted)
    names = tuple(name for name in names if name not in set(skip))
    defaults, notes = defaults or {}, notes or {}
    for name in names:
        field = chosen[name]
        option = field.option
        help_text = option.help
        if name in notes:
            help_text = f"{help_text}; {notes[name]}" if help_text else notes[name]
        default = defaults.get(name, field.parser_default)
        if say_defaults:
            said = default if name in defaults else field.field_default
            numeric = isinstance(said, (int, float)) and not isinstance(said, bool)
            if numeric or (name in defaults and default is not None):
                help_text = f"{help_text} (default {_described_default(said)})"
        extra: dict[str, Any] = {"dest": option.dest, "help": help_text, "default": default}
        if option.required:
            extra["required"] = True
        if field.kind == "flag":
            extra["action"] = "store_true"
        else:
            if field.kind == "list":
                extra["action"] = "append"
                extra["default"] = list(default) if default is not None else None
            if field.type is not None:
                extra["type"] = field.type
            if option.metavar is not None:
                extra["metavar"] = option.metavar
            if option.choices is not None:
                extra["choices"] = list(option.choices)
        parser.add_argument(*option.flags, **extra)
    return names


def values_from_args(cls: type, args: argparse.Namespace, **chosen: Any) -> dict[str, Any]:
    """The fields the parsed arguments choose: every declared option the command has (an
    absent one, None, leaves the field's default), then `chosen` (what the command decides
    itself)."""
    values: dict[str, Any] = {}
    for name, field in declared(cls).items():
        dest = field.option.dest
        if name in chosen or not hasattr(args, dest):
            continue
        value = getattr(args, dest)
        if value is None:
            continue
        if field.option.to_field is not None:
            value = field.option.to_field(value, values)
        elif field.kind == "list":
            value = tuple(value)
        values[name] = value
    return {**values, **chosen}


def from_args(cls: type[_T], args: argparse.Namespace, **chosen: Any) -> _T:
    """One `cls` from the parsed arguments (see values_from_args)."""
    return cls(**values_from_args(cls, args, **chosen))


def comma_separated(text: str, _chosen: Mapping[str, Any]) -> tuple[str, ...]:
    """A `to_field` for "a,b, c": ("a", "b", "c") ("": none)."""
    return tuple(part.strip() for part in text.split(",") if part.strip())
