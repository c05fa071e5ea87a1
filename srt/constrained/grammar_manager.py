"""GrammarManager: compiles request grammars off the scheduler's path and holds requests until ready.

Scheduler use, once per loop iteration (never blocks):
    ready, failed = manager.poll_ready()
    ready   -> waiting queue (req.grammar is set, a fresh matcher of its own)
    failed  -> (req, message): finish with an abort error (bad grammar, timeout, or abort())

Under tensor parallelism each rank compiles on its own threads and finishes at its own time, so a
rank must not admit a request that a peer is still compiling. Ranks agree instead:
    rids = manager.ready_rids()                     # local view
    agreed = all-reduce intersection of rids        # e.g. all_gather then set.intersection
    ready, failed = manager.pop_ready(agreed)
Both lists keep submission order, so every rank admits the same requests in the same order.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterable, List, Optional, Set, Tuple

from sglang.srt.constrained.base_grammar_backend import (
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarCompileError,
    grammar_key,
)
from sglang.srt.constrained.grammar_cache import GrammarCache, GrammarKey
from sglang.srt.core.req import Req

ABORTED_MESSAGE = "Aborted by AbortReq."


@dataclass
class _Waiting:
    req: Req
    key: GrammarKey
    future: "Future[BaseGrammarObject]"
    submitted_at: float
    aborted: bool = False


class GrammarManager:
    """timeout_s: a grammar still compiling after this long fails the request. Wall clocks differ
    between ranks, so under TP a timeout can fail on one rank and succeed on another; keep it
    None (no timeout) there unless the caller reconciles verdicts itself."""

    def __init__(
        self,
        backend: BaseGrammarBackend,
        num_threads: int = 4,
        cache_entries: int = 1024,
        timeout_s: Optional[float] = None,
    ):
        self.backend = backend
        self.timeout_s = timeout_s
        self._executor = ThreadPoolExecutor(max_workers=num_threads, thread_name_prefix="grammar")
        self._cache = GrammarCache(cache_entries)
        self._queue: "OrderedDict[str, _Waiting]" = OrderedDict()

    # ------------------------------------------------------------------ submission
    def submit(self, req: Req) -> bool:
        """Queue req if it asks for a grammar (True); False means it needs none and can go straight on."""
        key = grammar_key(req.sampling_params)
        if key is None:
            return False
        if req.rid in self._queue:
            raise ValueError(f"request {req.rid} is already waiting for its grammar")
        fut, _ = self._cache.get_or_create(key, lambda: self._executor.submit(self._compile, key))
        # Even a cache hit goes through the queue: another rank may not have that key yet.
        self._queue[req.rid] = _Waiting(req, key, fut, time.monotonic())
        return True

    def abort(self, rid: str) -> bool:
        """Mark a waiting request aborted; the next poll returns it in failed. False if not waiting."""
        entry = self._queue.get(rid)
        if entry is None:
            return False
        entry.aborted = True  # the compile itself runs on: its result is shared through the cache
        return True

    # ------------------------------------------------------------------ polling
    def ready_rids(self) -> Set[str]:
        """Requests this rank could release now: compiled, failed, timed out, or aborted."""
        now = time.monotonic()
        return {rid for rid, w in self._queue.items() if self._is_settled(w, now)}

    def pop_ready(self, rids: Iterable[str]) -> Tuple[List[Req], List[Tuple[Req, str]]]:
        """Release the given requests (those not settled locally stay queued), in submission order."""
        wanted = set(rids)
        now = time.monotonic()
        ready: List[Req] = []
        failed: List[Tuple[Req, str]] = []
        for rid in [r for r in self._queue if r in wanted]:
            w = self._queue[rid]
            if not self._is_settled(w, now):
                continue
            del self._queue[rid]
            done = w.future.done()  # read once: the compile thread may finish mid-decision
            err = _future_error(w.future) if done else None
            if w.aborted:
                failed.append((w.req, ABORTED_MESSAGE))
            elif not done:
                failed.append((w.req, f"Grammar compilation timed out after {self.timeout_s} s"))
            elif err is not None:
                failed.append((w.req, _error_message(err)))
            else:
                w.req.grammar = w.future.result().copy()
                ready.append(w.req)
        return ready, failed

    def poll_ready(self) -> Tuple[List[Req], List[Tuple[Req, str]]]:
        """Single-rank form: release everything settled on this rank."""
        return self.pop_ready(self.ready_rids())

    # ------------------------------------------------------------------ validation
    def validate(self, key_type: str, key_string: str) -> Optional[str]:
        """Compile now (through the cache) and return an error message, or None if the grammar is good.

        Blocks for the compile time, so an asyncio caller should run it in an executor.
        """
        key = (key_type, key_string)
        fut, is_new = self._cache.get_or_create(key, Future)
        if is_new:
            try:
                fut.set_result(self.backend.compile(key_type, key_string))
            except Exception as e:  # noqa: BLE001 - kept in the future, so later requests see the same error
                fut.set_exception(e)
            except BaseException as e:  # never leave a cached future pending; then propagate
                fut.set_exception(e)
                raise
        err = _future_error(fut, wait=True)  # waits if another thread is compiling this key
        return None if err is None else _error_message(err)

    # ------------------------------------------------------------------ state
    def num_waiting(self) -> int:
        return len(self._queue)

    def cached_grammar(self, key_type: str, key_string: str) -> Optional[BaseGrammarObject]:
        """The compiled template for a key, if cached and compiled successfully (for tests and stats)."""
        fut = self._cache.get((key_type, key_string))
        if fut is None or not fut.done() or _future_error(fut) is not None:
            return None
        return fut.result()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ internals
    def _compile(self, key: GrammarKey) -> BaseGrammarObject:
        return self.backend.compile(*key)

    def _is_settled(self, w: _Waiting, now: float) -> bool:
        return (
            w.aborted
            or w.future.done()
            or (self.timeout_s is not None and now - w.submitted_at > self.timeout_s)
        )


def _future_error(fut: "Future[BaseGrammarObject]", wait: bool = False) -> Optional[BaseException]:
    """The compile's exception (None on success); call only on a done future unless wait."""
    try:
        return fut.exception(timeout=None if wait else 0)
    except CancelledError as e:  # only after shutdown() cancelled a queued compile
        return e


def _error_message(err: BaseException) -> str:
    if isinstance(err, GrammarCompileError):
        return str(err)
    # Anything else is a backend bug, but the client still deserves an answer, not a hang.
    return f"Grammar compilation failed: {type(err).__name__}: {err}"
