"""Waiting-queue order (SchedulePolicy) and prefill admission on a token budget (PrefillAdder)."""

from __future__ import annotations

import random
from collections import defaultdict
from enum import Enum, auto
from typing import Dict, List, Optional, Set

import torch

from sglang.srt.core.req import Req
from sglang.srt.managers.scheduler.priority import PriorityOrder
from sglang.srt.mem_cache.radix_cache import RadixCache

# Above this many waiting requests, prefix-aware sorting costs more than it saves.
LPM_MAX_WAITING = 128
# In-batch prefix caching: requests with a short tree match but a long match against requests
# ahead of them in the queue wait one round, so the first one writes the shared part.
IN_BATCH_CHECK_THRESHOLD = 32
IN_BATCH_DEPRIORITIZE_THRESHOLD = 32
CLIP_MAX_NEW_TOKENS = 4096
IGNORE_EOS_RESERVE_TOKENS = 1


class SchedulePolicy:
    def __init__(
        self,
        policy: str,
        tree_cache,
        radix_enabled: bool,
        order: Optional[PriorityOrder] = None,
    ):
        """order: the priority order when priority scheduling is on (None: off)."""
        self.requested = policy
        self.tree_cache = tree_cache
        # Prefix-aware policies are meaningless without a tree.
        self.policy = policy if radix_enabled or policy in ("fcfs", "lof", "random") else "fcfs"
        self.order = order

    def active_policy(self, n_waiting: int) -> str:
        if self.policy == "lpm" and n_waiting > LPM_MAX_WAITING:
            return "fcfs"
        return self.policy

    def calc_priority(self, waiting: List[Req]) -> None:
        """Sort the waiting queue in place."""
        policy = self.active_policy(len(waiting))
        if policy in ("lpm", "dfs-weight"):
            deprioritized = self._compute_prefix_matches(waiting)
            if policy == "lpm":
                waiting.sort(key=lambda r: (r.rid in deprioritized, -len(r.prefix_indices)))
            else:
                self._sort_dfs_weight(waiting)
        elif policy == "lof":
            waiting.sort(key=lambda r: -(r.sampling_params.max_new_tokens or 0))
        elif policy == "random":
            random.shuffle(waiting)
        if self.order is not None:
            # Stable: within a priority level the policy's order (fcfs = arrival) is kept.
            waiting.sort(key=self.order.key)

    def _compute_prefix_matches(self, waiting: List[Req]) -> Set[str]:
        """Match every waiting request against the tree; those that share a long prefix with a
        request ahead of them in the queue (and not with the tree) go after the others."""
        in_queue = InBatchPrefixFilter(enabled=True)
        deprioritized: Set[str] = set()
        for r in waiting:
            r.init_next_round_input(self.tree_cache)
            if in_queue.should_wait(r):
                deprioritized.add(r.rid)
            else:
                in_queue.add(r)
        return deprioritized

    def _sort_dfs_weight(self, waiting: List[Req]) -> None:
        by_node: Dict[int, List[Req]] = defaultdict(list)
        nodes: Dict[int, object] = {}
        for r in waiting:
            by_node[id(r.last_node)].append(r)
            nodes[id(r.last_node)] = r.last_node
        weight: Dict[int, int] = defaultdict(int)
        children: Dict[int, List[object]] = defaultdict(list)
        root = self.tree_cache.root
        seen = set()
        for nid, node in nodes.items():
            w = len(by_node[nid])
            cur = node
            while cur is not None:
                weight[id(cur)] += w
                parent = getattr(cur, "parent", None)
                if parent is not None and (id(parent), id(cur)) not in seen:
                    seen.add((id(parent), id(cur)))
                    children[id(parent)].append(cur)
                cur = parent
        out: List[Req] = []

        def visit(node) -> None:
            for child in sorted(children[id(node)], key=lambda c: -weight[id(c)]):
                visit(child)
            out.extend(by_node.get(id(node), []))

        visit(root)
        waiting[:] = out + [r for r in waiting if r not in set(out)]


