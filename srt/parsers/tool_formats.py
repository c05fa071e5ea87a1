"""How each model family writes tool calls, as the places where the call section and its items
begin and end. The streaming engine (tool_call_parser.py) does the rest, the same for all.

Every step answers with an index into the text, or one of WAIT (the text stops before the answer
is known), END (the call section is over) and BROKEN (the text is not this format).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from sglang.srt.parsers.json_scan import skip_ws

WAIT: Optional[int] = None
END = -1
BROKEN = -2

Step = Optional[int]


def _expect(text: str, i: int, token: str) -> Step:
    """i past `token` if the text there is token; WAIT if it is a cut-off start of it; else BROKEN."""
    if text.startswith(token, i):
        return i + len(token)
    rest = text[i:]
    return WAIT if token.startswith(rest) else BROKEN


def _object_at(text: str, i: int) -> Step:
    i = skip_ws(text, i)
    if i >= len(text):
        return WAIT
    return i if text[i] == "{" else BROKEN


class ToolFormat:
    name: str = ""
    # Text that opens the call section wherever it appears in the output.
    markers: Tuple[str, ...] = ()
    # A character that opens it only as the first non-space character of the output.
    bare_start: Optional[str] = None

    def open_section(self, text: str, start: int) -> Step:
        """start is where the marker (or bare start) is: the index where the first item's prefix begins."""
        for m in self.markers:
            if text.startswith(m, start):
                return start + len(m)
        return start

    def before_item(self, text: str, i: int, first: bool) -> Step:
        """The index of the item's '{'."""
        raise NotImplementedError

    def after_item(self, text: str, i: int) -> Step:
        """i is just past the item's '}': the index where the next item's prefix begins."""
        return i


class HermesFormat(ToolFormat):
    """Qwen 2.5 / Qwen3 / Hermes: <tool_call>{"name": ..., "arguments": {...}}</tool_call>, repeated."""

    name = "qwen"
    markers = ("<tool_call>",)

    def open_section(self, text: str, start: int) -> Step:
        return start  # each item carries its own opening tag

    def before_item(self, text: str, i: int, first: bool) -> Step:
        j = skip_ws(text, i)
        if j >= len(text):
            return WAIT
        k = _expect(text, j, "<tool_call>")
        if k == BROKEN:
            return END  # other text after the calls: the section is over
        return WAIT if k is None else _object_at(text, k)

    def after_item(self, text: str, i: int) -> Step:
        j = skip_ws(text, i)
        if j >= len(text):
            return WAIT
        k = _expect(text, j, "</tool_call>")
        # A missing closing tag costs nothing: the object itself was complete.
        return j if k == BROKEN else k


class Llama3JsonFormat(ToolFormat):
    """Llama 3.1-3.3: {"name": ..., "parameters": {...}}, after <|python_tag|> or as the whole
    answer, several separated by ';'."""

    name = "llama3"
    markers = ("<|python_tag|>",)
    bare_start = "{"

    def before_item(self, text: str, i: int, first: bool) -> Step:
        if first:
            return _object_at(text, i)
        j = skip_ws(text, i)
        if j >= len(text):
            return WAIT
        if text[j] != ";":
            return END
        return _object_at(text, j + 1)


class JsonArrayFormat(ToolFormat):
    """A JSON array of call objects: what a constrained tool_choice produces."""

    name = "json_array"
    bare_start = "["

    def open_section(self, text: str, start: int) -> Step:
        i = skip_ws(text, super().open_section(text, start))
        if i >= len(text):
            return WAIT
        return i + 1 if text[i] == "[" else BROKEN

    def before_item(self, text: str, i: int, first: bool) -> Step:
        j = skip_ws(text, i)
        if j >= len(text):
            return WAIT
        if text[j] == "]":
            return END
        if first:
            return j if text[j] == "{" else BROKEN
        return _object_at(text, j + 1) if text[j] == "," else BROKEN


class MistralFormat(JsonArrayFormat):
    """Mistral: [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]."""

    name = "mistral"
    markers = ("[TOOL_CALLS]",)


FORMATS: Dict[str, ToolFormat] = {
    f.name: f for f in (HermesFormat(), Llama3JsonFormat(), MistralFormat(), JsonArrayFormat())
}
# SGLang's names for the same formats.
ALIASES = {"qwen25": "qwen", "qwen3": "qwen", "hermes": "qwen", "llama32": "llama3"}
# What --tool-call-parser accepts.
PARSER_CHOICES = ["auto", "qwen", "qwen25", "hermes", "llama3", "mistral"]


def format_for_template(chat_template: Optional[str]) -> ToolFormat:
    """The format a chat template teaches its model. A template that shows no tool syntax gets the
    Hermes format, which is also what the server's own tool prompt asks for (chat_template.py)."""
    t = chat_template or ""
    if "[TOOL_CALLS]" in t:
        return FORMATS["mistral"]
    if "<tool_call>" in t:
        return FORMATS["qwen"]
    if "<|python_tag|>" in t or "ipython" in t:
        return FORMATS["llama3"]
    return FORMATS["qwen"]


def resolve_format(parser: Optional[str], chat_template: Optional[str]) -> ToolFormat:
    if parser in (None, "auto"):
        return format_for_template(chat_template)
    return FORMATS[ALIASES.get(parser, parser)]
