"""Settings on disk: one human-readable JSON file in the platformdirs config dir.

Loading never crashes and never loses a user's choices silently: a file that cannot be used
as-is (bad JSON, missing or wrongly-typed keys, another schema version) is first copied to a
timestamped backup, then every value that still checks out is kept, the rest come from the
defaults, and a notice for the user says what happened and where the backup is. A file that is
not valid JSON at all (one bad byte) is read member by member (salvage.py), so it too keeps
every setting on a line that can still be read. What the notice quotes from the file is
bounded (app/text_bounds.py): a 10 MB key name is named by its first characters.

The schema (`app.settings.schema`) is the only description of the keys: values are checked
against its type hints, so adding a field there needs nothing here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import tempfile
import types
import typing
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import platformdirs

from app.paths import APP_NAME
from app.settings.salvage import Salvage, decode_leniently, salvage
from app.settings.schema import SCHEMA_VERSION, AppSettings
from app.text_bounds import NOTICE_LIMIT, bounded

SETTINGS_FILE = "settings.json"
_MAX_LISTED_PROBLEMS = 6
_NAME_LIMIT = 60  # characters of a key name quoted in a notice
_PATH_LIMIT = 400  # characters of a file's path quoted in a notice
# A settings file is a few KB; one far larger is not a user's settings with a bad byte, and is
# not read setting by setting (that reading costs time with the number of broken lines).
_SALVAGE_LIMIT = 256 * 1024

# Schema migrations: MIGRATIONS[n] turns a version-n dict into a version-(n + 1) dict (rename
# or reshape keys there). Versions without a step just have their values checked as they are.
def _precision_from_dtype(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 1 -> 2: `speech.dtype` and `speech.quantize` became one `speech.precision`
    (8-bit weights when quantize was on, else the dtype's precision, else auto)."""
    speech = raw.get("speech")
    if not isinstance(speech, dict):
        return raw
    speech = dict(speech)
    dtype, quantize = speech.pop("dtype", None), speech.pop("quantize", None)
    precisions = {"float32": "fp32", "bfloat16": "bf16"}  # float16: auto picks bf16 or less
    if "precision" not in speech:
        speech["precision"] = "int8" if quantize is True else precisions.get(dtype, "auto")
    return {**raw, "speech": speech}


