"""xgrammar implementation of the grammar interface (bitmask masks: int32 words, bit set = allowed)."""

from __future__ import annotations

import json
import re
from typing import Any, Optional, Sequence

import torch
import xgrammar as xgr

from sglang.srt.constrained.base_grammar_backend import (
    ANY_JSON,
    ANY_JSON_OBJECT,
    GRAMMAR_KEY_TYPES,
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarCompileError,
)
from sglang.srt.constrained.json_whitespace import rewrite_json_whitespace

# xgrammar's C++ errors start with "[hh:mm:ss] /path/file.cc:123: "; clients need only the rest.
_LOG_PREFIX = re.compile(r"^\[\d{2}:\d{2}:\d{2}\] \S+:\d+: ")
# ...often followed by the failed C++ check's condition, which means nothing to a client.
_CHECK_PREFIX = re.compile(r"^Check failed: \(.*?\) is false: ")
_ALL_ALLOWED = -1  # an int32 word with all 32 bits set


def _clean_message(err: BaseException) -> str:
    msg = _CHECK_PREFIX.sub("", _LOG_PREFIX.sub("", str(err).strip()))
    return msg.strip() or type(err).__name__


def _stop_only_row(num_words: int, stop_token_ids: Sequence[int]) -> torch.Tensor:
    words = [0] * num_words
    for t in stop_token_ids:
        words[t // 32] |= 1 << (t % 32)
    # Bit 31 makes a word negative as int32.
    return torch.tensor(
        [w - (1 << 32) if w >= (1 << 31) else w for w in words], dtype=xgr.bitmask_dtype
    )


class XGrammarGrammar(BaseGrammarObject):
    def __init__(self, compiled: xgr.CompiledGrammar, stop_token_ids: Sequence[int]):
        self._compiled = compiled
        self._matcher = xgr.GrammarMatcher(compiled)
        self._stop_token_ids = list(stop_token_ids)
        self._vocab_size = compiled.tokenizer_info.vocab_size

    @property
    def compiled_grammar(self) -> xgr.CompiledGrammar:
        return self._compiled

    def accept_token(self, token: int) -> bool:
        # xgrammar rejects (returns False) out-of-range ids and tokens after termination itself.
        return bool(self._matcher.accept_token(int(token)))

    def is_terminated(self) -> bool:
        return bool(self._matcher.is_terminated())

    def rollback(self, num_tokens: int) -> None:
        if num_tokens > 0:
            self._matcher.rollback(num_tokens)

    def allows_a_first_token(self) -> bool:
        """Whether the fresh matcher allows any token (a grammar of the empty language allows none)."""
        mask = xgr.allocate_token_bitmask(1, self._vocab_size)
        xgr.GrammarMatcher(self._compiled).fill_next_token_bitmask(mask, 0)
        return bool(mask.any())

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> torch.Tensor:
        if vocab_size != self._vocab_size:
            # xgrammar fills rows of exactly ceil(vocab/32) words; the backend must be built with
            # the logits width, which is what makes padded vocabulary columns forbidden.
            raise ValueError(
                f"vocab mask for {vocab_size} tokens requested, but the grammar backend "
                f"was built for {self._vocab_size}"
            )
        # Pinned so the host-to-device copy can be asynchronous; a fresh tensor each step, so the
        # CPU never overwrites a buffer an in-flight copy still reads.
        pin = torch.device(device).type == "cuda" and torch.cuda.is_available()
        shape = xgr.get_bitmask_shape(batch_size, vocab_size)
        return torch.full(shape, _ALL_ALLOWED, dtype=xgr.bitmask_dtype, pin_memory=pin)

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        if self._matcher.is_terminated():
            # xgrammar refuses to fill after the stop token. The overlap loop may still build one
            # more mask for a finishing request; allow only stop tokens so the row is harmless.
            vocab_mask[idx] = _stop_only_row(vocab_mask.shape[1], self._stop_token_ids)
            return
        self._matcher.fill_next_token_bitmask(vocab_mask, idx)

    @staticmethod
    def move_vocab_mask(vocab_mask: torch.Tensor, device: Any) -> torch.Tensor:
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
        if logits.shape[0] != vocab_mask.shape[0] or vocab_mask.shape[1] * 32 < logits.shape[1]:
            # xgrammar would leave uncovered columns unmasked; that would let padded ids through.
            raise ValueError(
                f"vocab mask {tuple(vocab_mask.shape)} does not cover logits {tuple(logits.shape)}"
            )
        if vocab_mask.device != logits.device:
            vocab_mask = vocab_mask.to(logits.device, non_blocking=True)
        xgr.apply_token_bitmask_inplace(logits, vocab_mask, vocab_size=logits.shape[1])

    def copy(self) -> "XGrammarGrammar":
        return XGrammarGrammar(self._compiled, self._stop_token_ids)


class XGrammarBackend(BaseGrammarBackend):
    """Compiles json / regex / ebnf / structural_tag grammars for one tokenizer and vocab size.

    vocab_size is the model's logits width; ids at or past the tokenizer's length are never allowed.
    whitespace_pattern (regex, or "" for none) replaces the free whitespace xgrammar allows between
    JSON tokens; None keeps xgrammar's default (any run of spaces, tabs, newlines).
    """

    def __init__(
        self,
        tokenizer: Any,
        vocab_size: int,
        *,
        stop_token_ids: Optional[Sequence[int]] = None,
        whitespace_pattern: Optional[str] = None,
        compile_threads: int = 8,
    ):
        self._info = xgr.TokenizerInfo.from_huggingface(
            tokenizer,
            vocab_size=vocab_size,
            stop_token_ids=list(stop_token_ids) if stop_token_ids is not None else None,
        )
        self._compiler = xgr.GrammarCompiler(self._info, max_threads=compile_threads)
        self._stop_token_ids = list(self._info.stop_token_ids)
        self.vocab_size = vocab_size
        self.whitespace_pattern = whitespace_pattern
        if whitespace_pattern:
            try:
                xgr.Grammar.from_regex(whitespace_pattern)
            except Exception as e:  # noqa: BLE001 - a server misconfiguration: fail at startup, not per request
                raise ValueError(
                    f"Invalid JSON whitespace pattern {whitespace_pattern!r}: {_clean_message(e)}"
                ) from None

    @property
    def stop_token_ids(self) -> Sequence[int]:
        return tuple(self._stop_token_ids)

    def compile(self, key_type: str, key_string: str) -> XGrammarGrammar:
        if key_type not in GRAMMAR_KEY_TYPES:
            raise GrammarCompileError(
                key_type, f"unknown grammar type, expected one of {GRAMMAR_KEY_TYPES}"
            )
        try:
            compiled = self._compile(key_type, key_string)
        except GrammarCompileError:
            raise
        except Exception as e:  # noqa: BLE001 - xgrammar raises RuntimeError, ValueError, TypeError and its own types
            raise GrammarCompileError(key_type, _clean_message(e)) from None
        grammar = XGrammarGrammar(compiled, self._stop_token_ids)
        if not grammar.allows_a_first_token():
            raise GrammarCompileError(
                key_type, "it matches no text: no token is allowed at the start"
            )
        return grammar

    def _compile(self, key_type: str, key_string: str) -> xgr.CompiledGrammar:
        if key_type == "json":
            return self._compile_json(key_string)
        if key_type == "regex":
            return self._compiler.compile_regex(key_string)
        if key_type == "ebnf":
            return self._compiler.compile_grammar(key_string)
        return self._compiler.compile_structural_tag(_structural_tag_json(key_string))

    def _compile_json(self, schema: str) -> xgr.CompiledGrammar:
        if schema == ANY_JSON:
            grammar = xgr.Grammar.builtin_json_grammar()
        else:
            if schema == ANY_JSON_OBJECT:
                schema = '{"type": "object"}'  # xgrammar reads this as any object, any properties
            if self.whitespace_pattern is None:
                return self._compiler.compile_json_schema(schema)
            grammar = xgr.Grammar.from_json_schema(schema)
        if self.whitespace_pattern is not None:
            ebnf = rewrite_json_whitespace(
                str(grammar), self.whitespace_pattern, lambda p: str(xgr.Grammar.from_regex(p))
            )
            grammar = xgr.Grammar.from_ebnf(ebnf)
        return self._compiler.compile_grammar(grammar)


def _structural_tag_json(key_string: str) -> str:
    """Accept both xgrammar's current format and the legacy {structures, triggers} one.

    The legacy form ({"type": "structural_tag", "structures": [{begin, schema, end}], "triggers"})
    is what OpenAI-style clients of SGLang send; xgrammar 0.2 wants a "format" field.
    """
    try:
        obj = json.loads(key_string)
    except json.JSONDecodeError:
        return key_string  # let xgrammar report the JSON error in its own words
    if isinstance(obj, dict) and "format" not in obj and "structures" in obj:
        tags = [
            xgr.StructuralTagItem(begin=s["begin"], schema=s["schema"], end=s["end"])
            for s in obj["structures"]
        ]
        return xgr.StructuralTag.from_legacy_structural_tag(
            tags, list(obj.get("triggers", []))
        ).model_dump_json(indent=None)
    return key_string
