"""Drive a ModelRunner without a scheduler: used by bench_one_batch and the model-level tests.

It owns request rows and KV slots itself, so tests can also share prefix slots between requests
the way the radix cache would.
"""

from __future__ import annotations

from typing import List, Optional, Union

import torch

from sglang.srt.core.forward_batch_info import ForwardBatch, build_decode_batch, build_extend_batch
from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.model_runner import ModelRunner


class StaticBatch:
    def __init__(self, runner: ModelRunner):
        self.runner = runner
        self.rows: List[int] = []
        self.lens: List[int] = []

    def prefill(
        self,
        prompts: List[List[int]],
        shared_prefix: Optional[List[int]] = None,
        max_tokens_per_pass: Optional[int] = None,
    ) -> LogitsProcessorOutput:
        """Prefill each prompt. shared_prefix[i] = index j < i whose first tokens request i reuses
        (the longest common prefix, capped at len-1), or -1. With max_tokens_per_pass, requests are
        run in consecutive groups of at most that many new tokens (at least one request each), the
        way the scheduler's max_prefill_tokens would split them; the logits are concatenated."""
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
            extend_ids.append(p[plen:])
            locs.append(loc)
        self.rows, self.lens = rows, [len(p) for p in prompts]
        outs = []
        for lo, hi in _groups(extend_lens, max_tokens_per_pass):
            fb = build_extend_batch(
                [t for ids in extend_ids[lo:hi] for t in ids],
                prefix_lens[lo:hi],
                extend_lens[lo:hi],
                rows[lo:hi],
                torch.cat(locs[lo:hi]),
                r.device,
            )
            outs.append(r.forward(fb))
        if len(outs) == 1:
            return outs[0]
        return LogitsProcessorOutput(
            next_token_logits=torch.cat([o.next_token_logits for o in outs])
        )

    def prefill_chunked(self, prompt: List[int], chunk: int) -> LogitsProcessorOutput:
        """One prompt in passes of at most `chunk` tokens, each attending to the KV of the ones
        before, as the scheduler's chunked prefill runs a long prompt."""
        r = self.runner
        rows = r.req_to_token_pool.alloc(1)
        assert rows is not None, "not enough request rows"
        out = None
        for lo in range(0, len(prompt), chunk):
            ids = prompt[lo : lo + chunk]
            loc = r.token_to_kv_pool_allocator.alloc(len(ids))
            assert loc is not None, "KV pool exhausted"
            r.req_to_token_pool.write(rows[0], lo, loc)
            out = r.forward(build_extend_batch(ids, [lo], [len(ids)], rows, loc, r.device))
        self.rows, self.lens = rows, [len(prompt)]
        return out

    def occupy(self, lens: List[int]) -> None:
        """Rows and KV slots for requests of these lengths, without computing their KV: decode
        timing at long contexts needs the memory traffic of the cache, not its values."""
        r = self.runner
        rows = r.req_to_token_pool.alloc(len(lens))
        assert rows is not None, "not enough request rows"
        for row, n in zip(rows, lens):
            loc = r.token_to_kv_pool_allocator.alloc(n)
            assert loc is not None, "KV pool exhausted"
            r.req_to_token_pool.write(row, 0, loc)
        self.rows, self.lens = rows, list(lens)

    def decode(self, next_ids: Union[List[int], torch.Tensor]) -> LogitsProcessorOutput:
        """One decode step. next_ids may be a device tensor (e.g. the sampler's output), so a benchmark
        loop never waits for the host. Under CUDA graphs the returned logits are valid until the next
        forward."""
        return self.runner.forward(self.prepare_decode(next_ids))

    def prepare_decode(self, next_ids: Union[List[int], torch.Tensor]) -> ForwardBatch:
        """The host half of a decode step: a slot per request and the ForwardBatch (no forward)."""
        r = self.runner
        loc = r.token_to_kv_pool_allocator.alloc(len(self.rows))
        assert loc is not None, "KV pool exhausted"
        # Host mirror only: the decode pass records its slots on the device (see prepare_for_decode).
        r.req_to_token_pool.write_batch(self.rows, self.lens, loc, on_device=False)
        self.lens = [x + 1 for x in self.lens]
        ids = (
            next_ids
            if isinstance(next_ids, torch.Tensor)
            else torch.tensor(next_ids, dtype=torch.int64)
        )
        return build_decode_batch(ids, self.lens, self.rows, loc, r.device)

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


def _groups(lens: List[int], cap: Optional[int]) -> List[tuple]:
    """Consecutive [lo, hi) index ranges whose sums stay <= cap (a single longer item forms its own)."""
    if not cap:
        return [(0, len(lens))]
    out, lo, tot = [], 0, 0
    for i, n in enumerate(lens):
        if i > lo and tot + n > cap:
            out.append((lo, i))
            lo, tot = i, 0
        tot += n
    out.append((lo, len(lens)))
    return out
