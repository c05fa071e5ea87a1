"""Extents of JSON values inside model output that may still be growing.

A streaming parser must tell "this value is complete" from "the text stops inside it" without a
full JSON parser: values are delimited by bracket depth outside strings, strings by an unescaped
quote, and bare scalars (numbers, true, false, null) by the first delimiter after them. Every
function returns None for "not decided yet: wait for more text".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

_WS = " \t\r\n"
_SCALAR_END = _WS + ",]}"


def skip_ws(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _WS:
        i += 1
    return i


def string_end(text: str, i: int) -> Optional[int]:
    """text[i] is a quote: the index just past the closing quote."""
    j, n = i + 1, len(text)
    while j < n:
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == '"':
            return j + 1
        j += 1
    return None


def value_end(text: str, i: int) -> Optional[int]:
    """The index just past the JSON value that starts at text[i]."""
    if i >= len(text):
        return None
    c = text[i]
    if c == '"':
        return string_end(text, i)
    if c in "{[":
        return _container_end(text, i)
    j = i
    while j < len(text) and text[j] not in _SCALAR_END:
        j += 1
    # A number at the very end of the text may still gain digits.
    return j if j < len(text) else None


def _container_end(text: str, i: int) -> Optional[int]:
    depth, j, n = 0, i, len(text)
    while j < n:
        c = text[j]
        if c == '"':
            end = string_end(text, j)
            if end is None:
                return None
            j = end
            continue
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return None


@dataclass
class ObjectScan:
    """The members of a (possibly unfinished) JSON object.

    members: key -> (value start, value end or None while the value is still growing).
    first_key: the first complete key, which tells early whether the object is a call at all.
    end: the index just past the closing brace, None while the object is open.
    broken: the text is not JSON where it should be; the object can never complete.
    """

    members: Dict[str, Tuple[int, Optional[int]]] = field(default_factory=dict)
    first_key: Optional[str] = None
    end: Optional[int] = None
    broken: bool = False


def scan_object(text: str, i: int) -> ObjectScan:
    """text[i] is '{': its members as far as the text goes."""
    out = ObjectScan()
    j = skip_ws(text, i + 1)
    while j < len(text):
        if text[j] == "}":
            out.end = j + 1
            return out
        if text[j] != '"':
            out.broken = True
            return out
        key_end = string_end(text, j)
        if key_end is None:
            return out
        key = _load_string(text[j:key_end])
        if key is None:
            out.broken = True
            return out
        if out.first_key is None:
            out.first_key = key
        j = skip_ws(text, key_end)
        if j >= len(text):
            return out
        if text[j] != ":":
            out.broken = True
            return out
        start = skip_ws(text, j + 1)
        if start >= len(text):
            return out
        end = value_end(text, start)
        out.members[key] = (start, end)
        if end is None:
            return out
        j = skip_ws(text, end)
        if j < len(text) and text[j] == ",":
            j = skip_ws(text, j + 1)
        elif j < len(text) and text[j] != "}":
            out.broken = True
            return out
    return out


def _load_string(literal: str) -> Optional[str]:
    try:
        value = json.loads(literal)
    except ValueError:
        return None
    return value if isinstance(value, str) else None
