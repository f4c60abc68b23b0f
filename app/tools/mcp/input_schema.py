"""Whether an MCP tool's input schema can be offered to an LLM.

A server lists each tool with a JSON Schema of its arguments; every LLM backend sends the
schemas of all offered tools in one request, and a client that checks them (the `ollama`
client does, with pydantic) refuses the whole request for one bad schema: one careless or
hostile server's tool would fail every turn, the built-in tools' and other servers' too.
So each tool's schema is checked when its server lists it (connection.py), and a tool
whose schema is unusable is left out, named with its server, while the rest are offered.

Usable: valid JSON Schema (against the metaschema its `$schema` names, else 2020-12, which
MCP specifies), an object at the root (`"type": "object"`, as MCP requires; a schema that
leaves the type out is read as one, as LLM APIs do), and each
property an object schema (JSON Schema allows `true`/`false` there; LLM APIs do not).
The reason quotes the schema only in a short, bounded phrase: the server's text is content.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

REASON_CHARS = 160


def input_schema_problem(schema: Any) -> str | None:
    """None when `schema` can be offered to an LLM, else why not (one short line)."""
    if not isinstance(schema, Mapping):
        return f"its input schema is a {type(schema).__name__}, not a JSON object"
    try:
        validator_for(schema, default=Draft202012Validator).check_schema(schema)
    except SchemaError as error:
        where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.path)
        return _bounded(f"its input schema is not valid JSON Schema: at {where or 'the root'}"
                        f", {error.message}")
    if schema.get("type", "object") != "object":  # absent: an object, as LLM APIs read it
        return "its input schema does not describe an object (\"type\": \"object\")"
    properties = schema.get("properties", {})
    for name, property_schema in properties.items():
        if not isinstance(property_schema, Mapping):
            return _bounded(f"its input schema's property {name!r} is not an object schema")
    return None


def _bounded(text: str) -> str:
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 1] + "…"
