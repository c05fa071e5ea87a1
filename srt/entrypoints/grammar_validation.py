"""HTTP-side grammar check: compile (cached) before queueing, so a bad schema or regex is a 400."""

from __future__ import annotations

from typing import Optional

from sglang.srt.core.sampling_params import SamplingParams


def attach_grammar_validator(tm) -> None:
    sa = tm.server_args
    if sa.grammar_backend == "none" or tm.tokenizer is None:
        tm.grammar_validator = None
        return
    state = {}

    def validate(sp: SamplingParams) -> Optional[str]:
        from sglang.srt.constrained.base_grammar_backend import grammar_key

        if "manager" not in state:
            from sglang.srt.constrained.factory import make_grammar_backend
            from sglang.srt.constrained.grammar_manager import GrammarManager

            state["manager"] = GrammarManager(
                make_grammar_backend(sa, tm.tokenizer, tm.vocab_size), num_threads=1
            )
        key = grammar_key(sp)
        return None if key is None else state["manager"].validate(*key)

    tm.grammar_validator = validate
