"""ScheduleBatch: the scheduler's CPU-side batch, and its conversion to a ForwardBatch.

All KV bookkeeping of a pass (rows, slots, committed/allocated lengths) is done here when the batch
is built, before the pass runs. Device work is ordered on one stream (or one worker thread on the
CPU), so slot numbers may be handed to the next pass before this one has written them.
"""

from __future__ import annotations

from typing import List, Optional

import torch

from sglang.srt.core.forward_batch_info import (
    ForwardBatch,
    ForwardMode,
    build_decode_batch,
    build_extend_batch,
)
from sglang.srt.core.req import Req
from sglang.srt.mem_cache.common import (
    alloc_paged,
    alloc_token_slots,
    evict_for,
    last_loc_of,
    page_need,
    release_kv_cache,
)
from sglang.srt.speculative.draft_tree import depths_of
from sglang.srt.utils.device_copy import to_device

RETRACT_DECODE_STEPS = 20


class ScheduleBatch:
    def __init__(self, reqs: List[Req], req_to_token_pool, allocator, tree_cache, device: str):
        self.reqs = reqs
        self.req_to_token_pool = req_to_token_pool
        self.allocator = allocator
        self.tree_cache = tree_cache
        self.device = device
        self.page_size = getattr(allocator, "page_size", 1)
        self.forward_mode = ForwardMode.EXTEND
        # Sampled ids of the previous pass (device; negative placeholders under the overlap loop).
        self.output_ids: Optional[torch.Tensor] = None
        self.seq_lens: List[int] = []
        self.prefix_lens: List[int] = []
        self.extend_lens: List[int] = []
        self.out_cache_loc: Optional[torch.Tensor] = None
        self.extend_input_ids: List[int] = []
        self.decoding_reqs: List[Req] = []  # decode rows mixed into an extend pass
        self.mixed_input_ids: Optional[torch.Tensor] = None
        # The sampling info of this batch's last pass (a decode step reuses it, see for_decode).
        self.last_info = None
        # TARGET_VERIFY: drafts per request, the rows' input ids, the draft's distributions.
        self.spec_num_drafts: List[int] = []
        self.verify_input_ids: List[int] = []
        self.draft_probs: Optional[torch.Tensor] = None
        # Per request the parent row of each verify row (-1: the pending token) when some
        # request's drafts are a tree; None when all are chains.
        self.spec_parents: Optional[List[List[int]]] = None

    # ------------------------------------------------------------------ basics
    def is_empty(self) -> bool:
        return len(self.reqs) == 0

    def batch_size(self) -> int:
        return len(self.reqs)

    @property
    def return_logprob(self) -> bool:
        return any(r.return_logprob for r in self.reqs)

    # ------------------------------------------------------------------ prefill
    def prepare_for_extend(self) -> None:
        """Rows, prefix slots and fresh slots for each request's extend part."""
        self.forward_mode = ForwardMode.EXTEND
        pool = self.req_to_token_pool
        need_rows = [r for r in self.reqs if r.req_pool_idx is None]
        rows = pool.alloc(len(need_rows))
        if rows is None:
            raise RuntimeError("no free request rows; the adder should have prevented this")
        for r, row in zip(need_rows, rows):
            r.req_pool_idx = row
        self.prefix_lens = [len(r.prefix_indices) for r in self.reqs]
        self.extend_lens = [len(r.fill_ids) - p for r, p in zip(self.reqs, self.prefix_lens)]
        self.seq_lens = [len(r.fill_ids) for r in self.reqs]
        for r, p in zip(self.reqs, self.prefix_lens):
            if p:
                pool.write(r.req_pool_idx, 0, r.prefix_indices)
        self.out_cache_loc = self._alloc_extend_slots()
        off = 0
        self.extend_input_ids = []
        for r, p, e, s in zip(self.reqs, self.prefix_lens, self.extend_lens, self.seq_lens):
            pool.write(r.req_pool_idx, p, self.out_cache_loc[off : off + e])
            off += e
            self.extend_input_ids.extend(r.fill_ids[p:])
            r.kv_committed_len = s
            r.kv_allocated_len = s
            self._account_cached_tokens(r, p, s)

    def _alloc_extend_slots(self) -> torch.Tensor:
        if self.page_size == 1:
            return alloc_token_slots(self.tree_cache, self.allocator, sum(self.extend_lens))
        last = [
            last_loc_of(self.req_to_token_pool, r.req_pool_idx, p)
            for r, p in zip(self.reqs, self.prefix_lens)
        ]
        return alloc_paged(
            self.tree_cache, self.allocator, self.prefix_lens, last, self.extend_lens
        )

    @staticmethod
    def _account_cached_tokens(r: Req, prefix_len: int, seq_len: int) -> None:
        # A retracted request re-reading its own earlier KV is not a cache hit for the client.
        if not r.was_retracted():
            r.cached_tokens += max(prefix_len - r.already_computed, 0)
        r.already_computed = seq_len

    def mix_with_running(self, running: "ScheduleBatch") -> None:
        """Append the running batch's decode rows to this extend pass as 1-token extends (MIXED)."""
        running.prepare_for_decode(for_mixed=True)
        self.forward_mode = ForwardMode.MIXED
        self.decoding_reqs = list(running.reqs)
        self.mixed_input_ids = running.output_ids
        self.reqs = self.reqs + running.reqs
        self.prefix_lens = self.prefix_lens + [s - 1 for s in running.seq_lens]
        self.extend_lens = self.extend_lens + [1] * running.batch_size()
        self.seq_lens = self.seq_lens + running.seq_lens
        self.out_cache_loc = torch.cat([self.out_cache_loc, running.out_cache_loc])

    # ------------------------------------------------------------------ decode
    def prepare_for_decode(self, for_mixed: bool = False) -> None:
        """One new slot per request at position seq_len; input ids are the previous pass's samples.
        A DECODE pass records the slots in the device req_to_token itself (the attention backend's
        decode metadata step, inside the CUDA graph), so only the host mirror is written here; a
        MIXED pass runs these rows as extends, which read the device table, so it is written too."""
        self.forward_mode = ForwardMode.DECODE
        pool = self.req_to_token_pool
        cur = [r.kv_allocated_len for r in self.reqs]
        if self.page_size == 1:
            loc = alloc_token_slots(self.tree_cache, self.allocator, len(self.reqs))
        else:
            last = [last_loc_of(pool, r.req_pool_idx, c) for r, c in zip(self.reqs, cur)]
            loc = alloc_paged(self.tree_cache, self.allocator, cur, last, [1] * len(cur))
        pool.write_batch([r.req_pool_idx for r in self.reqs], cur, loc, on_device=for_mixed)
        self.out_cache_loc = loc
        self.seq_lens = [c + 1 for c in cur]
        self.prefix_lens, self.extend_lens = [], []
        for r, s in zip(self.reqs, self.seq_lens):
            r.kv_committed_len = s
            r.kv_allocated_len = s

    # ------------------------------------------------------------------ speculative verify
    def verify_slots_needed(self, num_drafts: List[int]) -> int:
        """Slots a verify pass must find: 1 + k per request (whole new pages when paged)."""
        if self.page_size == 1:
            return sum(1 + k for k in num_drafts)
        ps = self.page_size
        need = 0
        for r, k in zip(self.reqs, num_drafts):
            cur = r.kv_allocated_len
            need += (-(-(cur + 1 + k) // ps) - (-(-cur // ps))) * ps
        return need

    def prepare_for_verify(self, num_drafts: List[int]) -> None:
        """Slots for each request's pending token and its drafts at positions cur..cur+k."""
        self.forward_mode = ForwardMode.TARGET_VERIFY
        pool = self.req_to_token_pool
        cur = [r.kv_allocated_len for r in self.reqs]
        n = [1 + k for k in num_drafts]
        if self.page_size == 1:
            loc = alloc_token_slots(self.tree_cache, self.allocator, sum(n))
        else:
            last = [last_loc_of(pool, r.req_pool_idx, c) for r, c in zip(self.reqs, cur)]
            loc = alloc_paged(self.tree_cache, self.allocator, cur, last, n)
        rows = [r.req_pool_idx for r, e in zip(self.reqs, n) for _ in range(e)]
        positions = [c + j for c, e in zip(cur, n) for j in range(e)]
        # The pass runs as a decode batch, which records its slots in the device table itself.
        pool.write_batch(rows, positions, loc, on_device=False)
        self.out_cache_loc = loc
        self.prefix_lens = cur
        self.extend_lens = n
        self.seq_lens = [c + e for c, e in zip(cur, n)]
        self.spec_num_drafts = list(num_drafts)
        # Committed: the pending token only. The drafts' KV is valid only once accepted, and a
        # request aborted while its verify pass is in flight (overlap loop) is released as it
        # stands, so the tree must not take the drafts' slots as its tokens.
        for r, c, s in zip(self.reqs, cur, self.seq_lens):
            r.kv_committed_len = c + 1
            r.kv_allocated_len = s

    def trim_verify_allocation(self, req: Req, keep: int) -> None:
        """After verification: the request keeps KV for positions [0, keep); slots past the last
        kept page go back to the allocator."""
        ps = self.page_size
        start = -(-keep // ps) * ps
        if req.kv_allocated_len > start:
            self.allocator.free(
                self.req_to_token_pool.read(req.req_pool_idx, start, req.kv_allocated_len)
            )
        req.kv_committed_len = keep
        req.kv_allocated_len = keep

    def check_decode_mem(self, reqs: Optional[List[Req]] = None) -> bool:
        reqs = self.reqs if reqs is None else reqs
        need = page_need([r.kv_allocated_len for r in reqs], self.page_size)
        return evict_for(self.tree_cache, self.allocator, need)

    def retract_decode(self) -> tuple:
        """Retract the least-progressed requests until the rest can decode one more step.

        Returns (retracted, new_token_ratio, oom_aborted)."""
        order = sorted(
            range(len(self.reqs)),
            key=lambda i: (len(self.reqs[i].output_ids), -len(self.reqs[i].origin_input_ids)),
            reverse=True,
        )
        retracted: List[Req] = []
        oom: List[Req] = []
        first = True
        while first or not self.check_decode_mem([self.reqs[i] for i in order]):
            first = False
            if len(order) == 1:
                # Even alone this request cannot grow: abort it rather than loop forever.
                req = self.reqs[order.pop()]
                release_kv_cache(
                    req, self.tree_cache, self.req_to_token_pool, self.allocator, is_insert=False
                )
                oom.append(req)
                break
            req = self.reqs[order.pop()]
            self.retract_req(req)
            evict_for(self.tree_cache, self.allocator, len(order) * RETRACT_DECODE_STEPS)
            retracted.append(req)
        keep = sorted(order)
        self.filter_batch(keep_indices=keep)
        total_out = sum(len(r.output_ids) for r in self.reqs)
        total_max = sum(r.sampling_params.max_new_tokens or 0 for r in self.reqs)
        new_ratio = min(1.0, (total_out + RETRACT_DECODE_STEPS * len(self.reqs)) / (total_max + 1))
        return retracted, new_ratio, oom

    def retract_req(self, req: Req) -> None:
        """The request gives back its KV (nothing enters the tree) and will be prefilled again."""
        release_kv_cache(
            req, self.tree_cache, self.req_to_token_pool, self.allocator, is_insert=False
        )
        req.reset_for_retract()

    def retract_all(self) -> List[Req]:
        """Every unfinished request is retracted (a pause in "retract" mode); returns them."""
        self.filter_batch()
        out = list(self.reqs)
        for req in out:
            self.retract_req(req)
        self.filter_batch(keep_indices=[])
        return out

    # ------------------------------------------------------------------ membership
    def exclude_finishing(self) -> None:
        """Drop requests certain to finish by length when their in-flight token lands: they need no
        further step."""
        keep = [
            i
            for i, r in enumerate(self.reqs)
            if not r.finished()
            and not (
                r.sampling_params.max_new_tokens is not None
                and len(r.output_ids) + r.inflight_tokens >= r.sampling_params.max_new_tokens
            )
        ]
        self.filter_batch(keep_indices=keep)

    def filter_batch(
        self, keep_indices: Optional[List[int]] = None, exclude: Optional[List[Req]] = None
    ) -> None:
        if keep_indices is None:
            ex = {id(r) for r in (exclude or [])}
            keep_indices = [
                i for i, r in enumerate(self.reqs) if not r.finished() and id(r) not in ex
            ]
        if len(keep_indices) == len(self.reqs):
            return
        self.reqs = [self.reqs[i] for i in keep_indices]
        if self.output_ids is not None:
            # non_blocking: torch.tensor(..., device=cuda) would sync the stream (the overlap loop's
            # previous pass may still be running).
            idx = to_device(torch.tensor(keep_indices, dtype=torch.int64), self.output_ids.device)
            self.output_ids = self.output_ids[idx] if keep_indices else self.output_ids[:0]

    def merge(self, other: "ScheduleBatch") -> None:
        self.reqs = self.reqs + other.reqs
        if self.output_ids is None:
            self.output_ids = other.output_ids
        elif other.output_ids is not None:
            self.output_ids = torch.cat([self.output_ids, other.output_ids])

    # ------------------------------------------------------------------ device batch
    def to_forward_batch(self) -> ForwardBatch:
        rows = [r.req_pool_idx for r in self.reqs]
        if self.forward_mode.is_target_verify():
            return self._verify_forward_batch()
        if self.forward_mode.is_decode():
            return build_decode_batch(
                self.output_ids, self.seq_lens, rows, self.out_cache_loc, self.device
            )
        n_ext = len(self.reqs) - len(self.decoding_reqs)
        fb = build_extend_batch(
            self.extend_input_ids + [0] * len(self.decoding_reqs),
            self.prefix_lens,
            self.extend_lens,
            rows,
            self.out_cache_loc,
            self.device,
            self.forward_mode,
        )
        if self.decoding_reqs:
            fb.input_ids[len(self.extend_input_ids) :] = self.mixed_input_ids
        self._add_logprob_fields(fb, n_ext)
        return fb

    def _verify_forward_batch(self) -> ForwardBatch:
        if self.spec_parents is not None:
            return self._tree_verify_forward_batch()
        return self._chain_verify_forward_batch()

    def _tree_verify_forward_batch(self) -> ForwardBatch:
        """Draft trees, as a decode batch too: node j of a request is a row that reads the request
        table through a scratch row of its own, holding the request's prefix and then, at cur + d
        for each depth d, the slot of the node's ancestor at that depth (itself last). Node j's KV
        goes to the slot at the request's table position cur + j; after the verdict the accepted
        branch's KV is moved to its positions (SpecDecoder)."""
        pool = self.req_to_token_pool
        loc = self.out_cache_loc.tolist()
        rows, seq_lens, src_rows = [], [], []
        path_rows, path_pos, path_slots = [], [], []
        off = 0
        for r, c, par in zip(self.reqs, self.prefix_lens, self.spec_parents):
            depth = depths_of(par)
            for j in range(len(par)):
                row = pool.scratch_base + off + j
                rows.append(row)
                seq_lens.append(c + depth[j] + 1)
                src_rows.append(r.req_pool_idx)
                a = j
                while a >= 0:
                    path_rows.append(row)
                    path_pos.append(c + depth[a])
                    path_slots.append(loc[off + a])
                    a = par[a]
            off += len(par)
        assert off <= pool.num_scratch, "draft tree rows exceed the scratch rows"
        # The request rows get the nodes' slots at cur..cur+n-1 on the device too (prepare_for_verify
        # wrote the host mirror): the accepted branch is read from there once moved into place.
        path_rows += [r.req_pool_idx for r, e in zip(self.reqs, self.extend_lens) for _ in range(e)]
        path_pos += [c + j for c, e in zip(self.prefix_lens, self.extend_lens) for j in range(e)]
        path_slots += loc
        dev = pool.req_to_token.device
        idx = to_device(torch.tensor([rows, src_rows], dtype=torch.int64), dev)
        pool.copy_prefixes(idx[0], idx[1], max(self.prefix_lens))
        path = to_device(torch.tensor([path_rows, path_pos, path_slots], dtype=torch.int64), dev)
        pool.write_device(path[0], path[1], path[2])
        ids = torch.tensor(self.verify_input_ids, dtype=torch.int64)
        return build_decode_batch(ids, seq_lens, rows, self.out_cache_loc, self.device)

    def _chain_verify_forward_batch(self) -> ForwardBatch:
        """The verify pass as a decode batch of one row per token: row j of a request is its token
        at position cur + j, attending to the request's KV up to and including that position. Each
        layer stores every row's KV before any row attends, so this is exactly the causal verify;
        and as a decode batch it replays the decode CUDA graphs."""
        rows = [r.req_pool_idx for r, e in zip(self.reqs, self.extend_lens) for _ in range(e)]
        seq_lens = [c + j + 1 for c, e in zip(self.prefix_lens, self.extend_lens) for j in range(e)]
        ids = torch.tensor(self.verify_input_ids, dtype=torch.int64)
        return build_decode_batch(ids, seq_lens, rows, self.out_cache_loc, self.device)

    def _add_logprob_fields(self, fb: ForwardBatch, n_ext: int) -> None:
        if not any(r.return_logprob for r in self.reqs[:n_ext]):
            return
        starts, lens, targets = [], [], []
        for i, r in enumerate(self.reqs):
            s, n, t = (
                _prompt_logprob_span(r, self.prefix_lens[i], self.extend_lens[i])
                if i < n_ext
                else (0, 0, [])
            )
            r.extend_logprob_start_len = s
            starts.append(s)
            lens.append(n)
            targets.extend(t)
        fb.return_logprob = True
        fb.top_logprobs_nums = [r.top_logprobs_num if r.return_logprob else 0 for r in self.reqs]
        fb.extend_logprob_start_lens_cpu = starts
        fb.extend_logprob_lens_cpu = lens
        fb.extend_input_logprob_token_ids = to_device(
            torch.tensor(targets, dtype=torch.int64), self.device
        )


def _prompt_logprob_span(r: Req, prefix_len: int, extend_len: int) -> tuple:
    """Which positions of this extend produce prompt logprobs.

    The hidden state at absolute position p scores prompt token p+1, for p in
    [logprob_start_len, prompt_len - 2]; token logprob_start_len itself is reported as None.
    """
    if not r.return_logprob or r.logprob_start_len < 0:
        return 0, 0, []
    prompt_len = len(r.origin_input_ids)
    lo = max(r.logprob_start_len, prefix_len)
    hi = min(prompt_len - 2, prefix_len + extend_len - 1)
    if hi < lo:
        return 0, 0, []
    targets = r.origin_input_ids[lo + 1 : hi + 2]
    return lo - prefix_len, hi - lo + 1, targets
