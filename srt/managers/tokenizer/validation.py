"""Every check of a request that needs no scheduler state, in one place (the HTTP process runs them
before anything is sent to the scheduler). Each raises ValueError with the message the client sees
as a 400. The scheduler keeps only what depends on its pools (see scheduler_input.py)."""

from __future__ import annotations

from typing import List

from sglang.srt.core.input_limits import InputLimits
from sglang.srt.core.sampling_params import SamplingParams


def check_top_logprobs_num(top: int, limit: int) -> None:
    if top > limit:
        raise ValueError(
            f"top_logprobs_num ({top}) is larger than this server allows ({limit}; see --max-top-logprobs-num)."
        )


def check_prompt_chars(text: str, limits: InputLimits, max_chars: int) -> None:
    """A prompt too long to fit even if every token were the vocabulary's longest is refused unread."""
    if len(text) > max_chars:
        raise ValueError(
            f"The input ({len(text)} characters) is longer than this server accepts: at most "
            f"{limits.max_req_input_len} prompt tokens, which no text over {max_chars} characters fits in."
        )


def check_input_ids(
    ids: List[int],
    limits: InputLimits,
    vocab_size: int,
    sp: SamplingParams,
    explicit_max_new_tokens: bool,
) -> None:
    n, ctx = len(ids), limits.context_len
    if n == 0:
        raise ValueError("The input is empty.")
    if n > limits.max_req_input_len:
        raise ValueError(limits.too_long_message(n))
    if explicit_max_new_tokens and n + sp.max_new_tokens > ctx:
        raise ValueError(
            f"Requested token count exceeds the model's maximum context length of {ctx} tokens. You "
            f"requested a total of {n + sp.max_new_tokens} tokens: {n} tokens from the input and "
            f"{sp.max_new_tokens} tokens for the completion. Please reduce the input or max_new_tokens."
        )
    if any(t < 0 or t >= vocab_size for t in ids):
        raise ValueError(f"Input token ids must be in [0, {vocab_size}).")


def check_logprob_start_len(return_logprob: bool, start: int, n: int) -> None:
    if return_logprob and start > n:
        raise ValueError(f"logprob_start_len ({start}) is greater than the input length ({n}).")
