"""NGRAM drafts: the tokens that followed the last time the sequence's current suffix occurred.

Each request keeps an index per window size n (min..max): the hash of every n-gram of its tokens
-> the position right after its latest occurrence. To propose, the longest window whose current
suffix occurred before wins, and the tokens after that occurrence are the draft (code edits,
quoting, RAG answers and JSON repeat long runs of their context). The prompt is indexed at once
with vectorised rolling hashes; each new token adds one n-gram per window. A hash match is checked
against the tokens themselves, so a collision costs a shorter draft, never a wrong one (the target
verifies every draft anyway).
"""

from __future__ import annotations

from typing import Dict, List

import numpy as np

_BASE = np.uint64(1_000_003)
_MASK = (1 << 64) - 1


class NgramIndex:
    def __init__(self, min_window: int, max_window: int, history: bool = False):
        self.windows = list(range(max_window, min_window - 1, -1))
        self.tokens: List[int] = []
        # window -> {hash of tokens[q - n : q]: q}, for q <= len(tokens) - 1 (a continuation exists)
        self.ends: Dict[int, Dict[int, int]] = {n: {} for n in self.windows}
        # With history (draft trees): window -> prev[q], the end of the same n-gram's previous
        # occurrence (-1: none), so every earlier occurrence can be walked, latest first.
        self.prev: Dict[int, List[int]] = {n: [] for n in self.windows} if history else {}

    # ------------------------------------------------------------------ building
    def extend(self, new_tokens: List[int]) -> None:
        """Append tokens. The first call with many tokens (the prompt) is vectorised."""
        if not new_tokens:
            return
        start = len(self.tokens)
        self.tokens.extend(int(t) for t in new_tokens)
        if len(new_tokens) > 32:
            self._index_bulk(start)
        else:
            for q in range(max(start, 1), len(self.tokens)):
                self._index_end(q)

    def _index_end(self, q: int) -> None:
        """Record the n-grams ending at position q (exclusive), now that tokens[q] exists."""
        t = self.tokens
        for n in self.windows:
            if q >= n:
                h = _hash(t[q - n : q])
                if self.prev:
                    self._grow_prev(n, q)
                    self.prev[n][q] = self.ends[n].get(h, -1)
                self.ends[n][h] = q

    def _grow_prev(self, n: int, q: int) -> None:
        prev = self.prev[n]
        if len(prev) <= q:
            prev.extend([-1] * (q + 1 - len(prev)))

    def _index_bulk(self, start: int) -> None:
        arr = np.asarray(self.tokens, dtype=np.uint64)
        last = len(arr) - 1  # n-grams ending at q <= last have a continuation
        first_q = max(start, 1)
        with np.errstate(over="ignore"):
            h = np.zeros(len(arr) + 1, dtype=np.uint64)  # h[q] = hash of the n-gram ending at q
            for n in range(1, max(self.windows) + 1):
                # hash_n(q) = hash_{n-1}(q) + tokens[q - n] * B^(n-1), for q >= n
                shifted = np.zeros_like(h)
                shifted[n:] = arr[: len(arr) + 1 - n]
                h = h + shifted * _BASE ** np.uint64(n - 1)
                if n in self.ends:
                    lo = max(first_q, n)
                    if lo <= last:
                        if self.prev:
                            self._link_bulk(n, h[lo : last + 1], lo)
                        qs = range(lo, last + 1)
                        self.ends[n].update(zip(h[lo : last + 1].tolist(), qs))

    def _link_bulk(self, n: int, hashes: np.ndarray, lo: int) -> None:
        """prev[q] for q in [lo, lo + len(hashes)): the previous q with the same hash, vectorised
        (a stable sort puts equal hashes in position order); the first of each hash links to the
        index's latest end before this batch."""
        order = np.argsort(hashes, kind="stable")
        hs = hashes[order]
        prev = np.full(len(hashes), -1, dtype=np.int64)
        same = hs[1:] == hs[:-1]
        prev[order[1:][same]] = order[:-1][same] + lo
        if self.ends[n]:
            firsts = np.flatnonzero(np.concatenate([[True], ~same]))
            for i in firsts.tolist():
                prev[order[i]] = self.ends[n].get(int(hs[i]), -1)
        self._grow_prev(n, lo + len(hashes) - 1)
        self.prev[n][lo : lo + len(hashes)] = prev.tolist()

    # ------------------------------------------------------------------ proposing
    def propose(self, k: int) -> List[int]:
        """Up to k tokens that followed the latest earlier occurrence of the longest matching suffix."""
        paths = self.propose_paths(k, 1)
        return paths[0] if paths else []

    def propose_paths(self, k: int, breadth: int) -> List[List[int]]:
        """Up to `breadth` distinct continuations of up to k tokens: the longest matching suffix's
        occurrences first, latest first (earlier ones only with history), then shorter suffixes'."""
        t = self.tokens
        L = len(t)
        if k <= 0 or L < 2 or breadth <= 0:
            return []
        out: List[List[int]] = []
        seen_q = set()
        for n in self.windows:
            if n >= L:
                continue
            suffix = t[L - n :]
            q = self.ends[n].get(_hash(suffix), -1)
            while q >= 0:
                if q < L and q not in seen_q and t[q - n : q] == suffix:
                    seen_q.add(q)
                    cont = t[q : q + k]
                    if cont not in out:
                        out.append(cont)
                        if len(out) == breadth:
                            return out
                q = self.prev[n][q] if self.prev and breadth > 1 else -1
        return out


def _hash(window: List[int]) -> int:
    """The same polynomial hash as the vectorised one: sum tokens[i] * B^(n-1-i) mod 2^64."""
    h = 0
    b = int(_BASE)
    for x in window:
        h = (h * b + x) & _MASK
    return h
