"""A call's arguments as the benchmark's agent logs them: the values its typed function got.

The benchmark's agent (`v3/lk_agent_tool.py`, on LiveKit agents) declares each tool as a
Python function with typed parameters and defaults (`bedrooms: int`, `quantity: int = 1`,
`mode: str = "driving"`). LiveKit validates the LLM's JSON arguments into those parameters
with pydantic, in its default (lax) mode, and the function logs what it received, every
parameter by name. So the benchmark's result files hold `{"bedrooms": 2}` where the LLM
wrote `"2"`, `{"quantity": 1}` where it left the quantity out, and no key the function does
not have; an argument pydantic cannot convert fails the call, which is then never logged.

Here the same from the tool's JSON schema (what the LLM was offered: its properties'
types and defaults), with pydantic in the same lax mode. A value that does not convert is
kept as the LLM wrote it: our MCP server validated the call the same way, so a call that
succeeded has none.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Union

from pydantic import TypeAdapter, ValidationError

_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float,
                               "boolean": bool, "null": type(None), "array": list,
                               "object": dict}


def python_type(schema: Any) -> Any:
    """The Python type a typed function would declare for a property's JSON schema."""
    if not isinstance(schema, Mapping):
        return Any
    declared = schema.get("type")
    if isinstance(declared, str):
        return _JSON_TYPES.get(declared, Any)
    if isinstance(declared, list) and declared:
        return _union([_JSON_TYPES.get(t, Any) if isinstance(t, str) else Any
                       for t in declared])
    choices = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(choices, list) and choices:
        return _union([python_type(choice) for choice in choices])
    return Any


def _union(types: list[Any]) -> Any:
    if Any in types:
        return Any
    return types[0] if len(types) == 1 else Union[tuple(types)]  # noqa: UP007 - built


@lru_cache(maxsize=256)
def _adapter(schema_json: str) -> TypeAdapter[Any]:
    return TypeAdapter(python_type(json.loads(schema_json)))


def _converted(value: Any, schema: Any) -> Any:
    try:
        return _adapter(json.dumps(schema, sort_keys=True)).validate_python(value)
    except (ValidationError, TypeError, ValueError):  # kept as written (see the docstring)
        return value


def typed_arguments(arguments: Mapping[str, Any], schema: Mapping[str, Any] | None
                    ) -> dict[str, Any]:
    """`arguments` as the benchmark's typed function receives them: each of the schema's
    properties converted to its type, or its default when the LLM left it out; keys the
    schema does not know are dropped. Without a schema (or properties), as given."""
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(properties, Mapping) or not properties:
        return dict(arguments)
    typed: dict[str, Any] = {}
    for name, property_schema in properties.items():
        if name in arguments:
            typed[name] = _converted(arguments[name], property_schema)
        elif isinstance(property_schema, Mapping) and "default" in property_schema:
            typed[name] = property_schema["default"]
    return typed