def _no_mcp_servers(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 2 -> 3: the MCP servers arrived (none until the user adds one)."""
    return raw if "mcp" in raw else {**raw, "mcp": {"servers": []}}


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    1: _precision_from_dtype, 2: _no_mcp_servers}


def config_dir() -> Path:
    """The folder that holds settings.json; `CONTEXTSPAN_CONFIG_DIR` overrides it so tests
    never touch a user's real settings."""
    override = os.environ.get("CONTEXTSPAN_CONFIG_DIR")
    if override:
        return Path(override)
    return Path(platformdirs.user_config_dir(APP_NAME, appauthor=False))


class SettingsStore:
    """Loads and saves `AppSettings` at one path (default: config_dir()/settings.json)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else config_dir() / SETTINGS_FILE

    # -- loading ---------------------------------------------------------------------------

    def load(self) -> tuple[AppSettings, str | None]:
        """The settings and a notice for the user (None when the file was fine or absent)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return AppSettings(), None
        except OSError as exc:
            return AppSettings(), (
                f"Could not read the settings file {self._shown_path()} ({_reason(exc)}). "
                "ContextSpan is using default settings for now; the file was left untouched."
            )

        try:
            # utf-8-sig: a byte-order mark (some editors write one) is not an error.
            raw = json.loads(data.decode("utf-8-sig"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return self._salvage(data, f"the file is not valid JSON ({bounded(str(exc))})")
        except RecursionError:
            return self._salvage(data, "the file is nested too deeply to read")
        except ValueError as exc:  # e.g. an integer longer than Python will convert
            return self._salvage(data, f"the file holds a value that cannot be read "
                                       f"({bounded(str(exc))})")
        if not isinstance(raw, dict):
            kind = type(raw).__name__
            problem = f"the file holds a JSON {kind}, not an object"
            return self._repair(data, AppSettings(), [problem])
        return self._checked(data, raw, _Problems())

    def _salvage(self, data: bytes, why: str) -> tuple[AppSettings, str | None]:
        """A file JSON cannot read: keep every setting that can still be read from it."""
        if len(data) > _SALVAGE_LIMIT:
            return self._repair(data, AppSettings(), [f"{why}, and at {len(data):,} bytes it "
                                                      "is too large to be read setting by "
                                                      "setting"])
        found = salvage(decode_leniently(data))
        raw = _with_unnamed_groups(found)
        groups = {f.name for f in dataclasses.fields(AppSettings)} - {"version"}
        if not raw.keys() & groups:  # nothing of the user's could be read
            return self._repair(data, AppSettings(), [why])
        where = []
        if found.skipped_lines:
            where.append(f"{_line_list(found.skipped_lines)} could not be read")
        if found.ended_early:
            where.append("the file ends before its last setting")
        kept = "every setting that could still be read was kept"
        problems = _Problems(other=[f"{why}: {kept}" + (f" ({'; '.join(where)})" if where
                                                         else "")])
        problems.other += _keep_whole_items(raw, found.cut_lists)
        return self._checked(data, raw, problems)

    def _checked(self, data: bytes, raw: dict[str, Any],
                 problems: _Problems) -> tuple[AppSettings, str | None]:
        """Settings from the file's object `raw`, each value checked against the schema."""
        version = raw.get("version")
        newer = False
        if not isinstance(version, int) or isinstance(version, bool):
            problems.other.append("it has no valid settings version")
        elif version > SCHEMA_VERSION:
            newer = True
            problems.other.append(
                f"it was written by a newer ContextSpan (settings version {version}; this one "
                f"knows version {SCHEMA_VERSION}), so only the settings this version knows "
                "were loaded"
            )
        elif version < SCHEMA_VERSION:
            for step in range(version, SCHEMA_VERSION):
                if step in MIGRATIONS:
                    raw = MIGRATIONS[step](raw)
            problems.other.append(
                f"it was upgraded from settings version {version} to {SCHEMA_VERSION}"
            )

        body = {key: value for key, value in raw.items() if key != "version"}
        settings = _from_dict(AppSettings, body, "", problems)
        settings = dataclasses.replace(settings, version=SCHEMA_VERSION)
        lines = problems.lines()
        if not lines:
            return settings, None
        # A newer app's file is kept as it is (that app may still be in use); the others are
        # rewritten with what survived, so the next start is clean.
        return self._repair(data, settings, lines, rewrite=not newer)

    def _repair(
        self, original: bytes, settings: AppSettings, problems: list[str], rewrite: bool = True
    ) -> tuple[AppSettings, str]:
        """Back up the original bytes, then (when asked) replace the file with `settings`."""
        listed = problems[:_MAX_LISTED_PROBLEMS]
        if len(problems) > len(listed):
            listed.append(f"and {len(problems) - len(listed)} more")
        what = "; ".join(listed)
        try:
            backup = self._backup(original)
        except OSError as exc:
            return settings, bounded(
                f"The settings file {self._shown_path()} had problems: {what}. It could not be "
                f"backed up ({_reason(exc)}), so it was left untouched; ContextSpan is using "
                "defaults for the settings it could not read.", NOTICE_LIMIT
            )
        notice = (
            f"The settings file {self._shown_path()} had problems: {what}. Settings that could "
            "not be read were reset to their defaults. The original file is kept at "
            f"{bounded(str(backup), _PATH_LIMIT)}."
        )
        if not rewrite:
            notice += " The file itself was left as it is until you save settings here."
        else:
            try:
                self.save(settings)
            except OSError as exc:
                notice += f" The repaired settings could not be written: {bounded(str(exc))}"
        # Each quote is bounded already; this bounds their number too.
        return settings, bounded(notice, NOTICE_LIMIT)

    def _shown_path(self) -> str:
        return bounded(str(self.path), _PATH_LIMIT)

    def _backup(self, original: bytes) -> Path:
        """Write `original` to settings.json.bak-YYYYmmdd-HHMMSS. An existing backup is never
        overwritten, and an identical one is reused so repeated loads do not pile up copies."""
        for existing in sorted(self.path.parent.glob(f"{self.path.name}.bak-*")):
            try:
                if existing.stat().st_size == len(original) and existing.read_bytes() == original:
                    return existing
            except OSError:
                continue
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        base = self.path.with_name(f"{self.path.name}.bak-{stamp}")
        candidate, n = base, 1
        while True:
            try:
                with open(candidate, "xb") as handle:  # "x": fails rather than overwrite
                    handle.write(original)
                return candidate
            except FileExistsError:
                candidate = base.with_name(f"{base.name}-{n}")
                n += 1

    # -- saving ----------------------------------------------------------------------------

    def save(self, settings: AppSettings) -> None:
        """Write atomically (temp file + os.replace): a crash mid-write leaves the old file.

        Raises OSError with a message that names the file and the reason.
        """
        text = json.dumps(to_dict(settings), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        folder = self.path.parent
        tmp_name: str | None = None
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{self.path.name}.", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp_name, self.path)
            tmp_name = None
        except OSError as exc:
            error = OSError(f"Could not save settings to {self.path}: {_reason(exc)}")
            error.errno = exc.errno
            raise error from exc
        finally:
            if tmp_name is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp_name)


def to_dict(settings: AppSettings) -> dict[str, Any]:
    """Plain JSON-ready data; tuples become lists."""
    return json.loads(json.dumps(dataclasses.asdict(settings)))


# -- checking values against the schema's type hints ------------------------------------------


class _Invalid(Exception):
    pass


@dataclasses.dataclass
class _Problems:
    """What was wrong with a file, most important first when listed."""

    other: list[str] = dataclasses.field(default_factory=list)
    missing: list[str] = dataclasses.field(default_factory=list)
    unknown: list[str] = dataclasses.field(default_factory=list)

    def lines(self) -> list[str]:
        lines = list(self.other)
        if self.missing:
            lines.append(f"{_names(self.missing)} missing (defaults used)")
        if self.unknown:
            lines.append(f"{_names(self.unknown)} unknown to this version (dropped)")
        return lines


def _names(keys: list[str], limit: int = 4) -> str:
    shown = ", ".join(f"'{bounded(k, _NAME_LIMIT)}'" for k in keys[:limit])
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    verb = "was" if len(keys) == 1 else "were"
    return f"{shown}{more} {verb}"


def _from_dict(cls: type, raw: dict[str, Any], prefix: str, problems: _Problems) -> Any:
    """An instance of dataclass `cls` from `raw`: valid values kept, the rest defaulted, and
    every missing, invalid or unknown key noted in `problems`."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if prefix == "" and f.name == "version":
            continue
        name = f"{prefix}{f.name}"
        if f.name not in raw:
            problems.missing.append(name)
            continue
        hint = hints[f.name]
        value = raw[f.name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):  # a group of settings
            if isinstance(value, dict):
                values[f.name] = _from_dict(hint, value, f"{name}.", problems)
            else:
                problems.other.append(f"'{bounded(name, _NAME_LIMIT)}' is not a group of "
                                  "settings")
            continue
        item = _item_dataclass(hint)
        if item is not None:  # a list of groups (the MCP servers): each item on its own
            values[f.name] = _items_from_list(item, value, name, problems)
            continue
        try:
            values[f.name] = _in_range(_check(value, hint), f.metadata.get("range"))
        except _Invalid as exc:
            problems.other.append(f"'{bounded(name, _NAME_LIMIT)}' had an invalid value "
                                  f"{_show(value)} ({exc})")
    known = {f.name for f in dataclasses.fields(cls)}
    problems.unknown += [f"{prefix}{key}" for key in raw if key not in known]
    return cls(**values)


def _item_dataclass(hint: Any) -> type | None:
    """The dataclass of a `tuple[SomeGroup, ...]` field, else None."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = args[0]
        if isinstance(item, type) and dataclasses.is_dataclass(item):
            return item
    return None


def _items_from_list(cls: type, value: Any, name: str, problems: _Problems) -> tuple:
    """Each item of a list of groups read as `_from_dict` reads a group: one bad value
    costs that value (defaulted, and said), never the other items. An item that is not an
    object at all is dropped, and said."""
    if not isinstance(value, list):
        problems.other.append(f"'{bounded(name, _NAME_LIMIT)}' had an invalid value "
                              f"{_show(value)} (expected a list)")
        return ()
    items = []
    for index, raw in enumerate(value):
        where = f"{name}[{index}]"
        if isinstance(raw, dict):
            items.append(_from_dict(cls, raw, f"{where}.", problems))
        else:
            problems.other.append(f"'{bounded(where, _NAME_LIMIT)}' is not a group of "
                                  "settings (dropped)")
    return tuple(items)


def _in_range(value: Any, bounds: tuple[float, float] | None) -> Any:
    """A number within the field's range (schema metadata), or _Invalid saying which."""
    if bounds is None or not isinstance(value, (int, float)) or isinstance(value, bool):
        return value
    low, high = bounds
    if not low <= value <= high:  # NaN fails this too
        raise _Invalid(f"expected a number from {low:g} to {high:g}")
    return value


def field_range(cls: type, name: str) -> tuple[float, float] | None:
    """The allowed range of a numeric setting (for the dialog and the command line)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.metadata.get("range")
    raise KeyError(name)


def _check(value: Any, hint: Any) -> Any:
    """`value` as the type `hint` wants, or _Invalid with what was expected."""
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        for option in typing.get_args(hint):
            try:
                return _check(value, option)
            except _Invalid:
                continue
        raise _Invalid("expected " + " or ".join(_describe(a) for a in typing.get_args(hint)))
    if origin is typing.Literal:
        options = typing.get_args(hint)
        if value in options and type(value) is type(options[0]):
            return value
        raise _Invalid(f"expected one of {', '.join(repr(o) for o in options)}")
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, list) or len(args) != 2 or args[1] is not Ellipsis:
            raise _Invalid(f"expected {_describe(hint)}")
        try:
            return tuple(_check(item, args[0]) for item in value)
        except _Invalid:
            raise _Invalid(f"expected {_describe(hint)}") from None
    if hint is type(None):
        if value is None:
            return None
        raise _Invalid("expected null")
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if abs(value) < 2**53:  # beyond this no setting means anything
                return value
            raise _Invalid("expected a reasonable whole number")
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if math.isfinite(value):
                return float(value)
            raise _Invalid("expected a finite number")
    elif hint is str:
        if isinstance(value, str):
            return value
    else:
        raise _Invalid(f"the schema type {hint!r} is not supported by the settings store")
    raise _Invalid(f"expected {_describe(hint)}")


def _describe(hint: Any) -> str:
    if hint is type(None):
        return "null"
    if typing.get_origin(hint) is tuple:
        return f"a list of {_describe(typing.get_args(hint)[0])}s"
    names = {bool: "true/false", int: "a whole number", float: "a number", str: "text"}
    return names.get(hint, str(hint))


def _show(value: Any, limit: int = 40) -> str:
    return bounded(json.dumps(value, ensure_ascii=False), limit)


def _line_list(lines: tuple[int, ...], limit: int = 5) -> str:
    shown = ", ".join(str(n) for n in lines[:limit])
    more = f" and {len(lines) - limit} more" if len(lines) > limit else ""
    return f"line{'s' if len(lines) > 1 else ''} {shown}{more}"


# A list of groups whose items stand alone: a cut one keeps the items read whole, and the
# notice names them and says what was lost: (path, what one item is, where to mend it).
_ITEM_LISTS: dict[tuple[str, ...], tuple[str, str]] = {
    ("mcp", "servers"): ("MCP server", "Settings → Tools"),
}


def _keep_whole_items(raw: dict[str, Any], cut: dict[tuple[str, ...], tuple[Any, ...]]
                      ) -> list[str]:
    """The whole items of a cut list of groups back into `raw` (the salvage leaves a list
    that lost an item out); returns what the notice says of each such list."""
    said = []
    for path, (one, mend) in _ITEM_LISTS.items():
        if path not in cut:
            continue
        whole = [item for item in cut[path] if isinstance(item, dict)]
        parent: Any = raw
        for name in path[:-1]:
            parent = parent.setdefault(name, {}) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            continue
        parent[path[-1]] = whole
        names = [f"'{bounded(str(item.get('name', '?')), _NAME_LIMIT)}'" for item in whole]
        kept = (f"{', '.join(names)} {'was' if len(names) == 1 else 'were'} kept"
                if names else f"no {one} could be read whole")
        said.append(f"the list of {one}s was cut or damaged: {kept}, the rest could not be "
                    f"read: add what is missing again in {mend} (the original file, kept as "
                    "named at the end, still has it)")
    return said


def _with_unnamed_groups(found: Salvage) -> dict[str, Any]:
    """The salvaged members, with each group whose name line was lost given back to the
    missing group of the schema that has all its keys."""
    raw = dict(found.data)
    hints = typing.get_type_hints(AppSettings)
    for group in found.unnamed_groups:
        for f in dataclasses.fields(AppSettings):
            hint = hints[f.name]
            if f.name in raw or not (isinstance(hint, type) and dataclasses.is_dataclass(hint)):
                continue
            if set(group) <= {g.name for g in dataclasses.fields(hint)}:
                raw[f.name] = group
                break
    return raw


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)
