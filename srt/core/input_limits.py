"""How long a prompt this server takes, and the message that says why when one is too long.

The scheduler fixes the numbers at startup: a request may hold at most max_req_len tokens (one
less than both the model's context and the KV pool), and its prompt at most max_req_input_len of
them, so that at least a few output tokens fit after it.
"""

from __future__ import annotations

from dataclasses import dataclass

# Tokens kept free after the longest prompt, so that a request can always produce output.
OUTPUT_RESERVE = 5


@dataclass(frozen=True)
class InputLimits:
    context_len: int
    max_total_num_tokens: int
    max_req_input_len: int

    @staticmethod
    def compute(context_len: int, max_total_num_tokens: int) -> "InputLimits":
        max_req_len = min(context_len - 1, max_total_num_tokens - 1)
        return InputLimits(context_len, max_total_num_tokens, max_req_len - OUTPUT_RESERVE)

    def too_long_message(self, n: int) -> str:
        if self.max_total_num_tokens < self.context_len:
            why = f"the KV cache holds {self.max_total_num_tokens} tokens"
            kept = self.max_total_num_tokens - self.max_req_input_len
        else:
            why = f"the model's context length is {self.context_len} tokens"
            kept = self.context_len - self.max_req_input_len
        return (
            f"The input ({n} tokens) is longer than this server accepts: at most {self.max_req_input_len} "
            f"prompt tokens ({why}, of which {kept} are kept free for the output)."
        )
