"""Building the configured grammar backend (shared by the scheduler and the HTTP-side validator)."""

from __future__ import annotations

from typing import Any, Optional, Sequence

# Unbounded whitespace lets a small model pad JSON forever; a little is enough for readable output.
DEFAULT_JSON_WHITESPACE = "[ \\n]{0,2}"


def make_grammar_backend(
    server_args: Any,
    tokenizer: Any,
    vocab_size: int,
    stop_token_ids: Optional[Sequence[int]] = None,
):
    from sglang.srt.constrained.xgrammar_backend import XGrammarBackend

    ws = server_args.constrained_json_whitespace_pattern
    if ws is None:
        ws = DEFAULT_JSON_WHITESPACE
    elif ws == "any":
        ws = None
    return XGrammarBackend(
        tokenizer, vocab_size, stop_token_ids=stop_token_ids, whitespace_pattern=ws
    )