class InBatchPrefixFilter:
    """Requests that arrive together and share a long prefix nobody has cached yet: admit the first,
    hold the rest one round so they read the shared part from the tree instead of recomputing it."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.shadow = None

    def should_wait(self, req: Req) -> bool:
        if (
            not self.enabled
            or self.shadow is None
            or len(req.prefix_indices) > IN_BATCH_CHECK_THRESHOLD
        ):
            return False
        shared = len(self.shadow.match_prefix(req.fill_ids).device_indices)
        return shared >= IN_BATCH_DEPRIORITIZE_THRESHOLD and shared > len(req.prefix_indices)

    def add(self, req: Req) -> None:
        if not self.enabled or len(req.prefix_indices) > IN_BATCH_CHECK_THRESHOLD:
            return
        if self.shadow is None:
            self.shadow = RadixCache(None, None, page_size=1)
        self.shadow.insert(req.fill_ids)


class AddReqResult(Enum):
    CONTINUE = auto()
    NO_TOKEN = auto()
    OTHER = auto()


class PrefillAdder:
    """Admits waiting requests into one prefill batch while the token budgets allow.

    rem_total_tokens = free + evictable - (reserved decode room of running requests x new_token_ratio
    + what this batch has already taken). A request joins only if its new input plus its full
    remaining max_new_tokens fits, so admitted work can (on the forecast) always finish.
    """

    def __init__(
        self,
        tree_cache,
        allocator,
        running_reqs: List[Req],
        new_token_ratio: float,
        max_prefill_tokens: int,
        chunked_prefill_size: Optional[int],
        mixed_decode_tokens: int = 0,
        page_size: int = 1,
        max_new_reqs: Optional[int] = None,
        draft_reserve_per_req: int = 0,
    ):
        """draft_reserve_per_req: speculative decoding's verify slots beyond the one token each
        running request takes per step (held for the step, then trimmed to what was accepted)."""
        self.tree_cache = tree_cache
        self.allocator = allocator
        self.running_reqs = running_reqs
        self.new_token_ratio = new_token_ratio
        self.page_size = page_size
        self.rem_input_tokens = max_prefill_tokens - mixed_decode_tokens
        self.rem_chunk_tokens = (
            None if chunked_prefill_size is None else chunked_prefill_size - mixed_decode_tokens
        )
        self.rem_total_token_offset = mixed_decode_tokens + sum(
            min(
                max((r.sampling_params.max_new_tokens or 0) - len(r.output_ids), 0),
                CLIP_MAX_NEW_TOKENS,
            )
            * (1.0 if r.sampling_params.ignore_eos else new_token_ratio)
            for r in running_reqs
        )
        self.draft_reserve = draft_reserve_per_req
        self.rem_total_token_offset += draft_reserve_per_req * len(running_reqs)
        self.cur_rem_token_offset = mixed_decode_tokens
        self.can_run_list: List[Req] = []
        self.new_chunked_req: Optional[Req] = None
        self.log_hit_tokens = 0
        self.log_input_tokens = 0
        self.log_host_hit_tokens = 0  # of log_hit_tokens, copied back from host memory
        self.log_storage_hit_tokens = 0  # of those, read from the storage tier first
        self.max_new_reqs = max_new_reqs

    # ---- budgets
    def _pool_room(self) -> int:
        return self.allocator.available_size() + self.tree_cache.evictable_size()

    @property
    def rem_total_tokens(self) -> float:
        return self._pool_room() - self.rem_total_token_offset

    @property
    def cur_rem_tokens(self) -> float:
        return self._pool_room() - self.cur_rem_token_offset

    def budget_state(self) -> AddReqResult:
        if self.rem_total_tokens <= 0 or self.cur_rem_tokens <= 0:
            return AddReqResult.NO_TOKEN
        if self.rem_input_tokens <= 0 or (
            self.rem_chunk_tokens is not None and self.rem_chunk_tokens <= 0
        ):
            return AddReqResult.OTHER
        return AddReqResult.CONTINUE

    def _ceil_page(self, n: int) -> int:
        return (n + self.page_size - 1) // self.page_size * self.page_size

    def _update_budget(self, prefix_len: int, extend_len: int, max_new: int) -> None:
        extend_len = self._ceil_page(extend_len)
        self.rem_total_token_offset += extend_len + max_new + self.page_size
        self.cur_rem_token_offset += extend_len + self.page_size
        self.rem_input_tokens -= extend_len
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= extend_len
        self.log_hit_tokens += prefix_len
        self.log_input_tokens += extend_len

    @staticmethod
    def _reserve(req: Req) -> int:
        left = max((req.sampling_params.max_new_tokens or 0) - len(req.output_ids), 0)
        return min(left, CLIP_MAX_NEW_TOKENS)

    # ---- admission
    def add_chunked_req(self, req: Req) -> Optional[Req]:
        """Continue the in-flight chunked request; it is never dropped (its slots would leak)."""
        rem = self.rem_chunk_tokens if self.rem_chunk_tokens is not None else req.extend_input_len
        rem = min(rem, int(self.rem_total_tokens))
        if rem <= 0:
            rem = self.rem_chunk_tokens or req.extend_input_len
        truncated = req.extend_input_len > rem
        if truncated:
            rem = self._aligned_trunc(len(req.prefix_indices), rem)
            req.extend_input_len = rem
            req.fill_ids = req.fill_ids[: len(req.prefix_indices) + rem]
        self.can_run_list.append(req)
        self._update_budget(0, req.extend_input_len, 0 if truncated else self._reserve(req))
        return req if truncated else None

    def _aligned_trunc(self, prefix_len: int, trunc: int) -> int:
        if self.page_size == 1:
            return max(trunc, 1)
        end = (prefix_len + trunc) // self.page_size * self.page_size
        return max(end - prefix_len, 1)

    def add_one_req(self, req: Req, has_chunked_req: bool) -> AddReqResult:
        if self.max_new_reqs is not None and len(self.can_run_list) >= self.max_new_reqs:
            return AddReqResult.OTHER
        # Tokens copied back from host memory need device slots (total) but no compute (input).
        total = req.extend_input_len + self._reserve(req) + self.page_size
        if total >= self.rem_total_tokens:
            return AddReqResult.NO_TOKEN
        input_tokens = self._ceil_page(req.extend_input_len - req.host_hit_length)
        if input_tokens >= self.rem_input_tokens and self.can_run_list:
            return AddReqResult.OTHER
        self.tree_cache.inc_lock_ref(req.last_node)
        if total >= self.rem_total_tokens:  # locking shrinks the evictable room
            self.tree_cache.dec_lock_ref(req.last_node)
            return AddReqResult.NO_TOKEN
        if req.host_hit_length:
            # The next pass waits for these copies whoever it runs, so a node loaded for a
            # request turned away below is safe to evict and reuse.
            self._load_back(req)
        input_tokens = self._ceil_page(req.extend_input_len)
        prefix_len = len(req.prefix_indices)
        whole = self.rem_chunk_tokens is None or input_tokens <= self.rem_chunk_tokens
        if not whole and has_chunked_req:  # only one chunked request at a time
            self.tree_cache.dec_lock_ref(req.last_node)
            return AddReqResult.OTHER
        if whole:
            self.can_run_list.append(req)
            self._update_budget(prefix_len, input_tokens, self._reserve(req) + self.draft_reserve)
        else:
            trunc = self._aligned_trunc(prefix_len, self.rem_chunk_tokens)
            req.extend_input_len = trunc
            req.fill_ids = req.fill_ids[: prefix_len + trunc]
            self.can_run_list.append(req)
            self.new_chunked_req = req
            self._update_budget(prefix_len, trunc, 0)
        return self.budget_state()

    def _load_back(self, req: Req) -> None:
        """Copy the request's host-only prefix back to the device; the lock moves down to it."""
        res = self.tree_cache.load_back(req.last_host_node)
        req.host_hit_length = 0
        if res is None:  # no device room after all: those tokens are computed instead
            return
        slots, node = res
        self.tree_cache.inc_lock_ref(node)
        self.tree_cache.dec_lock_ref(req.last_node)
        req.last_node = node
        req.prefix_indices = torch.cat([req.prefix_indices, slots])
        req.cache_protected_len = len(req.prefix_indices)
        req.extend_input_len -= len(slots)
        from_storage = min(len(slots), req.storage_hit_tokens)
        req.storage_hit_tokens = 0
        if not req.was_retracted():
            req.cached_storage_tokens += from_storage
            req.cached_host_tokens += len(slots)
        self.log_host_hit_tokens += len(slots)
        self.log_storage_hit_tokens += from_storage

    def preempt_to_schedule(
        self, req: Req, running: List[Req], threshold: int, order: PriorityOrder
    ) -> List[Req]:
        """Pick running requests of much lower priority to make room for `req` (priority scheduling)."""
        need = req.extend_input_len + self._reserve(req) - self.rem_total_tokens
        victims: List[Req] = []
        if need <= 0:
            return victims
        cands = sorted((r for r in running if not r.finished()), key=order.key, reverse=True)
        freed = 0.0
        for r in cands:
            if order.margin(req, r) <= threshold:
                break
            victims.append(r)
            freed += self._reserve(r) * self.new_token_ratio + r.kv_committed_len
            if freed >= need:
                return victims
        return []
