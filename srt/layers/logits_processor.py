"""From final hidden states to next-token logits (and prompt logprobs when asked for).

Only the last position of each request needs logits for sampling. Requests that asked for prompt
logprobs also need logits at their logprob positions; those are computed in bounded chunks because
[positions x vocab] can be large.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import torch

from sglang.srt.core.forward_batch_info import ForwardBatch

_LOGPROB_CHUNK = 1024


@dataclass
class LogitsProcessorOutput:
    next_token_logits: torch.Tensor  # [bs, vocab] model dtype (see _logits)
    input_token_logprobs: Optional[torch.Tensor] = None  # [num_lp_positions] float32
    input_top_logprobs_val: Optional[torch.Tensor] = None  # [num_lp_positions, max_k]
    input_top_logprobs_idx: Optional[torch.Tensor] = None
    hidden_states: Optional[torch.Tensor] = None  # [num_tokens, *] when ForwardBatch.capture_hidden


class LogitsProcessor:
    def __init__(self, vocab_size: int, logit_scale: float = 1.0):
        self.vocab_size = vocab_size
        self.logit_scale = logit_scale

    def __call__(
        self, hidden: torch.Tensor, lm_head, forward_batch: ForwardBatch
    ) -> LogitsProcessorOutput:
        mode = forward_batch.forward_mode
        if mode.is_decode():
            last = hidden
        else:
            last_idx = forward_batch.extend_start_loc + forward_batch.extend_seq_lens - 1
            last = hidden[last_idx]
        logits = self._logits(last, lm_head, keep_dtype=True)
        out = LogitsProcessorOutput(next_token_logits=logits)
        if (
            mode.is_extend()
            and forward_batch.return_logprob
            and forward_batch.extend_logprob_start_lens_cpu
        ):
            self._input_logprobs(hidden, lm_head, forward_batch, out)
        return out

    def _logits(self, h: torch.Tensor, lm_head, keep_dtype: bool = False) -> torch.Tensor:
        """float32 logits, or with keep_dtype the lm_head's own dtype: the next-token logits stay bf16
        so that plain greedy decode reads half the bytes and skips a [bs, vocab] float copy (24 us at
        batch 64 on an H200); the sampler widens them itself wherever it computes."""
        logits = lm_head.compute_logits(h)
        if self.logit_scale != 1.0:
            return logits.float() * self.logit_scale
        return logits if keep_dtype else logits.float()

    def _input_logprobs(
        self, hidden: torch.Tensor, lm_head, fb: ForwardBatch, out: LogitsProcessorOutput
    ) -> None:
        positions: List[int] = []
        start = 0
        lp_lens = fb.extend_logprob_lens_cpu or [0] * fb.batch_size
        for i, ext in enumerate(fb.extend_seq_lens_cpu):
            rel = fb.extend_logprob_start_lens_cpu[i]
            n = lp_lens[i]
            positions.extend(range(start + rel, start + rel + n))
            start += ext
        if not positions:
            return
        idx = torch.tensor(positions, device=hidden.device)
        targets = fb.extend_input_logprob_token_ids
        max_k = max(fb.top_logprobs_nums or [0])
        token_lp, top_v, top_i = [], [], []
        for s in range(0, len(positions), _LOGPROB_CHUNK):
            lp = torch.log_softmax(
                self._logits(hidden[idx[s : s + _LOGPROB_CHUNK]], lm_head), dim=-1
            )
            tgt = targets[s : s + _LOGPROB_CHUNK]
            token_lp.append(lp.gather(1, tgt.unsqueeze(1)).squeeze(1))
            if max_k > 0:
                v, i = lp.topk(
                    min(max_k, lp.shape[-1]), dim=-1
                )  # validated upstream; never crash here
                top_v.append(v)
                top_i.append(i)
        out.input_token_logprobs = torch.cat(token_lp)
        if max_k > 0:
            out.input_top_logprobs_val = torch.cat(top_v)
            out.input_top_logprobs_idx = torch.cat(top_i)
