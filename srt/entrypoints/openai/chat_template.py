"""Chat messages (and tools) -> prompt token ids, through the tokenizer's Jinja chat template.

`--chat-template` has already replaced tokenizer.chat_template when the server started, so the
tokenizer is the only place to look.

Tools reach the template as the `tools` variable, and earlier calls as each assistant message's
`tool_calls` (arguments as objects, which is what templates `tojson`). A template that never reads
`tools` (one written for a model without tool training) would drop them silently, so the server
describes them in the system message instead, in the Hermes <tool_call> format; likewise earlier
calls become <tool_call> text in a template that never reads `tool_calls`. Both are what the `auto`
tool-call parser expects from such a template.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import jinja2

from sglang.srt.entrypoints.errors import ApiError
from sglang.srt.entrypoints.openai.protocol import ChatMessage, Tool, ToolCallItem


@dataclass
class RenderedPrompt:
    text: str
    input_ids: List[int]


def template_text(tokenizer: Any) -> str:
    """The template source (all named variants of a multi-template tokenizer, joined)."""
    t = getattr(tokenizer, "chat_template", None)
    if isinstance(t, dict):
        return "\n".join(str(v) for v in t.values())
    return t or ""


def render_chat_prompt(
    tokenizer: Any,
    messages: List[ChatMessage],
    check_chars: Any = None,
    tools: Optional[List[Tool]] = None,
    template_kwargs: Optional[Dict[str, Any]] = None,
) -> RenderedPrompt:
    """The rendered conversation; check_chars(text) may refuse a text too long to fit."""
    if tokenizer is None:
        raise ApiError(
            400, "Chat completions need a tokenizer; this server runs with --skip-tokenizer-init."
        )
    source = template_text(tokenizer)
    if not source:
        raise ApiError(
            400, "This model has no chat template; start the server with --chat-template."
        )
    calls_as_text = "tool_calls" not in source
    conversation = [_message_dict(m, i, calls_as_text) for i, m in enumerate(messages)]
    tool_dicts = [t.model_dump(exclude_none=True) for t in tools] if tools else None
    if tool_dicts and "tools" not in source:
        conversation = _with_tool_prompt(conversation, tool_dicts)
        tool_dicts = None
    kwargs = dict(template_kwargs or {})
    for reserved in ("conversation", "tools", "tokenize", "add_generation_prompt"):
        if reserved in kwargs:
            raise ApiError(
                400, f"chat_template_kwargs cannot set {reserved!r}.", "chat_template_kwargs"
            )
    try:
        text = tokenizer.apply_chat_template(
            conversation, tools=tool_dicts, tokenize=False, add_generation_prompt=True, **kwargs
        )
    except (jinja2.TemplateError, ValueError, TypeError, KeyError, IndexError) as e:
        # Templates reject conversations they cannot express (e.g. roles out of order) by raising.
        raise ApiError(
            400, f"The chat template cannot render these messages: {e}", "messages"
        ) from None
    if check_chars is not None:
        check_chars(text)
    # The template writes every special token it wants (BOS included); letting the tokenizer add
    # its own would double them, which is also why HF tokenizes chat prompts this way.
    return RenderedPrompt(text, tokenizer.encode(text, add_special_tokens=False))


def _message_dict(m: ChatMessage, i: int, calls_as_text: bool) -> Dict[str, Any]:
    content = _content_text(m, i)
    d: Dict[str, Any] = {"role": m.role, "content": content}
    if m.name is not None:
        d["name"] = m.name
    if m.tool_call_id is not None:
        d["tool_call_id"] = m.tool_call_id
    if m.tool_calls:
        if calls_as_text:
            blocks = [_call_block(c) for c in m.tool_calls]
            d["content"] = "\n".join(([content] if content else []) + blocks)
        else:
            d["tool_calls"] = [_call_dict(c) for c in m.tool_calls]
    return d


def _content_text(m: ChatMessage, i: int) -> str:
    if m.content is None:
        return ""
    if isinstance(m.content, str):
        return m.content
    texts = []
    for part in m.content:
        if part.type != "text" or part.text is None:
            raise ApiError(
                400,
                f"messages[{i}]: only text content parts are supported, got {part.type!r}.",
                "messages",
            )
        texts.append(part.text)
    return "\n".join(texts)


def _arguments(c: ToolCallItem) -> Any:
    args = c.function.arguments
    if isinstance(args, str):
        try:
            return json.loads(args)
        except ValueError:
            return args  # not JSON: the template shows it as the client wrote it
    return args if args is not None else {}


def _call_dict(c: ToolCallItem) -> Dict[str, Any]:
    d: Dict[str, Any] = {
        "type": "function",
        "function": {"name": c.function.name, "arguments": _arguments(c)},
    }
    if c.id is not None:
        d["id"] = c.id
    return d


def _call_block(c: ToolCallItem) -> str:
    body = json.dumps({"name": c.function.name, "arguments": _arguments(c)}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


def tool_prompt(tools: List[Dict[str, Any]]) -> str:
    """How the server describes tools to a model whose template has no place for them."""
    lines = "\n".join(json.dumps(t.get("function", t), ensure_ascii=False) for t in tools)
    return (
        "You can call functions to help answer. Their signatures, one JSON object per line:\n"
        f"<tools>\n{lines}\n</tools>\n"
        "To call functions, reply with one block per call, each holding a JSON object with the "
        "function's name and its arguments:\n"
        '<tool_call>\n{"name": "function_name", "arguments": {"argument": "value"}}\n</tool_call>'
    )


def _with_tool_prompt(
    conversation: List[Dict[str, Any]], tools: List[Dict[str, Any]]
) -> List[Dict[str, Any]]:
    prompt = tool_prompt(tools)
    if conversation and conversation[0]["role"] in ("system", "developer"):
        first = dict(conversation[0])
        first["content"] = f"{first['content']}\n\n{prompt}" if first["content"] else prompt
        return [first] + conversation[1:]
    return [{"role": "system", "content": prompt}] + conversation
