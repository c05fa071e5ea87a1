"""Free-slot allocators for the token-to-KV pool.

Slot indices live on the CPU (int64 tensors): every scheduling decision (allocation, the radix
tree's values, freeing) is made on the host, and the device only ever receives copies. That keeps
the scheduler free of device synchronisations. Slot 0 is a dummy that is never handed out; padded
rows of a CUDA-graph batch write there harmlessly.
"""

from __future__ import annotations

from typing import List, Optional

import torch


class TokenToKVPoolAllocator:
    """Page size 1: any free slot serves any token."""

    page_size = 1

    def __init__(self, size: int):
        self.size = size
        self.clear()

    def clear(self) -> None:
        self.free_slots = torch.arange(1, self.size + 1, dtype=torch.int64)
        self._release: List[torch.Tensor] = []
        self._grouping = False
        self._group: List[torch.Tensor] = []

    def available_size(self) -> int:
        return len(self.free_slots) + sum(len(x) for x in self._release)

    def _merge_release(self) -> None:
        if self._release:
            self.free_slots = torch.cat([self.free_slots] + self._release)
            self._release = []

    def alloc(self, need_size: int) -> Optional[torch.Tensor]:
        if need_size > len(self.free_slots):
            self._merge_release()
            if need_size > len(self.free_slots):
                return None
        out = self.free_slots[:need_size]
        self.free_slots = self.free_slots[need_size:]
        return out

    def free(self, free_index: torch.Tensor) -> None:
        if free_index is None or free_index.numel() == 0:
            return
        free_index = free_index.to(torch.int64).flatten()
        if self._grouping:
            self._group.append(free_index)
        else:
            self._release.append(free_index)

    # Frees inside a decode step's result processing are batched into one concatenation.
    def free_group_begin(self) -> None:
        self._grouping = True
        self._group = []

    def free_group_end(self) -> None:
        self._grouping = False
        if self._group:
            self._release.append(torch.cat(self._group))
        self._group = []


class PagedTokenToKVPoolAllocator:
    """Page size > 1: allocation is in whole pages; a request fills its last page before taking a new one.

    `alloc(n)` hands out `n` slots made of whole fresh pages (n must be a multiple of page_size);
    `alloc_extend` / `alloc_decode` continue a request's partially filled last page first.
    """

    def __init__(self, size: int, page_size: int):
        assert page_size > 1
        self.page_size = page_size
        self.num_pages = size // page_size
        self.size = self.num_pages * page_size
        self.clear()

    def clear(self) -> None:
        self.free_pages = torch.arange(1, self.num_pages + 1, dtype=torch.int64)
        self._release: List[torch.Tensor] = []
        self._grouping = False
        self._group: List[torch.Tensor] = []

    def available_size(self) -> int:
        return (len(self.free_pages) + sum(len(x) for x in self._release)) * self.page_size

    def _merge_release(self) -> None:
        if self._release:
            self.free_pages = torch.cat([self.free_pages] + self._release)
            self._release = []

    def _take_pages(self, n: int) -> Optional[torch.Tensor]:
        if n > len(self.free_pages):
            self._merge_release()
            if n > len(self.free_pages):
                return None
        out = self.free_pages[:n]
        self.free_pages = self.free_pages[n:]
        return out

    def alloc(self, need_size: int) -> Optional[torch.Tensor]:
        assert need_size % self.page_size == 0, "paged alloc needs whole pages"
        pages = self._take_pages(need_size // self.page_size)
        if pages is None:
            return None
        return (pages[:, None] * self.page_size + torch.arange(self.page_size)).flatten()

    def alloc_extend(
        self, prefix_lens: List[int], last_locs: List[int], extend_lens: List[int]
    ) -> Optional[torch.Tensor]:
        """Slots for each request's new tokens, continuing its last page (last_loc = slot of its last token, or -1)."""
        ps = self.page_size
        need_pages = 0
        for pl, ext in zip(prefix_lens, extend_lens):
            need_pages += _pages_for(pl + ext, ps) - _pages_for(pl, ps)
        pages = self._take_pages(need_pages)
        if pages is None:
            return None
        out: List[torch.Tensor] = []
        p = 0
        for pl, loc, ext in zip(prefix_lens, last_locs, extend_lens):
            parts = []
            in_page = pl % ps
            if in_page and ext:
                take = min(ps - in_page, ext)
                parts.append(torch.arange(loc + 1, loc + 1 + take, dtype=torch.int64))
                ext -= take
            n_new = _pages_for(ext, ps)
            if n_new:
                new = pages[p : p + n_new]
                p += n_new
                parts.append((new[:, None] * ps + torch.arange(ps)).flatten()[:ext])
            out.append(torch.cat(parts) if parts else torch.empty(0, dtype=torch.int64))
        return torch.cat(out) if out else torch.empty(0, dtype=torch.int64)

    def alloc_decode(self, seq_lens: List[int], last_locs: List[int]) -> Optional[torch.Tensor]:
        """One slot per request for the token at position seq_len (the current length before this step)."""
        return self.alloc_extend(seq_lens, last_locs, [1] * len(seq_lens))

    def free(self, free_index: torch.Tensor) -> None:
        if free_index is None or free_index.numel() == 0:
            return
        pages = torch.unique(free_index.to(torch.int64).flatten() // self.page_size)
        if self._grouping:
            self._group.append(pages)
        else:
            self._release.append(pages)

    def free_group_begin(self) -> None:
        self._grouping = True
        self._group = []

    def free_group_end(self) -> None:
        self._grouping = False
        if self._group:
            self._release.append(torch.unique(torch.cat(self._group)))
        self._group = []


def _pages_for(n: int, page_size: int) -> int:
    return (n + page_size - 1) // page_size
