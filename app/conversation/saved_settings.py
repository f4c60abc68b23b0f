"""Where the desktop app saves a per-conversation option, declared once on its
ConversationConfig field.

A field the Settings dialog saves carries `saved_as("llm.timeout_s")` in its metadata, beside
its `cli_option(...)`: the AppSettings group (`llm`) and that group's field (`timeout_s`),
whose saved default may differ from the command line's (the app asks Ollama, `run` no LLM).
`ConversationConfig.from_settings` reads every declared field with `saved_values`; it writes
by hand only what no one saved field gives (a value derived from several, or from another
kind of setting). A saved setting the conversation does not read at all is listed in
`NOT_A_CONVERSATIONS`, with why (tests/conversation/test_saved_settings.py fails for one that
is none of these: a setting that would do nothing).

Light to import, like options.py: no Qt, no torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.settings.schema import AppSettings

SAVED_KEY = "saved"  # the field metadata's key

# Saved settings that are the desktop's, not a conversation's ("group.field" → why): the
# conversation's config never holds them, whoever uses them reads the settings directly.
NOT_A_CONVERSATIONS: dict[str, str] = {
    "audio.input_device": "the desktop's microphone: the live audio opens it (app/ui/app.py)",
    "audio.output_device": "the desktop's speakers: the live audio opens them (app/ui/app.py)",
    "audio.echo_mode": "the desktop's echo cancellation, switched on the live audio while a "
                       "conversation runs (session.py's apply_settings)",
    "engine.connect_timeout_s": "how long the desktop waits for the speech server: the "
                                "session hands it to connect_remote beside the config",
}


@dataclass(frozen=True)
class SavedAs:
    """Where one ConversationConfig field is saved: `AppSettings.<group>.<name>`."""

    group: str  # an AppSettings field holding a group: "speech", "audio", "llm", "engine"
    name: str  # that group's field
    # The saved value → the field's (None: as it is), e.g. `tuple` for a list kept as a tuple.
    convert: Callable[[Any], Any] | None = None

    @property
    def path(self) -> str:
        return f"{self.group}.{self.name}"

    def read(self, settings: AppSettings) -> Any:
        value = getattr(getattr(settings, self.group), self.name)
        return value if self.convert is None else self.convert(value)


def saved_as(path: str, *, convert: Callable[[Any], Any] | None = None) -> dict[str, SavedAs]:
    """The field metadata declaring where the desktop saves the field: "group.field"."""
    group, _, name = path.partition(".")
    if not group or not name or "." in name:
        raise ValueError(f"saved_as wants 'group.field', not {path!r}")
    return {SAVED_KEY: SavedAs(group, name, convert)}


def declared_saved(cls: type) -> dict[str, SavedAs]:
    """Field name → where the desktop saves it, in the fields' order (the dataclass `cls`'s
    fields that declare it: ConversationConfig's)."""
    return {f.name: f.metadata[SAVED_KEY] for f in dataclasses.fields(cls)
            if SAVED_KEY in f.metadata}


def saved_values(cls: type, settings: AppSettings) -> dict[str, Any]:
    """Every field of `cls` that declares where it is saved, with its value in `settings`
    (the fields derived by hand are not here)."""
    return {name: saved.read(settings) for name, saved in declared_saved(cls).items()}
