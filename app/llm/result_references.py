"""References to an earlier tool call's result: `$RESULT_0.flights[0].flight_id`.

Full-Duplex-Bench v3 writes an argument that must come from an earlier call's answer this
way: `$RESULT_<n>` is the result of the n-th call, then `.key` and `[index]` steps walk
into it (results are JSON objects). The stand-in LLM resolves them against the results it
was handed (app/llm/ollama_standin.py), and the benchmark's scorer against the results the
run recorded (app/eval/fdb3/score.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

REFERENCE = re.compile(r"^\$RESULT_(\d+)((?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])*)$")
_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")
MISSING = object()  # what a reference that leads nowhere resolves to


def is_reference(value: object) -> bool:
    return isinstance(value, str) and value.startswith("$")


def parse_result(text: str) -> Any:
    """A tool's result as JSON when it is JSON, else the text itself."""
    try:
        return json.loads(text)
    except (ValueError, TypeError):
        return text


def resolve(reference: str, results: Sequence[Any]) -> Any:
    """The value `reference` names in `results` (the n-th is call n's, parsed), or MISSING
    (a malformed reference, a call that did not happen, a key or index not there)."""
    found = REFERENCE.match(reference.strip())
    if found is None:
        return MISSING
    index = int(found.group(1))
    if index >= len(results):
        return MISSING
    value: Any = results[index]
    for key, position in _STEP.findall(found.group(2)):
        if key:
            if not isinstance(value, dict) or key not in value:
                return MISSING
            value = value[key]
        else:
            if not isinstance(value, list) or int(position) >= len(value):
                return MISSING
            value = value[int(position)]
    return value


def resolve_arguments(arguments: dict[str, Any], results: Sequence[Any]) -> dict[str, Any]:
    """`arguments` with each resolvable reference replaced by its value (an unresolvable
    one is left as written)."""
    resolved = {}
    for key, value in arguments.items():
        if is_reference(value):
            found = resolve(value, results)
            resolved[key] = value if found is MISSING else found
        else:
            resolved[key] = value
    return resolved
