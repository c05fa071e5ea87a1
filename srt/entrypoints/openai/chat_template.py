"""Chat messages -> prompt token ids, through the tokenizer's Jinja chat template.

`--chat-template` has already replaced tokenizer.chat_template when the server started, so the
tokenizer is the only place to look.
"""

from __future__ import annotations

from typing import Any, Dict, List

import jinja2

from sglang.srt.entrypoints.errors import ApiError
from sglang.srt.entrypoints.openai.protocol import ChatMessage


def render_chat_prompt(
    tokenizer: Any, messages: List[ChatMessage], check_chars: Any = None
) -> List[int]:
    """Token ids of the rendered conversation; check_chars(text) may refuse a text too long to fit."""
    if tokenizer is None:
        raise ApiError(
            400, "Chat completions need a tokenizer; this server runs with --skip-tokenizer-init."
        )
    if not getattr(tokenizer, "chat_template", None):
        raise ApiError(
            400, "This model has no chat template; start the server with --chat-template."
        )
    conversation = [_message_dict(m, i) for i, m in enumerate(messages)]
    try:
        text = tokenizer.apply_chat_template(
            conversation, tokenize=False, add_generation_prompt=True
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
    return tokenizer.encode(text, add_special_tokens=False)


def _message_dict(m: ChatMessage, i: int) -> Dict[str, Any]:
    if m.content is None:
        content = ""
    elif isinstance(m.content, str):
        content = m.content
    else:
        texts = []
        for part in m.content:
            if part.type != "text" or part.text is None:
                raise ApiError(
                    400,
                    f"messages[{i}]: only text content parts are supported, got {part.type!r}.",
                    "messages",
                )
            texts.append(part.text)
        content = "\n".join(texts)
    d: Dict[str, Any] = {"role": m.role, "content": content}
    if m.name is not None:
        d["name"] = m.name
    return d
