"""Replace the whitespace a JSON grammar allows with a caller-chosen regex.

xgrammar's JSON converter allows any run of [ \\n\\r\\t] between tokens (or, with a count cap, a
fixed repetition); it has no option for an arbitrary whitespace pattern. A weak or adversarial
model can spin forever in unbounded whitespace, so servers want e.g. "[ ]?" or "" (compact).
We get that by editing xgrammar's printed EBNF: every `[ \\n\\r\\t]*` outside a string literal
becomes a reference to a rule compiled from the pattern. This relies on the printed form of
xgrammar 0.2.x; if that form changes the pattern simply stops matching and
`count_whitespace_sites` lets tests notice. Known limit: a schema "pattern" that itself compiles
to exactly that class with "*" (free whitespace inside a string value) is rewritten too.
"""

from __future__ import annotations

import re
from typing import Callable, List, Tuple

# How xgrammar 0.2.x prints "any whitespace" in JSON grammars (also inside the string lookahead):
# this character class followed by "*".
_WS_CLASS = r"[ \n\r\t]"
# Prefix for the pattern's rules so they cannot collide with the JSON grammar's own rule names.
_RULE_PREFIX = "json_ws_pattern_"
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _split_literals(ebnf: str) -> List[Tuple[bool, str]]:
    """Split EBNF text into (is_literal, text) pieces; literals are "..." strings and [...] classes."""
    pieces: List[Tuple[bool, str]] = []
    i, start, n = 0, 0, len(ebnf)
    while i < n:
        ch = ebnf[i]
        if ch in '"[':
            close = '"' if ch == '"' else "]"
            if i > start:
                pieces.append((False, ebnf[start:i]))
            j = i + 1
            while j < n and ebnf[j] != close:
                j += 2 if ebnf[j] == "\\" else 1
            pieces.append((True, ebnf[i : j + 1]))
            i = start = j + 1
        else:
            i += 1
    if start < n:
        pieces.append((False, ebnf[start:]))
    return pieces


def _prefixed_pattern_rules(pattern_ebnf: str) -> str:
    """Rename every rule of the pattern's grammar (identifiers outside literals) with _RULE_PREFIX."""
    out = []
    for is_literal, text in _split_literals(pattern_ebnf):
        out.append(text if is_literal else _IDENT.sub(lambda m: _RULE_PREFIX + m.group(0), text))
    return "".join(out)


def _replace_whitespace_sites(ebnf: str, replacement: str) -> Tuple[str, int]:
    pieces = _split_literals(ebnf)
    out: List[str] = []
    count = 0
    for k, (is_literal, text) in enumerate(pieces):
        nxt = pieces[k + 1] if k + 1 < len(pieces) else (True, "")
        if is_literal and text == _WS_CLASS and not nxt[0] and nxt[1].startswith("*"):
            out.append(replacement)
            pieces[k + 1] = (False, nxt[1][1:])  # the "*" belongs to the replaced site
            count += 1
        else:
            out.append(text)
    return "".join(out), count


def count_whitespace_sites(ebnf: str) -> int:
    """How many any-whitespace sites the printed JSON grammar has (0 if xgrammar's format changed)."""
    return _replace_whitespace_sites(ebnf, "")[1]


def rewrite_json_whitespace(ebnf: str, pattern: str, regex_to_ebnf: Callable[[str], str]) -> str:
    """Return ebnf with every any-whitespace site replaced by `pattern` ("" means no whitespace)."""
    if _RULE_PREFIX in ebnf:
        raise ValueError(f"JSON grammar already uses the reserved rule prefix {_RULE_PREFIX!r}")
    if pattern == "":
        return _replace_whitespace_sites(ebnf, '""')[0]
    rewritten, _ = _replace_whitespace_sites(ebnf, _RULE_PREFIX + "root")
    return rewritten + "\n" + _prefixed_pattern_rules(regex_to_ebnf(pattern))
