"""Drive a ModelRunner without a scheduler: used by bench_one_batch and the model-level tests.

It owns request rows and KV slots itself, so tests can also share prefix slots between requests
the way the radix cache would.
"""

from __future__ import annotations

from typing import List, Optional

import torch

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import build_decode_batch, build_extend_batch
from sglang.srt.model_executor.model_runner import ModelRunner


class StaticBatch:
    def __init__(self, runner: ModelRunner):
        self.runner = runner
        self.rows: List[int] = []
        self.lens: List[int] = []

    def prefill(self, prompts: List[List[int]], shared_prefix: Optional[List[int]] = None
                ) -> LogitsProcessorOutput:
        """Prefill each prompt. shared_prefix[i] = index j < i whose first tokens request i reuses
        (the longest common prefix, capped at len-1), or -1."""
        r = self.runner
        rows = r.req_to_token_pool.alloc(len(prompts))
        assert rows is not None, "not enough request rows"
        prefix_lens, extend_ids, extend_lens, locs = [], [], [], []
        for i, p in enumerate(prompts):
            src = shared_prefix[i] if shared_prefix else -1
            plen = 0
            if src is not None and src >= 0:
                plen = _common_prefix(prompts[src], p, len(p) - 1)
                slots = r.req_to_token_pool.read(rows[src], 0, plen)
                r.req_to_token_pool.write(rows[i], 0, slots)
            ext = len(p) - plen
            loc = r.token_to_kv_pool_allocator.alloc(ext)
            assert loc is not None, "KV pool exhausted"
            r.req_to_token_pool.write(rows[i], plen, loc)
            prefix_lens.append(plen)
            extend_lens.append(ext)
            extend_ids.extend(p[plen:])
            locs.append(loc)
        fb = build_extend_batch(extend_ids, prefix_lens, extend_lens, rows, torch.cat(locs), r.device)
        self.rows, self.lens = rows, [len(p) for p in prompts]
        return r.forward(fb)

    def decode(self, next_ids: List[int]) -> LogitsProcessorOutput:
        r = self.runner
        loc = r.token_to_kv_pool_allocator.alloc(len(self.rows))
        assert loc is not None, "KV pool exhausted"
        for row, ln, slot in zip(self.rows, self.lens, loc):
            r.req_to_token_pool.write(row, ln, slot.view(1))
        self.lens = [x + 1 for x in self.lens]
        fb = build_decode_batch(torch.tensor(next_ids, dtype=torch.int64), self.lens, self.rows, loc, r.device)
        return r.forward(fb)

    def release(self) -> None:
        r = self.runner
        r.req_to_token_pool.clear()
        r.token_to_kv_pool_allocator.clear()
        self.rows, self.lens = [], []


def _common_prefix(a: List[int], b: List[int], cap: int) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y or n >= cap:
            break
        n += 1
    return n
