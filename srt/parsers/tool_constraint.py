"""The JSON schema that makes a model call a tool: tool_choice `required` or a named function.

The output is constrained to a JSON array of {"name": ..., "parameters": {...}} objects, where
each name is fixed to one offered function and its parameters follow that function's own schema,
so even a model that has never seen a tool emits a call the client can run. The array form is what
JsonArrayFormat reads back.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

# OpenAI: a function without `parameters` takes none, so its arguments are the empty object.
_NO_ARGUMENTS: Dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


def _call_schema(name: str, parameters: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "name": {"type": "string", "enum": [name]},
            "parameters": parameters if parameters else _NO_ARGUMENTS,
        },
        "required": ["name", "parameters"],
        "additionalProperties": False,
    }


def tool_call_schema(
    tools: List[Tuple[str, Optional[Dict[str, Any]]]],
    only: Optional[str] = None,
    parallel: bool = True,
) -> Dict[str, Any]:
    """tools: (name, parameters schema) pairs; only: the named function of tool_choice, if any."""
    chosen = [t for t in tools if only is None or t[0] == only]
    items = [_call_schema(n, p) for n, p in chosen]
    schema: Dict[str, Any] = {
        "type": "array",
        "minItems": 1,
        "items": items[0] if len(items) == 1 else {"anyOf": items},
    }
    if only is not None or not parallel:
        schema["maxItems"] = 1
    return schema
