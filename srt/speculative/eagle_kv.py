"""An EAGLE head's draft-layer KV: each request's own cache, and a draft round's padded batch.

A request's EagleKV holds the entries of positions whose features came from the target (kept past
verify). A draft round works on a RoundKV: the requests' caches copied once into one padded
[B, cap] tensor, where every pass of the round appends its rows with one indexed write. The entries
a round's later passes add (drafts, tree nodes) are dropped after the verify pass, so they never
go back into the requests' caches; only the first pass's (absorbed target features) do (commit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch


@dataclass
class EagleKV:
    """One request's draft-layer K / V so far ([n, kv_heads, head_dim] each), in buffers that
    grow by doubling so a draft step appends in place instead of copying the whole cache."""

    k_buf: Optional[torch.Tensor] = None
    v_buf: Optional[torch.Tensor] = None
    n: int = 0

    @property
    def k(self) -> Optional[torch.Tensor]:
        return None if self.k_buf is None else self.k_buf[: self.n]

    @property
    def v(self) -> Optional[torch.Tensor]:
        return None if self.v_buf is None else self.v_buf[: self.n]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        end = self.n + k.shape[0]
        self.reserve(k.shape[0], k)
        self.k_buf[self.n : end] = k
        self.v_buf[self.n : end] = v
        self.n = end
        return self.k, self.v

    def reserve(self, extra: int, like: torch.Tensor) -> None:
        """Room for `extra` more entries (like: a tensor of the entries' dtype, device, shape)."""
        end = self.n + extra
        if self.k_buf is None or self.k_buf.shape[0] < end:
            cap = max(end, 2 * (0 if self.k_buf is None else self.k_buf.shape[0]), 16)
            self.k_buf, self.v_buf = (
                self._grown(self.k_buf, like, cap),
                self._grown(self.v_buf, like, cap),
            )

    def truncate(self, n: int) -> None:
        self.n = min(self.n, max(n, 0))

    def _grown(self, old: Optional[torch.Tensor], like: torch.Tensor, cap: int) -> torch.Tensor:
        # Zeros, not empty: a round reads past n under its mask, and garbage could be NaN.
        buf = like.new_zeros((cap, *like.shape[1:]))
        if old is not None:
            buf[: self.n] = old[: self.n]
        return buf


@dataclass
class RoundKV:
    """Request i's entries at [i, :ends[i]] of k / v [B, cap, kv_heads, head_dim]. A round of one
    request works in that request's own buffers (`own`), with no copy either way."""

    k: torch.Tensor
    v: torch.Tensor
    ends: List[int]
    own: Optional[EagleKV] = None

    @classmethod
    def of(cls, kvs: List[EagleKV], room: int, like: torch.Tensor) -> "RoundKV":
        """The caches padded, with room for `room` more entries each (like: a [*, kv_heads,
        head_dim] tensor of the cache's dtype and device, for requests with empty caches)."""
        ends = [kv.n for kv in kvs]
        if len(kvs) == 1:
            kv = kvs[0]
            kv.reserve(room, like)
            cap = kv.n + room
            return cls(kv.k_buf[None, :cap], kv.v_buf[None, :cap], ends, own=kv)
        shape = (len(kvs), max(ends) + room, *like.shape[1:])
        k, v = like.new_zeros(shape), like.new_zeros(shape)
        for i, kv in enumerate(kvs):
            if kv.n:
                k[i, : kv.n], v[i, : kv.n] = kv.k, kv.v
        return cls(k, v, ends)

    def append(self, k: torch.Tensor, v: torch.Tensor, lens: List[int]) -> torch.Tensor:
        """Request i's next lens[i] rows of k / v (0: it adds none) at its end; returns, on the
        device, each row's [3, T] (request, entry, index among its request's new rows)."""
        rows, cols, nth = [], [], []
        for i, n in enumerate(lens):
            rows.extend([i] * n)
            cols.extend(range(self.ends[i], self.ends[i] + n))
            nth.extend(range(n))
            self.ends[i] += n
        at = torch.tensor([rows, cols, nth], dtype=torch.int64).to(self.k.device)
        self.k[at[0], at[1]] = k
        self.v[at[0], at[1]] = v
        return at

    def append_own(self, k: torch.Tensor, v: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """A one-request round's rows, written into its own buffer past its end (the request's
        n stays until commit); returns all its entries so far."""
        start = self.ends[0]
        end = start + k.shape[0]
        self.own.k_buf[start:end], self.own.v_buf[start:end] = k, v
        self.ends[0] = end
        return self.own.k_buf[:end], self.own.v_buf[:end]

    def commit(self, kvs: List[EagleKV], lens: List[int]) -> None:
        """Each request's last lens[i] entries into its own cache (they outlive the round)."""
        if self.own is not None:
            self.own.n = self.ends[0]  # they are in its buffer already
            return
        for i, (kv, n) in enumerate(zip(kvs, lens)):
            if n:
                end = self.ends[i]
                kv.append(self.k[i, end - n : end], self.v[i, end - n : end])
