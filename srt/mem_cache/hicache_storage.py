"""The storage tier of HiCache: KV blocks in files, found again by any server on the same disk.

A block is BLOCK tokens at a block-aligned position of a prompt. Its key is a hash chain over the
token prefix (sha256 of the previous block's key and this block's tokens, starting from the model
fingerprint and the extra_key), so equal prefixes give equal keys in every process and a block is
only ever reused after exactly the tokens it was computed for.

- Writes: whenever node copies reach host memory, the blocks that end inside those nodes are
  written by a writer thread (after the copy finished), while the path's host copies are held
  (host_ref) so they are not evicted under it.
- Prefetch: when a request is queued, the blocks beyond what the device and host hold are looked up;
  a run of at least prefetch_threshold tokens is read by a reader thread into host slots the
  prefetch owns, then attached to the tree as host-only nodes and loaded back like any host hit.
  The request waits per --hicache-storage-prefetch-policy: best_effort takes what has arrived when
  it could be scheduled, wait_complete waits for all, timeout waits at most 1 s + 0.25 s per 1,024
  tokens.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Optional

import torch

from sglang.srt.configs.sections import HiCacheSection
from sglang.srt.mem_cache.kv_transfer import CopyDone
from sglang.srt.mem_cache.radix_cache import TreeNode

if TYPE_CHECKING:
    from sglang.srt.core.req import Req
    from sglang.srt.mem_cache.hiradix_cache import HiRadixCache

logger = logging.getLogger(__name__)

BLOCK = 64  # tokens per storage block
DEFAULT_PREFETCH_THRESHOLD = 256  # a shorter storage hit is cheaper to recompute
TIMEOUT_BASE_S = 1.0
TIMEOUT_PER_1K_TOKENS_S = 0.25


def block_hashes(tokens: List[int], extra_key: Optional[str], seed: str) -> List[str]:
    """One key per whole block of `tokens`, each depending on every token before its end."""
    h = hashlib.sha256(f"{seed}\x00{extra_key}".encode()).digest()
    out = []
    for b in range(len(tokens) // BLOCK):
        blk = torch.tensor(tokens[b * BLOCK : (b + 1) * BLOCK], dtype=torch.int64).numpy()
        h = hashlib.sha256(h + blk.tobytes()).digest()
        out.append(h.hex())
    return out


class FileStorage:
    """One file per block under <dir>/<model fingerprint hash>/."""

    def __init__(self, root: str, fingerprint: str):
        tag = hashlib.sha256(fingerprint.encode()).hexdigest()[:16]
        self.dir = os.path.join(root, tag)
        os.makedirs(self.dir, exist_ok=True)

    def _path(self, key: str) -> str:
        return os.path.join(self.dir, key + ".kv")

    def exists(self, key: str) -> bool:
        return os.path.exists(self._path(key))

    def get(self, key: str) -> Optional[torch.Tensor]:
        try:
            return torch.load(self._path(key), weights_only=True)
        except (OSError, RuntimeError, EOFError) as e:
            logger.debug("storage block %s unreadable: %s", key, e)
            return None

    def put(self, key: str, data: torch.Tensor) -> None:
        # Written aside and renamed: a reader in another process never sees half a block.
        fd, tmp = tempfile.mkstemp(dir=self.dir, suffix=".tmp")
        os.close(fd)
        try:
            torch.save(data.contiguous(), tmp)
            os.replace(tmp, self._path(key))
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


@dataclass
class _WriteOp:
    keys: List[str]
    host_slots: List[torch.Tensor]  # one [BLOCK] tensor per key
    done: CopyDone
    held: TreeNode  # the path ending here keeps its host copies until the files are written


@dataclass
class PrefetchOp:
    """A storage read for one queued request: blocks into host slots this op owns."""

    key: List[int]  # the prompt tokens up to the last block read
    start: int  # first token read (what the device and host held before)
    keys: List[str]
    skip: int  # tokens of the first block that were already cached
    host_slots: torch.Tensor  # [end - start]
    deadline: float
    extra_key: Optional[str]
    done_tokens: int = 0
    cancel: bool = False
    finished: threading.Event = field(default_factory=threading.Event)


class StorageTier:
    def __init__(
        self,
        tree: "HiRadixCache",
        backend: FileStorage,
        policy: str,
        seed: str,
        prefetch_threshold: int = DEFAULT_PREFETCH_THRESHOLD,
    ):
        self.tree = tree
        self.backend = backend
        self.policy = policy
        self.seed = seed
        self.prefetch_threshold = prefetch_threshold
        self.read_blocks = 0
        self.written_blocks = 0  # written by the thread (read on the scheduler thread: a count)
        self._writes: "queue.Queue[Optional[_WriteOp]]" = queue.Queue()
        self._reads: "queue.Queue[Optional[PrefetchOp]]" = queue.Queue()
        self._written: "queue.Queue[_WriteOp]" = queue.Queue()
        self._writes_in_flight = 0
        self._prefetches: List[PrefetchOp] = []  # owned host slots: active and orphaned
        for target, name in (
            (self._write_loop, "hicache-write"),
            (self._read_loop, "hicache-read"),
        ):
            threading.Thread(target=target, name=name, daemon=True).start()

    # ------------------------------------------------------------------ scheduler side
    def poll(self) -> None:
        while True:
            try:
                op = self._written.get_nowait()
            except queue.Empty:
                break
            self._writes_in_flight -= 1
            self.tree.dec_host_ref_path(op.held)
        for op in [p for p in self._prefetches if p.cancel and p.finished.is_set()]:
            self._prefetches.remove(op)  # an orphan (its request left): give its slots back
            self.tree.host_pool.free(op.host_slots)

    def busy(self) -> bool:
        return self._writes_in_flight > 0 or bool(self._prefetches)

    def owned_host_slots(self) -> int:
        return sum(len(p.host_slots) for p in self._prefetches)

    def drain(self) -> None:
        """Wait for every write and read in flight (flush_cache)."""
        for op in self._prefetches:
            op.cancel = True
        while self.busy():
            self.poll()
            time.sleep(0.005)

    def stats(self) -> Dict[str, float]:
        return {
            "hicache_storage_read_blocks_total": float(self.read_blocks),
            "hicache_storage_write_blocks_total": float(self.written_blocks),
        }

    # ------------------------------------------------------------------ writes
    def on_written(self, nodes: List[TreeNode], done: CopyDone) -> None:
        """Host copies of `nodes` are on their way: write the blocks that end inside them."""
        keys: List[str] = []
        slots: List[torch.Tensor] = []
        seen = set()
        for node in nodes:
            if id(node) in seen or node.host_value is None or node.parent is None:
                continue
            seen.add(id(node))
            path = _path_nodes(node)
            tokens = [t for n in path for t in n.key]
            end, start = len(tokens), len(tokens) - len(node.key)
            first = start // BLOCK
            last = end // BLOCK  # blocks [first, last) end inside this node (or at its end)
            if (first + 1) * BLOCK > end:
                continue
            host = _host_slots(path)
            if host is None:
                continue
            hashes = block_hashes(tokens[: last * BLOCK], node.extra_key, self.seed)
            for b in range(first, last):
                if (b + 1) * BLOCK <= start:
                    continue
                row = host[b * BLOCK : (b + 1) * BLOCK]
                if row is not None and (row >= 0).all():
                    keys.append(hashes[b])
                    slots.append(row.clone())
            if keys:
                self.tree.inc_host_ref_path(node)
                self._writes_in_flight += 1
                self._writes.put(_WriteOp(keys, slots, done, node))
                keys, slots = [], []

    def _write_loop(self) -> None:
        while True:
            op = self._writes.get()
            try:
                op.done.wait()
                for key, rows in zip(op.keys, op.host_slots):
                    if not self.backend.exists(key):
                        self.backend.put(key, self.tree.host_pool.read_rows(rows))
                        self.written_blocks += 1
            except Exception:
                logger.exception("HiCache storage write failed")
            self._written.put(op)

    # ------------------------------------------------------------------ prefetch
    def start_prefetch(self, req: "Req") -> None:
        """At queueing time: read the blocks beyond the device and host match, if worth it."""
        req.init_next_round_input(self.tree)
        cached = len(req.prefix_indices) + req.host_hit_length
        key = req.fill_ids[: req.match_limit]
        n_blocks = len(key) // BLOCK
        if n_blocks * BLOCK - cached < self.prefetch_threshold:
            return
        hashes = block_hashes(key[: n_blocks * BLOCK], req.extra_key, self.seed)
        b0 = cached // BLOCK
        b = b0
        while b < n_blocks and self.backend.exists(hashes[b]):
            b += 1
        end = b * BLOCK
        n = end - cached
        if n < self.prefetch_threshold:
            return
        host = self.tree._host_alloc(n)
        if host is None:
            return
        op = PrefetchOp(
            key=key[:end],
            start=cached,
            keys=hashes[b0:b],
            skip=cached - b0 * BLOCK,
            host_slots=host,
            deadline=time.monotonic() + TIMEOUT_BASE_S + TIMEOUT_PER_1K_TOKENS_S * n / 1024,
            extra_key=req.extra_key,
        )
        self._prefetches.append(op)
        req.prefetch = op
        self._reads.put(op)

    def ready(self, req: "Req") -> bool:
        """May the request be admitted now? Ends its prefetch when the policy says so."""
        op = req.prefetch
        if op is None:
            return True
        if not op.finished.is_set():
            if self.policy == "wait_complete":
                return False
            if self.policy == "timeout" and time.monotonic() < op.deadline:
                return False
            op.cancel = True
            op.finished.wait()  # at most the block being read
        self._complete(req, op)
        return True

    def drop(self, req: "Req") -> None:
        """The request left the queue: its prefetch is abandoned; poll() frees the slots."""
        op = req.prefetch
        if op is not None:
            op.cancel = True
            req.prefetch = None

    def _complete(self, req: "Req", op: PrefetchOp) -> None:
        self._prefetches.remove(op)
        req.prefetch = None
        got = op.done_tokens
        taken_from = got
        if got:
            taken_from = self.tree.insert_host(op.key, op.start, op.host_slots[:got], op.extra_key)
        self.tree.host_pool.free(torch.cat([op.host_slots[:taken_from], op.host_slots[got:]]))
        req.storage_hit_tokens = got - taken_from

    def _read_loop(self) -> None:
        while True:
            op = self._reads.get()
            try:
                off = 0
                for i, key in enumerate(op.keys):
                    if op.cancel:
                        break
                    data = self.backend.get(key)
                    if data is None:
                        break
                    if i == 0 and op.skip:
                        data = data[:, :, op.skip :]
                    n = data.shape[2]
                    self.tree.host_pool.write_rows(op.host_slots[off : off + n], data)
                    off += n
                    op.done_tokens = off
                    self.read_blocks += 1
            except Exception:
                logger.exception("HiCache storage read failed")
            op.finished.set()


def _path_nodes(node: TreeNode) -> List[TreeNode]:
    out = []
    while node.parent is not None:
        out.append(node)
        node = node.parent
    out.reverse()
    return out


def _host_slots(path: List[TreeNode]) -> Optional[torch.Tensor]:
    """Host slot of every token on the path (-1 where a node has no host copy)."""
    parts = [
        n.host_value if n.host_value is not None else torch.full((len(n.key),), -1) for n in path
    ]
    return torch.cat(parts) if parts else None


def make_storage_tier(
    section: HiCacheSection, tree: "HiRadixCache", fingerprint: str
) -> StorageTier:
    if section.storage_backend != "file":
        raise ValueError(f"--hicache-storage-backend {section.storage_backend} is not built")
    backend = FileStorage(section.storage_dir, fingerprint)
    return StorageTier(
        tree,
        backend,
        section.prefetch_policy,
        seed=fingerprint,
        prefetch_threshold=section.prefetch_threshold,
    )
