"""Tool calls out of model text, whole or as it streams.

One engine serves every format (tool_formats.py) and both modes: the non-stream answer is the
stream fed once with final=True, so the two can never disagree about what is a call. The engine
keeps the text so far and re-reads only the item still being written; what it has sent is never
taken back, which is why content stops at the call section's first marker, a cut-off marker at
the end of the text is held back, and a call is announced only once its name is complete.

A section that begins with a bare '{' or '[' (no marker) is only a guess; if its first object is
not a call (its first key is not name / arguments / parameters), the guess is dropped and the
text is content. A call naming a function the request did not offer is dropped.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

from sglang.srt.parsers.json_scan import ObjectScan, scan_object, skip_ws
from sglang.srt.parsers.partial_tag import cut_tag_len
from sglang.srt.parsers.tool_formats import BROKEN, END, ToolFormat

_NAME_KEYS = ("name",)
_ARGS_KEYS = ("arguments", "parameters")
_CALL_KEYS = _NAME_KEYS + _ARGS_KEYS


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class ToolCall:
    """A finished call: arguments are the JSON text of an object, as OpenAI sends them."""

    index: int
    id: str
    name: str
    arguments: str


@dataclass
class CallDelta:
    """One streamed piece of a call: the first carries id and name, later ones argument text."""

    index: int
    id: Optional[str] = None
    name: Optional[str] = None
    arguments: str = ""


@dataclass
class ParseUpdate:
    content: str = ""
    calls: List[CallDelta] = field(default_factory=list)


@dataclass
class _Call:
    index: int = -1  # OpenAI index, assigned when announced; -1 while unnamed or dropped
    id: str = field(default_factory=new_call_id)
    name: Optional[str] = None
    args: str = ""  # argument text seen so far
    args_sent: int = 0
    complete: bool = False
    dropped: bool = False


class ToolCallStream:
    def __init__(
        self, fmt: ToolFormat, allowed_names: Optional[Sequence[str]] = None, max_calls: int = 0
    ):
        self.fmt = fmt
        self.allowed = set(allowed_names) if allowed_names is not None else None
        self.max_calls = max_calls  # 0: no limit (parallel_tool_calls)
        self.text = ""
        self.section: Optional[int] = None  # where the call section starts
        self.bare_rejected = False
        self.pos: Optional[int] = None  # where the next item's prefix begins
        self.section_over = False
        self._item_closed = False  # pos is just past an item whose closing text is unread
        self.calls: List[_Call] = []
        self.content_sent = 0  # characters of text[0:...] sent as content
        self.announced = 0
        self._search_from = 0  # markers cannot start before this (the text before was searched)

    # ------------------------------------------------------------------ public
    def feed(self, delta: str, final: bool = False) -> ParseUpdate:
        self.text += delta
        if self.section is None:
            self._find_section()
        if self.section is not None and not self.section_over:
            self._read_items(final)
        out = ParseUpdate(content=self._new_content(final))
        out.calls = self._call_deltas()
        if final and self.announced == 0 and self.section is not None:
            # Nothing in the section was a call: it was content after all.
            out.content += self.text[self.content_sent :]
            self.content_sent = len(self.text)
        return out

    def finished_calls(self) -> List[ToolCall]:
        """The complete, well-formed calls (after the last feed), with normalized arguments."""
        out = []
        for c in self.calls:
            if c.index < 0 or not c.complete:
                continue
            try:
                args = json.loads(c.args)
            except ValueError:
                continue
            if isinstance(args, str):  # arguments written as a JSON string holding the object
                try:
                    args = json.loads(args)
                except ValueError:
                    continue
            if not isinstance(args, dict):
                continue
            out.append(ToolCall(len(out), c.id, c.name or "", json.dumps(args, ensure_ascii=False)))
        return out

    # ------------------------------------------------------------------ section
    def _find_section(self) -> None:
        text = self.text
        fmt = self.fmt
        hits = [i for i in (text.find(m, self._search_from) for m in fmt.markers) if i >= 0]
        if hits:
            self._open(min(hits))
            return
        if fmt.markers:
            longest = max(len(m) for m in fmt.markers)
            self._search_from = max(0, len(text) - longest + 1)
        if fmt.bare_start and not self.bare_rejected:
            i = skip_ws(text, 0)
            # "[" may yet become "[TOOL_CALLS]": only a start that no marker begins with is bare.
            head = text[i:]
            if head[:1] == fmt.bare_start and not any(m.startswith(head) for m in fmt.markers):
                self._open(i)

    def _open(self, start: int) -> None:
        self.section = start
        self.pos = None

    def _reject_bare(self) -> None:
        self.section, self.pos, self.bare_rejected = None, None, True
        self._search_from = 0
        self._find_section()

    def _is_bare(self) -> bool:
        return not any(self.text.startswith(m, self.section) for m in self.fmt.markers)

    # ------------------------------------------------------------------ items
    def _read_items(self, final: bool) -> None:
        text, fmt = self.text, self.fmt
        if self.pos is None:
            p = fmt.open_section(text, self.section)
            if p is None:
                return
            if p == BROKEN:
                self._broken()
                return
            self.pos = p
        while not self.section_over:
            if self._item_closed:
                after = fmt.after_item(text, self.pos)
                if after is None:
                    return
                self.pos, self._item_closed = after, False
            done = sum(1 for c in self.calls if c.complete)
            start = fmt.before_item(text, self.pos, first=done == 0)
            if start is None:
                return
            if start in (END, BROKEN):
                if start == BROKEN and done == 0:
                    self._broken()
                self.section_over = True
                return
            scan = scan_object(text, start)
            if not self._update_call(done, scan, start):
                return
            self.pos, self._item_closed = scan.end, True
            if self.max_calls and done + 1 >= self.max_calls:
                self.section_over = True

    def _broken(self) -> None:
        if self._is_bare() and not any(c.index >= 0 for c in self.calls):
            self._reject_bare()
        else:
            self.section_over = True

    def _update_call(self, k: int, scan: ObjectScan, start: int) -> bool:
        """Fold the scan of item k into its call; returns whether the item is complete."""
        if scan.first_key is not None and scan.first_key not in _CALL_KEYS:
            if k == 0 and self._is_bare():
                self._reject_bare()
            else:
                self.section_over = True
            return False
        if scan.broken:
            self.section_over = True
            return False
        if k == len(self.calls):
            self.calls.append(_Call())
        call = self.calls[k]
        text = self.text
        name_span = next((scan.members[key] for key in _NAME_KEYS if key in scan.members), None)
        if call.name is None and name_span is not None and name_span[1] is not None:
            try:
                name = json.loads(text[name_span[0] : name_span[1]])
            except ValueError:
                name = None
            call.name = name if isinstance(name, str) else ""
            if self.allowed is not None and call.name not in self.allowed:
                call.dropped = True
        args_span = next((scan.members[key] for key in _ARGS_KEYS if key in scan.members), None)
        if args_span is not None:
            a, b = args_span
            if text[a] == '"':  # a JSON string holding the arguments: usable only once whole
                call.args = _unquote(text[a:b]) if b is not None else ""
            else:
                call.args = text[a : b if b is not None else len(text)]
        if scan.end is None:
            return False
        if args_span is None:
            call.args = "{}"
        call.complete = True
        return True

    # ------------------------------------------------------------------ output
    def _new_content(self, final: bool) -> str:
        if self.section is not None:
            end = self.section
            while end > self.content_sent and self.text[end - 1].isspace():
                end -= 1
        elif final:
            end = len(self.text)
        else:
            end = len(self.text) - self._held_back()
        if end <= self.content_sent:
            return ""
        piece = self.text[self.content_sent : end]
        self.content_sent = end
        return piece

    def _held_back(self) -> int:
        """Characters at the end that may be the start of a marker (or trailing space before one)."""
        text = self.text
        held = max((cut_tag_len(text, m) for m in self.fmt.markers), default=0)
        stripped = len(text) - held
        return len(text) - len(text[:stripped].rstrip())

    def _call_deltas(self) -> List[CallDelta]:
        out = []
        for c in self.calls:
            if c.dropped or c.name is None:
                continue
            if c.index < 0:
                c.index = self.announced
                self.announced += 1
                out.append(CallDelta(c.index, c.id, c.name, ""))
            if c.args_sent < len(c.args):
                out.append(CallDelta(c.index, arguments=c.args[c.args_sent :]))
                c.args_sent = len(c.args)
        return out


def _unquote(literal: str) -> str:
    try:
        value = json.loads(literal)
    except ValueError:
        return ""
    return value if isinstance(value, str) else ""


def parse_tool_calls(
    text: str, fmt: ToolFormat, allowed_names: Optional[Sequence[str]] = None, max_calls: int = 0
) -> "tuple[str, List[ToolCall]]":
    """Whole text -> (content, calls). Content is the text before the calls, or all of it if none."""
    stream = ToolCallStream(fmt, allowed_names, max_calls)
    update = stream.feed(text, final=True)
    calls = stream.finished_calls()
    if not calls:
        return text, []
    return update.content, calls
