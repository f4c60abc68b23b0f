"""Where the desktop saves each per-conversation option (app/conversation/saved_settings.py):
every saved setting reaches the conversation, or is listed as the desktop's own with why,
and every `saved_as` names a saved setting of the field's type."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import pytest

from app.conversation.config import ConversationConfig
from app.conversation.saved_settings import NOT_A_CONVERSATIONS, declared_saved, saved_as
from app.settings.schema import AppSettings, EngineSettings, LlmSettings

# Saved settings some setting only matters beside: a token only for the server mode, the
# server's recogniser only with an LLM side. A saved setting reaches the conversation when
# changing it changes the conversation from at least one of these.
_STARTING_POINTS = (
    AppSettings(),  # a first start: the speech model here, Ollama
    AppSettings(engine=EngineSettings(mode="server")),  # the speech model on a server
    AppSettings(llm=LlmSettings(backend="none", tools_enabled=False)),  # no LLM side
)


def _groups() -> dict[str, type]:
    """AppSettings' groups: attribute → its dataclass (`version` is no group)."""
    hints = typing.get_type_hints(AppSettings)
    return {f.name: hints[f.name] for f in dataclasses.fields(AppSettings)
            if dataclasses.is_dataclass(hints[f.name])}


def _saved_settings() -> list[str]:
    """Every saved setting of a group, as "group.field"."""
    return [f"{group}.{f.name}" for group, cls in _groups().items()
            for f in dataclasses.fields(cls)]


def _hint(path: str) -> Any:
    group, name = path.split(".")
    return typing.get_type_hints(_groups()[group])[name]


def _another_value(value: Any, hint: Any) -> Any:
    """A value of `hint` other than `value`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return next(choice for choice in args if choice != value)
    if origin in (typing.Union, types.UnionType):  # `X | None`
        return next(arg for arg in args if arg is not type(None))() if value is None else None
    if origin is tuple:
        item = args[0]
        return (*value, item() if dataclasses.is_dataclass(item) else f"{item.__name__}-new")
    if hint is bool:
        return not value
    if hint is float or hint is int:
        return value + 1
    if hint is str:
        return f"{value}-changed"
    raise AssertionError(f"teach _another_value a saved setting of type {hint}")


def _changed(settings: AppSettings, path: str) -> AppSettings:
    group, name = path.split(".")
    saved_group = getattr(settings, group)
    new_value = _another_value(getattr(saved_group, name), _hint(path))
    return dataclasses.replace(settings, **{group: dataclasses.replace(
        saved_group, **{name: new_value})})


def _reaches_the_conversation(path: str) -> bool:
    return any(ConversationConfig.from_settings(_changed(settings, path))
               != ConversationConfig.from_settings(settings) for settings in _STARTING_POINTS)


@pytest.mark.parametrize("path", _saved_settings())
def test_every_saved_setting_reaches_the_conversation_or_says_why_not(path):
    if path in NOT_A_CONVERSATIONS:
        assert not _reaches_the_conversation(path), (
            f"{path} reaches the conversation: it is no longer only the desktop's, take it "
            "out of NOT_A_CONVERSATIONS (app/conversation/saved_settings.py)")
    else:
        assert _reaches_the_conversation(path), (
            f"the saved setting {path} changes nothing in the conversation: declare "
            f"saved_as({path!r}) on its ConversationConfig field, derive it in "
            "from_settings, or list it in NOT_A_CONVERSATIONS with why")


def test_the_desktops_own_settings_are_saved_ones_each_with_a_reason():
    assert set(NOT_A_CONVERSATIONS) <= set(_saved_settings())
    assert all(reason.strip() for reason in NOT_A_CONVERSATIONS.values())


def _fits(value: Any, hint: Any) -> bool:
    """Does `value` belong to `hint` (the few kinds a ConversationConfig field has)?"""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if origin is tuple:
        return isinstance(value, tuple) and all(_fits(item, args[0]) for item in value)
    if hint is type(None):
        return value is None
    return isinstance(value, hint) and (hint is bool or not isinstance(value, bool))


@pytest.mark.parametrize("name", list(declared_saved(ConversationConfig)))
def test_a_declared_saved_setting_exists_and_fits_the_field(name):
    saved = declared_saved(ConversationConfig)[name]
    assert saved.path in _saved_settings(), f"{name}: saved_as({saved.path!r}) is no setting"
    field_hint = typing.get_type_hints(ConversationConfig)[name]
    saved_default = saved.read(AppSettings())
    another = saved.read(_changed(AppSettings(), saved.path))
    for value in (saved_default, another):
        assert _fits(value, field_hint), f"{name}: {saved.path} gives {value!r}"


def test_a_saved_setting_is_named_by_its_group_and_field():
    assert saved_as("llm.timeout_s")["saved"].path == "llm.timeout_s"
    for wrong in ("timeout_s", "llm.", ".timeout_s", "llm.timeout_s.x"):
        with pytest.raises(ValueError):
            saved_as(wrong)
