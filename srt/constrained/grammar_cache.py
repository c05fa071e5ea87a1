"""LRU cache of compile futures keyed by (key_type, key_string).

Futures, not results, are cached so that requests with the same grammar that arrive while it is
still compiling share one compile. Failed compiles stay cached too: a bad grammar is bad every
time, and recompiling it per request would let one client burn the compile threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future
from typing import Callable, Optional, Tuple

from sglang.srt.constrained.base_grammar_backend import BaseGrammarObject

GrammarKey = Tuple[str, str]


class GrammarCache:
    def __init__(self, max_entries: int = 1024):
        self._max_entries = max_entries
        self._entries: "OrderedDict[GrammarKey, Future[BaseGrammarObject]]" = OrderedDict()
        self._lock = threading.Lock()  # validate() may run on another thread than the scheduler

    def get(self, key: GrammarKey) -> Optional["Future[BaseGrammarObject]"]:
        with self._lock:
            fut = self._entries.get(key)
            if fut is not None:
                self._entries.move_to_end(key)
            return fut

    def get_or_create(
        self, key: GrammarKey, start: Callable[[], "Future[BaseGrammarObject]"]
    ) -> Tuple["Future[BaseGrammarObject]", bool]:
        """The cached future for key, or a new one from start(); the bool says whether it was new."""
        with self._lock:
            fut = self._entries.get(key)
            if fut is not None:
                self._entries.move_to_end(key)
                return fut, False
            fut = start()
            self._entries[key] = fut
            # Evicting an entry only forgets the template; requests keep their own copies.
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)
            return fut, True

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
