"""Splitting a model's thinking (<think> ... </think>) from its answer, whole or as it streams.

Qwen3 writes the opening tag itself; DeepSeek-R1's template (and Qwen3-Thinking's) already ends the
prompt with it, so the output starts inside the thinking. Either way the rule is read off the
prompt: a prompt that ends in the opening tag starts the output in reasoning. `deepseek-r1` and
`qwen3-thinking` start there regardless, as their models sometimes drop the tag.

Like the tool-call engine, the stream never takes back what it sent: a cut-off tag at the end of
the text is held until the next piece says what it is. An output that never closes its thinking
(it ran out of tokens) is all reasoning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from sglang.srt.parsers.partial_tag import cut_tag_len

THINK_START = "<think>"
THINK_END = "</think>"


@dataclass(frozen=True)
class ReasoningStyle:
    name: str
    starts_in_reasoning: bool
    start: str = THINK_START
    end: str = THINK_END


STYLES: Dict[str, ReasoningStyle] = {
    "deepseek-r1": ReasoningStyle("deepseek-r1", starts_in_reasoning=True),
    "qwen3": ReasoningStyle("qwen3", starts_in_reasoning=False),
    "qwen3-thinking": ReasoningStyle("qwen3-thinking", starts_in_reasoning=True),
}
PARSER_CHOICES = list(STYLES)


@dataclass
class ReasoningUpdate:
    reasoning: str = ""
    content: str = ""


def prompt_opens_reasoning(prompt_text: str, style: ReasoningStyle) -> bool:
    return prompt_text.rstrip().endswith(style.start)


class ReasoningStream:
    def __init__(self, style: ReasoningStyle, in_reasoning: bool = False):
        self.style = style
        # None: not yet known whether the output opens with the tag.
        self.state: Optional[str] = "reasoning" if in_reasoning else None
        self.buf = ""
        self.after_reasoning = False  # the answer's leading blank lines are the template's layout

    def feed(self, delta: str, final: bool = False) -> ReasoningUpdate:
        self.buf += delta
        out = ReasoningUpdate()
        if self.state is None:
            self._decide_start(final)
        if self.state == "reasoning":
            self._read_reasoning(out, final)
        if self.state == "content":
            if self.after_reasoning:
                self.buf = self.buf.lstrip()
                self.after_reasoning = not self.buf
            out.content += self.buf
            self.buf = ""
        return out

    def _decide_start(self, final: bool) -> None:
        head = self.buf.lstrip()
        if head.startswith(self.style.start):
            self.buf = head[len(self.style.start) :]
            self.state = "reasoning"
        elif not final and self.style.start.startswith(head):
            return  # empty, or a cut-off opening tag: wait
        else:
            self.state = "content"

    def _read_reasoning(self, out: ReasoningUpdate, final: bool) -> None:
        end = self.style.end
        i = self.buf.find(end)
        if i >= 0:
            out.reasoning += self.buf[:i]
            self.buf = self.buf[i + len(end) :]
            self.state = "content"
            self.after_reasoning = True
            return
        keep = 0 if final else cut_tag_len(self.buf, end)
        out.reasoning += self.buf[: len(self.buf) - keep]
        self.buf = self.buf[len(self.buf) - keep :]


def separate_reasoning(
    text: str, style: ReasoningStyle, in_reasoning: bool = False
) -> Tuple[str, str]:
    """Whole text -> (reasoning, content)."""
    update = ReasoningStream(style, in_reasoning).feed(text, final=True)
    return update.reasoning, update.content
