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
    def __init__(self, min_window: int, max_window: int):
        self.windows = list(range(max_window, min_window - 1, -1))
        self.tokens: List[int] = []
        # window -> {hash of tokens[q - n : q]: q}, for q <= len(tokens) - 1 (a continuation exists)
        self.ends: Dict[int, Dict[int, int]] = {n: {} for n in self.windows}

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
                self.ends[n][_hash(t[q - n : q])] = q

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
                        qs = range(lo, last + 1)
                        self.ends[n].update(zip(h[lo : last + 1].tolist(), qs))

    # ------------------------------------------------------------------ proposing
    def propose(self, k: int) -> List[int]:
        """Up to k tokens that followed the latest earlier occurrence of the longest matching suffix."""
        t = self.tokens
        L = len(t)
        if k <= 0 or L < 2:
            return []
        for n in self.windows:
            if n >= L:
                continue
            suffix = t[L - n :]
            q = self.ends[n].get(_hash(suffix))
            if q is None or q >= L or t[q - n : q] != suffix:
                continue
            return t[q : q + k]
        return []


def _hash(window: List[int]) -> int:
    """The same polynomial hash as the vectorised one: sum tokens[i] * B^(n-1-i) mod 2^64."""
    h = 0
    b = int(_BASE)
    for x in window:
        h = (h * b + x) & _MASK
    return h
