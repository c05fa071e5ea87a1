"""The grammar interface the scheduler uses: one object per request, one backend per server.

Mask protocol (the scheduler's per-step sequence):
    mask = grammar.allocate_vocab_mask(vocab_size, batch_size, device)   # CPU, every row all-allowed
    for i, req in enumerate(batch): if req.grammar: req.grammar.fill_vocab_mask(mask, i)
    mask = type(grammar).move_vocab_mask(mask, device)
    type(grammar).apply_vocab_mask(logits, mask)                          # -inf where forbidden
    ...sample...; req.grammar.accept_token(token)
Rows that nobody fills stay all-allowed, and applying an all-allowed row writes nothing, so the
logits of unconstrained requests in a mixed batch are left untouched bit for bit.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

# The grammar kinds a request can ask for, in the order SamplingParams lists them.
GRAMMAR_KEY_TYPES: Tuple[str, ...] = ("json", "regex", "ebnf", "structural_tag")

# json_schema values that are not schemas: any JSON value (xgrammar's built-in JSON grammar), and
# any JSON object (what OpenAI response_format {"type": "json_object"} promises).
ANY_JSON = "$$ANY$$"
ANY_JSON_OBJECT = "$$ANY_OBJECT$$"


class GrammarCompileError(Exception):
    """A grammar the backend cannot compile; the message is meant for the client (HTTP 400)."""

    def __init__(self, key_type: str, detail: str):
        self.key_type = key_type
        self.detail = detail
        super().__init__(f"Invalid {key_type} grammar: {detail}")

    def __reduce__(self):  # picklable across processes despite the two-argument constructor
        return (GrammarCompileError, (self.key_type, self.detail))


class BaseGrammarObject:
    """Matcher state of one request over a compiled grammar."""

    def accept_token(self, token: int) -> bool:
        """Advance by one sampled token; False means the grammar rejected it (abort the request)."""
        raise NotImplementedError

    def is_terminated(self) -> bool:
        """True once the grammar has accepted a stop token: the request must finish."""
        raise NotImplementedError

    def rollback(self, num_tokens: int) -> None:
        """Undo the last num_tokens accept_token calls (speculative decoding tries drafts)."""
        raise NotImplementedError

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> torch.Tensor:
        """A CPU mask for the whole batch with every row all-allowed (see the module docstring)."""
        raise NotImplementedError

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        """Write this request's allowed next tokens into row idx (CPU work)."""
        raise NotImplementedError

    @staticmethod
    def move_vocab_mask(vocab_mask: torch.Tensor, device: Any) -> torch.Tensor:
        raise NotImplementedError

    @staticmethod
    def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
        """Set forbidden logits to -inf in place; logits is [batch_size, vocab_size]."""
        raise NotImplementedError

    def copy(self) -> "BaseGrammarObject":
        """A fresh matcher (initial state) over the same compiled grammar."""
        raise NotImplementedError


class BaseGrammarBackend:
    """Compiles grammar text into grammar objects; must be safe to call from worker threads."""

    def compile(self, key_type: str, key_string: str) -> BaseGrammarObject:
        """Compile; raise GrammarCompileError for a bad grammar (one that matches no text included) or an
        unknown key_type."""
        raise NotImplementedError


def grammar_key(sampling_params: Any) -> Optional[Tuple[str, str]]:
    """(key_type, key_string) of the grammar a request asks for, or None for a free request.

    SamplingParams.verify already rejects more than one grammar, so the first one set wins.
    """
    for key_type, attr in (
        ("json", "json_schema"),
        ("regex", "regex"),
        ("ebnf", "ebnf"),
        ("structural_tag", "structural_tag"),
    ):
        value = getattr(sampling_params, attr, None)
        if value is not None:
            return key_type, value
    return None
