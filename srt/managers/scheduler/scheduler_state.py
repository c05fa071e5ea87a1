"""What the scheduler's parts share: the KV pools, the queues and batches, the passes in flight."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Dict, List, Optional

from sglang.srt.core.forward_batch_info import ForwardMode
from sglang.srt.core.req import Req
from sglang.srt.managers.scheduler.overlap import PendingResult
from sglang.srt.managers.scheduler.schedule_batch import ScheduleBatch
from sglang.srt.mem_cache.common import release_kv_cache


@dataclass
class KVPools:
    """The request rows, the token slots and the prefix tree over them, with the pool's size."""

    req_to_token_pool: object
    allocator: object
    tree_cache: object
    max_total_num_tokens: int
    page_size: int
    device: str

    def new_batch(self, reqs: List[Req]) -> ScheduleBatch:
        return ScheduleBatch(
            reqs, self.req_to_token_pool, self.allocator, self.tree_cache, self.device
        )

    def release(self, req: Req, is_insert: bool = True) -> None:
        """Return everything a request holds (see mem_cache/common.py)."""
        release_kv_cache(
            req, self.tree_cache, self.req_to_token_pool, self.allocator, is_insert=is_insert
        )

    def clear_all(self) -> None:
        """Empty the tree and free every slot and row: only when no request holds KV."""
        self.tree_cache.reset()
        self.allocator.clear()
        self.req_to_token_pool.clear()

    def used_tokens(self) -> int:
        return (
            self.max_total_num_tokens
            - self.allocator.available_size()
            - self.tree_cache.evictable_size()
        )

    def token_usage(self) -> float:
        total = self.max_total_num_tokens
        return self.used_tokens() / total if total else 0.0


@dataclass
class LaunchedBatch:
    """A launched pass: the batch as it was at launch (the live batch mutates afterwards) and its
    pending result."""

    batch: ScheduleBatch
    pending: PendingResult
    reqs: List[Req]
    samples: List[bool]  # False for a non-final prefill chunk (its sample is discarded)
    forward_mode: ForwardMode
    n_extend: int  # leading requests that were extends (the rest are mixed decodes)
    logprob_lens: List[int]  # prompt-logprob positions of each request in this pass
    launch_time: float
    num_tokens: int = 0  # TARGET_VERIFY: tokens the pass emitted (set when processed)


@dataclass
class SchedulerState:
    """The requests the scheduler knows, by where they are."""

    running_batch: ScheduleBatch
    waiting_queue: List[Req] = field(default_factory=list)
    chunked_req: Optional[Req] = None  # the request whose prompt is being prefilled in chunks
    last_batch: Optional[ScheduleBatch] = None
    in_flight: Deque[LaunchedBatch] = field(
        default_factory=deque
    )  # launched, results not processed
    rid_to_req: Dict[str, Req] = field(default_factory=dict)  # every request not yet finished

    def unmerged_prefill(self) -> bool:
        lb = self.last_batch
        return (
            lb is not None
            and lb.forward_mode.is_extend()
            and any(not r.finished() for r in lb.reqs)
        )

    def has_work(self) -> bool:
        return bool(
            self.waiting_queue
            or not self.running_batch.is_empty()
            or self.chunked_req is not None
            or self.in_flight
            or self.unmerged_prefill()
        )

    def live_reqs(self) -> List[Req]:
        """Requests that hold or may hold KV: running, mid-prefill, or in a launched pass."""
        out = list(self.running_batch.reqs)
        if self.chunked_req is not None:
            out.append(self.chunked_req)
        for launched in self.in_flight:
            out.extend(launched.reqs)
        if self.last_batch is not None and self.last_batch.forward_mode.is_extend():
            out.extend(self.last_batch.reqs)
        return out
