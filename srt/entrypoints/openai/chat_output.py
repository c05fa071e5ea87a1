"""One chat choice's text -> reasoning_content, content and tool_calls, whole or streamed.

Reasoning comes off first (a <think> block precedes the answer), then tool calls are read from
the answer. The plan (ChatOutputPlan) is fixed per request when the prompt is built: which tool
format applies, which names may be called, whether the output starts inside a <think> block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

from sglang.srt.parsers.reasoning_parser import ReasoningStream, ReasoningStyle
from sglang.srt.parsers.tool_call_parser import CallDelta, ToolCall, ToolCallStream
from sglang.srt.parsers.tool_formats import ToolFormat


@dataclass(frozen=True)
class ChatOutputPlan:
    tool_format: Optional[ToolFormat] = None  # None: the answer is never read for calls
    tool_names: Sequence[str] = ()
    max_calls: int = 0  # 0: any number (parallel_tool_calls)
    reasoning: Optional[ReasoningStyle] = None  # None: thinking stays in content
    starts_in_reasoning: bool = False
    stream_reasoning: bool = True

    @property
    def plain(self) -> bool:
        return self.tool_format is None and self.reasoning is None


@dataclass
class ShapedDelta:
    reasoning: str = ""
    content: str = ""
    calls: List[CallDelta] = field(default_factory=list)

    def delta_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {}
        if self.reasoning:
            d["reasoning_content"] = self.reasoning
        if self.content:
            d["content"] = self.content
        if self.calls:
            d["tool_calls"] = [_call_delta_dict(c) for c in self.calls]
        return d


@dataclass
class ShapedMessage:
    content: Optional[str]
    reasoning: Optional[str]
    tool_calls: List[ToolCall]

    def message_dict(self) -> Dict[str, Any]:
        m: Dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning is not None:
            m["reasoning_content"] = self.reasoning
        if self.tool_calls:
            m["tool_calls"] = [
                {
                    "id": c.id,
                    "index": c.index,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.tool_calls
            ]
        return m


def _call_delta_dict(c: CallDelta) -> Dict[str, Any]:
    if c.name is not None:
        return {
            "index": c.index,
            "id": c.id,
            "type": "function",
            "function": {"name": c.name, "arguments": c.arguments},
        }
    return {"index": c.index, "function": {"arguments": c.arguments}}


class ChoiceShaper:
    """The stream of one choice. feed() takes the new text; the last call passes final=True."""

    def __init__(self, plan: ChatOutputPlan):
        self.plan = plan
        self.reasoning = (
            ReasoningStream(plan.reasoning, plan.starts_in_reasoning) if plan.reasoning else None
        )
        self.tools = (
            ToolCallStream(plan.tool_format, plan.tool_names, plan.max_calls)
            if plan.tool_format is not None
            else None
        )
        self.held_reasoning = ""  # stream_reasoning=False: sent in one piece when it ends
        self.reasoning_text = ""
        self.content_text = ""
        self.ids: List[int] = []

    def observe_ids(self, ids: Sequence[int]) -> None:
        self.ids.extend(ids)

    def reasoning_tokens(self, decode: Callable[[List[int]], str]) -> int:
        """Output tokens spent thinking, up to the one that completes the closing tag: the shortest
        prefix of the ids whose text holds the tag (a binary search, a few decodes)."""
        if self.reasoning is None:
            return 0
        if self.reasoning.state == "reasoning":
            return len(self.ids)  # never closed: all of it was thinking
        if not self.reasoning_text and not self.plan.starts_in_reasoning:
            return 0
        end = self.reasoning.style.end
        lo, hi = 1, len(self.ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if end in decode(self.ids[:mid]):
                hi = mid
            else:
                lo = mid + 1
        return min(lo, len(self.ids))

    def feed(self, text: str, final: bool = False) -> ShapedDelta:
        out = ShapedDelta()
        answer = text
        if self.reasoning is not None:
            r = self.reasoning.feed(text, final)
            self.reasoning_text += r.reasoning
            answer = r.content
            if self.plan.stream_reasoning:
                out.reasoning = r.reasoning
            else:
                self.held_reasoning += r.reasoning
                if final or self.reasoning.state == "content":
                    out.reasoning, self.held_reasoning = self.held_reasoning, ""
        if self.tools is not None:
            t = self.tools.feed(answer, final)
            out.content, out.calls = t.content, t.calls
        else:
            out.content = answer
        self.content_text += out.content
        return out

    def called(self) -> bool:
        return self.tools is not None and self.tools.announced > 0

    def message(self, text: str) -> ShapedMessage:
        """The whole text at once (non-stream)."""
        self.feed(text, final=True)
        calls = self.tools.finished_calls() if self.tools is not None else []
        content: Optional[str] = self.content_text
        if self.tools is not None and not calls:
            # Nothing was a well-formed call: the answer is the text as written.
            content = self.tools.text
        if calls and not content:
            content = None  # OpenAI: a message that only calls tools has null content
        reasoning = self.reasoning_text or None  # no <think> block: null, as SGLang answers
        return ShapedMessage(content, reasoning, calls)


def shaped_finish_reason(finish: Optional[str], called: bool) -> Optional[str]:
    """A turn that ended by itself after calling tools finishes with "tool_calls"."""
    return "tool_calls" if called and finish == "stop" else finish
